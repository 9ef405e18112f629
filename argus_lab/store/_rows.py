"""Checkpoint rows written straight into diskcache's ``Cache`` table.

``Cache.set`` is general: it looks the key up, rewrites every column (store and
access times, expiry, tag, size, mode, file name), considers culling and removing
an old value file, and goes through two context managers and a pid check per call.
A checkpoint row is always a raw ``str`` key with JSON text kept inside SQLite, and
Argus never expires, tags, culls or reads access times, so the hot path writes the
same row with one statement:

- an existing row: ``UPDATE ... SET store_time, value`` by its unique ``(key, raw)``
  index. No indexed column changes (only ``Cache_key_raw`` and
  ``Cache_expire_time`` exist with ``eviction_policy="none"``) and ``size`` is not
  touched, so neither an index page nor diskcache's ``Settings`` size trigger is
  written;
- a new row (an event): one ``INSERT`` of what ``Cache.set`` would insert;
- a row that may or may not exist yet (a task's record, first written by the
  step that runs it): one ``INSERT ... ON CONFLICT DO UPDATE``, which is one of
  the two above.

Anything else (a value big enough for diskcache to keep in a file, an old row that
points to a file) falls back to ``Cache.set``, so the table stays exactly what
diskcache itself would have written and diskcache reads it back unchanged.

Must be called inside ``cache.transact()`` on the thread that holds it: rows are
written through that thread's connection, in that transaction.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from types import TracebackType
from typing import Any

# Opening the database (its page size, one commit) is _opening.py's; the
# names stay importable from here.
from argus_lab.store._opening import (
    PAGE_SIZE,
    SESSION_PAGE_SIZE,
    OneCommitOpenCache,
    prepare_database,
)

__all__ = [
    "PAGE_SIZE",
    "SESSION_PAGE_SIZE",
    "OneCommitOpenCache",
    "RowWriter",
    "Transaction",
    "prepare_database",
]

_UPDATE = (
    "UPDATE Cache SET store_time = ?, value = ? "
    "WHERE key = ? AND raw = 1 AND mode = 1 AND filename IS NULL"
)
_INSERT = (
    "INSERT INTO Cache(key, raw, store_time, expire_time, access_time, "
    "access_count, tag, size, mode, filename, value) "
    "VALUES (?, 1, ?, NULL, ?, 0, NULL, 0, 1, NULL, ?)"
)
_UPSERT = (
    _INSERT + " ON CONFLICT(key, raw) DO UPDATE SET store_time = excluded.store_time, "
    "value = excluded.value WHERE mode = 1 AND filename IS NULL"
)
_MODE_RAW = 1  # diskcache.core.MODE_RAW


class RowWriter:
    """Writes str rows into a diskcache ``Cache`` inside an open transaction.

    Args:
        cache: The diskcache Cache (its Disk must keep str values raw below
            ``disk_min_file_size``, which diskcache's default Disk does).
    """

    def __init__(self, cache: Any) -> None:
        self._cache = cache
        self._max_inline = int(cache.disk_min_file_size)

    def update(self, con: sqlite3.Connection, key: str, value: str) -> None:
        """Replaces or adds row ``key``."""
        if len(value) < self._max_inline:
            now = time.time()
            if con.execute(_UPSERT, (key, now, now, value)).rowcount == 1:
                return
        # A row diskcache keeps in a file (the upsert changed nothing), or a
        # value big enough for one: diskcache writes it.
        self._cache.set(key, value)

    def update_if(
        self, con: sqlite3.Connection, key: str, old: str, value: str
    ) -> bool:
        """Replaces row ``key`` only if its stored text is ``old``; whether it did.

        One statement where a read, a comparison and a write would take three.
        """
        if len(value) >= self._max_inline:
            return False
        cur = con.execute(_UPDATE + " AND value = ?", (time.time(), value, key, old))
        return cur.rowcount == 1

    def insert(self, con: sqlite3.Connection, key: str, value: str) -> None:
        """Adds row ``key``; for rows that are new (falls back if it exists)."""
        if len(value) < self._max_inline:
            now = time.time()
            try:
                con.execute(_INSERT, (key, now, now, value))
                return
            except sqlite3.IntegrityError:
                pass  # the key exists: let diskcache replace it
        self._cache.set(key, value)


_forks = 0
"""Forks this process is the child of (a connection held before: the parent's)."""


def _forked() -> None:
    global _forks
    _forks += 1


if hasattr(os, "register_at_fork"):  # (no fork where it is missing)
    os.register_at_fork(after_in_child=_forked)


def _thread_con(cache: Any) -> sqlite3.Connection:
    """``cache._con`` (this thread's connection) from its thread-local: that
    property asks the kernel for the pid on every call to notice a fork (~4k
    instructions and a syscall a commit); counting forks notices it too. A
    thread without one, or forked since, goes through ``_con``, which closes
    the parent's and connects anew."""
    local = cache._local
    con: sqlite3.Connection | None = getattr(local, "con", None)
    if con is None or getattr(local, "forks", -1) != _forks:
        con = cache._con
        local.forks = _forks
    return con


class Transaction:
    """``cache.transact(retry=True)`` without its two generator context managers.

    The same protocol as diskcache's: ``BEGIN IMMEDIATE`` on this thread's
    connection (waiting out other writers, as ``retry=True`` does), the cache's
    ``_txn_id`` set so ``Cache`` calls inside join the transaction, then
    ``COMMIT``, or ``ROLLBACK`` if the block raised. Yields the connection.
    """

    __slots__ = ("_cache", "_con")

    def __init__(self, cache: Any) -> None:
        self._cache = cache
        self._con: sqlite3.Connection | None = None

    def __enter__(self) -> sqlite3.Connection:
        cache = self._cache
        tid = threading.get_ident()
        if cache._txn_id == tid:
            raise RuntimeError("checkpoint transactions do not nest")
        con = _thread_con(cache)
        while True:
            try:
                con.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as e:
                # SQLite's busy handler waited out the connection's timeout (60 s)
                # while another writer held the lock: diskcache's retry=True
                # tries again, and so does this.
                if str(e) != "database is locked":
                    raise
        cache._txn_id = tid
        self._con = con
        return con

    def __exit__(
        self,
        et: type[BaseException] | None,
        e: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        con = self._con
        assert con is not None
        self._cache._txn_id = None
        if et is not None:
            con.execute("ROLLBACK")
            return
        try:
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:  # never leave the connection holding the lock
                con.execute("ROLLBACK")
            raise
