"""The rows of one checkpoint commit, as text: records, events, meta, plan.

``SessionStore.commit`` (checkpoints.py) opens the transaction and claims the
next head; the rows it writes are made here: each value JSON, scrubbed of
secrets (invariant 7) and wrapped in the checksummed envelope (envelope.py).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any, Literal

from argus_lab.events import EventBase, dump_event
from argus_lab.model import SessionInfo, TaskRecord
from argus_lab.plan import Plan
from argus_lab.redact import Redactor
from argus_lab.store._rows import RowWriter
from argus_lab.store.envelope import (
    EVENT_VERSION,
    EVENTS_PER_ROW,
    encode,
    encode_bytes,
)
from argus_lab.store.head import Head

__all__ = [
    "HeadRow",
    "encoded",
    "mask_events",
    "mask_record",
    "successor",
    "write_rows",
]

_OUTSIDE_TEXT = ("result", "error", "error_type", "traceback", "reason", "approval")
"""A TaskRecord's fields that can hold outside text (the rest: ids, numbers)."""


def mask_record(red: Redactor, rec: TaskRecord) -> TaskRecord:
    """``rec``, or a copy with the fields that can hold outside text masked,
    value by value (invariant 7), before it is kept or stored:
    ``SessionState.commit`` runs every commit through it and
    ``mask_events``, and the store then scans the rows for secret values only
    (``scrubbed``)."""
    upd: dict[str, Any] = {}
    for name in _OUTSIDE_TEXT:
        v = getattr(rec, name)
        if v is not None:
            nv = red.value(v)
            if nv is not v and nv != v:
                upd[name] = nv
    return rec.model_copy(update=upd) if upd else rec


def mask_events(red: Redactor, events: list[EventBase]) -> None:
    """Masks every string of each event's own fields, nested ones too, in
    place (a field is only written back when the redactor replaced it).
    Texts that repeat step after step (a ``task_started``'s tool name) are
    remembered clean by the redactor (``Redactor.changes``) until it learns a
    secret."""
    for ev in events:
        for k, v in red.changes(ev.own_fields()).items():
            setattr(ev, k, v)


def scrubbed(redactor: Redactor | None, text: str, *, shapes: bool = True) -> str:
    """``text`` (one JSON document) with secrets masked.

    ``shapes=False`` looks for secret values only: for a row whose fields that
    can hold outside text were masked value by value already (secret shapes
    and keys included), so scanning the whole row again for shapes would only
    cost time (see ``SessionStore.commit``'s ``fields_redacted``).

    What needs masking is masked in the parsed data, string by string, and
    written again: masking the JSON text itself cut quotes and escapes (a
    plan's ``"password": "hunter22"`` became ``"password":[REDACTED]"``) and
    left a row that no longer parses, a session nobody could open. A shape
    behind an escaped quote (``password=\\"x\\"`` in a goal) also hid from a
    scan of the text; any escape sends the row to the parsed path.
    """
    if redactor is None:
        return text
    if shapes:
        if "\\" not in text and not redactor.needed(text):
            return text
    elif not redactor.has_value(text):
        return text
    try:
        data = json.loads(text)
    except ValueError:  # not JSON after all: as text
        return redactor.text(text)
    masked = redactor.value(data)
    if masked == data:
        return text
    return json.dumps(masked, ensure_ascii=False, separators=(",", ":"))


_PLAIN_SET: dict[type[EventBase], bool] = {}
"""Event classes whose attributes pydantic sets without validating them."""


def set_seq(ev: EventBase, seq: int) -> None:
    """``ev.seq = seq``, what pydantic's ``__setattr__`` does for a plain
    field (the value in ``__dict__``, the name marked set) in a quarter of
    its ~3k instructions, for classes that neither validate assignments nor
    are frozen (the others get ``setattr``)."""
    cls = ev.__class__
    plain = _PLAIN_SET.get(cls)
    if plain is None:
        cfg = cls.model_config
        plain = _PLAIN_SET[cls] = (
            not (cfg.get("validate_assignment") or cfg.get("frozen"))
            and "seq" in cls.model_fields
        )
    if plain:
        ev.__dict__["seq"] = seq
        ev.__pydantic_fields_set__.add("seq")
    else:
        ev.seq = seq


def encoded(redactor: Redactor | None, text: str, *, shapes: bool = True) -> str:
    """``text`` in its envelope, secrets masked first (see ``scrubbed``)."""
    return encode(scrubbed(redactor, text, shapes=shapes))


