"""How one attempt of a task ended, as a type (not an ``error_type`` string).

An attempt ends in exactly one of these; the failure policy (policy.py) matches
on the type to decide what happens next. Every failure carries the text a
person reads (``error``) and the class name stored in the record and the
events (``error_type``), which stays what it always was so old trajectories and
new ones read alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from argus_lab.model import TaskRecord
from argus_lab.runtime.budget import BudgetHit

__all__ = [
    "Failed",
    "Failure",
    "FailureKind",
    "InDoubt",
    "Interrupted",
    "Outcome",
    "OverBudget",
    "Rejected",
    "ShutDown",
    "Succeeded",
    "TimedOut",
    "ended_record",
    "failure_fields",
]

FailureKind = Literal[
    "error",  # the tool raised
    "transient",  # a failure worth retrying: 429/5xx, a connection reset
    "invalid_args",  # the arguments do not fit the tool's signature
    "bad_result",  # not JSON, or not matching the task's success schema
    "missing_tool",  # the task's tool is not registered in this session
    "bad_reference",  # a ${task.result...} reference cannot be resolved
    "plan",  # the planner could not expand a lazy compound
    "budget",  # BudgetExceeded raised inside the call, with no hit recorded
]


@dataclass(slots=True)
class Succeeded:
    """The tool returned a result that passed every check.

    Not frozen, unlike the failures: every step makes one, and a frozen
    dataclass sets each field through ``object.__setattr__`` (~0.5% of a
    step). Nothing changes one once it is handed on.
    """

    result: Any
    """The result, JSON-ready (large values already stored as artifacts)."""
    result_json: str
    """``result`` as JSON text (its size decides inline or artifact)."""
    duration: float = 0.0
    """Seconds the call took."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The attempt failed; ``kind`` says how."""

    kind: FailureKind
    """What went wrong, as the policy sees it."""
    error: str
    """What happened, for a person."""
    error_type: str
    """The exception's class name (stored in the record and events)."""
    traceback: str | None = None
    """The formatted traceback, when there was an exception."""
    retry_after: float | None = None
    """Seconds a server asked us to wait (transient failures)."""
    duration: float = 0.0
    """Seconds the call took."""

    @property
    def transient(self) -> bool:
        """Whether trying again may help."""
        return self.kind == "transient"


@dataclass(frozen=True, slots=True)
class TimedOut:
    """The call ran past its timeout and was abandoned (worth retrying)."""

    error: str
    error_type: str = "TransientError"
    traceback: str | None = None
    retry_after: float | None = None
    duration: float = 0.0


@dataclass(frozen=True, slots=True)
class InDoubt:
    """A call with side effects was lost mid-way: it may or may not have taken
    effect, so it is never rerun without a person (invariant 2)."""

    error: str
    error_type: str = "InDoubtError"
    traceback: str | None = None
    duration: float = 0.0
    running: bool = False
    """Its call still runs in this process (a thread past its timeout): a
    retry waits for it to end (runtime/abandoned.py)."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """A person or an approval policy said no."""

    error: str
    by: str
    """"policy" or the person's name."""
    error_type: str = "Rejected"
    traceback: str | None = None
    duration: float = 0.0


@dataclass(frozen=True, slots=True)
class OverBudget:
    """A budget ran out inside the attempt (before a model call)."""

    hit: BudgetHit
    error: str
    error_type: str = "BudgetExceeded"
    traceback: str | None = None
    duration: float = 0.0


@dataclass(frozen=True, slots=True)
class Interrupted:
    """Found RUNNING when the session was opened: the process running the
    attempt died before its outcome was committed."""

    attempt: int
    """The attempt that was under way."""


@dataclass(frozen=True, slots=True)
class ShutDown:
    """The process or the session was shutting down, so the attempt was left
    unfinished: never a failure. Its committed intent is decided when the
    session is opened again, exactly as after a crash (``Interrupted``)."""

    why: str
    """What shut down (kernel restart, interpreter exit, SIGTERM, close())."""
    started: bool
    """Whether the tool may have begun (False: refused before the call)."""
    duration: float = 0.0


Failure = Failed | TimedOut | InDoubt | Rejected | OverBudget
"""Every way an attempt can end that is not a success."""
Outcome = Succeeded | Failure | ShutDown
"""How one attempt ended."""


def ended_record(
    rec: TaskRecord, out: Failure, now: float, **update: Any
) -> TaskRecord:
    """The record of a task that failed for good with ``out`` (status "failed"
    unless ``update`` says otherwise)."""
    return rec.model_copy(
        update={
            "status": "failed",
            "ended": now,
            "error": out.error,
            "error_type": out.error_type,
            "traceback": out.traceback,
            **update,
        }
    )


def failure_fields(out: Failure, *, blocked: int, **more: Any) -> dict[str, Any]:
    """The ``task_failed`` event's own fields for ``out``."""
    return {
        "error": out.error,
        "error_type": out.error_type,
        "blocked": blocked,
        **more,
    }
