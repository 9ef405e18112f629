"""A workspace's session folders on disk: which exist, how big, removing one.

Light to import (the CLI's front reads sizes with it): the store is imported
only to delete.

Layout (see argus_lab.workspace): ``sessions/<id>/`` holds a session's
checkpoints, ``files/<id>/`` its tools' working files, ``marks/<id>`` the
version of its latest commit (``witness.py``: kept outside its folder, so
that an older copy of the folder restored over it is seen), ``.trash/`` what
a removal cut short left behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from argus_lab.errors import ConcurrentSessionError, StorageError

if TYPE_CHECKING:
    from argus_lab.store.envelope import Durability

__all__ = [
    "MARKS",
    "delete_session",
    "dir_bytes",
    "fsync_dir",
    "mark_of",
    "remove_session_folders",
    "session_folder_ids",
]


def dir_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (its size if a file; 0 if missing)."""
    if not path.is_dir():
        return path.stat().st_size if path.is_file() else 0
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:  # removed while we looked
            continue
    return total


def session_folder_ids(root: Path) -> list[str]:
    """Ids of every session folder under ``root`` with a checkpoint, by id."""
    return [
        d.name
        for d in sorted((root / "sessions").iterdir())
        if (d / "cache.db").exists()
    ]


MARKS = "marks"
"""The workspace's folder of session marks (``mark_of``)."""


def mark_of(folder: Path) -> Path | None:
    """The mark of the session in ``folder`` (``<root>/sessions/<id>``):
    ``<root>/marks/<id>``, outside the folder; None for a folder that is no
    workspace's session folder (a store opened on a bare folder keeps none)."""
    folder = Path(folder)
    if folder.parent.name != "sessions":
        return None
    return folder.parent.parent / MARKS / folder.name


def remove_session_folders(root: Path, sid: str) -> int:
    """Removes a session's checkpoint folder, working files and mark; returns
    the bytes.

    The checkpoint folder is first moved aside (one rename: the session vanishes
    at once), then deleted; an interruption leaves only a folder under
    ``.trash`` (``argus gc`` deletes those). The mark goes after the folder: a
    session deleted on purpose and a backup of it restored later is not a
    rollback to report (a mark left by an interruption is: ``argus gc``
    deletes marks whose folder is gone).
    """
    src, files = root / "sessions" / sid, root / "files" / sid
    freed = dir_bytes(src) + dir_bytes(files)
    trash = root / ".trash"
    trash.mkdir(exist_ok=True)
    if src.exists():
        shutil.rmtree(trash / sid, ignore_errors=True)  # an earlier, cut-short one
        src.rename(trash / sid)
    shutil.rmtree(trash / sid, ignore_errors=True)
    shutil.rmtree(files, ignore_errors=True)
    with contextlib.suppress(OSError):
        (root / MARKS / sid).unlink(missing_ok=True)
    return freed


def delete_session(root: Path, sid: str, durability: Durability) -> tuple[str, int]:
    """Removes a session nobody is running; returns (its name, bytes freed).

    The name is "" when its metadata cannot be read (a damaged session cannot
    be run either, so it is removed all the same).

    Raises:
        ConcurrentSessionError: a live process holds its lease (nothing removed).
    """
    from argus_lab.store.checkpoints import SessionStore  # pydantic
    from argus_lab.store.head import lease_is_live, lease_message

    name, lease = "", None
    try:
        store = SessionStore(root / "sessions" / sid, sid, durability=durability)
        try:
            head, name = store.read_head(), store.read_meta().name
            lease = head.lease if head is not None else None
        finally:
            store.close()
    except StorageError:
        pass
    if lease is not None and lease_is_live(lease, time.time()):
        raise ConcurrentSessionError(
            lease_message(repr(name or sid), lease, advice="stop that run first"),
            session_id=sid,
        )
    return name, remove_session_folders(root, sid)


def fsync_dir(path: Path) -> None:
    """Flushes a folder's entries (the names of what is in it) to disk: under
    durability "full", before a commit that points to a file or folder just
    made in it (POSIX asks for it; ext4 and XFS usually do it anyway)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
