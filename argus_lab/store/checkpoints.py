"""Checkpoints on diskcache: one SQLite-backed cache per session, JSON only.

Keys in a session's cache:

- ``head``: version counter, last event seq and the runner lease (invariant 6);
  read and rewritten by every commit.
- ``meta``: the SessionInfo. ``plan``: the Plan.
- ``t:<task_id>``: one TaskRecord per task, rewritten when the task changes.
- ``e:<seq>``: one Event per key, zero-padded so keys sort by seq.

Every value is ``"<schema_version>|<crc32>|<json>"`` text: no pickle anywhere
(``JsonOnlyDisk`` refuses to write or read one), a checksum to catch damage, and a
version for migrations. A commit writes only the changed records and the new
events in one SQLite transaction (invariants 1 and 3).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import diskcache
from pydantic import ValidationError

from argus_lab.errors import (
    ArgusError,
    ConcurrentSessionError,
    CorruptCheckpointError,
    SchemaVersionError,
)
from argus_lab.events import (
    COMMON_FIELDS,
    EVENT_KINDS,
    EventBase,
    event_adapter,
    payload_to_fields,
)
from argus_lab.model import SessionInfo, TaskRecord
from argus_lab.plan import Plan
from argus_lab.redact import Redactor
from argus_lab.store._bulk import load_records, paused_gc
from argus_lab.store._rows import (
    NOT_INLINE,
    RowWriter,
    Transaction,
    prepare_database,
)
from argus_lab.store.space import full_error, is_disk_full
from argus_lab.store.witness import Witness, check_witness

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Durability",
    "Head",
    "JsonOnlyDisk",
    "Loaded",
    "SessionStore",
    "migration",
    "open_cache",
]

SCHEMA_VERSION = 2
"""1 -> 2: events carry their kind's typed fields instead of a ``payload`` dict."""
Durability = Literal["normal", "full"]
"""SQLite ``synchronous`` in WAL mode. "normal": a commit survives a process crash
(SIGKILL, kernel restart) but the last ones may roll back on power loss. "full":
each commit is fsynced and survives power loss too, at a cost (see BENCHMARKS.md)."""

RecordKind = Literal["head", "meta", "plan", "task", "event", "replay"]
MIGRATIONS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}
"""(record kind, from_version) -> function upgrading the JSON data one version."""

HOST = socket.gethostname()


