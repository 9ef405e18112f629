"""Trajectory events: one small model per kind, and the ``Event`` union.

Events are append-only; the store gives each its ``seq`` when it commits.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = ["EVENT_KINDS", "Event", "EventBase", "event_adapter", "make_event"]


class EventBase(BaseModel):
    """Fields every event has."""

    # Built on first use: two dozen event classes would otherwise cost
    # `import argus_lab` tens of milliseconds of schema generation.
    model_config = ConfigDict(defer_build=True)

    kind: str
    """What happened (a lowercase literal per event class)."""
    session_id: str
    """The session it happened in."""
    seq: int = 0
    """Position in the session's trajectory; assigned at commit, starting at 1."""
    ts: float
    """When it happened (epoch seconds, UTC)."""
    task_id: str | None = None
    """The task concerned, if any."""
    attempt: int | None = None
    """The attempt concerned, if any."""
    duration: float | None = None
    """Seconds the thing took, when it took time."""
    payload: dict[str, Any] = Field(default_factory=dict)
    """Kind-specific details (errors, delays, counts, reasons)."""


class SessionCreated(EventBase):
    """A session was created (payload: name, goal, parent)."""

    kind: Literal["session_created"] = "session_created"


class PlanCreated(EventBase):
    """The session's plan was stored (payload: n_tasks, version)."""

    kind: Literal["plan_created"] = "plan_created"


class TaskStarted(EventBase):
    """An attempt's intent was committed; its tool is about to run."""

    kind: Literal["task_started"] = "task_started"


class TaskSucceeded(EventBase):
    """An attempt succeeded and its result was stored."""

    kind: Literal["task_succeeded"] = "task_succeeded"


class TaskFailed(EventBase):
    """A task failed for good (payload: error, error_type, blocked)."""

    kind: Literal["task_failed"] = "task_failed"


class RetryScheduled(EventBase):
    """A transient failure; another attempt is due after payload.delay seconds."""

    kind: Literal["retry_scheduled"] = "retry_scheduled"


class TaskSkipped(EventBase):
    """A person skipped the task; its dependents may go on."""

    kind: Literal["task_skipped"] = "task_skipped"


class TaskBlocked(EventBase):
    """A task cannot run because a dependency failed (payload: by)."""

    kind: Literal["task_blocked"] = "task_blocked"


class TaskRetried(EventBase):
    """A person asked for a task (and what it blocked) to run again."""

    kind: Literal["task_retried"] = "task_retried"


class TaskInDoubt(EventBase):
    """A non-idempotent attempt was interrupted; a person must decide."""

    kind: Literal["in_doubt"] = "in_doubt"


class ApprovalRequested(EventBase):
    """A call waits for a person (payload: tool, args, policy, reason)."""

    kind: Literal["approval_requested"] = "approval_requested"


class ApprovalGranted(EventBase):
    """A person approved a call (payload: by, args, edited_args)."""

    kind: Literal["approval_granted"] = "approval_granted"


class ApprovalRejected(EventBase):
    """A person or a policy refused a call (payload: by, reason, args)."""

    kind: Literal["approval_rejected"] = "approval_rejected"


class LlmCall(EventBase):
    """One model request (payload: model, purpose, input_tokens, output_tokens,
    cache_read_tokens, cache_write_tokens, cost_usd, request_hash, cached,
    stop_reason). ``cached`` is true when a recorded reply was served."""

    kind: Literal["llm_call"] = "llm_call"


class ToolCall(EventBase):
    """A tool call made inside an LLM task (payload: tool, args, ok, error)."""

    kind: Literal["tool_call"] = "tool_call"


class PlanPatched(EventBase):
    """The plan changed (payload: version, added, removed, reason)."""

    kind: Literal["plan_patched"] = "plan_patched"


class HtnDecision(EventBase):
    """An HTN planning decision (payload: compound, method, decision, reason);
    decision is one of tried, chosen, rejected, backtracked."""

    kind: Literal["htn_decision"] = "htn_decision"


class BudgetCrossed(EventBase):
    """A budget would be crossed (payload: budget, limit, used, needed)."""

    kind: Literal["budget_exceeded"] = "budget_exceeded"


class MemoryWritten(EventBase):
    """A memory was written with this event's provenance (payload: id, kind)."""

    kind: Literal["memory_written"] = "memory_written"


class ContextBuilt(EventBase):
    """An LLM prompt was assembled (payload: budget, used, items: included,
    truncated or dropped, each with why)."""

    kind: Literal["context_built"] = "context_built"


class Anomaly(EventBase):
    """Something looks wrong (payload: what, detail): consecutive failures, or an
    attempt far over its expected time. The session pauses for a person."""

    kind: Literal["anomaly"] = "anomaly"


class Paused(EventBase):
    """The session paused (payload: reason)."""

    kind: Literal["paused"] = "paused"


class Resumed(EventBase):
    """A run began or resumed (payload: recovered tasks, if any)."""

    kind: Literal["resumed"] = "resumed"


class Forked(EventBase):
    """This session was forked from another (payload: parent, at, kept)."""

    kind: Literal["forked"] = "forked"


class SessionSucceeded(EventBase):
    """Every task succeeded or was skipped."""

    kind: Literal["session_succeeded"] = "session_succeeded"


class SessionFailed(EventBase):
    """Nothing more can run and some task failed (payload: failed, summary)."""

    kind: Literal["session_failed"] = "session_failed"


_CLASSES: tuple[type[EventBase], ...] = (
    SessionCreated,
    PlanCreated,
    TaskStarted,
    TaskSucceeded,
    TaskFailed,
    RetryScheduled,
    TaskSkipped,
    TaskBlocked,
    TaskRetried,
    TaskInDoubt,
    ApprovalRequested,
    ApprovalGranted,
    ApprovalRejected,
    LlmCall,
    ToolCall,
    PlanPatched,
    HtnDecision,
    BudgetCrossed,
    MemoryWritten,
    ContextBuilt,
    Anomaly,
    Paused,
    Resumed,
    Forked,
    SessionSucceeded,
    SessionFailed,
)
EVENT_KINDS: tuple[str, ...] = tuple(c.model_fields["kind"].default for c in _CLASSES)
_BY_KIND: dict[str, type[EventBase]] = dict(zip(EVENT_KINDS, _CLASSES, strict=True))

Event = Annotated[
    SessionCreated
    | PlanCreated
    | TaskStarted
    | TaskSucceeded
    | TaskFailed
    | RetryScheduled
    | TaskSkipped
    | TaskBlocked
    | TaskRetried
    | TaskInDoubt
    | ApprovalRequested
    | ApprovalGranted
    | ApprovalRejected
    | LlmCall
    | ToolCall
    | PlanPatched
    | HtnDecision
    | BudgetCrossed
    | MemoryWritten
    | ContextBuilt
    | Anomaly
    | Paused
    | Resumed
    | Forked
    | SessionSucceeded
    | SessionFailed,
    Field(discriminator="kind"),
]
"""Any event, discriminated by ``kind``."""

_adapter: TypeAdapter[Event] | None = None


def event_adapter() -> TypeAdapter[Event]:
    """The TypeAdapter that parses any event (built on first use)."""
    global _adapter
    if _adapter is None:
        _adapter = TypeAdapter(Event)
    return _adapter


def make_event(kind: str, **fields: Any) -> EventBase:
    """Builds the event model for ``kind`` (KeyError names the known kinds)."""
    try:
        cls = _BY_KIND[kind]
    except KeyError:
        raise KeyError(f"unknown event kind {kind!r}; known: {EVENT_KINDS}") from None
    return cls(**fields)
