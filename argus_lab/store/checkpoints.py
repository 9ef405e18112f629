"""Checkpoints on diskcache: one SQLite-backed cache per session, JSON only.

``SessionStore`` creates, loads and commits a session; the record format lives in
envelope.py, the head and its lease in head.py, decoding and read errors in
_reader.py.

Keys in a session's cache:

- ``head``: version counter, last event seq and the runner lease (invariant 6);
  read and rewritten by every commit.
- ``meta``: the SessionInfo. ``plan``: the Plan.
- ``t:<task_id>``: one TaskRecord per task, rewritten when the task changes.
- ``e:<seq>``: the events of one commit (up to 64), one JSON text a line,
  keyed by the first one's seq, zero-padded so keys sort by seq (envelope
  version 3; a row of version 2, as older argus-lab wrote, holds one event).

Every value is ``"<schema_version>|<crc32>|<json>"`` text: no pickle anywhere
(``JsonOnlyDisk`` refuses to write or read one), a checksum to catch damage, and a
version for migrations. A commit writes only the changed records and the new
events in one SQLite transaction (invariants 1 and 3).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from argus_lab.errors import ConcurrentSessionError
from argus_lab.events import EventBase
from argus_lab.model import SessionInfo, TaskRecord
from argus_lab.plan import Plan
from argus_lab.redact import Redactor
from argus_lab.store._bulk import paused_gc
from argus_lab.store._commit import HeadRow, encoded, successor, write_rows
from argus_lab.store._reader import CheckpointReader
from argus_lab.store._rows import RowWriter, Transaction
from argus_lab.store.copies import Origin
from argus_lab.store.envelope import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Durability,
    JsonOnlyDisk,
    RecordKind,
    migration,
    open_cache,
)
from argus_lab.store.folders import OpenHold, mark_of
from argus_lab.store.head import (
    Head,
    abandon_lease,
    make_lease,
    refusal,
    release_abandoned,
)
from argus_lab.store.loss import check_witness
from argus_lab.store.records import Loaded, bulk_records
from argus_lab.store.witness import Witness

# The record format (envelope.py) and the head and lease (head.py) were once in
# this module; their names stay importable from here, where users found them.
__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Durability",
    "Head",
    "JsonOnlyDisk",
    "Loaded",
    "SessionStore",
    "make_lease",
    "migration",
    "open_cache",
]


class SessionStore:
    """The checkpoint store of one session (a diskcache folder)."""

    def __init__(
        self, directory: Path, session_id: str, *, durability: Durability = "normal"
    ) -> None:
        self.directory = Path(directory)
        self.session_id = session_id
        self.durability = durability
        self.redactor: Redactor | None = None
        """Set by the Session: a last scrub of every value before it is written."""
        self.witness = Witness(
            self.directory, fsync=durability == "full", mark=mark_of(self.directory)
        )
        wal = self.directory / "cache.db-wal"
        # No WAL before we open: every commit is in cache.db itself, so the
        # journal of which task each version touched can start afresh.
        self._settled = not wal.exists() or wal.stat().st_size == 0
        """The second record of the latest commit, outside SQLite (witness.py)."""
        self._read = CheckpointReader(self.directory, session_id, durability)
        self.cache = self._read.cache
        self._rows = RowWriter(self.cache)
        self._heads = HeadRow(self._rows)
        self.origin = Origin(self.directory, self.witness)
        """The files our leases name; a copy of them told apart (copies.py)."""
        self.accept_copy = False
        """Take over a lease whose files went on after these were copied."""
        self.opened: OpenHold | None = None
        """A Session's hold on the folder (``hold_open``); None for readers."""

    def hold_open(self) -> None:
        """For a Session: holds the folder against removal until ``close``
        (``argus rm``/``gc`` refuse it meanwhile), and from now on
        ``read_head``, which each public call reads first (never each step),
        refuses once the folder was removed or replaced anyway (folders.py).

        Raises:
            ConcurrentSessionError: it is being removed right now.
        """
        if self.opened is None:
            self.opened = OpenHold(self.directory, self.label)

    def close(self) -> None:
        """Closes the SQLite connections (the data stays on disk)."""
        self.cache.close()
        self.witness.close()
        if self.opened is not None:
            self.opened.close()  # after the files: then it may be removed

    @property
    def label(self) -> str:
        """How messages name the session (the Session sets "name (id)")."""
        return self._read.label

    @label.setter
    def label(self, value: str) -> None:
        self._read.label = value

    # -- reading -------------------------------------------------------------

    def decode(self, key: str, text: Any, kind: RecordKind) -> tuple[int, str]:
        """Checks the envelope and returns (schema_version, json text)."""
        return self._read.decode(key, text, kind)

    def read_head(self) -> Head | None:
        """The current head, or None for a session that was never created.

        Raises:
            StorageError: a Session's folder was removed or replaced since
                it was opened (``hold_open``).
        """
        if self.opened is not None:
            self.opened.check(self.label)
        return self._read.read_head()

    def read_meta(self) -> SessionInfo:
        """Reads only the SessionInfo."""
        return self._read.read_meta()

    def iter_event_json(self, since: int = 0) -> Iterator[str]:
        """Yields the JSON text of every event with seq > since, in order."""
        return self._read.iter_event_json(since)

    def read_events(self, since: int = 0) -> list[EventBase]:
        """Every event with seq > since, as models."""
        return self._read.read_events(since)

    def task_records(self) -> MutableMapping[str, TaskRecord]:
        """Every task record as stored now (what ``load`` reads of them, with
        no witness check): a fork's view of a session another process may be
        running."""
        read = self._read
        with paused_gc():  # tens of thousands of objects, none of them garbage
            records = bulk_records(read.values("t:", "t;"), read.parse_task_text)
            # Not all plain: row by row, damage named.
            return read.task_records() if records is None else records

    def load(self, *, accept_lost_commits: bool = False) -> Loaded:
        """Loads head, meta, plan and every task record (not the events).

        Every record's checksum and status are checked now; the rest of a
        record is validated when it is first read (see ``store/records.py``).

        Raises:
            LostCommitsError: the head is older than its witness (commits were
                lost), or than its mark outside the folder (an older copy of
                the folder was put in its place: a backup restored), unless
                ``accept_lost_commits``: then each task they may have touched
                is marked as interrupted, for the runtime to rerun
                (idempotent) or hold in doubt, and the loss is recorded.
        """
        # The witness and the mark first: each is written after each commit,
        # so what they say now is at most what the head read next holds. Read
        # the other way round, a commit landing in between (another thread or
        # process writing while this one loads) looked like a lost commit.
        witnessed = self.witness.read()
        marked = self.witness.read_mark()
        head = self.read_head()
        if head is None:
            if witnessed:  # everything was lost, the session's plan included
                check_witness(self, None, witnessed, accept=accept_lost_commits)
            raise self._read.corrupt("head", "missing: this folder holds no session")
        meta = self._read.parse("meta", self._read.get("meta"), "meta", SessionInfo)
        with paused_gc():  # tens of thousands of objects, none of them garbage
            plan = self._read.stored_plan()
        records = self.task_records()
        loaded = Loaded(head=head, meta=meta, plan=plan, records=records)
        if (
            marked is not None
            and marked > max(witnessed or 0, head.version)
            and meta.id == self.session_id  # (else ws.open says whose it is)
        ):
            # The folder agrees with itself but is older than its last
            # commit: an older copy of it put in its place (witness.py).
            check_witness(
                self, loaded, marked, accept=accept_lost_commits, restored=True
            )
        elif witnessed is not None and head.version < witnessed:
            check_witness(self, loaded, witnessed, accept=accept_lost_commits)
        elif self._settled and witnessed == head.version:
            self.witness.compact()
        self._settled = False  # later loads (a lease handover) find a live WAL
        return loaded

    # -- writing -------------------------------------------------------------

    @contextmanager
    def _transaction(self, task_ids: Iterable[str] = ()) -> Iterator[None]:
        try:
            with Transaction(self.cache):
                yield
        except sqlite3.DatabaseError as e:
            raise self._read.db_error("cache.db", e, task_ids) from None

    def _check(self, head: Head | None, expected: int, holder: str) -> Head:
        if head is None:
            raise self._read.corrupt("head", "missing")
        if head.version != expected:
            raise ConcurrentSessionError(
                f"session {self.label} was changed by another writer "
                f"(version {head.version}, expected {expected}); nothing was "
                "written. Reopen it with ws.open() to see the latest state.",
                session_id=self.session_id,
            )
        self.refuse_if_held(head, holder)
        return head

    def refuse_if_held(self, head: Head, holder: str) -> None:
        """ConcurrentSessionError while a live process other than ``holder``
        holds the runner lease, or a run held it when these files were copied."""
        lease = head.lease
        if not lease or lease.get("holder") == holder:
            return  # ours, or none: every commit of a run asks, keep it cheap
        label = self.label
        why = refusal(lease, holder, label)
        if why is None and not self.accept_copy:
            why = self.origin.refusal(
                lease, holder, self.witness.read, f"session {label}"
            )
        if why is not None:
            raise ConcurrentSessionError(why, session_id=self.session_id)

    def create(
        self,
        meta: SessionInfo,
        plan: Plan,
        records: Iterable[TaskRecord],
        events: list[EventBase],
        replays: Mapping[str, str] | None = None,
    ) -> Head:
        """Writes a new session in one transaction (fails if one exists here).

        ``replays`` (key -> JSON text) seed the replay cache, e.g. a fork's.
        """
        with self._transaction():
            if self.cache.get("head") is not None:
                raise ConcurrentSessionError(
                    f"a session already exists in {self.directory}",
                    session_id=self.session_id,
                )
            head = Head(version=1, last_seq=0)
            for key, text in (replays or {}).items():
                self.cache.set("r:" + key, encoded(self.redactor, text))
            records = list(records)
            self._write(head, records, events, meta=meta, plan=plan)
        self.witness.record(
            head.version, [r.task_id for r in records], last_seq=head.last_seq
        )
        return head

    # -- the replay cache (invariant 9) -----------------------------------------

    def put_replay(self, key: str, data: dict[str, Any]) -> None:
        """Records a reply (a model response, a tool result) under ``key``.

        Written on its own: a reply is a fact about a request, true whether or
        not the step that asked for it commits, so it needs no transaction.
        """
        try:
            self.cache.set("r:" + key, encoded(self.redactor, json.dumps(data)))
        except sqlite3.DatabaseError as e:
            raise self._read.db_error("r:" + key, e) from None

    def get_replay(self, key: str) -> dict[str, Any] | None:
        """The reply recorded under ``key``, or None."""
        return self._read.get_replay(key)

    def has_replays(self, prefix: str = "") -> bool:
        """Whether any reply is recorded under a key starting with ``prefix``."""
        return self._read.has_replays(prefix)

    def replays(self) -> dict[str, str]:
        """Every recorded reply, key -> JSON text (to seed a fork)."""
        return self._read.replays()

    def commit(
        self,
        expected_version: int,
        holder: str,
        *,
        records: Iterable[TaskRecord] = (),
        events: list[EventBase] = (),  # type: ignore[assignment]
        meta: SessionInfo | None = None,
        plan: Plan | None = None,
        lease: dict[str, Any] | Literal["keep"] | None = "keep",
        usage: dict[str, float] | None = None,
        relaxed: bool = False,
        fields_redacted: bool = False,
    ) -> Head:
        """Writes changed records and new events atomically; returns the new head.

        Events get their ``seq`` here. Raises ConcurrentSessionError, writing
        nothing, when another writer changed the session or holds its lease.

        ``relaxed``: under durability "full", skip this commit's fsync (it
        survives a process crash, not a power cut). For commits whose loss can
        only make work run again, never repeat a side effect: the intent of an
        attempt of a tool without side effects. The next fsynced commit makes
        it durable too (same WAL file). It is journaled but not witnessed, so
        a power cut that drops it is not reported as a loss (``witness.py``).

        ``fields_redacted``: the caller masked every field of the records and
        events that can hold outside text, value by value (``SessionState``
        does): their rows are scanned for secret values only (_commit.py).
        """
        relax = relaxed and self.durability == "full"
        records = list(records)
        tids = [r.task_id for r in records]
        if relax:
            self.cache._sql("PRAGMA synchronous=1")
        try:
            if lease is None:
                abandon_lease(holder)  # until the release below is committed
            try:
                with Transaction(self.cache) as con:
                    n = len(events)
                    head = self._next_head(
                        con, expected_version, holder, lease, usage, n
                    )
                    write_rows(
                        self._rows,
                        con,
                        self.redactor,
                        head.last_seq - n,
                        records,
                        events,
                        meta=meta,
                        plan=plan,
                        fields_redacted=fields_redacted,
                    )
            except sqlite3.DatabaseError as e:
                raise self._read.db_error("cache.db", e, tids) from None
        finally:
            if relax:
                self.cache._sql("PRAGMA synchronous=2")
        release_abandoned(holder)
        self.witness.record(
            head.version, tids, durable=not relax, last_seq=head.last_seq
        )
        if isinstance(lease, dict):
            self.origin.claim()
        return head

    def _next_head(
        self,
        con: sqlite3.Connection,
        expected: int,
        holder: str,
        lease: dict[str, Any] | Literal["keep"] | None,
        usage: dict[str, float] | None,
        n_events: int,
    ) -> Head:
        """Checks the stored head (invariant 6) and writes the next one.

        Usually one statement: the head is rewritten only where its stored text
        is still the text this store wrote last, so nobody else wrote since and
        the head to check is the one remembered. Otherwise (a first commit,
        another writer, a commit rolled back) it is read and parsed first.
        """
        moved = self._heads.advance(con, expected, lease, usage, n_events)
        if moved is not None:
            last, head = moved
            self.refuse_if_held(last, holder)  # raising rolls the update back
            return head
        head = successor(
            self._check(self.read_head(), expected, holder), lease, usage, n_events
        )
        self._heads.put(con, head)
        return head

    def _write(
        self,
        head: Head,
        records: Iterable[TaskRecord],
        events: list[EventBase],
        *,
        meta: SessionInfo | None = None,
        plan: Plan | None = None,
    ) -> None:
        """Writes records, events (numbered after ``head.last_seq``), meta, plan
        and then ``head``, in the open transaction."""
        con = self.cache._con
        head.last_seq = write_rows(
            self._rows,
            con,
            self.redactor,
            head.last_seq,
            records,
            events,
            meta=meta,
            plan=plan,
        )
        self._heads.put(con, head)

    def acquire_lease(self, holder: str, ttl: float) -> Head:
        """Takes the runner lease (or renews ours) in a transaction of its own
        (ConcurrentSessionError while a live process elsewhere holds it)."""
        with self._transaction():
            head = self.read_head()
            if head is None:
                raise self._read.corrupt("head", "missing")
            self.refuse_if_held(head, holder)
            head.version += 1
            head.lease = make_lease(holder, ttl, self.origin.where, renewed=True)
            self._heads.put(self.cache._con, head)
        release_abandoned(holder)
        self.witness.record(head.version, [], last_seq=head.last_seq)
        self.origin.claim()
        return head
