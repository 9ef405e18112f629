"""Group commit of attempts' intents: the intents of tasks that start together
are written in one transaction, and each attempt waits for it.

When a fan-out starts 128 async tasks, each used to commit its own intent (a
transaction each, on the loop thread, one after the other). Here an attempt
queues its intent and awaits it; the queue is written by one ``commit`` at the
next turn of the loop, after every task that started in this turn has queued
its own. Invariant 2 holds as before: no attempt goes on to its call until the
transaction holding its intent has committed (fsynced under "full" if any
intent in it belongs to a write tool). A shutdown that comes while intents
wait (from another thread: SIGTERM, the interpreter's exit) writes none of
them: their attempts start nothing, as if refused before their intents.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from argus_lab.events import EventBase
from argus_lab.model import TaskRecord
from argus_lab.runtime.state import SessionState

__all__ = ["IntentBatch"]


class IntentBatch:
    """Queues intents and commits them together once per turn of the loop.

    Args:
        state: The session state, whose ``commit`` writes the batch.
        stopping: Whether the session is shutting down (then nothing is written).
    """

    def __init__(
        self, state: SessionState, stopping: Callable[[], bool] = lambda: False
    ) -> None:
        self._state = state
        self._stopping = stopping
        self._records: list[TaskRecord] = []
        self._events: list[EventBase] = []
        self._relaxed = True
        self._waiters: list[asyncio.Future[bool]] = []
        self._before: dict[str, TaskRecord] = {}
        """Task id -> its record before the queued intent (to put back if the
        intent is never written)."""

    async def commit(self, rec: TaskRecord, event: EventBase, *, relaxed: bool) -> bool:
        """Returns True once ``rec`` and ``event`` are committed, False if they
        never will be (shutting down: the attempt must start nothing). Raises
        what the commit raised, e.g. ConcurrentSessionError."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        if not self._waiters:
            loop.call_soon(self._flush)
        self._records.append(rec)
        self._events.append(event)
        self._relaxed = self._relaxed and relaxed
        self._waiters.append(fut)
        # Shown as running at once, as a synchronous commit would: the
        # scheduler, a plan patch and a person's retry/skip see it in flight.
        records = self._state.records
        self._before[rec.task_id] = records[rec.task_id]
        records[rec.task_id] = rec
        try:
            return await fut
        except asyncio.CancelledError:
            # Cancelled before the batch was written: the intent stays out (here,
            # or in _flush), so no record says "running" for a call that never
            # began. Cancelled after: the intent is committed and the call may
            # as well have begun, as for any attempt cancelled at an await.
            if fut in self._waiters:
                i = self._waiters.index(fut)
                del self._waiters[i], self._records[i], self._events[i]
                self._put_back([rec])
            raise
        finally:
            self._before.pop(rec.task_id, None)

    def _put_back(self, records: list[TaskRecord]) -> None:
        """Intents that were not written: their tasks' records are as before."""
        for rec in records:
            old = self._before.get(rec.task_id)
            if old is not None and self._state.records.get(rec.task_id) is rec:
                self._state.records[rec.task_id] = old

    def _flush(self) -> None:
        records, events, relaxed = self._records, self._events, self._relaxed
        waiters = self._waiters
        self._records, self._events, self._relaxed, self._waiters = [], [], True, []
        if any(w.cancelled() for w in waiters):
            # Task.cancel() cancels the future its task waits on at once, before
            # the task runs again: leave out the intents of cancelled attempts.
            kept = [i for i, w in enumerate(waiters) if not w.cancelled()]
            self._put_back([r for i, r in enumerate(records) if i not in kept])
            records = [records[i] for i in kept]
            events = [events[i] for i in kept]
            waiters = [waiters[i] for i in kept]
        if not waiters:  # every attempt of the batch was cancelled
            return
        if self._stopping():
            self._put_back(records)
            for w in waiters:
                w.set_result(False)
            return
        try:
            self._state.commit(records, events, relaxed=relaxed)
        except BaseException as e:  # every attempt of the batch sees it
            self._put_back(records)
            for w in waiters:
                if not w.done():
                    w.set_exception(e)
            return
        for w in waiters:
            if not w.done():
                w.set_result(True)
