"""Group commit: the writes of calls that arrive together share one fsync.

LangGraph (``durability="sync"``) saves a task's writes (``put_writes``) in the
background and then the step's checkpoint (``put``), without waiting for the
first before it starts the second. Each call still returns only once its records
are committed (fsynced, under durability "full"); but a ``put_writes`` waits a
moment (``linger``) for the ``put`` that usually follows, and both go into one
transaction: one fsync per step instead of two. A call that does not linger
(``put``) flushes whatever is queued at once. PostgreSQL's ``commit_delay`` does
the same for the same reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from argus_lab.langgraph._store import ThreadStore

__all__ = ["GroupCommit"]


@dataclass
class _Job:
    fn: Callable[[], None]
    done: bool = False
    error: BaseException | None = None


SKIP = 50
"""After a wait that found no partner, this many calls do not wait (a graph whose
writes are awaited before its checkpoint is written, as LangGraph does for a
``DeltaChannel``, would otherwise pay the whole wait at every step)."""


class GroupCommit:
    """Runs the work of concurrent calls on one thread in shared transactions."""

    def __init__(self, store: ThreadStore, linger: float) -> None:
        self.store = store
        self.linger = linger
        self._cv = threading.Condition()
        self._queue: list[_Job] = []
        self._leading = False
        self._skip = 0

    def run(self, fn: Callable[[], None], *, linger: bool) -> None:
        """Runs ``fn`` (it writes records with ``store.set``) inside a committed
        transaction, possibly with other calls' work; returns once committed.

        ``linger``: wait up to ``self.linger`` seconds for a call to join (a call
        that does not linger commits everything queued at once).

        Raises what the transaction raised (ConcurrentSessionError, ...).
        """
        job = _Job(fn)
        with self._cv:
            wait = self.linger if linger and self._skip == 0 else 0.0
            if linger and self._skip:
                self._skip -= 1
            deadline = time.monotonic() + wait
            self._queue.append(job)
            while not job.done:
                now = time.monotonic()
                if not self._leading and now >= deadline:
                    # Lead: commit everything queued, lingering calls included.
                    batch, self._queue = self._queue, []
                    self._leading = True
                    if wait and len(batch) == 1:
                        self._skip = SKIP  # waited, and nobody came
                    break
                self._cv.wait(None if self._leading else deadline - now)
            else:
                if job.error is not None:
                    raise job.error
                return
        error: BaseException | None = None
        try:
            with self.store.transaction():
                for j in batch:
                    j.fn()
        except BaseException as e:  # handed to every call of the batch
            error = e
        with self._cv:
            for j in batch:
                j.done, j.error = True, error
            self._leading = False
            self._cv.notify_all()
        if error is not None:
            raise error
