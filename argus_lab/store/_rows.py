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
from collections.abc import Callable
from functools import partial
from types import TracebackType
from typing import Any

import diskcache

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


PAGE_SIZE = 1024
"""SQLite page size of a new checkpoint database (SQLite's default is 4096)."""

SESSION_PAGE_SIZE = 512
"""Page size of a new session's ``cache.db``: SQLite's smallest.

A step's commit writes ~1.1 KB of new rows (a task record, two events) but
touches 8-13 pages: the head's leaf, the table's last leaf and its parent, the
two index leaves (``t:`` and ``e:`` keys), the expiry index's last leaf,
diskcache's ``Settings`` row (count trigger) and page 1 (the file grew). Each is
written whole into the WAL, so halving the page halves most of a commit's bytes:
5-8 KB of WAL frames per commit instead of 8.4-9.4 KB (BENCHMARKS.md, issue 18,
second round). A record over ~480 bytes takes one overflow page: reopening a
20,000-step session cost 10% more CPU, its frames 8-11% less; bytes kept per
step stay under 2 KB.
"""


def prepare_database(directory: str, page_size: int = PAGE_SIZE) -> None:
    """Creates ``cache.db`` with small pages, before diskcache first opens it.

    A WAL commit writes every page it changed, whole: with 4 KiB pages a step's
    two commits wrote ~60 KB to keep ~1.3 KB. A page size can only be chosen
    before the database's first write, and diskcache switches to WAL (which fixes
    it) before it could pass one on, so the empty file is made here first. An
    existing database keeps its page size. Nothing about atomicity or fsync
    changes: it is the same WAL, written in smaller pages.
    """
    path = os.path.join(directory, "cache.db")
    # An empty file is one another process is creating right now (connecting
    # creates it): set its page size too, which is harmless if theirs is first.
    if os.path.exists(path) and os.path.getsize(path) > 0:
        return
    os.makedirs(directory, exist_ok=True)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        # Two processes creating the same database at once (a fresh workspace's
        # index) contend for its first lock; SQLite answers one of them "locked"
        # at once, without waiting, when waiting could deadlock: try again.
        # The page size is set again before each try: SQLite forgets it when
        # it finds the file changed while it waited.
        _retry_locked(
            lambda: (
                con.execute(f"PRAGMA page_size = {int(page_size)}"),
                con.execute("PRAGMA journal_mode = wal"),
            )
        )
    finally:
        con.close()


def _retry_locked(statement: Callable[[], object], limit: float = 60.0) -> None:
    """Runs ``statement`` until SQLite stops answering "database is locked"
    (at most ``limit`` seconds, as diskcache's own retries)."""
    start = time.monotonic()
    while True:
        try:
            statement()
            return
        except sqlite3.OperationalError as e:
            if str(e) != "database is locked" or time.monotonic() - start > limit:
                raise
            time.sleep(0.001)


