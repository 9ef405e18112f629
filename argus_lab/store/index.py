"""The workspace index (name -> session id) as a cache of the session folders.

Every session folder holds its own name (in its ``meta`` record), so the index
only saves a scan. When it is damaged (not a database, a bad page) or missing
while sessions exist, it is rebuilt from the folders with a warning naming what
was rebuilt; the damaged copy is moved aside, never deleted. Opening a session
by id never reads it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
import stat
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.errors import (
    ArgusError,
    CorruptCheckpointError,
    SchemaVersionError,
    StorageError,
)
from argus_lab.model import SessionInfo
from argus_lab.store.checkpoints import SessionStore
from argus_lab.store.envelope import Durability, open_cache
from argus_lab.store.head import Head, lease_is_live
from argus_lab.store.records import TaskRecords
from argus_lab.store.space import full_error, is_damaged, is_disk_full

if TYPE_CHECKING:
    import diskcache

    from argus_lab.store.records import Loaded

__all__ = [
    "IndexRebuiltWarning",
    "folder_problem",
    "live_runner",
    "mismatch",
    "open_index",
    "read_progress",
    "rebuild_index",
    "rebuild_or_raise",
    "scan_sessions",
    "session_store",
    "stored_progress",
    "with_runner",
]


class IndexRebuiltWarning(UserWarning):
    """The workspace index was damaged or missing and was rebuilt from the folders."""


def folder_problem(d: Path) -> str | None:
    """Why the entry ``d`` of the sessions folder is not a session, or None.

    None also for an empty folder (a session being created). The message
    starts with "session <entry name>:", like the store's own errors.
    """
    head = f"session {d.name}:"
    try:
        st = os.stat(d)
    except OSError as e:
        if e.errno == errno.ENOENT and d.is_symlink():
            return f"{head} {d} is a symbolic link to nothing"
        return f"{head} {d} cannot be read: {e.strerror or e}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{head} {d} is a file, not a session folder"
    try:
        if (d / "cache.db").is_file() or not any(d.iterdir()):
            return None
    except OSError as e:
        return f"{head} {d} cannot be read: {e.strerror or e}"
    return f"{head} its records (cache.db) are missing from its folder"


def mismatch(d: Path, info: SessionInfo) -> str | None:
    """Says so when the records in folder ``d`` are another session's."""
    if info.id == d.name:
        return None
    return (
        f"session {d.name}: its folder holds the records of session {info.id} "
        f"({info.name!r}), copied or moved there; move it back"
    )


def session_store(folder: Path, sid: str, durability: Durability) -> SessionStore:
    """The store of an existing session's folder, refused if it is not one.

    Raises:
        CorruptCheckpointError: the folder is not a session's (opening it
            would make a new, empty cache.db there and hide what happened).
    """
    why = folder_problem(folder)
    if why is None and not (folder / "cache.db").is_file():
        why = f"session {sid}: its folder is empty (being created, or emptied)"
    if why is not None:
        raise CorruptCheckpointError(why, session_id=sid)
    return SessionStore(folder, sid, durability=durability)


def scan_sessions(
    sessions: Path, durability: Durability
) -> tuple[list[SessionInfo], dict[str, str]]:
    """Every readable session (oldest first), and damaged entries: name -> error.

    Any entry of the sessions folder that is not a readable session is listed
    as damaged with why (a file, a dangling or looping link, a folder whose
    records are missing or are another session's); hidden entries are skipped.
    """
    out: list[SessionInfo] = []
    damaged: dict[str, str] = {}
    try:
        entries = sorted(sessions.iterdir()) if sessions.is_dir() else []
    except OSError:
        entries = []
    for d in entries:
        if d.name.startswith("."):
            continue
        why = folder_problem(d)
        if why is not None:
            damaged[d.name] = why
            continue
        if not (d / "cache.db").is_file():
            continue  # being created
        try:
            store = SessionStore(d, d.name, durability=durability)
        except (CorruptCheckpointError, SchemaVersionError) as e:
            damaged[d.name] = e.message
            continue
        try:
            if store.cache.get("meta") is None and store.cache.get("head") is None:
                # No create ever committed here (its one transaction writes
                # meta and head together), or the commits were lost.
                why = _uncommitted(store)
                if why is not None:
                    damaged[d.name] = why
                continue
            info = store.read_meta()
            other = mismatch(d, info)
            if other is not None:
                damaged[d.name] = other
            else:
                out.append(info)
        except (CorruptCheckpointError, SchemaVersionError) as e:
            damaged[d.name] = e.message
        except sqlite3.DatabaseError as e:
            damaged[d.name] = f"session {d.name}: cache.db cannot be read ({e})"
        finally:
            store.close()
    out.sort(key=lambda i: (i.created, i.id))  # ids share a second
    return out, damaged


