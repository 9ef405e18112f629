"""A workspace's session folders on disk: which exist, how big, removing one.

Light to import (the CLI's front reads sizes with it): the store is imported
only to delete.

Layout (see argus_lab.workspace): ``sessions/<id>/`` holds a session's
checkpoints, ``files/<id>/`` its tools' working files, ``marks/<id>`` the
version of its latest commit (``witness.py``: kept outside its folder, so
that an older copy of the folder restored over it is seen), ``.trash/`` what
a removal cut short left behind.

A session folder's ``open`` file is its lock against removal: every open
Session holds a shared ``flock`` on it (``OpenHold``) until it closes (the OS
drops it when its process dies); a removal takes it exclusive, without
waiting, before it moves the folder aside, and keeps it while it deletes
(``removal_lock``). So a session open anywhere (a kernel with it paused for
an approval holds no lease) is never removed under it.

On a file system without ``flock`` (NFSv3 without lockd: ENOLCK) a Session
opens without the lock (a warning, once per file system), and a removal
refuses with a StorageError saying what to do: it cannot tell whether the
session is open.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import json
import logging
import os
import shutil
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.errors import ConcurrentSessionError, StorageError

if TYPE_CHECKING:
    from argus_lab.store.envelope import Durability

log = logging.getLogger("argus_lab")

__all__ = [
    "MARKS",
    "OPEN",
    "OpenHold",
    "delete_session",
    "dir_bytes",
    "fsync_dir",
    "is_open",
    "mark_of",
    "open_refusal",
    "removal_lock",
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


OPEN = "open"
"""A session folder's lock file against removal (see the module's doc)."""

_holds: weakref.WeakSet[OpenHold] = weakref.WeakSet()
"""The OpenHolds of this process holding their lock (let go of in a forked child)."""


def _let_go_in_child() -> None:
    # A forked child (a multiprocessing worker) shares each open lock with
    # us until it closes its copy (O_CLOEXEC covers exec, not fork): closed
    # here, a session the parent closes is no longer kept "open" by a child
    # that lives on. Only this thread runs in the child.
    for hold in list(_holds):
        fd, hold.fd = hold.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    _holds.clear()


os.register_at_fork(after_in_child=_let_go_in_child)


class OpenHold:
    """An open Session's shared lock on its folder's ``open`` file, and what
    its folder was when opened (to notice it removed or replaced anyway).

    Taken once per open (an open, a ``flock`` and three ``stat``), released by
    ``close`` or the process's death. ``check`` costs two ``stat`` calls: it
    runs before each public call (run, step, approve ...), never per step.
    """

    def __init__(self, folder: Path, label: str) -> None:
        self.folder = folder
        self.fd: int | None = None
        path = folder / OPEN
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            try:  # a read-only folder (a backup mounted to look at)
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                fd = None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    # No flock on this file system (NFS without lockd):
                    # opened without the lock, as before there was one.
                    _no_locks(path, e)
                    fd = None
                else:
                    raise ConcurrentSessionError(
                        f"session {label} is being removed (argus rm or gc, or "
                        "ws.delete) right now; it cannot be opened",
                    ) from None
        if fd is not None:
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except OSError:
                same = False
            if not same:  # removed between our open and our lock
                os.close(fd)
                raise ConcurrentSessionError(
                    f"session {label} was removed while it was being opened"
                )
            self.fd = fd
            _holds.add(self)
        self._paths = (str(folder), str(folder / "cache.db"))
        try:
            self.identity = _identity(self._paths)
            """(device, inode) of the folder and of its cache.db when opened."""
        except OSError:
            self.close()
            raise ConcurrentSessionError(
                f"session {label} was removed while it was being opened"
            ) from None

    def check(self, label: str) -> None:
        """StorageError if the folder is no longer the one opened: removed
        (``argus rm``/``gc`` of an older argus-lab, ``rm -rf``, a move) or
        replaced (a copy put in its place). Whatever this object committed
        from now on would go to deleted files and be lost."""
        try:
            now = _identity(self._paths)
        except OSError:
            now = None
        if now == self.identity:
            return
        what = "removed" if now is None else "replaced by another copy"
        raise StorageError(
            f"session {label}: its folder {self.folder} was {what} while "
            "this Session object had it open (argus rm or gc, or by hand); "
            "nothing more is run or committed by it, as its commits would be "
            "lost. Close it (s.close()). If the session still exists, "
            "ws.open() it again; if it was removed, its records are gone"
        )

    def close(self) -> None:
        """Releases the lock (idempotent)."""
        fd, self.fd = self.fd, None
        _holds.discard(self)
        if fd is not None:
            os.close(fd)  # the last descriptor of the lock: released

    def __del__(self) -> None:  # a Session dropped unclosed, then collected
        with contextlib.suppress(Exception):
            self.close()


def _identity(paths: tuple[str, str]) -> tuple[int, int, int, int]:
    a, b = os.stat(paths[0]), os.stat(paths[1])
    return (a.st_dev, a.st_ino, b.st_dev, b.st_ino)


def _lock_holders(fd: int) -> list[int]:
    """The pids holding a ``flock`` on the file of ``fd`` (Linux /proc/locks;
    empty where it cannot be read)."""
    st = os.fstat(fd)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids: list[int] = []
    try:
        with open("/proc/locks") as f:
            for line in f:
                parts = line.split()
                # "1: FLOCK  ADVISORY  READ  1234 08:01:5678 0 EOF"
                if "FLOCK" in parts and dev in parts:
                    i = parts.index(dev)
                    with contextlib.suppress(ValueError):
                        pids.append(int(parts[i - 1]))
    except OSError:
        return []
    return sorted(set(pids))


def _process(pid: int) -> str:
    """ "pid 123 (python -m ipykernel ...)": who holds a session open."""
    if pid == os.getpid():
        return f"this process (pid {pid})"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = ""
    if len(cmd) > 80:
        cmd = cmd[:77] + "..."
    return f"pid {pid}" + (f" ({cmd})" if cmd else "")


def open_refusal(label: str, holders: list[int]) -> str:
    """Why a session open in ``holders`` (pids; may be empty) is not removed."""
    who = ", ".join(map(_process, holders)) or "another process (or this one)"
    others = any(p != os.getpid() for p in holders)
    dead = "; it is released too when that process exits" if others else ""
    return (
        f"session {label} is open in {who}: a Session object there may still "
        "run it (one paused for an approval holds no lease), and removing it "
        "now would lose whatever it commits next. Nothing was removed. Close "
        f"it there first (s.close(), or shut down that notebook kernel{dead}), "
        "then remove it again"
    )


@contextlib.contextmanager
def removal_lock(folder: Path, label: str) -> Iterator[None]:
    """Holds ``folder``'s removal lock (exclusive) while the body removes it.

    Raises:
        ConcurrentSessionError: a Session has it open (in another process or
            this one), or another removal holds it; nothing was removed.
    """
    try:
        fd = os.open(folder / OPEN, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except (FileNotFoundError, NotADirectoryError):
        # No folder (only its files or mark are left), or a file in its
        # place (damaged): no Session can have it open.
        yield
        return
    except OSError as e:
        raise StorageError(
            f"session {label}: cannot take its removal lock {folder / OPEN} "
            f"({e.strerror or e}); nothing was removed"
        ) from None
    try:
        if not _exclusive(fd, folder / OPEN, label):
            holders = _lock_holders(fd)
            if os.getpid() in holders or not holders:
                # Ours may be a Session dropped unclosed (``ws.open(x).status``)
                # and not collected yet: collected, it lets go.
                gc.collect()
            if not _exclusive(fd, folder / OPEN, label):
                raise ConcurrentSessionError(open_refusal(label, _lock_holders(fd)))
        yield
    finally:
        os.close(fd)


def _exclusive(fd: int, path: Path, label: str) -> bool:
    """Takes ``fd``'s flock exclusive if nobody holds it; False if one does.

    Raises:
        StorageError: the file system of ``path`` has no flock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise StorageError(
                f"session {label}: cannot lock {path} ({e.strerror or e}): "
                f"{_fs_of(path)} gives no flock locks, so whether a Session "
                "has the session open cannot be told; nothing was removed. "
                "Give it locks (NFS: run lockd/rpc.statd on the server and "
                "this client, or mount with local_lock=flock if only this "
                "host uses it), or remove the session on a host that has "
                "them; or, once sure no process has it open, delete its "
                f"folder {path.parent} by hand"
            ) from None
        return False
    return True


