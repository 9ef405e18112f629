"""Reading one session's checkpoint cache: envelopes, migrations, range scans.

``CheckpointReader`` turns stored text back into records (checking the envelope,
upgrading old schema versions) and says what went wrong when it cannot: a damaged
record, a full disk, a newer schema. ``SessionStore`` reads through it and uses its
errors when a write fails.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Iterable, Iterator
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

import diskcache
from pydantic import ValidationError

from argus_lab.errors import ArgusError, CorruptCheckpointError, SchemaVersionError
from argus_lab.events import EventBase, event_adapter
from argus_lab.model import SessionInfo, TaskRecord
from argus_lab.plan import Plan
from argus_lab.store._rows import SESSION_PAGE_SIZE
from argus_lab.store.envelope import (
    EVENT_VERSION,
    MIGRATIONS,
    SCHEMA_VERSION,
    Durability,
    RecordKind,
    open_cache,
)
from argus_lab.store.head import Head
from argus_lab.store.records import TaskRecords, load_records
from argus_lab.store.space import full_error, is_damaged, is_disk_full
from argus_lab.store.stored_plan import StoredPlan

__all__ = ["CheckpointReader"]


class CheckpointReader:
    """Opens one session's diskcache folder; reads and decodes its records."""

    def __init__(
        self, directory: Path, session_id: str, durability: Durability
    ) -> None:
        self.directory = directory
        self.session_id = session_id
        self.label = session_id
        """How messages name the session (the SessionStore keeps it in step)."""
        try:
            self.cache = open_cache(directory, durability, page_size=SESSION_PAGE_SIZE)
        except sqlite3.DatabaseError as e:
            raise self.db_error("cache.db", e, what="opening") from None

    def corrupt(self, key: str, why: object) -> CorruptCheckpointError:
        """The error for a damaged record ``key``."""
        return CorruptCheckpointError(
            f"session {self.session_id}: checkpoint record {key!r} is damaged ({why}). "
            "Other sessions are unaffected; fork from an earlier task or delete "
            "this session's folder to start it over.",
            key=key,
            session_id=self.session_id,
        )

    def damaged_file(self, key: str, e: sqlite3.DatabaseError) -> ArgusError:
        """The error for a database file SQLite itself cannot read.

        Not a record's checksum: the file is damaged (cut short, overwritten),
        so no record of it can be trusted to open or fork from.
        """
        db = self.directory / "cache.db"
        return CorruptCheckpointError(
            f"session {self.label}: its database {db} is damaged ({e}), found "
            f"reading {key!r}: it can be neither opened nor forked. Other "
            "sessions are unaffected. Restore its folder from a backup, or "
            f"delete it (argus rm {self.session_id}) to start over; `sqlite3 "
            f"{db} .recover` may save the records that can still be read.",
            key=key,
            session_id=self.session_id,
        )

    def db_error(
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
        if is_damaged(e):  # SQLITE_CORRUPT / SQLITE_NOTADB, a row not UTF-8
            return self.damaged_file(key, e)
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
            raise self.corrupt(key, f"unexpected {type(text).__name__} value")
        try:
            sv_s, crc_s, body = text.split("|", 2)
            sv = int(sv_s)
        except ValueError:
            raise self.corrupt(key, "no version/checksum envelope") from None
        if f"{zlib.crc32(body.encode()):08x}" != crc_s:
            raise self.corrupt(key, "checksum mismatch")
        newest = EVENT_VERSION if kind == "event" else SCHEMA_VERSION
        if sv > newest:
            raise SchemaVersionError(
                f"session {self.session_id}: record {key!r} has schema_version {sv}, "
                f"newer than this argus-lab understands ({newest}); "
                "upgrade argus-lab to open it",
                session_id=self.session_id,
            )
        return sv, body

    def parse(self, key: str, text: Any, kind: RecordKind, model: Any) -> Any:
        """Decodes, migrates and validates one record (``model`` None: a dict)."""
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
            raise self.corrupt(key, f"invalid {kind} record: {e}") from None

    def get(self, key: str) -> Any:
        """The stored text under ``key``, or None."""
        try:
            return self.cache.get(key)
        except sqlite3.DatabaseError as e:
            raise self.db_error(key, e) from None

    def read_head(self) -> Head | None:
        """The current head, or None for a session that was never created."""
        raw = self.get("head")
        if raw is None:
            return None
        d = self.parse("head", raw, "head", None)
        return Head(
            d.get("version", 0),
            d.get("last_seq", 0),
            d.get("lease"),
            d.get("usage") or {},
        )

    def rows(self, lo: str, hi: str) -> list[tuple[str, int, Any, Any]]:
        """(key, mode, filename, value) of every key in [lo, hi), in key order;
        ``fetch`` gives the stored text of a row not in mode raw."""
        # One range query instead of a get() per key: reopening a 10,000-task
        # session or reading 100,000 events stays a single pass over the index.
        # diskcache exposes no range read, so this uses its per-thread connection.
        return self._range("key, mode, filename, value", lo, hi)

    def values(self, lo: str, hi: str) -> list[Any]:
        """The stored value of every key in [lo, hi), in key order, alone (no
        key, mode or file name: a value not in mode raw comes back as None,
        bytes or a pickle, which ``rows`` then reads properly)."""
        return list(map(itemgetter(0), self._range("value", lo, hi)))

    def _range(self, columns: str, lo: str, hi: str) -> list[Any]:
        """``columns`` (a literal of the callers below) of the text rows with keys in
        [lo, hi), in key order: the one range query ``rows`` and ``values``
        share."""
        try:
            found: list[Any] = self.cache._sql(
                f"SELECT {columns} FROM Cache "
                "WHERE key >= ? AND key < ? AND raw = 1 ORDER BY key",
                (lo, hi),
            ).fetchall()
        except sqlite3.DatabaseError as e:
            raise self.db_error(f"{lo}*", e) from None
        return found

    def fetch(self, mode: int, filename: Any, value: Any) -> Any:
        """The stored value of a row that is not text inside SQLite (a file;
        diskcache refuses a pickled one here, see JsonOnlyDisk)."""
        return self.cache.disk.fetch(mode, filename, value, False)

    def scan(self, lo: str, hi: str) -> Iterator[tuple[str, Any]]:
        """(key, stored text) for every key in [lo, hi), in key order."""
        for key, mode, filename, value in self.rows(lo, hi):
            if mode == diskcache.core.MODE_RAW:
                yield key, value
            else:
                yield key, self.fetch(mode, filename, value)

    def decode_task(self, key: str, raw: Any) -> tuple[bool, str]:
        """(whether the task record is of the current schema, its JSON text)."""
        sv, body = self.decode(key, raw, "task")
        return sv == SCHEMA_VERSION, body

    def parse_task_text(self, task_id: str, body: str) -> TaskRecord:
        """Validates a task record's JSON text, already checked by ``decode``."""
        try:
            return TaskRecord.model_validate_json(body)
        except ValidationError as e:
            raise self.corrupt("t:" + task_id, f"invalid task record: {e}") from None

    def task_records(self, lo: str = "t:", hi: str = "t;") -> TaskRecords:
        """The task records of the keys in [lo, hi), read row by row, a damaged
        one named (``load_records``)."""
        return load_records(
            self.rows(lo, hi),
            self.fetch,
            self.decode_task,
            lambda key, raw: self.parse(key, raw, "task", TaskRecord),
            self.parse_task_text,
        )

    def stored_plan(self) -> StoredPlan:
        """The plan, its tasks validated when first read (stored_plan.py)."""
        raw = self.get("plan")
        sv, body = self.decode("plan", raw, "plan")
        if sv != SCHEMA_VERSION:  # migrated and validated now
            return StoredPlan(self.parse("plan", raw, "plan", Plan))
        return StoredPlan.from_json(
            body, lambda why: self.corrupt("plan", f"invalid plan record: {why}")
        )

    def read_meta(self) -> SessionInfo:
        """Reads only the SessionInfo."""
        info: SessionInfo = self.parse("meta", self.get("meta"), "meta", SessionInfo)
        return info

    def iter_event_json(self, since: int = 0) -> Iterator[str]:
        """Yields the JSON text of every event with seq > since, in order."""
        from argus_lab.store._event_read import event_pages

        # Chained in C: no generator step per event (100,000+ of them).
        return chain.from_iterable(event_pages(self, since))

    def event_texts(self, since: int = 0) -> list[str]:
        """The JSON text of every event with seq > since, in order, as one list
        (checked in bulk, see ``store._event_read``)."""
        from argus_lab.store._event_read import event_texts

        return event_texts(self, since)

    def decode_events(self, lo: str, hi: str) -> Iterator[str]:
        """The JSON text of the events in the rows with keys in [lo, hi),
        decoded row by row (and migrated from an older schema); a damaged
        row raises, named."""
        for key, raw in self.scan(lo, hi):
            sv, body = self.decode(key, raw, "event")
            if sv == EVENT_VERSION:  # a commit's events, one a line
                yield from body.split("\n")
                continue
            if sv != SCHEMA_VERSION:  # migrated, then dumped as a new one would be
                data = self.parse(key, raw, "event", None)
                try:
                    body = event_adapter().validate_python(data).model_dump_json()
                except ValidationError as e:
                    raise self.corrupt(key, f"invalid event record: {e}") from None
            yield body

    def read_events(self, since: int = 0) -> list[EventBase]:
        """Every event with seq > since, as models."""
        ad = event_adapter()
        return [ad.validate_json(b) for b in self.iter_event_json(since)]

    def get_replay(self, key: str) -> dict[str, Any] | None:
        """The reply recorded under ``key``, or None."""
        raw = self.get("r:" + key)
        if raw is None:
            return None
        data: dict[str, Any] = self.parse("r:" + key, raw, "replay", None)
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
            raise self.db_error(lo + "*", e) from None
        return row is not None

    def replays(self) -> dict[str, str]:
        """Every recorded reply, key -> JSON text (to seed a fork)."""
        out: dict[str, str] = {}
        for key, raw in self.scan("r:", "r;"):
            _, body = self.decode(key, raw, "replay")
            out[key[2:]] = body
        return out