def _uncommitted(store: SessionStore) -> str | None:
    """Why a folder whose cache.db holds no session is listed, or None.

    None for a create that is running now, or was killed before its one
    transaction committed: nothing was committed, so nothing is damaged or
    lost, and it is left out like an empty folder. A witness there means
    versions were committed and the write-ahead log that held them is gone.
    """
    witnessed = store.witness.read()
    if not witnessed or store.cache.get("head") is not None:
        # The head again, after the witness: a create that committed since
        # the first look wrote its witness after its head (as load() reads).
        return None
    return (
        f"session {store.session_id}: {witnessed} committed version(s) were lost "
        f"with the SQLite write-ahead log of {store.directory / 'cache.db'} "
        "(cut short, damaged or deleted): nothing of the session survived, not "
        "even its plan; create it again from its plan"
    )


_BAD = "integrity check failed"


def _usable(cache: diskcache.Cache) -> None:
    # Opening checks the header; quick_check reads every page of this small file.
    row = cache._sql("PRAGMA quick_check").fetchone()
    if row is None or row[0] != "ok":
        raise sqlite3.DatabaseError(f"{_BAD}: {row and row[0]}")
    cache.get("name:")


def open_index(root: Path, durability: Durability) -> diskcache.Cache:
    """Opens ``root/index``, rebuilding it first if it is damaged or missing."""
    folder = root / "index"
    missing = not (folder / "cache.db").exists()
    if not missing:
        try:
            cache = open_cache(folder, durability)
        except sqlite3.DatabaseError as e:
            return rebuild_or_raise(root, durability, e)
        try:
            _usable(cache)
        except sqlite3.DatabaseError as e:
            cache.close()
            return rebuild_or_raise(root, durability, e)
        if len(cache) == 0 and _has_sessions(root):
            # SQLite reads a zero-byte file as an empty database: no error, but
            # no names either.
            cache.close()
            return rebuild_index(root, durability, why="empty")
        return cache
    if _has_sessions(root):
        return rebuild_index(root, durability, why="missing")
    cache = open_cache(folder, durability)
    cache.set(_BUILT, str(time.time()))
    return cache


_BUILT = "built:"
"""Set in every index made or rebuilt: an index with no key at all is a zero-byte
file SQLite took for an empty database, while one with only this key is an index
of a workspace with no readable session (not rebuilt again at every open)."""


def _has_sessions(root: Path) -> bool:
    return any((root / "sessions").glob("*/cache.db"))


