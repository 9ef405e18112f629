"""Argus Lab: a Jupyter-native workbench for long-horizon AI agents.

The public API is exactly ``__all__``; everything else is internal. Heavy
libraries (pandas, lancedb, anthropic, anywidget) are imported where used, so
``import argus_lab`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from argus_lab.errors import (
    ApprovalRequired,
    ArgusError,
    BudgetExceeded,
    ConcurrentSessionError,
    CorruptCheckpointError,
    InDoubtError,
    MissingDependency,
    PlanError,
    SchemaVersionError,
    ToolError,
    TransientError,
)
from argus_lab.events import Event
from argus_lab.model import Plan, SessionInfo, Task, TaskRecord
from argus_lab.plan.domain import HTNDomain, Subtask
from argus_lab.plan.htn import HTNPlanner
from argus_lab.runtime.session import RunResult, Session
from argus_lab.tools.approval import ApprovalPolicy
from argus_lab.tools.builtin import builtin_tools
from argus_lab.tools.registry import Tool, ToolContext, tool
from argus_lab.workspace import Workspace

if TYPE_CHECKING:
    from argus_lab import analysis

__version__ = "0.1.0"

__all__ = [
    "ApprovalPolicy",
    "ApprovalRequired",
    "ArgusError",
    "BudgetExceeded",
    "ConcurrentSessionError",
    "CorruptCheckpointError",
    "Event",
    "HTNDomain",
    "HTNPlanner",
    "InDoubtError",
    "MissingDependency",
    "Plan",
    "PlanError",
    "RunResult",
    "SchemaVersionError",
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
]


def __getattr__(name: str) -> Any:
    # Submodules that import pandas are loaded on first use.
    if name == "analysis":
        import importlib

        return importlib.import_module("argus_lab.analysis")
    raise AttributeError(f"module 'argus_lab' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext argus_lab``: registers the %%argus and %argus magics."""
    from argus_lab.jupyter import load_ipython_extension as load

    load(ipython)