class OneCommitOpenCache(diskcache.Cache):  # type: ignore[misc]
    """A diskcache ``Cache`` whose opening writes in one transaction.

    ``Cache.__init__`` rewrites every setting on each open (``INSERT OR
    REPLACE`` then ``UPDATE`` of ~14 ``Settings`` rows) and, for a new file,
    creates its tables, indexes and triggers: ~30-45 autocommit transactions,
    each fsynced under durability "full". It then closes its connection, the
    database's last, so SQLite checkpoints the WAL into the file and deletes it,
    and opens a new one. Here the same statements run inside one ``BEGIN
    IMMEDIATE`` (all or nothing, one commit), committed where ``__init__``
    closes, and a second connection holds the WAL open meanwhile, so that close
    is not the last and checkpoints nothing. Opening a new database wrote 110 KB
    ("normal") and 209 KB ("full") of pages, now 45 KB (BENCHMARKS.md, issue 18,
    second round). ``open_cache`` always passes ``sqlite_synchronous``, which
    is set before the transaction begins (SQLite refuses it inside one).

    diskcache keeps one SQLite connection per thread. A thread that is done
    with its connection can hand it over (``hand_over``) to the next thread
    that needs one: a session made on the caller's thread and run on its
    loop thread opens one connection, not two (connecting and re-applying
    the pragmas costs about half a millisecond of a run).
    """

    _opening = False
    _connecting = False
    _spare: tuple[int, sqlite3.Connection] | None = None
    """A connection no thread uses, with the pid that opened it."""
    _spare_lock = threading.Lock()

    def __init__(self, directory: str, **settings: Any) -> None:
        import contextlib

        # SQLite refuses to change these inside a transaction: set on the
        # connection before it begins (diskcache then finds them set).
        self._pragmas = [
            (k[7:], v) for k, v in settings.items() if k == "sqlite_synchronous"
        ]
        keeper = sqlite3.connect(
            os.path.join(directory, "cache.db"), isolation_level=None
        )
        self._opening = True
        try:
            with contextlib.suppress(sqlite3.DatabaseError):  # diskcache says it
                keeper.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            super().__init__(directory, **settings)
        except BaseException:
            con = getattr(getattr(self, "_local", None), "con", None)
            if con is not None:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                con.close()
            raise
        finally:
            self._opening = False
            keeper.close()

    @property
    def _con(self) -> sqlite3.Connection:
        get = diskcache.Cache._con.fget
        if not self._opening:
            if getattr(self._local, "con", None) is None:
                self._connect()
            return get(self)  # type: ignore[no-any-return]
        # Only __init__'s thread gets here, and once re-entered: diskcache's
        # getter applies the stored pragmas through this property.
        if self._connecting:
            return self._local.con  # type: ignore[no-any-return]
        self._connecting = True
        try:
            con: sqlite3.Connection = get(self)
        finally:
            self._connecting = False
        if not con.in_transaction:
            # __init__ runs with timeout 0 (it retries its own statements): the
            # ones added here wait, as it does, for a process opening the same
            # database at this moment (a new one's first lock; see
            # prepare_database).
            for pragma, value in self._pragmas:
                _retry_locked(partial(con.execute, f"PRAGMA {pragma} = {int(value)}"))
            _retry_locked(partial(con.execute, "BEGIN IMMEDIATE"))
        return con

    def _connect(self) -> None:
        """Gives this thread the spare connection, or a new one as diskcache
        makes it (its pragmas applied), usable from any thread (one at a time)
        so that it can be handed over."""
        local, pid = self._local, os.getpid()
        with self._spare_lock:
            spare, self._spare = self._spare, None
        if spare is not None and spare[0] == pid:
            local.pid, local.con = spare
            local.shareable = spare[1]
            return
        # (A spare from before a fork belongs to the parent: left alone.)
        con = sqlite3.connect(
            os.path.join(self._directory, "cache.db"),
            timeout=self._timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        local.pid, local.con = pid, con
        local.shareable = con  # (not one diskcache made itself after a fork)
        try:
            settings = con.execute("SELECT key, value FROM Settings").fetchall()
        except sqlite3.OperationalError:  # no table yet: as diskcache does
            settings = []
        for key, value in settings:
            if key.startswith("sqlite_"):
                self.reset(key, value, update=False)

    def hand_over(self) -> None:
        """Lets go of this thread's connection (outside a transaction) for the
        next thread that needs one; this thread opens another if it reads or
        writes again."""
        local = self._local
        con: sqlite3.Connection | None = getattr(local, "con", None)
        pid = os.getpid()
        # Only a connection made here: diskcache's own (after a fork) is bound
        # to its thread.
        ours = con is not None and getattr(local, "shareable", None) is con
        if con is None or not ours or con.in_transaction:
            return
        if getattr(local, "pid", None) != pid:
            return
        with self._spare_lock:
            if self._spare is not None:
                return
            self._spare = (pid, con)
        del local.con

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if self._opening and con is not None and con.in_transaction:
            self._opening = False  # the connection __init__ opens next is plain
            _retry_locked(partial(con.execute, "COMMIT"))
        super().close()
        with self._spare_lock:
            spare, self._spare = self._spare, None
        if spare is not None and spare[0] == os.getpid():
            spare[1].close()