@contextmanager
def _rebuild_lock(root: Path) -> Iterator[None]:
    # Processes that find the same damage rebuild one at a time; each later
    # one finds the index rebuilt and uses it (a rename of a fresh index by a
    # second rebuilder would send the first one's new names to the aside copy).
    with open(root / "index.lock", "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _rebuilt_meanwhile(root: Path, durability: Durability) -> diskcache.Cache | None:
    folder = root / "index"
    if not (folder / "cache.db").is_file():
        return None
    try:
        cache = open_cache(folder, durability)
    except sqlite3.DatabaseError:
        return None
    try:
        _usable(cache)
        if len(cache) > 0 or not _has_sessions(root):
            return cache
    except sqlite3.DatabaseError:
        pass
    cache.close()
    return None


def rebuild_or_raise(
    root: Path, durability: Durability, e: sqlite3.DatabaseError
) -> diskcache.Cache:
    """Rebuilds an index that failed with ``e`` if it is damaged; a full disk,
    a file size limit or another failure to read or write (locked, read-only,
    an I/O error) is said as such, and nothing is moved aside."""
    db = root / "index" / "cache.db"
    if is_disk_full(e, root / "index"):
        raise full_error(db, e, what="writing") from None
    if not (is_damaged(e) or str(e).startswith(_BAD)):
        raise StorageError(
            f"the workspace index {db} could not be read or written ({e}). "
            "Nothing is known to be damaged: check the disk, its free space, "
            "the file size limit and the folder's permissions, then open the "
            "workspace again; sessions can still be opened by id."
        ) from None
    return rebuild_index(root, durability, why=f"damaged ({e})")


def rebuild_index(root: Path, durability: Durability, *, why: str) -> diskcache.Cache:
    """Moves a damaged index aside and writes a new one from the session folders.

    Warns (IndexRebuiltWarning) naming the sessions indexed and any damaged one.
    Another process that rebuilt it meanwhile wins: its index is used as is.
    """
    with _rebuild_lock(root):
        again = _rebuilt_meanwhile(root, durability)
        if again is not None:
            return again
        return _rebuild(root, durability, why)


def _rebuild(root: Path, durability: Durability, why: str) -> diskcache.Cache:
    folder = root / "index"
    aside = None
    if folder.exists():
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = root / f"index.damaged-{stamp}-{uuid.uuid4().hex[:6]}"
        folder.rename(aside)
    cache = open_cache(folder, durability)
    infos, damaged = scan_sessions(root / "sessions", durability)
    try:
        with cache.transact(retry=True):
            cache.set(_BUILT, str(time.time()))
            for info in infos:
                cache.set("name:" + info.name, info.id)
    except sqlite3.DatabaseError as e:
        cache.close()
        raise ArgusError(
            f"the workspace index {folder} could not be rebuilt ({e}); sessions "
            "can still be opened by id (argus ls lists them)"
        ) from None
    names = ", ".join(i.name for i in infos[:12]) + (", ..." if len(infos) > 12 else "")
    text = (
        f"the workspace index {folder} was {why}; rebuilt it from the session "
        f"folders: {len(infos)} session(s) ({names or 'none'})"
    )
    if damaged:
        text += f"; {len(damaged)} damaged session(s) left out: {', '.join(damaged)}"
    if aside is not None:
        text += f"; the old index was moved to {aside}"
    warnings.warn(text, IndexRebuiltWarning, stacklevel=5)
    return cache


def read_progress(store: SessionStore) -> dict[str, Any]:
    """A session's status and task counts as its records say now.

    The stored status is written when a run starts and ends, so a process that
    died mid-run leaves "running" behind: when no live runner holds the
    session's lease, the status is "interrupted". Counts come from the task
    records (a run's progress, a fork's kept results), never from the summary.
    """
    loaded = store.load()
    return with_runner(stored_progress(loaded), loaded.head)


def stored_progress(loaded: Loaded) -> dict[str, Any]:
    """``read_progress`` without the runner: the stored status, the counts and
    each task's status of ``loaded``, and the reason."""
    counts: dict[str, int] = {}
    tasks: dict[str, str] = {}  # for a widget following a run elsewhere
    recs = loaded.records
    # A TaskRecords knows every status without validating a record.
    known = recs.status if isinstance(recs, TaskRecords) else {}
    for tid in loaded.stored_plan.deps():
        if tid in known:
            st = known[tid]
        else:
            rec = recs.get(tid)
            st = rec.status if rec is not None else "pending"
        counts[st] = counts.get(st, 0) + 1
        tasks[tid] = st
    return {
        "status": loaded.meta.status,
        "counts": counts,
        "tasks": tasks,
        "reason": loaded.meta.reason,
    }


def with_runner(stored: dict[str, Any], head: Head | None) -> dict[str, Any]:
    """``stored`` (``stored_progress``) with the live runner of ``head``, and
    "interrupted" for a status of "running" that no live runner holds."""
    status: str = stored["status"]
    runner = live_runner(head)
    if status == "running" and runner is None:
        status = "interrupted"
    return {**stored, "status": status, "runner": runner}


def live_runner(head: Head | None) -> dict[str, Any] | None:
    """The pid and host of the live process holding ``head``'s lease, or None
    (no lease, or its holder is gone)."""
    lease = head.lease if head is not None else None
    if lease and lease_is_live(lease, time.time()):
        return {"pid": lease.get("pid"), "host": lease.get("host")}
    return None
