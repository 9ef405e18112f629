"""Group commit of outcomes: the successes of tasks that settle in the same turn
of the loop are written in one transaction, and each attempt waits for it.

A fan-out of 128 async tasks whose calls end together used to commit 128
outcomes one after the other on the loop thread, each its own transaction (a
WAL commit, the head read and rewritten, a witness record): the run was bound
by the loop thread's CPU. Here a settled success queues its record and events
and awaits the batch; one ``commit`` at the next turn of the loop writes every
outcome queued in this turn.

The invariants hold per task exactly as with one commit each:

- A step is atomic (1): a task's record and its events are in the same
  transaction (the batch's), never split across two.
- A result is reported only once durable: the in-memory record changes, the
  subscribers hear of it, the scheduler readies its dependants and the
  attempt returns (so ``run``/``step`` can say it is done) only after the
  batch committed. Before that the task reads "running", as while its call ran.
- A crash before the batch commits leaves each of its tasks at its committed
  intent (status running), which the next open decides about as for any
  crash mid-call: rerun if the tool is side-effect-free or idempotent, in
  doubt otherwise (invariant 2). After the commit, all of them are done.
- One writer (6): the batch is written by ``SessionState.commit``, the
  session's one way to write, with its version and lease checks.

Outcomes are not relaxed under durability "full": a batch is fsynced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from argus_lab.events import EventBase
from argus_lab.model import TaskRecord
from argus_lab.runtime.options import log
from argus_lab.runtime.state import SessionState

__all__ = ["OutcomeBatch"]


class OutcomeBatch:
    """Queues outcomes and commits them together once per turn of the loop.

    Args:
        state: The session state, whose ``commit`` writes the batch.
    """

    def __init__(self, state: SessionState) -> None:
        self._state = state
        self._records: list[TaskRecord] = []
        self._events: list[EventBase] = []
        self._after: list[Callable[[], None]] = []
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def pending(self) -> int:
        """How many outcomes wait for the next flush."""
        return len(self._waiters)

    async def commit(
        self, rec: TaskRecord, events: list[EventBase], after: Callable[[], None]
    ) -> None:
        """Returns once ``rec`` and ``events`` are committed and ``after`` ran.

        ``after`` runs right after the commit, before any attempt of the batch
        goes on (e.g. the scheduler readies the task's dependants), so what it
        does happens even if the waiting attempt is cancelled meanwhile: a
        queued outcome is written whatever becomes of its attempt. Raises what
        the commit raised (e.g. ConcurrentSessionError); nothing of the batch
        is written then.
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if not self._waiters:
            loop.call_soon(self._flush)
        self._records.append(rec)
        self._events.extend(events)
        self._after.append(after)
        self._waiters.append(fut)
        await fut

    def _flush(self) -> None:
        records, events, after, waiters = (
            self._records,
            self._events,
            self._after,
            self._waiters,
        )
        self._records, self._events, self._after, self._waiters = [], [], [], []
        try:
            self._state.commit(records, events)
        except BaseException as e:  # every attempt of the batch sees it
            told = False
            for w in waiters:
                if not w.done():
                    w.set_exception(e)
                    told = True
            if not told:  # every waiter was cancelled: say it somewhere
                log.error(
                    "a batch of %d outcomes failed to commit: %r", len(records), e
                )
            return
        for w, rec, then in zip(waiters, records, after, strict=True):
            try:
                then()
            except Exception as e:
                if not w.done():
                    w.set_exception(e)
                    continue
                log.exception("after the outcome of task %s", rec.task_id)
            if not w.done():
                w.set_result(None)