def write_rows(
    rows: RowWriter,
    con: sqlite3.Connection,
    redactor: Redactor | None,
    seq: int,
    records: Iterable[TaskRecord],
    events: list[EventBase],
    *,
    meta: SessionInfo | None = None,
    plan: Plan | None = None,
    fields_redacted: bool = False,
) -> int:
    """Writes a commit's rows in the open transaction; events are numbered
    ``seq + 1``, ``seq + 2``, ...; returns the last seq.

    The events go into one row (``EVENTS_PER_ROW`` at most), one JSON text a
    line, keyed by the first one's seq (envelope.EVENT_VERSION): a step's
    intent and outcome are one row, not two (a statement, a table cell and an
    index entry fewer per step: ~8 µs of a step's ~130, BENCHMARKS.md).
    """
    # Records and events are dumped by their pydantic-core serializer, what
    # ``model_dump_json`` calls with the same (default) options: passing its
    # sixteen keywords on cost ~7k instructions a call, three calls a step.
    shapes = not fields_redacted
    for rec in records:
        # Fields at their defaults (most are None on a plain success) are
        # left out: ~150 bytes a step; loading fills them back in.
        data = rec.__pydantic_serializer__.to_json(rec, exclude_defaults=True)
        rows.update(
            con, "t:" + rec.task_id, encoded(redactor, data.decode(), shapes=shapes)
        )
    datas = []
    for ev in events:
        seq += 1
        set_seq(ev, seq)
        datas.append(dump_event(ev))
    first = seq - len(datas) + 1
    for i in range(0, len(datas), EVENTS_PER_ROW):
        # JSON text holds no raw newline, so a line is exactly one event.
        part = datas[i : i + EVENTS_PER_ROW]
        chunk = b"\n".join(part)
        body = chunk.decode()
        if redactor is not None and (shapes or redactor.has_value(body)):
            # Masked one by one (a secret can never match across two events).
            texts = [scrubbed(redactor, d.decode(), shapes=shapes) for d in part]
            text = encode("\n".join(texts), EVENT_VERSION)
        else:  # no secret value in the row, so in none of its events
            text = encode_bytes(chunk, body, EVENT_VERSION)
        # (str.zfill: a ``:012d`` format spec costs twice as much)
        rows.insert(con, "e:" + str(first + i).zfill(12), text)
    if meta is not None:
        rows.update(con, "meta", encoded(redactor, meta.model_dump_json()))
    if plan is not None:
        text = plan.model_dump_json(exclude_defaults=True)
        rows.update(con, "plan", encoded(redactor, text))
    return seq


def successor(
    head: Head,
    lease: dict[str, Any] | Literal["keep"] | None,
    usage: dict[str, float] | None,
    n_events: int,
) -> Head:
    """The head a commit of ``n_events`` events writes after ``head``."""
    return Head(
        head.version + 1,
        head.last_seq + n_events,
        head.lease if lease == "keep" else lease,
        dict(head.usage if usage is None else usage),
    )


class HeadRow:
    """The head row as this store last wrote it, text and parsed.

    Args:
        rows: Writes the row.
    """

    def __init__(self, rows: RowWriter) -> None:
        self._rows = rows
        self.text: str | None = None
        self.head: Head | None = None

    def put(self, con: sqlite3.Connection, head: Head) -> None:
        """Writes ``head`` in the open transaction."""
        text = head.row()
        self._rows.update(con, "head", text)
        # Remembered only as what the transaction wrote: if it rolls back, the
        # stored text differs and the next commit reads the head afresh.
        self.text, self.head = text, head

    def advance(
        self,
        con: sqlite3.Connection,
        expected: int,
        lease: dict[str, Any] | Literal["keep"] | None,
        usage: dict[str, float] | None,
        n_events: int,
    ) -> tuple[Head, Head] | None:
        """Writes the successor of the remembered head if that is at version
        ``expected`` and still the stored one (its text unchanged: nobody else
        wrote since), in one statement; returns (remembered, written) heads.
        None: nothing written; read the stored head and check it."""
        last = self.head
        if last is None or last.version != expected or self.text is None:
            return None
        head = successor(last, lease, usage, n_events)
        text = head.row()
        if not self._rows.update_if(con, "head", self.text, text):
            return None
        self.text, self.head = text, head
        return last, head
