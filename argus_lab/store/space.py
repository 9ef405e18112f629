"""Telling a full disk from a damaged file, and saying so (StorageFullError).

A full disk reaches us as ``OSError(ENOSPC)`` from a file write, as SQLite's
``SQLITE_FULL`` ("database or disk is full"), as an I/O error when SQLite could
not extend its WAL or shared-memory file, or as text from LanceDB's Rust side.
A file size limit (RLIMIT_FSIZE, ``ulimit -f``: EFBIG, like a quota) reaches
us from SQLite as a plain I/O error too (it keeps the errno to itself): one
while such a limit is set and one of the database's files is near it is that
limit. None of these means anything is damaged: the write that failed was not
committed, and everything committed before it is intact.
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
import sys
from pathlib import Path

from argus_lab.errors import StorageFullError

__all__ = [
    "file_size_limit",
    "full_error",
    "is_damaged",
    "is_disk_full",
    "with_context",
]

_SQLITE_FULL = 13
_SQLITE_IOERR = 10
_LOW = 1 << 20
"""Free bytes under which an I/O error on write is taken to be a full disk."""


def _free(path: Path) -> int | None:
    for p in (path, *path.parents):
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return None


_NEAR = 1 << 17
"""How close to RLIMIT_FSIZE a file of a database must be for an I/O error to
be that limit: SQLite grows its shared-memory file by 32 KiB regions and its
WAL and database by pages (at most 64 KiB)."""


def file_size_limit(where: Path | None) -> int | None:
    """The file size limit (RLIMIT_FSIZE, bytes) a file of the SQLite database
    at ``where`` (its folder, or its file) is near, or None (no limit set, or
    every file far below it)."""
    if where is None or sys.platform == "win32":
        return None
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    folder = where if where.is_dir() else where.parent
    try:
        sizes = [p.stat().st_size for p in folder.iterdir() if p.is_file()]
    except OSError:
        return None
    return soft if any(n + _NEAR > soft for n in sizes) else None


def is_disk_full(e: BaseException, where: Path | None = None) -> bool:
    """Whether ``e`` says the disk (or quota, or the file size limit) is full."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(e)
    if isinstance(e, sqlite3.Error):
        code = getattr(e, "sqlite_errorcode", None)
        if (code is not None and code & 0xFF == _SQLITE_FULL) or "is full" in text:
            return True
        io = (code is not None and code & 0xFF == _SQLITE_IOERR) or (
            "disk I/O error" in text
        )
        if io and where is not None:
            free = _free(where)
            return (free is not None and free < _LOW) or (
                file_size_limit(where) is not None
            )
        return False
    return "No space left on device" in text or "os error 28" in text


def is_damaged(e: BaseException) -> bool:
    """Whether SQLite said its file is damaged (SQLITE_CORRUPT, SQLITE_NOTADB).

    Any other failure to read or write (locked, read-only, an I/O error with
    space left) is not known to damage anything: no advice to delete or fork.
    """
    code = getattr(e, "sqlite_errorcode", None)
    text = str(e)
    return (code is not None and code & 0xFF in (11, 26)) or (
        "malformed" in text
        or "not a database" in text
        # A row's stored text is no longer UTF-8 (bytes overwritten inside a
        # record, not in the file's structure): Python's sqlite3 says so.
        or "Could not decode to UTF-8" in text
    )


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def full_error(
    path: Path,
    why: object,
    *,
    session_id: str | None = None,
    label: str | None = None,
    task_id: str | None = None,
    what: str = "writing",
) -> StorageFullError:
    """A StorageFullError naming the session, the task and the path."""
    free = _free(path)
    limit = file_size_limit(path) if isinstance(why, sqlite3.Error) else None
    if isinstance(why, OSError) and why.errno == errno.EFBIG:
        limit = file_size_limit(path) or -1
    who = f"session {label or session_id}: " if (label or session_id) else ""
    task = f" for task {task_id!r}" if task_id else ""
    again = (
        f"then reopen the session (ws.open({session_id!r}) or `argus resume "
        f"{session_id}`) to go on"
        if session_id
        else "then try again"
    )
    room = f" ({_human(free)} free now)" if free is not None else ""
    kept = (
        "Nothing committed was lost: this write was not committed and "
        "everything before it is intact."
    )
    if limit is not None:
        size = f" of {_human(limit)}" if limit > 0 else ""
        text = (
            f"{who}the file size limit{size} is reached (RLIMIT_FSIZE, "
            f"`ulimit -f`; like a full quota): {what} {path}{task} failed "
            f"({why}). {kept} Raise the limit for the process (`ulimit -f "
            "unlimited` in the shell that starts Python, or the service's "
            f"LimitFSIZE=), {again}."
        )
    else:
        text = (
            f"{who}the disk is full: {what} {path}{task} failed ({why}). {kept} "
            f"Free space on the disk holding {path.parent}{room}, e.g. with "
            f"`argus gc` or by deleting other files, {again}."
        )
    err = StorageFullError(text, path=str(path), session_id=session_id, task_id=task_id)
    if limit is not None:
        err.errno = errno.EFBIG
    err.why, err.what = why, what  # type: ignore[attr-defined]  # for with_context
    return err


def with_context(
    e: StorageFullError, *, session_id: str, label: str, task_id: str | None
) -> StorageFullError:
    """``e`` naming the session and task, when the writer did not know them."""
    if e.session_id is not None and (e.task_id is not None or task_id is None):
        return e
    return full_error(
        Path(e.path or "."),
        getattr(e, "why", e.message),
        session_id=session_id,
        label=label,
        task_id=e.task_id or task_id,
        what=getattr(e, "what", "writing"),
    )
