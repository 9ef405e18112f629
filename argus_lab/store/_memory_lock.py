"""One writer at a time to a memory's LanceDB table: threads and processes alike.

Every :class:`~argus_lab.store.memory.Memory` operation that commits to the
table (an upsert, a delete, optimize, an index build, a vector backfill, each
step of a re-embedding, a column added, dropped or renamed) runs holding
:class:`WriteLock`: the instance's thread lock, then an exclusive ``flock`` on
``<memory>/write.lock``, so two notebooks, or a notebook and ``argus serve``,
writing the same memory take turns. Readers never take it: LanceDB's versions
let a search read the last commit while the next is being written.

Why a lock and not retrying LanceDB's "Retryable commit conflict": several of
those operations are more than one commit, or decide from what they read
(create the table and its full-text index unless they exist; add the vector
column if it is missing; drop the old vector index, then build the new one;
drop the old vectors, then rename the new ones). Retrying one commit of such a
sequence does not make it right when another process ran the same sequence in
between: it fails differently ("Column vector already exists") or leaves two
indexes. Serialised, each sequence sees the table as the previous writer left
it. The lock is held for the commits, not for embedding, where that can be
kept apart (a re-embedding's batches, a backfill's), so a long job delays
another process's write by one batch, not by the whole job.

``fcntl.flock`` is what the workspace index and typed states already use (the
``filelock`` package would add a dependency for the same call); the kernel
drops the lock when its holder dies, so a killed writer never leaves it held.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from argus_lab.errors import ArgusError

__all__ = ["LOCK_FILE", "MemoryBusyError", "WriteLock"]

LOCK_FILE = "write.lock"
"""In the memory's folder; it holds who has the lock (pid, what, since)."""
TIMEOUT = 300.0
"""Seconds a writer waits for another process's write before giving up. The
longest single hold is one optimize or index build: ~2-5 s at 100k memories."""


class MemoryBusyError(ArgusError):
    """Another process held a memory's write lock for longer than the timeout;
    nothing was written by the caller (its memories can be written again)."""


class WriteLock:
    """Re-entrant: held by one thread of one process at a time.

    Args:
        folder: The memory's folder (the lock file is made in it).
        rlock: The instance's thread lock (taken first, so the threads of one
            process queue on it and only one of them waits on the file).
    """

    def __init__(self, folder: Path, rlock: threading.RLock) -> None:
        self.folder = folder
        self._rlock = rlock
        self._depth = 0
        self._fd: int | None = None

    @contextmanager
    def hold(self, what: str) -> Iterator[None]:
        """Holds the lock for ``what`` (named in another waiter's error)."""
        with self._rlock:
            try:
                # Taken and counted inside the try: a Ctrl-C between the two
                # must not leave the file (and its lock) open for good.
                if self._depth == 0:
                    self._fd = _acquire(self.folder, what)
                self._depth += 1
                yield
            finally:
                if self._fd is not None:
                    self._depth = max(self._depth - 1, 0)
                    if self._depth == 0:
                        fd, self._fd = self._fd, None
                        os.close(fd)  # closing the file releases the flock


class _Writing:
    """Memory's ``_writing`` (a mixin of its parts that write the table)."""

    if TYPE_CHECKING:
        _writer: WriteLock

    def _writing(self, what: str) -> AbstractContextManager[None]:
        """Held around every commit to the table (see the module docstring)."""
        return self._writer.hold(what)


def _acquire(folder: Path, what: str) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    deadline = time.monotonic() + TIMEOUT
    delay = 0.002
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() >= deadline:
                raise MemoryBusyError(_busy(folder, path, what))
            # Polled (flock has no timeout); backing off to 0.1 s keeps a
            # waiter cheap while an optimize of a few seconds finishes.
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        # Who holds it, for another waiter's error only: a full disk here
        # must not fail the write (nor keep the lock, as it did).
        holder = {"pid": os.getpid(), "what": what, "since": time.time()}
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(holder).encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _busy(folder: Path, path: Path, what: str) -> str:
    try:
        holder = json.loads(path.read_text() or "{}")
        who = (
            f"process {holder['pid']} ({holder['what']}, for "
            f"{time.time() - float(holder['since']):.0f} s)"
        )
    except (OSError, ValueError, KeyError, TypeError):
        who = "another process"
    return (
        f"memory at {folder} is being written by {who}; waited {TIMEOUT:.0f} s "
        f"to {what} and gave up, so nothing was written. Try again when it is "
        "done (a large optimize, index build or backfill can take minutes); if "
        "that process is stuck, stop it: its lock goes with it"
    )
