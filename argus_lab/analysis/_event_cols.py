"""Events as columns: the EventBase fields parsed by Arrow, ``details`` as text.

``events_df`` needs no dict per event: each body is split after ``duration`` (the
same split as ``parse_events``), the heads are joined into newline-delimited JSON
and read by Arrow's JSON reader into typed columns in C, and the kind's own fields
stay JSON text (``details``) in an Arrow string column. The frame is then built from
the Arrow arrays (``_columns.to_series``), no Python value per cell.

Anything Arrow cannot read as the head schema (a field of another type, a body of
an unexpected shape it could not split) makes ``event_table`` answer None, and the
caller builds the rows as dicts instead: the same content, slower.

Frames that read only the kind, seq, time, task and attempt of every event
(``tasks_df``, the attempts) take ``head_table`` instead: msgspec decodes just
those fields of each body and skips the rest unread, no split, no Arrow array.
"""

from __future__ import annotations

import json
from functools import cache
from operator import attrgetter
from typing import Any

from argus_lab.analysis._columns import arrow
from argus_lab.analysis._table import Table
from argus_lab.events import COMMON_FIELDS, EventBase

__all__ = [
    "EVENT_FIELDS",
    "FAST",
    "HEAD_FIELDS",
    "Heads",
    "event_table",
    "head_table",
    "parse_events",
    "split_bodies",
]

EVENT_FIELDS: tuple[str, ...] = (*COMMON_FIELDS, "details")
"""The columns of an event row: the EventBase fields, then ``details``."""
HEAD_FIELDS = ("kind", "seq", "ts", "task_id", "attempt")
"""The columns of ``head_table``: what pairing attempts and tasks reads."""

_MARK = ',"duration":'
_TYPES = {
    "kind": "string",
    "session_id": "string",
    "seq": "int64",
    "ts": "float64",
    "task_id": "string",
    "attempt": "int64",
    "duration": "float64",
}


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def split_bodies(
    bodies: list[str], fast: bool
) -> tuple[list[str], list[str | None], list[int]]:
    """Splits each body after ``duration``: (heads without their closing brace,
    details JSON text, indexes of the bodies that could not be split).

    A body that could not be split gets the head ``"{"`` and details None; with
    ``fast`` False (the field order is not the one expected) none is split.
    """
    heads: list[str] = []
    details: list[str | None] = []
    slow: list[int] = []
    # Inline, no call or tuple per row: this loop runs once per event (100,000+).
    mark, width = _MARK, len(_MARK)
    add_head, add_details = heads.append, details.append
    for i, body in enumerate(bodies):
        j = body.find(mark) if fast else -1
        if j < 0 or body[-1:] != "}":
            add_head("{")
            add_details(None)
            slow.append(i)
            continue
        # The duration is null or a number: no comma or brace inside.
        k = body.find(",", j + width)
        if k < 0:
            add_head(body[:-1])
            add_details("{}")
        else:
            add_head(body[:k])
            add_details("{" + body[k + 1 :])
    return heads, details, slow


def _duration_is_last_common() -> bool:
    classes: list[type[EventBase]] = [EventBase]
    while classes:
        cls = classes.pop()
        if tuple(cls.model_fields)[: len(COMMON_FIELDS)] != COMMON_FIELDS:
            return False
        classes.extend(cls.__subclasses__())
    return COMMON_FIELDS[-1] == "duration"


# Checked once: if the field order ever changes, the split would be wrong, so
# every body is then parsed whole (slower, still correct).
FAST = _duration_is_last_common()


def parse_events(bodies: list[str]) -> list[dict[str, Any]]:
    """Parses event JSON bodies into row dicts with the EventBase fields and
    ``details``: the kind's own fields as JSON text.

    Args:
        bodies: Event JSON texts, as ``SessionStore.iter_event_json`` yields them.

    Returns:
        One dict per event with the EventBase fields; ``details`` is the JSON
        text of the kind's own fields (``"{}"`` when it has none).
    """
    heads, details, slow = split_bodies(bodies, FAST)
    if not bodies:
        return []
    rows: list[dict[str, Any]] = json.loads("[" + "},".join(heads) + "}]")
    for row, text in zip(rows, details, strict=True):
        row["details"] = text
    for i in slow:
        full = json.loads(bodies[i])
        own = {k: full.pop(k) for k in list(full) if k not in COMMON_FIELDS}
        full["details"] = _compact(own)
        rows[i] = full
    return rows