_warned: set[int] = set()
"""Devices whose missing flock was already logged."""


def _no_locks(path: Path, e: OSError) -> None:
    """Says once per file system that sessions there are opened unlocked."""
    try:
        dev = os.stat(path.parent).st_dev
    except OSError:
        dev = -1
    if dev in _warned:
        return
    _warned.add(dev)
    log.warning(
        "cannot lock %s (%s): %s gives no flock locks; sessions there are "
        "opened without their lock against removal, so argus rm/gc and "
        "ws.delete cannot tell whether one is open (and refuse)",
        path,
        e.strerror or e,
        _fs_of(path),
    )


def _fs_of(path: Path) -> str:
    """The file system ``path`` is on, for a person: its type and mount point
    (from /proc/self/mounts), else a description."""
    best = ("", "")
    try:
        real = os.path.realpath(path)
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) > len(best[0]):
                    best = (mnt, parts[2])
    except OSError:
        pass
    if not best[0]:
        return f"the file system holding {path.parent}"
    return f"the {best[1]} file system mounted at {best[0]}"


def is_open(folder: Path) -> list[int] | None:
    """The pids holding session ``folder`` open, or None when nobody does
    (or it cannot be told here). A hint for a plan: the removal asks again,
    under its lock."""
    try:
        fd = os.open(folder / OPEN, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # no lock file: never opened since argus-lab made them
    try:
        # Read, never probed by taking the lock: a Session being opened
        # meanwhile would be told the session is being removed.
        return _lock_holders(fd) or None
    finally:
        os.close(fd)


ABANDONED = "abandoned"
"""A session folder's folder of lock files, one per call still running after
its attempt was abandoned (``runtime/abandoned.py`` writes and reads them)."""


def probe_lock(path: Path) -> tuple[bool, dict[str, Any]]:
    """Whether a process holds the ``flock`` of lock file ``path``, and the
    JSON its writer put in it (``{}`` when unreadable).

    Raises:
        OSError: it cannot be opened (FileNotFoundError: its call ended), or
            its file system has no flock (some network file systems).
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            data = json.loads(os.read(fd, 1 << 16) or b"{}")
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict):
            data = {}
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True, data
        return False, data
    finally:
        os.close(fd)


def refuse_running_calls(folder: Path, label: str) -> None:
    """Raises ConcurrentSessionError while an abandoned call whose lock file
    is in ``folder``'s ``abandoned/`` still runs (a process holds its flock;
    ``runtime/abandoned.py``): removing the folder would drop the lock that
    keeps a retry, here or in a fork under this session's key, from calling
    beside it. A lock nobody holds is a leftover and no reason to refuse."""
    locks = folder / ABANDONED
    try:
        names = sorted(n for n in os.listdir(locks) if not n.startswith("."))
    except OSError:
        return  # none, or no folder
    for name in names:
        try:
            held, info = probe_lock(locks / name)
        except OSError:
            continue  # gone, or no flock here: the lease and open lock decide
        if not held:
            continue  # nobody holds it: its call ended
        raise ConcurrentSessionError(
            f"session {label}: a call of its task {info.get('task_id', '?')!r} "
            f"(tool {info.get('tool', '?')!r}), abandoned past its timeout or at "
            f"a close, still runs in process {info.get('pid', '?')}; its lock "
            "in the session's folder keeps a retry from calling beside it, and "
            "removing the session would drop it. Wait for the call to end (or end "
            "that process), then remove the session; nothing was removed"
        )


def remove_session_folders(root: Path, sid: str, label: str | None = None) -> int:
    """Removes a session's checkpoint folder, working files and mark; returns
    the bytes.

    Under the folder's removal lock (``removal_lock``): refused, with nothing
    removed, while a Session has it open, here or in another process.

    The checkpoint folder is first moved aside (one rename: the session vanishes
    at once), then deleted; an interruption leaves only a folder under
    ``.trash`` (``argus gc`` deletes those). The mark goes after the folder: a
    session deleted on purpose and a backup of it restored later is not a
    rollback to report (a mark left by an interruption is: ``argus gc``
    deletes marks whose folder is gone).

    Raises:
        ConcurrentSessionError: the session is open somewhere (its message
            names the process).
    """
    src, files = root / "sessions" / sid, root / "files" / sid
    with removal_lock(src, label or sid):
        refuse_running_calls(src, label or sid)
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
    """Removes a session nobody is running or has open; returns (its name,
    bytes freed).

    The name is "" when its metadata cannot be read (a damaged session cannot
    be run either, so it is removed all the same).

    Raises:
        ConcurrentSessionError: a live process holds its lease, or a Session
            has it open (here or elsewhere): nothing removed.
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
    label = f"{name!r} ({sid})" if name else sid
    return name, remove_session_folders(root, sid, label)


def fsync_dir(path: Path) -> None:
    """Flushes a folder's entries (the names of what is in it) to disk: under
    durability "full", before a commit that points to a file or folder just
    made in it (POSIX asks for it; ext4 and XFS usually do it anyway)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
