"""Session options, run results, and the hashes that name calls and keys."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from argus_lab.events import EventBase
from argus_lab.model import SessionStatus
from argus_lab.tools.approval import ApprovalPolicy

if TYPE_CHECKING:
    pass

__all__ = [
    "RunResult",
    "SessionOptions",
    "Subscriber",
    "idempotency_key",
    "input_hash",
    "tool_replay_key",
]

log = logging.getLogger("argus_lab")
T = TypeVar("T")
Subscriber = Callable[[EventBase], None]


@dataclass(frozen=True)
class SessionOptions:
    """How a session runs (not stored: pass them again to ``ws.open``)."""

    concurrency: int = 4
    """Tasks that may run at once."""
    backoff: tuple[float, float] = (0.5, 30.0)
    """(first delay, largest delay) in seconds between transient retries;
    each delay doubles, with jitter, and honours a server's retry-after."""
    lease_ttl: float = 30.0
    """Seconds a runner lease lasts without renewal (renewed while running)."""
    inline_result_bytes: int = 64 * 1024
    """Results larger than this (as JSON) go to content-addressed artifacts."""
    approvals: tuple[ApprovalPolicy, ...] | None = None
    """Approval policies, first match decides; None: ask before write tools."""
    secrets: tuple[str, ...] = ()
    """Values to redact besides env vars named like KEY/TOKEN/SECRET/PASSWORD."""
    max_consecutive_failures: int | None = 5
    """Pause (an anomaly) after this many tasks in a row failed for good."""
    anomaly_factor: float = 3.0
    """An attempt running this many times over its task's expected_seconds is
    an anomaly: no new task starts until a person looks."""
    remember: bool | None = None
    """Write finished results (and lessons from failures) to the workspace's
    memory, with provenance. None: only when the plan has LLM tasks or uses
    memory tools (plain tool pipelines stay as fast as they are)."""
    context_tokens: int = 8000
    """Token budget of an LLM task's prompt (see runtime/context.py)."""
    models: Any = None
    """Models for LLM tasks: one Model, or a dict of name -> Model where
    "default" serves tasks that name none (``Task.model`` picks another)."""
    executor: Any = None
    """Where sync tool calls run: None for this process's thread pool, or a
    RemoteExecutor such as ``al.DaskExecutor(client)`` (async tools and the
    session itself always stay here)."""
    planner: Any = None
    """An HTNPlanner: expands lazy compound tasks when they become ready and
    backtracks a failed subtree to the next method (code: hand it in again on
    ``ws.open``, like tools)."""

    def __post_init__(self) -> None:
        if self.approvals is not None:
            object.__setattr__(self, "approvals", tuple(self.approvals))
        object.__setattr__(self, "secrets", tuple(self.secrets))
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.lease_ttl <= 0:
            raise ValueError(f"lease_ttl must be positive, got {self.lease_ttl}")


@dataclass(frozen=True)
class RunResult:
    """How a ``run()`` ended."""

    status: SessionStatus
    """succeeded, failed or paused."""
    reason: str | None = None
    """Why it failed or paused, naming tasks."""
    counts: dict[str, int] = field(default_factory=dict)
    """Tasks per status."""
    failed: dict[str, str] = field(default_factory=dict)
    """Failed task id -> its error."""

    def __bool__(self) -> bool:
        return self.status == "succeeded"

    def __str__(self) -> str:
        done = ", ".join(f"{n} {s}" for s, n in self.counts.items() if n)
        return f"{self.status}: {done}" + (f" — {self.reason}" if self.reason else "")


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def input_hash(tool_name: str, args: Any) -> str:
    """Hash of a call's tool name and resolved arguments (staleness, caching)."""
    text = json.dumps([tool_name, args], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def idempotency_key(session_id: str, task_id: str, generation: int) -> str:
    """Stable for a task's generation: the same across crash- and transient retries."""
    raw = f"{session_id}\x00{task_id}\x00{generation}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def tool_replay_key(task_id: str, in_hash: str, tool_hash: str) -> str:
    """Replay-cache key of a tool result: the task, its inputs and its tool's code."""
    return f"tool:{task_id}:{in_hash}:{tool_hash}"
