"""The fields every event has (``EventBase``), and their stored order."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

__all__ = ["COMMON_FIELDS", "EventBase"]

COMMON_FIELDS: tuple[str, ...] = (
    "kind",
    "session_id",
    "seq",
    "ts",
    "task_id",
    "attempt",
    "duration",
)
"""The fields of EventBase, in stored order; every kind's own fields come after."""


_COMMON = frozenset(COMMON_FIELDS)
_OWN: dict[type[BaseModel], tuple[str, ...]] = {}
"""Event class -> its own field names (``EventBase.own_fields``), in order."""


class EventBase(BaseModel):
    """Fields every event has; each kind's subclass adds its typed fields."""

    # Built on first use: two dozen event classes would otherwise cost
    # `import argus_lab` tens of milliseconds of schema generation. Extra keys
    # are kept, not refused, only so a migrated old record loses nothing;
    # ``make_event`` refuses keys a kind does not declare.
    model_config = ConfigDict(defer_build=True, extra="allow")

    RENAMED: ClassVar[dict[str, str]] = {}
    """Payload key (schema_version 1) -> field name, where they differ."""

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

    def own_fields(self) -> dict[str, Any]:
        """The kind's own fields as set (unserialized, ``None`` left out), by name.

        Cheaper than ``details()``: no dump. The runtime's redaction reads these
        and writes masked values back with ``setattr``.
        """
        cls = self.__class__
        names = _OWN.get(cls)
        if names is None:
            names = _OWN[cls] = tuple(k for k in cls.model_fields if k not in _COMMON)
        # A loop over the kind's own names (one or two for a step's events),
        # not a comprehension over all of them: the runtime masks every
        # event's own fields before each commit.
        d = self.__dict__
        out = {}
        for k in names:
            v = d.get(k)
            if v is not None:
                out[k] = v
        if self.__pydantic_extra__:
            out.update(self.__pydantic_extra__)
        return out

    def details(self) -> dict[str, Any]:
        """The kind's own fields (everything but the EventBase ones), by name."""
        data = self.model_dump(mode="json")
        for k in COMMON_FIELDS:
            data.pop(k, None)
        return data
