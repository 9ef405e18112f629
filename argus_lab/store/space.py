"""Telling a full disk from a damaged file, and saying so (StorageFullError).

A full disk reaches us as ``OSError(ENOSPC)`` from a file write, as SQLite's
``SQLITE_FULL`` ("database or disk is full"), as an I/O error when SQLite could
not extend its WAL or shared-memory file, or as text from LanceDB's Rust side.
None of these means anything is damaged: the write that failed was not
committed, and everything committed before it is intact.
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
from pathlib import Path

from argus_lab.errors import StorageFullError

__all__ = ["full_error", "is_damaged", "is_disk_full", "with_context"]

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


def is_disk_full(e: BaseException, where: Path | None = None) -> bool:
    """Whether ``e`` says the disk (or quota) is full."""
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
            return free is not None and free < _LOW
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
    who = f"session {label or session_id}: " if (label or session_id) else ""
    task = f" for task {task_id!r}" if task_id else ""
    again = (
        f"then reopen the session (ws.open({session_id!r}) or `argus resume "
        f"{session_id}`) to go on"
        if session_id
        else "then try again"
    )
    room = f" ({_human(free)} free now)" if free is not None else ""
    err = StorageFullError(
        f"{who}the disk is full: {what} {path}{task} failed ({why}). Nothing "
        "committed was lost: this write was not committed and everything before "
        f"it is intact. Free space on the disk holding {path.parent}{room}, e.g. "
        f"with `argus gc` or by deleting other files, {again}.",
        path=str(path),
        session_id=session_id,
        task_id=task_id,
    )
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