def _schema() -> Any:
    pa = arrow()
    return pa.schema([(k, getattr(pa, _TYPES[k])()) for k in COMMON_FIELDS])


def event_table(bodies: list[str], fast: bool) -> Table | None:
    """The events as a Table of Arrow arrays (``EVENT_FIELDS``), or None when
    Arrow cannot read their heads as the EventBase fields' types.

    Args:
        bodies: Event JSON texts, as the store returns them (checksums checked).
        fast: Whether bodies may be split after ``duration`` (see ``_read``).
    """
    pa = arrow()
    pj = arrow("pyarrow.json")
    heads, details, slow = split_bodies(bodies, fast)
    for i in slow:  # a body of another shape: its head rebuilt from a full parse
        full = json.loads(bodies[i])
        if not isinstance(full, dict):
            return None
        heads[i] = _compact({k: full[k] for k in COMMON_FIELDS if k in full})[:-1]
        details[i] = _compact({k: v for k, v in full.items() if k not in _TYPES})
    schema = _schema()
    if not bodies:
        cols = {f.name: pa.array([], f.type) for f in schema}
    else:
        text = ("}\n".join(heads) + "}").encode()
        try:
            got = pj.read_json(
                pa.BufferReader(text),
                # One block, one thread: the CPU time is what is measured, and a
                # second thread on a busy machine only adds to it.
                read_options=pj.ReadOptions(
                    use_threads=False, block_size=max(len(text), 1 << 16)
                ),
                parse_options=pj.ParseOptions(
                    explicit_schema=schema, unexpected_field_behavior="ignore"
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None
        if got.num_rows != len(bodies):
            return None
        cols = {k: got.column(k).combine_chunks() for k in COMMON_FIELDS}
    cols["details"] = pa.array(details, pa.large_string())
    return Table(cols, len(bodies))


@cache
def _head_decoder() -> Any:
    """A msgspec decoder of one event's HEAD_FIELDS (typed as ``_TYPES`` says,
    missing ones None, every other field skipped unread)."""
    import msgspec

    class Head(msgspec.Struct, gc=False):
        kind: str | None = None
        seq: int | None = None
        ts: float | None = None
        task_id: str | None = None
        attempt: int | None = None

    return msgspec.json.Decoder(Head)


class Heads(Table):
    """``HEAD_FIELDS`` of every event, each column read from the decoded
    structs when first asked for (``tasks_df`` never reads ``seq``)."""

    __slots__ = ("_structs",)

    def __init__(self, structs: list[Any]) -> None:
        super().__init__({}, len(structs))
        self._structs = structs

    def column(self, name: str) -> Any:
        if name not in HEAD_FIELDS:
            return super().column(name)
        got = self._columns.get(name)
        if got is None:
            got = self._columns[name] = list(map(attrgetter(name), self._structs))
        return got

    def rows(self) -> list[dict[str, Any]]:
        for k in HEAD_FIELDS:
            self.column(k)
        return super().rows()


def head_table(bodies: list[str]) -> Heads | None:
    """Only ``HEAD_FIELDS`` of every event, as a Table of lists, or None when
    one is not of those fields' types (the caller then reads the events whole).

    What tasks_df and the frames pairing attempts read of every event. msgspec
    decodes each body into a struct of these fields alone, skipping the rest
    of the text without building it (4x faster than ``event_table``'s split
    and Arrow read, and no Arrow array to turn back into lists).

    Args:
        bodies: Event JSON texts, as the store returns them (checksums checked).
    """
    try:
        import msgspec
    except ImportError:  # an install without it: the caller reads the table
        return None
    try:
        return Heads(list(map(_head_decoder().decode, bodies)))
    # Not an object, a field of another type; or nesting msgspec will not
    # descend (~1,000 levels; pydantic writes 254 at most): read otherwise.
    except (msgspec.MsgspecError, RecursionError):
        return None
