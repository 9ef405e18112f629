"""One LangGraph thread's records in its own diskcache folder (no LangGraph import).

A thread lives in ``<workspace>/sessions/lg-<slug>-<hash>/`` beside native sessions,
in a diskcache database like theirs (same settings, same no-pickle Disk). Argus's
own ``head`` record (version counter and runner lease) is in diskcache's table;
LangGraph's records are in a table of their own, ``LangGraph`` (key, JSON text),
written in the same transactions. Its keys:

- ``lg:thread``: the thread id.
- ``c<US>ns<US>checkpoint_id``: a checkpoint record (``_delta.py``).
- ``b<US>ns<US>channel<US>version``: a channel's value at one version.
- ``w<US>ns<US>checkpoint_id<US>task_id<US>idx``: one pending write.

(``<US>`` is the ASCII unit separator, which no namespace or channel contains.)
Every value is ``"<schema_version>|<crc32>|<json>"`` text (``_record.py``); a record
that fails its checksum raises CorruptCheckpointError naming the thread and the key.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from argus_lab.errors import (
    ArgusError,
    ConcurrentSessionError,
    CorruptCheckpointError,
)
from argus_lab.langgraph._lost import refuse_copy, refuse_held
from argus_lab.langgraph._record import (
    TABLE_SCHEMA,
    US,
    lg_decode,
    lg_encode,
)
from argus_lab.store._rows import Transaction
from argus_lab.store.copies import Origin
from argus_lab.store.envelope import Durability, open_cache
from argus_lab.store.envelope import encode as encode_argus
from argus_lab.store.folders import fsync_dir
from argus_lab.store.head import Head, make_lease
from argus_lab.store.witness import Witness

__all__ = ["LINGER", "PROGRESS", "ThreadStore"]

PROGRESS = "~lg"
"""What a thread's journal line names for a commit that wrote checkpoints or
writes (a release writes none): a copy's original went on only if one came
after the copy (``store/copies.touched_a_task``)."""

LINGER = 0.01
"""Seconds a task's writes wait, under durability "full", for the checkpoint that
usually follows them, to share its fsync (``_group.py``)."""


class ThreadStore:
    """The records of one LangGraph thread; every write is one transaction."""

    def __init__(
        self,
        directory: Path,
        thread_id: str,
        *,
        durability: Durability,
        holder: str,
        lease_ttl: float,
        accept_copy: bool = False,
    ) -> None:
        self.directory = directory
        self.thread_id = thread_id
        self.session_id = directory.name
        self.holder = holder
        self.lease_ttl = lease_ttl
        self.accept_copy = accept_copy
        """Take over a lease whose files went on after these were copied."""
        self.lock = threading.RLock()
        self.expected_version: int | None = None
        """The head version of our last commit: a different one at the next
        commit means another writer got in between (ConcurrentSessionError)."""
        self._head_text: str | None = None
        self._head: Head | None = None
        self.status: str | None = None
        """The session status last written to ``meta`` by this process."""
        from argus_lab.langgraph._group import GroupCommit

        self.group = GroupCommit(self, LINGER if durability == "full" else 0.0)
        """Concurrent puts and writes share one transaction (``_group.py``)."""
        self.status_at = ""
        """The checkpoint whose writes set that status (an interrupt, an error):
        only a newer checkpoint changes it again."""
        self._pending: list[tuple[str, str]] = []
        self._pending_keep: list[tuple[str, str]] = []
        self.witness = Witness(directory, fsync=durability == "full")
        """The head's latest committed version, outside SQLite (``_lost.py``)."""
        wal = directory / "cache.db-wal"
        self.settled = not wal.exists() or wal.stat().st_size == 0
        """No WAL when opened: every commit is in cache.db (the journal of a
        long life may start afresh)."""
        new = not (directory / "cache.db").exists()
        try:
            # A new thread's database is set up (diskcache's tables, ours, the
            # thread's first records: ~20 small commits) without an fsync each,
            # then switched to "full"; its first fsynced commit makes all of
            # that durable too (one WAL, written in order).
            self.cache = open_cache(directory, "normal" if new else durability)
            self.origin = Origin(directory, self.witness)
            """The files our leases name; a copy told apart (store/copies.py)."""
            self.cache._sql(TABLE_SCHEMA)
            if new:
                self.ensure_thread_record()
                if durability == "full":
                    self.cache.reset("sqlite_synchronous", 2)
                    fsync_dir(directory.parent)  # the new folder's name too
        except sqlite3.DatabaseError as e:
            raise self.failed(e) from None

    def close(self) -> None:
        self.cache.close()
        self.witness.close()

    def _sql(self, statement: str, args: Any = ()) -> sqlite3.Cursor:
        try:
            cur: sqlite3.Cursor = self.cache._sql(statement, args)
        except sqlite3.DatabaseError as e:
            raise self.failed(e) from None
        return cur

    # -- reading ------------------------------------------------------------

    def corrupt(self, key: str, why: object) -> CorruptCheckpointError:
        readable = key.replace(US, " / ")
        return CorruptCheckpointError(
            f"LangGraph thread {self.thread_id!r} (session {self.session_id}): "
            f"record {readable!r} is damaged ({why}). Other threads are "
            "unaffected; resume from an earlier checkpoint (graph.get_state_history) "
            "or delete the thread to start it over.",
            key=key,
            session_id=self.session_id,
        )

    def failed(self, e: sqlite3.DatabaseError) -> ArgusError:
        """A full disk, a damaged file, or another failure to read or write
        (``_lost.storage_error``)."""
        from argus_lab.langgraph._lost import storage_error

        return storage_error(self, e)

    def parse(self, key: str, raw: Any) -> Any:
        """Checks the envelope of a LangGraph record and returns its data."""
        return lg_decode(
            key,
            raw,
            thread_id=self.thread_id,
            session_id=self.session_id,
            corrupt=self.corrupt,
        )

    def get(self, key: str) -> Any:
        """The data of one LangGraph record, or None."""
        row = self._sql("SELECT value FROM LangGraph WHERE key = ?", (key,)).fetchone()
        return None if row is None else self.parse(key, row[0])

    def scan_raw(self, prefix: str) -> list[tuple[str, str]]:
        """(key, stored text) of every record whose key starts with ``prefix``."""
        rows = self._sql(
            "SELECT key, value FROM LangGraph WHERE key >= ? AND key < ? ORDER BY key",
            (prefix, prefix + "\uffff"),
        ).fetchall()
        return [(str(k), v) for k, v in rows]

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        """The data of the LangGraph records among ``keys`` that exist."""
        out: dict[str, Any] = {}
        for i in range(0, len(keys), 500):  # SQLite's bound-parameter limit
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._sql(
                f"SELECT key, value FROM LangGraph WHERE key IN ({marks})", chunk
            ).fetchall()
            for key, value in rows:
                out[key] = self.parse(key, value)
        return out

    def keys(self, prefix: str) -> set[str]:
        """The keys that start with ``prefix``."""
        rows = self._sql(
            "SELECT key FROM LangGraph WHERE key >= ? AND key < ?",
            (prefix, prefix + "\uffff"),
        ).fetchall()
        return {str(r[0]) for r in rows}

    def last_key(self, prefix: str) -> str | None:
        """The greatest key starting with ``prefix``, or None."""
        row = self._sql(
            "SELECT key FROM LangGraph WHERE key >= ? AND key < ? "
            "ORDER BY key DESC LIMIT 1",
            (prefix, prefix + "\uffff"),
        ).fetchone()
        return None if row is None else str(row[0])

    def scan(self, prefix: str) -> Iterator[tuple[str, Any]]:
        """(key, data) of every LangGraph record under ``prefix``, in key order."""
        for key, raw in self.scan_raw(prefix):
            yield key, self.parse(key, raw)

    def namespaces(self) -> list[str]:
        """The checkpoint namespaces that hold checkpoints."""
        out: set[str] = set()
        for key, _ in self.scan_raw("c" + US):
            out.add(key.split(US)[1])
        return sorted(out)

    def read_head(self) -> Head | None:
        """The Argus head record (version counter and runner lease), or None."""
        try:
            raw = self.cache.get("head")
        except sqlite3.DatabaseError as e:
            raise self.failed(e) from None
        if raw is None:
            return None
        try:
            _, crc, body = raw.split("|", 2)
            if f"{zlib.crc32(body.encode()):08x}" != crc:
                raise ValueError("checksum mismatch")
            d = json.loads(body)
        except ValueError as e:
            raise self.corrupt("head", e) from None
        return Head(d.get("version", 0), d.get("last_seq", 0), d.get("lease"))

    # -- writing ------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Head]:
        """One SQLite transaction that checks and takes the runner lease.

        Records written with ``set`` inside it go in with one statement at its
        end, with the head. Raises ConcurrentSessionError, writing nothing,
        while another live process holds the thread or wrote it since our last
        commit (the head is compared and swapped in one UPDATE).
        """
        with self.lock:
            self._pending, self._pending_keep = [], []
            wrote: list[str] = []
            try:
                # One BEGIN IMMEDIATE ... COMMIT on this thread's connection,
                # diskcache's protocol without its generator context managers
                # (``store/_rows.py``): the commit is the step's hot path.
                with Transaction(self.cache):
                    head = self._take_head()
                    yield head
                    if self._pending:
                        self._sql_many(
                            "INSERT OR REPLACE INTO LangGraph (key, value) "
                            "VALUES (?, ?)",
                            self._pending,
                        )
                    if self._pending_keep:
                        self._sql_many(
                            "INSERT OR IGNORE INTO LangGraph (key, value) "
                            "VALUES (?, ?)",
                            self._pending_keep,
                        )
                    self._put_head(head)
                    if self._pending or self._pending_keep:
                        wrote = [PROGRESS]
            except BaseException as e:
                # Rolled back: the head remembered by _put_head was never
                # stored, and comparing with it would blame "another writer".
                self._head_text = self._head = None
                if isinstance(e, sqlite3.DatabaseError):
                    raise self.failed(e) from None
                raise
            finally:
                self._pending, self._pending_keep = [], []
            self.expected_version = head.version
            self.witness.record(head.version, wrote)
            self.origin.claim()  # (ours to write: checked at the take or at open)

    def _sql_many(self, statement: str, rows: list[tuple[str, str]]) -> None:
        con = self.cache._con
        con.executemany(statement, rows)

    def _take_head(self) -> Head:
        if self._head_text is not None and self._head is not None:
            # Our last head is assumed still there; ``_put_head`` swaps it only
            # if it is (compare and swap), so no read is needed here.
            return Head(self._head.version + 1, self._head.last_seq, None)
        head = self.read_head() or Head()
        self._check(head)
        head.version += 1
        return head

    def _put_head(self, head: Head, *, hold: bool = True) -> None:
        head.lease = (
            make_lease(self.holder, self.lease_ttl, self.origin.where) if hold else None
        )
        text = encode_argus(head.to_json())
        old = self._head_text
        if old is not None:
            cur = self._sql(
                "UPDATE Cache SET value = ? WHERE key = 'head' AND raw = 1 "
                "AND value = ?",
                (text, old),
            )
            if cur.rowcount != 1:
                # Another writer changed the head since our last commit: the
                # check below raises, and the transaction rolls back.
                self._head_text = self._head = None
                stored = self.read_head() or Head()
                self.expected_version = head.version - 1
                self._check(stored)
                raise ConcurrentSessionError(
                    f"LangGraph thread {self.thread_id!r} was changed by another "
                    "writer; nothing was written. Invoke the graph again to "
                    "continue from the latest checkpoint.",
                    session_id=self.session_id,
                )
        else:
            self.cache.set("head", text)
        self._head_text, self._head = text, head

    def ensure_thread_record(self) -> None:
        """Writes ``lg:thread`` and the session records once (``_session.py``)."""
        from argus_lab.langgraph._session import write_session_records

        if self.get("lg:thread") is None:
            write_session_records(self)

    def set_status(self, status: str, reason: str | None, at: str = "") -> None:
        """Rewrites the session status in ``meta`` (inside ``transaction``)."""
        from argus_lab.langgraph._session import write_status

        write_status(self, status, reason)
        self.status, self.status_at = status, at

    def _check(self, head: Head) -> None:
        refuse_held(self, head)
        refuse_copy(self, head)
        expected = self.expected_version
        if expected is not None and head.version != expected:
            # Re-read from here on: the next commit starts from what is stored.
            self.expected_version = None
            raise ConcurrentSessionError(
                f"LangGraph thread {self.thread_id!r} was changed by another writer "
                f"(version {head.version}, expected {expected}); "
                "nothing was written. Invoke the graph again to continue from the "
                "latest checkpoint.",
                session_id=self.session_id,
            )

    def set(self, key: str, data: Any, *, keep: bool = False) -> int:
        """Writes a LangGraph record (inside ``transaction``); returns its size.

        ``keep``: an existing record under ``key`` stays as it is.
        """
        return self.set_text(key, lg_encode(data), keep=keep)

    def set_text(self, key: str, text: str, *, keep: bool = False) -> int:
        """``set`` of a record already in its envelope (``lg_encode``)."""
        (self._pending_keep if keep else self._pending).append((key, text))
        return len(text)

    def delete(self, key: str) -> None:
        self._sql("DELETE FROM LangGraph WHERE key = ?", (key,))

    def delete_prefix(self, prefix: str) -> None:
        self._sql(
            "DELETE FROM LangGraph WHERE key >= ? AND key < ?",
            (prefix, prefix + "\uffff"),
        )

    def release(self) -> None:
        """Gives up the runner lease so another process may write at once."""
        try:
            with self.lock, self.cache.transact(retry=True):
                head = self.read_head()
                if head is None or not head.lease:
                    return
                if head.lease.get("holder") != self.holder:
                    return
                head.version += 1
                self._put_head(head, hold=False)
                self.expected_version = head.version
        except sqlite3.DatabaseError as e:
            self._head_text = self._head = None  # rolled back (see transaction)
            raise self.failed(e) from None
        self.witness.record(head.version, [])
