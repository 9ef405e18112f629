"""Opening a checkpoint database: small pages, one commit, guarded triggers.

``prepare_database`` creates ``cache.db`` with small pages before diskcache
first opens it; ``OneCommitOpenCache`` is the diskcache ``Cache`` Argus opens
(``envelope.open_cache``): its opening writes in one transaction, it hands
its connection from thread to thread, and the size triggers it creates skip
rows whose size does not change. Rows are written by ``_rows.py``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import diskcache

__all__ = [
    "PAGE_SIZE",
    "SESSION_PAGE_SIZE",
    "OneCommitOpenCache",
    "prepare_database",
]

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


def _size_trigger(name: str, event: str, change: str, when: str) -> tuple[str, str]:
    """diskcache's ``CREATE`` of a size trigger, and the same trigger guarded."""
    body = (
        f" AFTER {event} ON Cache FOR EACH ROW BEGIN UPDATE Settings"
        f' SET value = value + {change} WHERE key = "size"; END'
    )
    guarded = body.replace(" BEGIN", f" WHEN {when} BEGIN", 1)
    return (
        f"CREATE TRIGGER IF NOT EXISTS {name}{body}",
        f"CREATE TRIGGER {name}{guarded}",
    )


_EXPIRY_INDEX = "Cache_expire_time"
_GUARDED = {
    created: ("TRIGGER", name, guarded)
    for name, (created, guarded) in {
        "Settings_size_insert": _size_trigger(
            "Settings_size_insert", "INSERT", "NEW.size", "NEW.size IS NOT 0"
        ),
        "Settings_size_update": _size_trigger(
            "Settings_size_update",
            "UPDATE",
            "NEW.size - OLD.size",
            "NEW.size IS NOT OLD.size",
        ),
    }.items()
} | {
    f"CREATE INDEX IF NOT EXISTS {_EXPIRY_INDEX} ON Cache (expire_time)": (
        "INDEX",
        _EXPIRY_INDEX,
        f"CREATE INDEX {_EXPIRY_INDEX} ON Cache (expire_time)"
        " WHERE expire_time IS NOT NULL",
    ),
}
"""diskcache's statement -> (kind, name, what Argus creates instead).

diskcache keeps the total size of the values it stores in files in
``Settings``, by triggers that run an ``UPDATE`` of it after every insert
and every update of a row, whatever its size. Argus's rows live inside
SQLite (size 0), so each adds 0: three statements of every step's commit
(~15k instructions, ~2% of a step). The same triggers with ``WHEN`` run only
when the size changes, which is when they change anything: the setting stays
exactly what diskcache keeps.

diskcache indexes every row's expiry time to find expired rows. Argus's rows
never expire (NULL), and each new one added an entry to that index: a leaf
of it in every step's commit (~12k instructions, a WAL frame). A partial
index of the rows that expire serves every query diskcache makes of it
(each asks for ``expire_time IS NOT NULL`` or compares it, which implies it).

A database diskcache or an older argus-lab made gets these the next time it
is opened here (in the opening's one transaction); diskcache creates its
own only where they are missing, so it keeps these."""


_SQL_RETRY = diskcache.Cache._sql_retry.fget


def _guard(
    run: Callable[..., Any], found: dict[str, str], kind: str, name: str, sql: str
) -> Any:
    """Creates ``kind`` ``name`` as ``sql`` unless ``found`` (the database's
    triggers and indexes) holds it so, replacing any other version."""
    old = found.get(name)
    if old == sql:
        return None
    if old is not None:
        run(f"DROP {kind} {name}")
    return run(sql)


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
    _guarded = 0
    """Size triggers put in place by this opening (``_GUARDED``)."""
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

    @property
    def _sql_retry(self) -> Callable[..., Any]:
        run: Callable[..., Any] = _SQL_RETRY(self)
        if not self._opening or self._guarded >= len(_GUARDED):
            return run
        # While diskcache's __init__ creates its tables and triggers.
        found: list[dict[str, str]] = []  # the database's triggers, read once

        def guarded(statement: str, *args: Any) -> Any:
            trigger = _GUARDED.get(statement)
            if trigger is None:
                return run(statement, *args)
            if not found:
                sql = "SELECT name, sql FROM sqlite_master WHERE type != 'table'"
                found.append(dict(run(sql).fetchall()))
            self._guarded += 1
            return _guard(run, found[0], *trigger)

        return guarded

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
