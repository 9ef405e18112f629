"""Argus Lab: a Jupyter-native workbench for long-horizon AI agents.

The public API is exactly ``__all__``; everything else is internal. Heavy
libraries (pandas, lancedb, anthropic, anywidget) are imported where used, so
``import argus_lab`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from argus_lab._redact_log import mask_logs as _mask_logs
from argus_lab.errors import (
    ApprovalRequired,
    ArgusError,
    BudgetExceeded,
    ConcurrentSessionError,
    ConflictError,
    CorruptCheckpointError,
    InDoubtError,
    LostCommitsError,
    MissingDependency,
    ModelError,
    PlanError,
    ReplayMiss,
    SchemaVersionError,
    SecretUnsetError,
    SessionNotFoundError,
    SessionStateError,
    StorageError,
    StorageFullError,
    ToolArgumentsError,
    ToolError,
    TransientError,
    UnresolvedReferenceError,
)
from argus_lab.runtime.views import VIEWS as _VIEWS

if TYPE_CHECKING:
    from argus_lab import analysis, llm
    from argus_lab.client import connect
    from argus_lab.events import Event
    from argus_lab.llm.anthropic import AnthropicModel
    from argus_lab.model import Budget, SessionInfo, Task, TaskRecord
    from argus_lab.plan import Plan
    from argus_lab.plan.domain import HTNDomain, Subtask
    from argus_lab.plan.htn import HTNPlanner
    from argus_lab.plan.llm import LLMPlanner
    from argus_lab.runtime.dask import DaskExecutor
    from argus_lab.runtime.session import RunResult, Session
    from argus_lab.tools.approval import ApprovalPolicy
    from argus_lab.tools.builtin import builtin_tools
    from argus_lab.tools.registry import Tool, ToolContext, tool
    from argus_lab.workspace import Workspace

__version__ = "0.1.0"

__all__ = [
    "AnthropicModel",
    "ApprovalPolicy",
    "ApprovalRequired",
    "ArgusError",
    "Budget",
    "BudgetExceeded",
    "ConcurrentSessionError",
    "ConflictError",
    "CorruptCheckpointError",
    "DaskExecutor",
    "Event",
    "HTNDomain",
    "HTNPlanner",
    "InDoubtError",
    "LLMPlanner",
    "LostCommitsError",
    "MissingDependency",
    "ModelError",
    "Plan",
    "PlanError",
    "ReplayMiss",
    "RunResult",
    "SchemaVersionError",
    "SecretUnsetError",
    "Session",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionStateError",
    "StorageError",
    "StorageFullError",
    "Subtask",
    "Task",
    "TaskRecord",
    "Tool",
    "ToolArgumentsError",
    "ToolContext",
    "ToolError",
    "TransientError",
    "UnresolvedReferenceError",
    "Workspace",
    "analysis",
    "builtin_tools",
    "connect",
    "llm",
    "tool",
]


_LAZY = {
    "analysis": ("argus_lab.analysis", None),
    "llm": ("argus_lab.llm", None),
    "AnthropicModel": ("argus_lab.llm.anthropic", "AnthropicModel"),
    "LLMPlanner": ("argus_lab.plan.llm", "LLMPlanner"),
    "DaskExecutor": ("argus_lab.runtime.dask", "DaskExecutor"),
    "connect": ("argus_lab.client", "connect"),
    "Event": ("argus_lab.events", "Event"),
    "Budget": ("argus_lab.model", "Budget"),
    "Plan": ("argus_lab.plan", "Plan"),
    "SessionInfo": ("argus_lab.model", "SessionInfo"),
    "Task": ("argus_lab.model", "Task"),
    "TaskRecord": ("argus_lab.model", "TaskRecord"),
    "HTNDomain": ("argus_lab.plan.domain", "HTNDomain"),
    "Subtask": ("argus_lab.plan.domain", "Subtask"),
    "HTNPlanner": ("argus_lab.plan.htn", "HTNPlanner"),
    "RunResult": ("argus_lab.runtime.session", "RunResult"),
    "Session": ("argus_lab.runtime.session", "Session"),
    "ApprovalPolicy": ("argus_lab.tools.approval", "ApprovalPolicy"),
    "builtin_tools": ("argus_lab.tools.builtin", "builtin_tools"),
    "Tool": ("argus_lab.tools.registry", "Tool"),
    "ToolContext": ("argus_lab.tools.registry", "ToolContext"),
    "tool": ("argus_lab.tools.registry", "tool"),
    "Workspace": ("argus_lab.workspace", "Workspace"),
}
"""Public names loaded on first use. pydantic and the runtime take ~0.3 s to
import, pandas and the anthropic SDK 0.5-1.5 s: ``import argus_lab`` (and the
``argus`` command's front, ``argus --help``) pays for none of them."""


_WIRING = {"builtin_tools": "argus_lab.store.memory_tools"}
"""Modules imported before a public name: the memory tools live beside the memory
(store/) and register with ``builtin_tools`` (tools/, below it) on import."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        if name in _WIRING:
            importlib.import_module(_WIRING[name])
        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value  # the next access is a plain lookup
        return value
    raise AttributeError(f"module 'argus_lab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _tasks_df(session: Session, **options: Any) -> Any:
    from argus_lab import analysis

    return analysis.tasks_df(session, **options)


def _events_df(session: Session, **options: Any) -> Any:
    from argus_lab import analysis

    return analysis.events_df(session, **options)


def _session_html(session: Session) -> str:
    from argus_lab.jupyter.display import session_html

    return session_html(session)


def _graph_svg(session: Session) -> str:
    from argus_lab.jupyter.display import session_svg

    return session_svg(session)


# The runtime must not import analysis or jupyter (DESIGN.md section 3): this
# package, above every layer, hands it their views (imported on first use).
_VIEWS.register(
    tasks_df=_tasks_df,
    events_df=_events_df,
    session_html=_session_html,
    graph_svg=_graph_svg,
)
# Secrets never reach a log (invariant 7): every logger of Argus masks first.
_mask_logs()


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext argus_lab``: registers the %%argus and %argus magics."""
    from argus_lab.jupyter import load_ipython_extension as load

    load(ipython)