def migration(
    kind: RecordKind, from_version: int
) -> Callable[[Callable[[dict[str, Any]], dict[str, Any]]], Callable[..., Any]]:
    """Registers a function that upgrades ``kind`` records from ``from_version``."""

    def register(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[..., Any]:
        MIGRATIONS[(kind, from_version)] = fn
        return fn

    return register


@migration("task", 0)
def _task_v0(d: dict[str, Any]) -> dict[str, Any]:
    # v0 called status "state" and attempts "tries", and had no generation.
    d = dict(d)
    if "state" in d:
        d["status"] = d.pop("state")
    if "tries" in d:
        d["attempts"] = d.pop("tries")
    return d


@migration("meta", 0)
def _meta_v0(d: dict[str, Any]) -> dict[str, Any]:
    # v0 stored the goal as "title" and timestamps as "created_at".
    d = dict(d)
    if "title" in d:
        d["goal"] = d.pop("title")
    if "created_at" in d:
        d["created"] = d.pop("created_at")
        d.setdefault("updated", d["created"])
    return d


for _kind in ("head", "plan", "event", "replay"):
    MIGRATIONS[(_kind, 0)] = dict
for _kind in ("head", "meta", "plan", "task", "replay"):
    MIGRATIONS[(_kind, 1)] = dict


@migration("event", 1)
def _event_v1(d: dict[str, Any]) -> dict[str, Any]:
    # v1 kept each kind's own fields in a "payload" dict; v2 types them as fields
    # of the kind's model (argus_lab.events), a few under new names.
    d = dict(d)
    payload = d.pop("payload", None)
    kind = d.get("kind")
    if not isinstance(payload, dict) or kind not in EVENT_KINDS:
        return d
    for k, v in payload_to_fields(str(kind), payload).items():
        if k not in COMMON_FIELDS or d.get(k) is None:
            d[k] = v
    return d


class JsonOnlyDisk(diskcache.Disk):  # type: ignore[misc]
    """A diskcache Disk that stores str keys and str/bytes values, and never pickles.

    diskcache pickles anything that is not str/bytes/int/float; refusing here makes
    "no pickle" a property of the store, not a habit of its callers.
    """

    def put(self, key: Any) -> tuple[Any, bool]:
        if not isinstance(key, str):
            raise TypeError(f"checkpoint keys are str, got {type(key).__name__}")
        return super().put(key)  # type: ignore[no-any-return]

    def get(self, key: Any, raw: bool) -> Any:
        if not raw:
            raise CorruptCheckpointError(
                "a pickled key was found in a checkpoint; refusing to unpickle it"
            )
        return super().get(key, raw)

    def store(self, value: Any, read: bool, key: Any = diskcache.core.UNKNOWN) -> Any:
        if read or not isinstance(value, str | bytes):
            raise TypeError(
                f"checkpoints store JSON text only, got {type(value).__name__}"
            )
        return super().store(value, read, key=key)

    def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> Any:
        if mode == diskcache.core.MODE_PICKLE:
            raise CorruptCheckpointError(
                "a pickled value was found in a checkpoint; refusing to unpickle it"
            )
        return super().fetch(mode, filename, value, read)


def open_cache(directory: Path, durability: Durability = "normal") -> diskcache.Cache:
    """Opens a diskcache Cache configured for checkpoints (never evicts, no pickle)."""
    prepare_database(str(directory))  # 1 KiB pages: a quarter of the WAL traffic
    return diskcache.Cache(
        str(directory),
        disk=JsonOnlyDisk,
        eviction_policy="none",
        size_limit=2**62,
        cull_limit=0,
        statistics=0,
        tag_index=0,
        sqlite_synchronous=2 if durability == "full" else 1,
        # Keep records inside SQLite (one transaction) unless they are huge;
        # large results go to artifacts before they get here.
        disk_min_file_size=1 << 22,
    )


def encode(data_json: str) -> str:
    """Wraps JSON text in the versioned, checksummed envelope."""
    return f"{SCHEMA_VERSION}|{zlib.crc32(data_json.encode()):08x}|{data_json}"


@dataclass
class Head:
    """The session's version counter, last event seq and runner lease."""

    version: int = 0
    last_seq: int = 0
    lease: dict[str, Any] | None = None
    usage: dict[str, float] = field(default_factory=dict)
    """Running totals the budgets are checked against: steps, cost_usd,
    tokens, wall_s. Kept here because the head is rewritten by every commit."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": self.version,
                "last_seq": self.last_seq,
                "lease": self.lease,
                "usage": self.usage,
            }
        )


@dataclass
class Loaded:
    """Everything needed to continue a session."""

    head: Head
    meta: SessionInfo
    plan: Plan
    records: dict[str, TaskRecord] = field(default_factory=dict)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_ABANDONED: set[str] = set()
"""Lease holders of this process whose release failed (e.g. on a full disk):
their Session gave the lease up, nobody renews it, so it protects no one and a
reopen in this process need not wait for it to expire."""


def lease_is_live(lease: dict[str, Any] | None, now: float) -> bool:
    """Whether a lease still protects its holder: not expired and (here) alive."""
    if not lease or lease.get("expires", 0) <= now:
        return False
    if (
        lease.get("host") == HOST
        and lease.get("pid") == os.getpid()
        and lease.get("holder") in _ABANDONED
    ):
        return False
    # A holder on this host whose process is gone cannot renew: take over now
    # rather than making the user wait out the lease.
    return not (lease.get("host") == HOST and not _pid_alive(int(lease.get("pid", 0))))


class SessionStore:
    """The checkpoint store of one session (a diskcache folder)."""

    def __init__(
        self, directory: Path, session_id: str, *, durability: Durability = "normal"
    ) -> None:
        self.directory = Path(directory)
        self.session_id = session_id
        self.durability = durability
        self.label = session_id
        """How messages name the session (the Session sets "name (id)")."""
        self.redactor: Redactor | None = None
        """Set by the Session: a last scrub of every value before it is written."""
        self.witness = Witness(self.directory, fsync=durability == "full")
        wal = self.directory / "cache.db-wal"
        # No WAL before we open: every commit is in cache.db itself, so the
        # journal of which task each version touched can start afresh.
        self._settled = not wal.exists() or wal.stat().st_size == 0
        """The second record of the latest commit, outside SQLite (witness.py)."""
        try:
            self.cache = open_cache(self.directory, durability)
        except sqlite3.DatabaseError as e:
            raise self._db_error("cache.db", e, what="opening") from None
        self._rows = RowWriter(self.cache)
        self._head_text: str | None = None
        """The head's stored text as this store last wrote it: a commit that finds
        the same text in its transaction knows nobody else wrote since."""
        self._head: Head | None = None

    def close(self) -> None:
        """Closes the SQLite connections (the data stays on disk)."""
        self.cache.close()
        self.witness.close()

    # -- reading -------------------------------------------------------------

    def _corrupt(self, key: str, why: object) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            f"session {self.session_id}: checkpoint record {key!r} is damaged ({why}). "
            "Other sessions are unaffected; fork from an earlier task or delete "
            "this session's folder to start it over.",
            key=key,
            session_id=self.session_id,
        )

    def _db_error(
        self,
        key: str,
        e: sqlite3.DatabaseError,
        task_ids: Iterable[str] = (),
        *,
        what: str = "committing to",
    ) -> ArgusError:
        """A full disk, a damaged file, or another failure to read or write."""
        if is_disk_full(e, self.directory):
            tids = list(task_ids)
            return full_error(
                self.directory / "cache.db",
                e,
                session_id=self.session_id,
                label=self.label,
                task_id=tids[0] if tids else None,
                what=what,
            )
        code = getattr(e, "sqlite_errorcode", None)
        text = str(e)
        if (code is not None and code & 0xFF in (11, 26)) or (
            "malformed" in text or "not a database" in text
        ):
            return self._corrupt(key, e)  # SQLITE_CORRUPT / SQLITE_NOTADB
        # Not known to be damaged (locked, read-only, an I/O error): no advice
        # to delete anything.
        return CorruptCheckpointError(
            f"session {self.label}: could not read or write {key!r} in "
            f"{self.directory} ({e}). Nothing is known to be damaged: check the "
            "disk, its free space and the folder's permissions, then reopen it.",
            key=key,
            session_id=self.session_id,
        )

    def decode(self, key: str, text: Any, kind: RecordKind) -> tuple[int, str]:
        """Checks the envelope and returns (schema_version, json text)."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        if not isinstance(text, str):
            raise self._corrupt(key, f"unexpected {type(text).__name__} value")
        try:
            sv_s, crc_s, body = text.split("|", 2)
            sv = int(sv_s)
        except ValueError:
            raise self._corrupt(key, "no version/checksum envelope") from None
        if f"{zlib.crc32(body.encode()):08x}" != crc_s:
            raise self._corrupt(key, "checksum mismatch")
        if sv > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"session {self.session_id}: record {key!r} has schema_version {sv}, "
                f"newer than this argus-lab understands ({SCHEMA_VERSION}); "
                "upgrade argus-lab to open it",
                session_id=self.session_id,
            )
        return sv, body

    def _parse(self, key: str, text: Any, kind: RecordKind, model: Any) -> Any:
        sv, body = self.decode(key, text, kind)
        try:
            if sv == SCHEMA_VERSION:
                return model.model_validate_json(body) if model else json.loads(body)
            data = json.loads(body)
            for v in range(sv, SCHEMA_VERSION):
                fn = MIGRATIONS.get((kind, v))
                if fn is None:
                    raise SchemaVersionError(
                        f"session {self.session_id}: no migration for {kind} records "
                        f"from schema_version {v}; this checkpoint cannot be upgraded",
                        session_id=self.session_id,
                    )
                data = fn(data)
            return model.model_validate(data) if model else data
        except (ValidationError, json.JSONDecodeError) as e:
            raise self._corrupt(key, f"invalid {kind} record: {e}") from None

    def _get(self, key: str) -> Any:
        try:
            return self.cache.get(key)
        except sqlite3.DatabaseError as e:
            raise self._db_error(key, e) from None

    def read_head(self) -> Head | None:
        """The current head, or None for a session that was never created."""
        raw = self._get("head")
        if raw is None:
            return None
        d = self._parse("head", raw, "head", None)
        return Head(
            d.get("version", 0),
            d.get("last_seq", 0),
            d.get("lease"),
            d.get("usage") or {},
        )

    def _scan(self, lo: str, hi: str) -> Iterator[tuple[str, Any]]:
        # One range query instead of a get() per key: reopening a 10,000-task
        # session or reading 100,000 events stays a single pass over the index.
        # diskcache exposes no range read, so this uses its per-thread connection.
        sql = self.cache._sql
        try:
            rows = sql(
                "SELECT key, mode, filename, value FROM Cache "
                "WHERE key >= ? AND key < ? AND raw = 1 ORDER BY key",
                (lo, hi),
            ).fetchall()
        except sqlite3.DatabaseError as e:
            raise self._db_error(f"{lo}*", e) from None
        for key, mode, filename, value in rows:
            if mode == diskcache.core.MODE_RAW:
                yield key, value
            else:
                yield key, self.cache.disk.fetch(mode, filename, value, False)

    def load(self, *, accept_lost_commits: bool = False) -> Loaded:
        """Loads head, meta, plan and every task record (not the events).

        Raises:
            LostCommitsError: the head is older than its witness (commits were
                lost), unless ``accept_lost_commits``: then each task they
                touched is marked as interrupted, for the runtime to rerun
                (idempotent) or hold in doubt, and the loss is recorded.
        """
        head = self.read_head()
        witnessed = self.witness.read()
        if head is None:
            if witnessed:  # everything was lost, the session's plan included
                check_witness(self, None, witnessed, accept=accept_lost_commits)
            raise self._corrupt("head", "missing: this folder holds no session")
        meta = self._parse("meta", self._get("meta"), "meta", SessionInfo)
        with paused_gc():  # tens of thousands of objects, none of them garbage
            plan = self._parse("plan", self._get("plan"), "plan", Plan)
            records = load_records(
                self._scan("t:", "t;"),
                self._decode_task,
                lambda key, raw: self._parse(key, raw, "task", TaskRecord),
            )
        loaded = Loaded(head=head, meta=meta, plan=plan, records=records)
        if witnessed is not None and head.version < witnessed:
            check_witness(self, loaded, witnessed, accept=accept_lost_commits)
        elif self._settled and witnessed == head.version:
            self.witness.compact()
        self._settled = False  # later loads (a lease handover) find a live WAL
        return loaded

    def _decode_task(self, key: str, raw: Any) -> tuple[bool, str]:
        sv, body = self.decode(key, raw, "task")
        return sv == SCHEMA_VERSION, body

    def read_meta(self) -> SessionInfo:
        """Reads only the SessionInfo."""
        info: SessionInfo = self._parse("meta", self._get("meta"), "meta", SessionInfo)
        return info

    def iter_event_json(self, since: int = 0) -> Iterator[str]:
        """Yields the JSON text of every event with seq > since, in order."""
        for key, raw in self._scan(f"e:{since + 1:012d}", "e;"):
            sv, body = self.decode(key, raw, "event")
            if sv != SCHEMA_VERSION:  # migrated, then dumped as a new one would be
                data = self._parse(key, raw, "event", None)
                try:
                    body = event_adapter().validate_python(data).model_dump_json()
                except ValidationError as e:
                    raise self._corrupt(key, f"invalid event record: {e}") from None
            yield body

    def read_events(self, since: int = 0) -> list[EventBase]:
        """Every event with seq > since, as models."""
        ad = event_adapter()
        return [ad.validate_json(b) for b in self.iter_event_json(since)]

    # -- writing -------------------------------------------------------------

    @contextmanager
    def _transaction(self, task_ids: Iterable[str] = ()) -> Iterator[None]:
        try:
            with Transaction(self.cache):
                yield
        except sqlite3.DatabaseError as e:
            raise self._db_error("cache.db", e, task_ids) from None

    def _check(self, head: Head | None, expected: int, holder: str) -> Head:
        if head is None:
            raise self._corrupt("head", "missing")
        if head.version != expected:
            raise ConcurrentSessionError(
                f"session {self.label} was changed by another writer "
                f"(version {head.version}, expected {expected}); nothing was "
                "written. Reopen it with ws.open() to see the latest state.",
                session_id=self.session_id,
            )
        self._refuse_if_held(head, holder)
        return head

    def _refuse_if_held(self, head: Head, holder: str) -> None:
        """ConcurrentSessionError while a live process other than ``holder``
        holds the runner lease."""
        lease = head.lease
        if (
            lease
            and lease.get("holder") != holder
            and lease_is_live(lease, time.time())
        ):
            raise ConcurrentSessionError(
                _lease_msg(self.label, lease), session_id=self.session_id
            )

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
                self.cache.set("r:" + key, self._encode(text))
            records = list(records)
            self._write(head, records, events, meta=meta, plan=plan)
        self.witness.record(head.version, [r.task_id for r in records])
        return head

    # -- the replay cache (invariant 9) -----------------------------------------

    def put_replay(self, key: str, data: dict[str, Any]) -> None:
        """Records a reply (a model response, a tool result) under ``key``.

        Written on its own: a reply is a fact about a request, true whether or
        not the step that asked for it commits, so it needs no transaction.
        """
        try:
            self.cache.set("r:" + key, self._encode(json.dumps(data)))
        except sqlite3.DatabaseError as e:
            raise self._db_error("r:" + key, e) from None

    def get_replay(self, key: str) -> dict[str, Any] | None:
        """The reply recorded under ``key``, or None."""
        raw = self._get("r:" + key)
        if raw is None:
            return None
        data: dict[str, Any] = self._parse("r:" + key, raw, "replay", None)
        return data

    def has_replays(self, prefix: str = "") -> bool:
        """Whether any reply is recorded under a key starting with ``prefix``."""
        lo = "r:" + prefix
        try:
            row = self.cache._sql(
                "SELECT 1 FROM Cache WHERE key >= ? AND key < ? AND raw = 1 LIMIT 1",
                (lo, lo + "\uffff"),
            ).fetchone()
        except sqlite3.DatabaseError as e:
            raise self._db_error(lo + "*", e) from None
        return row is not None

    def replays(self) -> dict[str, str]:
        """Every recorded reply, key -> JSON text (to seed a fork)."""
        out: dict[str, str] = {}
        for key, raw in self._scan("r:", "r;"):
            _, body = self.decode(key, raw, "replay")
            out[key[2:]] = body
        return out

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
    ) -> Head:
        """Writes changed records and new events atomically; returns the new head.

        Events get their ``seq`` here. Raises ConcurrentSessionError, writing
        nothing, when another writer changed the session or holds its lease.

        ``relaxed``: under durability "full", skip this commit's fsync (it
        survives a process crash, not a power cut). For commits whose loss can
        only make work run again, never repeat a side effect: the intent of an
        attempt of a tool without side effects. The next fsynced commit makes
        it durable too (same WAL file).
        """
        relax = relaxed and self.durability == "full"
        records = list(records)
        if relax:
            self.cache._sql("PRAGMA synchronous=1")
        try:
            if lease is None:
                _ABANDONED.add(holder)  # until the release below is committed
            with self._transaction(r.task_id for r in records):
                head = self._check(
                    self._head_in(self.cache._con), expected_version, holder
                )
                head.version += 1
                if lease != "keep":
                    head.lease = lease
                if usage is not None:
                    head.usage = usage
                self._write(head, records, events, meta=meta, plan=plan)
        finally:
            if relax:
                self.cache._sql("PRAGMA synchronous=2")
        _ABANDONED.discard(holder)
        self.witness.record(
            head.version, [r.task_id for r in records], sync=False if relax else None
        )
        return head

    def _head_in(self, con: sqlite3.Connection) -> Head | None:
        """The head inside a transaction: the cached one if its stored text is
        the text this store wrote last (nobody else wrote), else read afresh."""
        raw = self._rows.read_raw(con, "head")
        if raw is not None and raw is not NOT_INLINE and raw == self._head_text:
            h = self._head
            assert h is not None
            return Head(h.version, h.last_seq, h.lease, dict(h.usage))
        return self.read_head()

    def _encode(self, text: str) -> str:
        red = self.redactor
        if red is not None and red.needed(text):
            text = red.text(text)
        return encode(text)

    def _write(
        self,
        head: Head,
        records: Iterable[TaskRecord],
        events: list[EventBase],
        *,
        meta: SessionInfo | None = None,
        plan: Plan | None = None,
    ) -> None:
        rows, con = self._rows, self.cache._con
        for rec in records:
            # Fields at their defaults (most are None on a plain success) are
            # left out: ~150 bytes a step; loading fills them back in.
            rows.update(
                con,
                "t:" + rec.task_id,
                self._encode(rec.model_dump_json(exclude_defaults=True)),
            )
        for ev in events:
            head.last_seq += 1
            ev.seq = head.last_seq
            rows.insert(con, f"e:{ev.seq:012d}", self._encode(ev.model_dump_json()))
        if meta is not None:
            rows.update(con, "meta", self._encode(meta.model_dump_json()))
        if plan is not None:
            text = plan.model_dump_json(exclude_defaults=True)
            rows.update(con, "plan", self._encode(text))
        self._put_head(con, head)

    def _put_head(self, con: sqlite3.Connection, head: Head) -> None:
        text = encode(head.to_json())
        self._rows.update(con, "head", text)
        # Remembered only as what the transaction wrote: if it rolls back, the
        # stored text differs and the next commit reads the head afresh.
        self._head_text, self._head = text, head

    def acquire_lease(self, holder: str, ttl: float) -> Head:
        """Takes the runner lease (or renews ours).

        Raises:
            ConcurrentSessionError: while a live process elsewhere holds it.
        """
        with self._transaction():
            head = self.read_head()
            if head is None:
                raise self._corrupt("head", "missing")
            self._refuse_if_held(head, holder)
            head.version += 1
            head.lease = make_lease(holder, ttl)
            self._put_head(self.cache._con, head)
        _ABANDONED.discard(holder)
        self.witness.record(head.version, [])
        return head


def make_lease(holder: str, ttl: float) -> dict[str, Any]:
    """A lease for this process, valid for ``ttl`` seconds."""
    return {
        "holder": holder,
        "pid": os.getpid(),
        "host": HOST,
        "expires": time.time() + ttl,
    }


def _lease_msg(label: str, lease: dict[str, Any]) -> str:
    left = max(0.0, lease.get("expires", 0) - time.time())
    return (
        f"session {label} is being run by process {lease.get('pid')} on "
        f"{lease.get('host')} (lease valid {left:.0f}s more); wait for that run to "
        "end, pause it there, or open a fork instead"
    )
