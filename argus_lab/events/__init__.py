"""Trajectory events: one small typed model per kind, and the ``Event`` union.

Every event has the fields of ``EventBase`` (kind, session, seq, time, task,
attempt, duration); each kind adds its own typed fields (``TaskFailed.error``,
``LlmCall.input_tokens``, ...), declared below with a docstring each. The class
name of a kind is its ``kind`` in CamelCase (``task_failed`` -> ``TaskFailed``).

Events are append-only; the store gives each its ``seq`` when it commits.

Sessions written before the fields were typed (schema_version 1) stored the
kind-specific fields in a ``payload`` dict; the store's event migration moves them
onto the fields (``RENAMED`` maps the few keys whose name changed, and
``payload_to_fields`` applies it).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from argus_lab.events import _lane
from argus_lab.events._base import COMMON_FIELDS, EventBase
from argus_lab.events._session import (
    Anomaly,
    BudgetExceeded,
    CheckpointSaved,
    ContextBuilt,
    Forked,
    HtnDecision,
    LlmCall,
    MemoryWritten,
    Paused,
    PlanCreated,
    PlanPatched,
    Resumed,
    SessionCreated,
    SessionFailed,
    SessionSucceeded,
)
from argus_lab.events._task import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    InDoubt,
    RetryScheduled,
    TaskBlocked,
    TaskFailed,
    TaskRetried,
    TaskSkipped,
    TaskStarted,
    TaskSucceeded,
    ToolCall,
)

__all__ = [
    "COMMON_FIELDS",
    "EVENT_KINDS",
    "Anomaly",
    "ApprovalGranted",
    "ApprovalRejected",
    "ApprovalRequested",
    "BudgetExceeded",
    "CheckpointSaved",
    "ContextBuilt",
    "Event",
    "EventBase",
    "Forked",
    "HtnDecision",
    "InDoubt",
    "LlmCall",
    "MemoryWritten",
    "Paused",
    "PlanCreated",
    "PlanPatched",
    "Resumed",
    "RetryScheduled",
    "SessionCreated",
    "SessionFailed",
    "SessionSucceeded",
    "TaskBlocked",
    "TaskFailed",
    "TaskRetried",
    "TaskSkipped",
    "TaskStarted",
    "TaskSucceeded",
    "ToolCall",
    "dump_event",
    "event_adapter",
    "event_class",
    "make_event",
    "payload_to_fields",
]

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
    InDoubt,
    ApprovalRequested,
    ApprovalGranted,
    ApprovalRejected,
    LlmCall,
    ToolCall,
    PlanPatched,
    HtnDecision,
    BudgetExceeded,
    MemoryWritten,
    ContextBuilt,
    Anomaly,
    Paused,
    Resumed,
    Forked,
    SessionSucceeded,
    SessionFailed,
    CheckpointSaved,
)
EVENT_KINDS: tuple[str, ...] = tuple(c.model_fields["kind"].default for c in _CLASSES)
_BY_KIND: dict[str, type[EventBase]] = dict(zip(EVENT_KINDS, _CLASSES, strict=True))
_COMMON = frozenset(COMMON_FIELDS)
_FIELDS: dict[type[EventBase], frozenset[str]] = {
    c: frozenset(c.model_fields) for c in _CLASSES
}
_MAKE: dict[str, tuple[type[EventBase], frozenset[str]]] = {
    k: (c, _FIELDS[c]) for k, c in _BY_KIND.items()
}
_LANES: dict[type[EventBase], _lane.Lane | None] = {}
"""Event class -> its compiled lane (None: not a plain kind), on first use."""

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
    | InDoubt
    | ApprovalRequested
    | ApprovalGranted
    | ApprovalRejected
    | LlmCall
    | ToolCall
    | PlanPatched
    | HtnDecision
    | BudgetExceeded
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


def event_class(kind: str) -> type[EventBase]:
    """The model of ``kind`` (KeyError names the known kinds)."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise _unknown(kind) from None


def _unknown(kind: str) -> KeyError:
    return KeyError(f"unknown event kind {kind!r}; known: {EVENT_KINDS}")


def payload_to_fields(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Maps a schema_version-1 payload onto ``kind``'s field names.

    A payload key naming an EventBase field (LLM planner rounds carry their
    ``duration``) is returned under that name too; the caller decides which wins.
    """
    renamed = event_class(kind).RENAMED
    return {renamed.get(k, k): v for k, v in payload.items()}


def make_event(kind: str, **fields: Any) -> EventBase:
    """Builds the event model for ``kind``.

    Args:
        kind: The event kind (KeyError names the known kinds).
        **fields: Fields by name: the EventBase ones and the kind's own.

    Raises:
        KeyError: an unknown kind.
        TypeError: a field the kind does not declare (a typo, or a new key
            that needs a field in ``argus_lab.events`` first).
    """
    # Every step builds events: one lookup, a subset test of the keys (no set
    # built, no sorting unless something is wrong), then the instance.
    try:
        cls, known = _MAKE[kind]
    except KeyError:
        raise _unknown(kind) from None
    if not known.issuperset(fields):
        unknown = sorted(fields.keys() - known)
        raise TypeError(
            f"event {kind!r} ({cls.__name__}) has no field(s) {unknown}; its fields: "
            f"{sorted(known - _COMMON)}. Declare new ones in argus_lab/events/"
        )
    # A plain kind's event is made from exact values as they are, else
    # validated by a written schema (_lane.py); the other kinds are built on
    # the class's first use (defer_build), the validator called as
    # ``cls(**fields)`` calls it, without the Python frame of __init__.
    lane = _LANES[cls] if cls in _LANES else _lane_of(cls)
    if lane is None:
        return cls.__pydantic_validator__.validate_python(fields)  # type: ignore[no-any-return]
    checker = lane.checker
    if checker is None:
        event = lane.build(fields)
        if event is not None:
            return event
        checker = lane.compile()
    return checker.validate_python(fields)  # type: ignore[no-any-return]


def _lane_of(cls: type[EventBase]) -> _lane.Lane | None:
    lane = _LANES[cls] = _lane.lane_of(cls)
    return lane


def dump_event(event: EventBase) -> bytes:
    """``event.model_dump_json()``, as bytes (a plain kind's without building
    its class's schema: ``_lane.py``)."""
    cls = event.__class__
    lane = _LANES[cls] if cls in _LANES else _lane_of(cls)
    if lane is None:
        return event.__pydantic_serializer__.to_json(event)
    serializer = lane.serializer
    return lane.dump(event) if serializer is None else serializer.to_json(event)
