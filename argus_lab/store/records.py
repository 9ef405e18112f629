"""Task records read on demand: every status at once, a whole record when asked.

Reopening a session needs the status of every task (the scheduler's in-degrees,
the counts) but the full record of only the few tasks the next step or a view
touches. Validating 50,000 records with pydantic took most of a reopen, so
``load_records`` keeps each stored record's JSON text instead and reads its
status from the text's first field, and ``TaskRecords`` validates a record only
when it is first read (every remaining one in one pydantic-core call when all
are asked for: ``values()``, ``items()``).

What is checked when, so damage is still found where it was:

- **On opening** (``bulk_records`` for all rows at once; ``load_records`` row by
  row, naming the key, when any row is not plain), for every record: the envelope, the
  checksum of the whole text, the schema version, and that the text starts
  ``{"task_id":"<the key's id>"`` followed by a known status (or by none, which
  means pending when no ``"status"`` key comes later), as
  ``TaskRecord.model_dump_json`` writes it. A damaged record therefore still
  fails the open with ``CorruptCheckpointError`` naming its key. A record of an
  older schema (migrated), or one whose text does not start that way, is
  validated in full at once, as before.
- **On first read** of a record (``records[task_id]``, ``get``, ``values``,
  ``items``): pydantic validates the rest of its fields. Text that passed its
  checksum but is not a valid record (only a faulty writer makes one) raises
  the same ``CorruptCheckpointError`` ("invalid task record") then.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import (
    Callable,
    ItemsView,
    Iterable,
    Mapping,
    MutableMapping,
    ValuesView,
)
from operator import itemgetter, methodcaller
from typing import Any, cast

import diskcache
from pydantic import ValidationError

from argus_lab.model import STATUSES, SessionInfo, Status, TaskRecord, blank_record
from argus_lab.plan import Plan
from argus_lab.store._bulk import paused_gc, records_adapter
from argus_lab.store._lazy import LazyMap
from argus_lab.store.envelope import SCHEMA_VERSION, intact_bodies
from argus_lab.store.head import Head
from argus_lab.store.stored_plan import StoredPlan

__all__ = ["Loaded", "TaskRecords", "bulk_records", "load_records"]

# How model_dump_json starts a record: the id, then the status unless it is
# the default ("pending"). Task ids never need escaping (TASK_ID_PATTERN); a
# text that starts any other way is validated in full.
_HEAD = re.compile(
    r'\{"task_id":"([^"\\]*)"(?:,"status":"([a-z_]+)"[,}]|(?!,"status")[,}])'
)
_KNOWN: frozenset[str] = frozenset(STATUSES)
_KNOWN_OR_NONE: frozenset[str | None] = frozenset([*STATUSES, None])
_RAW = diskcache.core.MODE_RAW
_GROUPS, _FIRST, _SECOND = methodcaller("groups"), itemgetter(0), itemgetter(1)

Entry = TaskRecord | str | None
"""A record, its verified JSON text (not validated yet), or None (not stored)."""

Parse = Callable[[str, str], TaskRecord]
"""(task id, verified JSON text) -> the record; raises CorruptCheckpointError
naming the key when the text is not a valid record."""


class TaskRecords(LazyMap[TaskRecord]):
    """Task records by id; a stored one is validated when first read.

    Args:
        entries: Task id -> its record, its verified JSON text (validated when
            read), or None (no stored record: a fresh pending one when read).
        statuses: Task id -> status, for every entry.
        parse: Validates one record's text (see ``Parse``).
    """

    def __init__(
        self, entries: dict[str, Entry], statuses: dict[str, Status], parse: Parse
    ) -> None:
        super().__init__(entries, TaskRecord)
        self.status = statuses
        """Every task's status, kept in step with the records (read it instead
        of the records when the status is all you need: nothing is parsed)."""
        self._parse = parse

    @classmethod
    def of(cls, records: Mapping[str, TaskRecord], order: Iterable[str]) -> TaskRecords:
        """The records of the tasks in ``order`` (and in that order), taken from
        ``records`` without validating any; tasks it lacks get pending ones."""
        if isinstance(records, TaskRecords):
            ids = list(order)
            src, st = records._d, records.status
            # Copies made in C (50,000 tasks on every reopen): the tasks in
            # order, then what is stored for them (when it is for them alone).
            d: dict[str, Entry] = dict.fromkeys(ids)
            sts: dict[str, Status] = dict.fromkeys(ids, "pending")
            if src.keys() <= d.keys():
                d.update(src)
                sts.update(st)
            else:
                d = dict(zip(ids, map(src.get, ids), strict=True))
                sts = {t: st.get(t, "pending") for t in ids}
            return cls(d, sts, records._parse)
        d2: dict[str, Entry] = {t: records.get(t) for t in order}
        statuses: dict[str, Status] = {
            t: r.status if isinstance(r, TaskRecord) else "pending"
            for t, r in d2.items()
        }
        return cls(d2, statuses, _no_text)

    def _make(self, key: str, raw: Any) -> TaskRecord:
        return blank_record(key) if raw is None else self._parse(key, raw)

    def values(self) -> ValuesView[TaskRecord]:
        """Every record (those not read yet validated first, in one call)."""
        self.read_all()
        return cast(ValuesView[TaskRecord], self._d.values())

    def items(self) -> ItemsView[str, TaskRecord]:
        """(task id, record) pairs (validated first, as ``values``)."""
        self.read_all()
        return cast(ItemsView[str, TaskRecord], self._d.items())

    def where(self, *statuses: Status) -> list[tuple[str, TaskRecord]]:
        """(task id, record) of every task in one of ``statuses``, in order;
        only those records are validated."""
        st = self.status
        return [(t, self[t]) for t in self._d if st[t] in statuses]

    def read_all(self) -> None:
        """Validates every record not read yet (one call for all of them)."""
        with paused_gc():  # tens of thousands of records, none of them garbage
            unread = self._unread()
            if not unread:
                return
            keys, raws = zip(*unread, strict=True)
            if None in raws:  # tasks with no stored record: fresh pending ones
                fresh = [k for k, v in unread if v is None]
                made = [TaskRecord(task_id=k) for k in fresh]
                self._keep(fresh, [None] * len(fresh), made)
                unread = [(k, v) for k, v in unread if v is not None]
                if not unread:
                    return
                keys, raws = zip(*unread, strict=True)
            try:
                batch = records_adapter().validate_json("[" + ",".join(raws) + "]")
            except ValidationError:  # parse one by one: the error names the key
                batch = [self._parse(k, v) for k, v in unread]
            self._keep(keys, raws, batch)

    def __setitem__(self, task_id: str, rec: TaskRecord) -> None:
        with self._lock:
            self._d[task_id] = rec
            self.status[task_id] = rec.status

    def __delitem__(self, task_id: str) -> None:
        with self._lock:
            del self._d[task_id]
            del self.status[task_id]


class Loaded:
    """Everything needed to continue a session.

    Args:
        head: The head when it was read.
        meta: The SessionInfo.
        plan: The plan, validated or as stored (``StoredPlan``: validated
            when ``plan`` is first read).
        records: Task records by id (from ``load``: a ``TaskRecords``, each
            validated when first read).
    """

    def __init__(
        self,
        head: Head,
        meta: SessionInfo,
        plan: Plan | StoredPlan,
        records: MutableMapping[str, TaskRecord] | None = None,
    ) -> None:
        self.head = head
        self.meta = meta
        self.stored_plan = plan if isinstance(plan, StoredPlan) else StoredPlan(plan)
        self.records: MutableMapping[str, TaskRecord] = (
            {} if records is None else records
        )

    @property
    def plan(self) -> Plan:
        """The plan (validated on first read)."""
        return self.stored_plan.plan


def _no_text(task_id: str, text: str) -> TaskRecord:
    raise AssertionError(f"no stored text was given for task {task_id!r}")


def bulk_records(texts: list[Any], parse_text: Parse) -> TaskRecords | None:
    """Task records from the stored texts of every ``t:`` row, checked together
    with C-level maps (``envelope.intact_bodies``, as events are): every envelope
    current with its checksum right, every text starting as ``model_dump_json``
    writes it. None if any row is otherwise: ``load_records`` then goes row by
    row, naming a damaged key, migrating an older schema."""
    bodies = intact_bodies(texts)
    if bodies is None:
        return None
    found = list(map(_HEAD.match, bodies))
    if None in found:
        return None
    heads = list(map(_GROUPS, found))
    ids: list[str] = list(map(_FIRST, heads))
    statuses: list[Any] = list(map(_SECOND, heads))
    if not set(statuses) <= _KNOWN_OR_NONE:
        return None
    if None in statuses:  # no status after the id: pending, if no later "status"
        for i, st in enumerate(statuses):
            if st is None:
                if '"status":' in bodies[i]:
                    return None
                statuses[i] = "pending"
    return TaskRecords(
        dict(zip(ids, bodies, strict=True)),
        dict(zip(ids, statuses, strict=True)),
        parse_text,
    )


def load_records(
    rows: Iterable[tuple[str, int, Any, Any]],
    fetch: Callable[[int, Any, Any], Any],
    decode: Callable[[str, Any], tuple[bool, str]],
    parse_one: Callable[[str, Any], TaskRecord],
    parse_text: Parse,
) -> TaskRecords:
    """Task records from the stored rows, every status read at once.

    Args:
        rows: The stored ``t:<task id>`` rows: (key, diskcache mode, filename,
            value), as ``CheckpointReader.rows`` gives them.
        fetch: (mode, filename, value) -> the stored value, for a row whose
            value is not text inside SQLite (raises for a pickled one).
        decode: (key, value) -> (current schema version?, JSON text); raises
            for a damaged envelope or checksum.
        parse_one: (key, value) -> the record, validated now (migrations, and
            texts that do not start as ``model_dump_json`` writes them).
        parse_text: Validates a record's text when it is first read.
    """
    entries: dict[str, Entry] = {}
    statuses: dict[str, Any] = {}
    match, known, crc32, raw_mode = _HEAD.match, _KNOWN, zlib.crc32, _RAW
    current = str(SCHEMA_VERSION)
    for key, mode, filename, raw in rows:
        if mode != raw_mode:
            raw = fetch(mode, filename, raw)
        # The usual row inline (what ``decode`` accepts, checked the same way:
        # this schema version, its checksum right); anything else, damage
        # included, goes through ``decode``, which says what is wrong.
        try:
            sv, crc, body = raw.split("|", 2)
        except (AttributeError, TypeError, ValueError):
            sv = crc = body = ""
        if sv != current or f"{crc32(body.encode()):08x}" != crc:
            current_version, body = decode(key, raw)
            if not current_version:  # migrated, and validated, now
                body = ""
        m = match(body)
        if m is not None:
            tid, st = m.groups()
            # No status after the id means the default, "pending" - unless a
            # "status" key comes later (not as model_dump_json writes it, or
            # inside the result): then the record is validated now.
            if tid == key[2:] and (
                st in known or (st is None and '"status":' not in body)
            ):
                entries[tid] = body
                statuses[tid] = st or "pending"
                continue
        rec = parse_one(key, raw)
        entries[rec.task_id] = rec
        statuses[rec.task_id] = rec.status
    return TaskRecords(entries, statuses, parse_text)
