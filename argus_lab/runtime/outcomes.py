"""Group commit of outcomes: the successes of tasks that settle close together
are written in one transaction, and each attempt waits for it.

A fan-out of 128 async tasks whose calls end together used to commit 128
outcomes one after the other on the loop thread, each its own transaction (a
WAL commit, the head read and rewritten, a witness record): the run was bound
by the loop thread's CPU. Here a settled success queues its record and events
and awaits the batch; one ``commit`` writes every outcome queued until then.

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

When the batch is written: once the loop has nothing else ready to run (at
most ``MAX_WAIT_TURNS`` turns after the first outcome was queued). An attempt
whose outcome waits here no longer holds one of the session's concurrency
slots (``Settler.settling``; its call is over), so by then the run loop has
started the tasks it made room for, their intents are committed and their
calls have begun: this commit's CPU overlaps their calls instead of
delaying them, and waves of a fan-out no longer run in lockstep behind each
other's commits. A run with nothing else to do (a chain) writes it at the
next turn, as before.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, NamedTuple

from argus_lab.events import EventBase
from argus_lab.model import TaskRecord, updated
from argus_lab.runtime.options import log
from argus_lab.runtime.outcome import Succeeded
from argus_lab.runtime.state import SessionState

__all__ = ["MAX_WAIT_TURNS", "OutcomeBatch", "success_of"]

MAX_WAIT_TURNS = 8
"""Turns of the loop a queued outcome waits at most for the loop to go idle."""


class _Entry(NamedTuple):
    rec: TaskRecord
    events: list[EventBase]
    after: Callable[[], None]
    waiter: asyncio.Future[None]


class OutcomeBatch:
    """Queues outcomes and commits them together once the loop is idle.

    Args:
        state: The session state, whose ``commit`` writes the batch.
    """

    def __init__(self, state: SessionState) -> None:
        self._state = state
        self._queue: list[_Entry] = []
        self._waited = 0  # turns the queued batch has waited so far
        self._drained: asyncio.Future[None] | None = None

    @property
    def pending(self) -> int:
        """How many outcomes wait for the next flush."""
        return len(self._queue)

    async def commit(
        self, rec: TaskRecord, events: list[EventBase], after: Callable[[], None]
    ) -> None:
        """Returns once ``rec`` and ``events`` are committed and ``after`` ran.

        ``after`` runs right after the commit, before any attempt of the batch
        goes on (e.g. the scheduler readies the task's dependants), so what it
        does happens even if the waiting attempt is cancelled meanwhile: a
        queued outcome is written whatever becomes of its attempt. Raises what
        the commit raised (e.g. ConcurrentSessionError, StorageFullError
        naming this task); this outcome is not written then.
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if not self._queue:
            loop.call_soon(self._flush)
        self._queue.append(_Entry(rec, events, after, fut))
        await fut

    async def drained(self) -> None:
        """Returns once every outcome queued so far was written (or refused)."""
        if not self._queue:
            return
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._drained)

    def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        # CPython's loops keep what is ready to run in ``_ready``; other loops
        # (uvloop) do not say, and get the batch written at once.
        ready = getattr(loop, "_ready", None)
        if ready and self._waited < MAX_WAIT_TURNS:
            self._waited += 1
            loop.call_soon(self._flush)
            return
        self._waited = 0
        try:
            self._write()
        finally:
            drained, self._drained = self._drained, None
            if drained is not None and not drained.done():
                drained.set_result(None)

    def _write(self) -> None:
        batch, self._queue = self._queue, []
        if len(batch) > 1:
            try:
                self._state.commit(
                    [e.rec for e in batch], [ev for e in batch for ev in e.events]
                )
            except Exception:
                # Refused as a whole (a full disk, a row that cannot be
                # written, another writer): each outcome is tried alone below,
                # so the one at fault is named in its own error and the others
                # are not held back by it.
                pass
            else:
                for entry in batch:
                    self._done(entry)
                return
        for entry in batch:
            try:
                self._state.commit([entry.rec], entry.events)
            except BaseException as e:
                if not entry.waiter.done():
                    entry.waiter.set_exception(e)
                else:  # its attempt was cancelled: say it somewhere
                    log.error(
                        "the outcome of %s failed to commit: %r", entry.rec.task_id, e
                    )
                continue
            self._done(entry)

    @staticmethod
    def _done(entry: _Entry) -> None:
        w = entry.waiter
        try:
            entry.after()
        except Exception as e:
            if not w.done():
                w.set_exception(e)
                return
            log.exception("after the outcome of task %s", entry.rec.task_id)
        if not w.done():
            w.set_result(None)


def success_of(
    st: SessionState,
    tid: str,
    rec: TaskRecord,
    out: Succeeded,
    tool_hash: str | None,
    inline_limit: int,
    intent: dict[str, Any] | None = None,
) -> tuple[TaskRecord, EventBase]:
    """The record and event of a success, not committed yet: the result kept
    in the record up to ``inline_limit`` bytes of JSON, as an artifact above.
    ``intent``: the attempt's intent fields, not in ``rec`` yet (taken over:
    the caller made them for this and holds them no more)."""
    size = len(out.result_json)
    upd: dict[str, Any] = {
        "status": "succeeded",
        "ended": st.now(),
        "error": None,
        "error_type": None,
        "traceback": None,
        "reason": None,
        "tool_hash": tool_hash,
    }
    if intent is not None:
        intent.update(upd)
        upd = intent
    if size > inline_limit:
        # Redacted like an inline result before it lands (invariant 7), the
        # secrets a tool put in os.environ included (learnt at commit, later).
        st.redactor.learn_new_env()
        text = json.dumps(st.redactor.value(out.result), ensure_ascii=False)
        upd["result_ref"] = st.artifacts.put_bytes(text.encode())
        upd["result"] = None
    else:
        upd["result"], upd["result_ref"] = out.result, None
    rec = updated(rec, upd)
    ev = st.event(
        "task_succeeded",
        tid,
        attempt=rec.attempts,
        duration=out.duration,
        bytes=size,
    )
    return rec, ev
