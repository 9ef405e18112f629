"""Events as columns: the EventBase fields parsed by Arrow, ``details`` as text.

``events_df`` needs no dict per event: each body is split after ``duration`` (the
same split as ``parse_events``), the heads are joined into newline-delimited JSON
and read by Arrow's JSON reader into typed columns in C, and the kind's own fields
stay JSON text (``details``) in an Arrow string column. The frame is then built from
the Arrow arrays (``_columns.to_series``), no Python value per cell.

Anything Arrow cannot read as the head schema (a field of another type, a body of
an unexpected shape it could not split) makes ``event_table`` answer None, and the
caller builds the rows as dicts instead: the same content, slower.
"""

from __future__ import annotations

import json
from itertools import repeat
from operator import add, getitem
from typing import Any

from argus_lab.analysis._columns import arrow
from argus_lab.analysis._table import Table
from argus_lab.events import COMMON_FIELDS

__all__ = ["EVENT_FIELDS", "event_table", "head_table", "split_bodies"]

EVENT_FIELDS: tuple[str, ...] = (*COMMON_FIELDS, "details")
"""The columns of an event row: the EventBase fields, then ``details``."""

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


def _schema() -> Any:
    pa = arrow()
    return pa.schema([(k, getattr(pa, _TYPES[k])()) for k in COMMON_FIELDS])


def _cuts(bodies: list[str], fast: bool) -> list[int] | None:
    """Where each body's head ends, found by C-level maps (no bytecode per body):
    the comma after ``duration``'s value, or -1 for a body with no own fields
    (its head is then all but the closing brace, ``body[:-1]``, as in
    ``split_bodies``). None when some body is not of that shape."""
    if not fast:
        return None
    at = list(map(str.find, bodies, repeat(_MARK)))
    if -1 in at or not all(map(str.endswith, bodies, repeat("}"))):
        return None
    # The duration is null or a number: no comma inside.
    return list(map(str.find, bodies, repeat(","), map(add, at, repeat(len(_MARK)))))


def _read_heads(heads: list[str]) -> dict[str, Any] | None:
    """The EventBase fields of the heads (without their closing brace) as Arrow
    arrays, or None when Arrow cannot read them as those fields' types."""
    pa = arrow()
    pj = arrow("pyarrow.json")
    schema = _schema()
    if not heads:
        return {f.name: pa.array([], f.type) for f in schema}
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
    if got.num_rows != len(heads):
        return None
    return {k: got.column(k).combine_chunks() for k in COMMON_FIELDS}


def _rebuilt(
    bodies: list[str], heads: list[str], details: list[Any], slow: list[int]
) -> bool:
    """Rebuilds the head (and details) of the bodies ``split_bodies`` could not
    split, from a full parse; False when one is not a JSON object."""
    for i in slow:
        full = json.loads(bodies[i])
        if not isinstance(full, dict):
            return False
        heads[i] = _compact({k: full[k] for k in COMMON_FIELDS if k in full})[:-1]
        details[i] = _compact({k: v for k, v in full.items() if k not in _TYPES})
    return True


def event_table(bodies: list[str], fast: bool) -> Table | None:
    """The events as a Table of Arrow arrays (``EVENT_FIELDS``), or None when
    Arrow cannot read their heads as the EventBase fields' types.

    Args:
        bodies: Event JSON texts, as the store returns them (checksums checked).
        fast: Whether bodies may be split after ``duration`` (see ``_read``).
    """
    heads, details, slow = split_bodies(bodies, fast)
    cols = _read_heads(heads) if _rebuilt(bodies, heads, details, slow) else None
    if cols is None:
        return None
    cols["details"] = arrow().array(details, arrow().large_string())
    return Table(cols, len(bodies))


def head_table(bodies: list[str], fast: bool) -> Table | None:
    """The EventBase fields alone as a Table of Arrow arrays (no ``details``
    column), or None as for ``event_table``: what the frames that read only
    the kinds, ids and times of every event need (``tasks_df``, the pairing of
    attempts), without cutting out and keeping every event's own fields.

    Args:
        bodies: Event JSON texts, as the store returns them (checksums checked).
        fast: Whether bodies may be split after ``duration`` (see ``_read``).
    """
    cuts = _cuts(bodies, fast)
    if cuts is None:  # some body of another shape: split one by one
        heads, details, slow = split_bodies(bodies, fast)
        if not _rebuilt(bodies, heads, details, slow):
            return None
    else:
        heads = list(map(getitem, bodies, map(slice, repeat(None), cuts)))
    cols = _read_heads(heads)
    return None if cols is None else Table(cols, len(bodies))
