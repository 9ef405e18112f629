"""The public contract: argus_lab.__all__ is exact, sorted, and importable."""

from __future__ import annotations

import subprocess
import sys

import argus_lab as al

EXPECTED = {
    "DaskExecutor",
    "Budget",
    "AnthropicModel",
    "LLMPlanner",
    "ModelError",
    "ReplayMiss",
    "llm",
    "ApprovalPolicy",
    "ApprovalRequired",
    "ArgusError",
    "BudgetExceeded",
    "ConcurrentSessionError",
    "ConflictError",
    "connect",
    "CorruptCheckpointError",
    "Event",
    "HTNDomain",
    "HTNPlanner",
    "InDoubtError",
    "LostCommitsError",
    "MissingDependency",
    "StorageFullError",
    "Plan",
    "PlanError",
    "RunResult",
    "SchemaVersionError",
    "SessionNotFoundError",
    "SecretUnsetError",
    "SessionStateError",
    "StorageError",
    "ToolArgumentsError",
    "UnresolvedReferenceError",
    "Session",
    "SessionInfo",
    "Subtask",
    "Task",
    "TaskRecord",
    "Tool",
    "ToolContext",
    "ToolError",
    "TransientError",
    "Workspace",
    "analysis",
    "builtin_tools",
    "tool",
}


def test_all_is_exact_and_sorted() -> None:
    assert set(al.__all__) == EXPECTED
    assert list(al.__all__) == sorted(al.__all__)
    for name in al.__all__:
        assert getattr(al, name) is not None


def test_errors_derive_from_argus_error_and_carry_message() -> None:
    for name in al.__all__:
        obj = getattr(al, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, al.ArgusError)
            e = obj("what happened; what to do")
            assert e.message == "what happened; what to do"


def test_import_does_not_pull_heavy_libraries() -> None:
    code = (
        "import sys, argus_lab\n"
        "heavy = [m for m in ('pandas', 'lancedb', 'anthropic', 'anywidget',"
        " 'matplotlib', 'networkx', 'numpy') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


def test_contract_check_names_session_methods() -> None:
    for m in (
        "step",
        "run",
        "start",
        "arun",
        "pause",
        "retry",
        "skip",
        "fork",
        "tasks_df",
        "events_df",
        "subscribe",
        "graph",
    ):
        assert hasattr(al.Session, m), m
    for m in ("new_session", "open", "sessions"):
        assert hasattr(al.Workspace, m), m
    for m in ("from_yaml", "from_dict", "to_yaml", "to_dict", "graph"):
        assert hasattr(al.Plan, m), m


def test_the_suite_refuses_real_network_requests() -> None:
    import httpx2
    import pytest

    with pytest.raises(RuntimeError, match="real network request"):
        httpx2.get("https://api.anthropic.com/v1/models")
