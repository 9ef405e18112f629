"""Room for a session's write-ahead log, allocated once, under durability "full".

Under "full" every commit ends in an fdatasync of ``cache.db-wal``. While the
WAL still grows (a fresh session's first ~90 steps, until SQLite's automatic
checkpoint at 1,000 pages sends writers back to its start), each of those also
makes the file system allocate blocks and commit the file's new size: a commit
then cost 0.21-0.25 ms of CPU against 0.16 ms once the WAL is reused in place
(BENCHMARKS.md, "N = 100: the fixed part of a run"). Allocating the WAL's
steady size at once (``posix_fallocate``: no bytes written, the new space reads
as zeros) spares most of that.

SQLite is indifferent to it: a WAL longer than its frames is what it leaves
after every restart, and it reads frames only up to the first whose salt and
checksum do not match (zeros never do). Only the space past the file's end is
allocated, on the session's one writer thread, and never where SQLite has not
made a WAL yet; at close SQLite deletes the file as before. Nothing about what
is fsynced, or when, changes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["WAL_ROOM_MAX", "WalRoom"]

WAL_ROOM_MAX = 1 << 20
"""At most this many bytes (a database with large pages grows the rest itself)."""

_AUTOCHECKPOINT = 1000
"""SQLite's default ``wal_autocheckpoint``, in pages: the WAL's steady size."""


class WalRoom:
    """Allocates a session's WAL once, under "full", after a commit.

    Args:
        directory: The session's folder.
        cache: Its diskcache (for the page size).
        durability: The store's durability ("normal": nothing to do).
    """

    def __init__(self, directory: Path, cache: Any, durability: str) -> None:
        self._path = os.path.join(directory, "cache.db-wal")
        self._cache = cache
        self._todo = durability == "full" and hasattr(os, "posix_fallocate")

    def make(self) -> None:
        """Extends the WAL to its steady size, the first time one exists."""
        if self._todo:
            self._todo = not self._allocate()

    def _allocate(self) -> bool:
        """True once done or not possible; False while there is no WAL yet."""
        try:
            fd = os.open(self._path, os.O_RDWR)  # never created here: SQLite's
        except FileNotFoundError:
            return False
        except OSError:
            return True
        try:
            (page_size,) = self._cache._sql("PRAGMA page_size").fetchone()
            # A WAL frame is a page and a 24-byte header; the file has a 32-byte one.
            want = min(_AUTOCHECKPOINT * (int(page_size) + 24) + 32, WAL_ROOM_MAX)
            size = os.fstat(fd).st_size
            if size < want:
                os.posix_fallocate(fd, size, want - size)
        except OSError:
            pass  # no room to spare, or a file system without it: SQLite grows it
        finally:
            os.close(fd)
        return True
