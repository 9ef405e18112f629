"""The run loop: the lease around a call, recovery, the run and step loops
(how a run ends is ending.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from argus_lab.errors import ArgusError, SessionStateError, StorageFullError
from argus_lab.events import EventBase
from argus_lab.model import TaskRecord
from argus_lab.plan.graph import EXPAND_TOOL
from argus_lab.runtime.attempt import AttemptRunner
from argus_lab.runtime.ending import RunEnd
from argus_lab.runtime.options import RunResult, SessionOptions, T, log
from argus_lab.runtime.outcome import Interrupted
from argus_lab.runtime.policy import FailurePolicy, Rerun
from argus_lab.runtime.scheduler import DONE
from argus_lab.runtime.settle import Settler
from argus_lab.runtime.signals import Signals
from argus_lab.runtime.state import SessionState
from argus_lab.runtime.supervisor import Supervisor
from argus_lab.store.space import with_context

__all__ = ["BREATHE_S", "RunLoop"]

BREATHE_S = 0.002
"""The longest the run loop runs steps that end without awaiting before it
lets the event loop serve its other callbacks once."""


class RunLoop:
    """Holds the lease, recovers interrupted work, runs and steps the plan.

    Args:
        state: The session state (the only writer).
        signals: The pause request and the loop's wake-up.
        attempts: Runs one attempt of a task.
        supervisor: Expands lazy compounds.
        settler: Settles what cannot even be attempted.
        policy: Decides about attempts a dead process left running.
        options: concurrency, anomaly_factor.
    """

    def __init__(
        self,
        state: SessionState,
        signals: Signals,
        attempts: AttemptRunner,
        supervisor: Supervisor,
        settler: Settler,
        policy: FailurePolicy,
        options: SessionOptions,
    ) -> None:
        self._state = state
        self._signals = signals
        self._attempts = attempts
        self._supervisor = supervisor
        self._settler = settler
        self._policy = policy
        self._options = options
        self._bp_passed: set[str] = set()  # breakpoints paused at, to go past next
        # Committed retry delays being waited out: task -> (its next_attempt_at,
        # when it is due on the monotonic clock, which no clock change moves).
        self._due: dict[str, tuple[float, float]] = {}
        self._inflight: set[asyncio.Task[Any]] = set()  # execute() tasks running
        self._end = RunEnd(state, signals)

    # -- the lease around one public call ----------------------------------

    async def guarded(self, coro: Coroutine[Any, Any, T]) -> T:
        """Holds the runner lease around one public call (re-entrant)."""
        lease = self._state.lease
        if self._signals.wake is None:
            self._signals.wake = asyncio.Event()
            self._signals.loop = asyncio.get_running_loop()
        if lease.active == 0:
            try:
                self._acquire()
            except BaseException:
                coro.close()  # refused: the call never starts, and never leaks
                raise
        lease.active += 1
        try:
            return await coro
        finally:
            lease.active -= 1
            if lease.active == 0:
                self._release()

    def _acquire(self) -> None:
        st = self._state
        st.take_lease()
        st.redactor.learn_env()  # set since the session opened (%env, a cell)
        self.recover()
        st.lease.start_heartbeat(
            lambda fresh: st.commit(lease=fresh), f"{st.info.name!r} ({st.info.id})"
        )

    def _release(self) -> None:
        st = self._state
        st.lease.stop_heartbeat()
        # A lease never written (the call committed nothing) or already given
        # back by the call's last commit (``RunEnd.finish``) needs no commit.
        st.lease.pending = False
        if st.lease.expires:
            try:
                st.commit(lease=None)
            except ArgusError:
                log.warning("could not release the lease of session %s", st.info.id)
        st.lease.expires = 0.0

    def recover(self) -> None:
        """Decides about attempts a dead process left RUNNING (invariant 2)."""
        st = self._state
        changed: list[TaskRecord] = []
        events: list[EventBase] = []
        left = [(t, r) for t, r in st.records.where("running") if t not in st.timers]
        done = sum(s in DONE for s in st.records.status.values()) if left else 0
        for tid, rec in left:
            # Interrupts in a row with no task done since the last one: its
            # call may be what kills the process. With others running (a group
            # of intents committed together, calls after, or tasks in
            # parallel) any of them may be, and they get more reruns.
            in_a_row = rec.interrupts + 1 if rec.done_at_interrupt == done else 1
            task = st.tasks[tid]
            tool = self._attempts.tool_for(task)
            decision = self._policy.after_interrupt(
                task,
                Interrupted(rec.attempts),
                tool,
                st.tools,
                unsafe_when_started=rec.unsafe_intent,
                in_a_row=in_a_row,
                alone=len(left) == 1,
            )
            if isinstance(decision, Rerun):
                # Safe to repeat: same generation, so the same idempotency key.
                changed.append(
                    rec.model_copy(
                        update={
                            "status": "pending",
                            "interrupts": in_a_row,
                            "done_at_interrupt": done,
                        }
                    )
                )
                events.append(
                    st.event(
                        "resumed",
                        tid,
                        attempt=rec.attempts,
                        recovered="rerun",
                        key=rec.idempotency_key,
                    )
                )
            else:
                why = decision.reason
                key = rec.idempotency_key
                if key is not None:  # what to check the effect by
                    why += (
                        f" Its attempt ran under idempotency key {key!r}"
                        + (
                            f" (its model's tool calls under {key!r}:<tool_use id>)"
                            if task.kind == "llm"
                            else ""
                        )
                        + " and s.retry reuses it: check by that key whether "
                        "it took effect."
                    )
                changed.append(
                    rec.model_copy(update={"status": "in_doubt", "reason": why})
                )
                events.append(
                    st.event("in_doubt", tid, attempt=rec.attempts, reason=why)
                )
        if changed:
            st.commit(changed, events)
            for r in changed:
                st.sched.set(r.task_id, r.status)

    # -- one task -----------------------------------------------------------

    async def execute(self, tid: str) -> None:
        """Runs one ready task: an expansion, or an attempt under a slow-watch."""
        rest = self.begin(tid)
        if rest is not None:
            await rest

    def begin(self, tid: str) -> Coroutine[Any, Any, None] | None:
        """Starts one ready task now; returns None if it already ended (an
        expansion, a gate, a quick call inline), else the coroutine that
        finishes it (under the slow-watch, cancellable by ``abandon``)."""
        st = self._state
        # No work starts before the lease is written (a deferred intent's
        # call would otherwise run under a lease only checked, not held).
        st.claim_lease()
        task = st.tasks[tid]
        if task.tool == EXPAND_TOOL:
            rec = st.records[tid]
            failure = self._supervisor.expand(tid)
            if failure is not None:
                self._settler.settle(tid, rec, failure)
            return None
        try:
            rest = self._attempts.begin(tid)
        except StorageFullError as e:  # e.g. an artifact: name session and task
            raise self._storage_full(e, tid) from None
        return None if rest is None else self._finish(tid, rest)

    async def _finish(self, tid: str, rest: Callable[[], Awaitable[None]]) -> None:
        me = asyncio.current_task()
        assert me is not None
        self._inflight.add(me)
        watch = None
        expected = self._state.tasks[tid].expected_seconds
        if expected is not None:
            loop = asyncio.get_running_loop()
            limit = expected * self._options.anomaly_factor
            watch = loop.call_later(limit, self._too_slow, tid, limit)
        try:
            await rest()
        except StorageFullError as e:
            raise self._storage_full(e, tid) from None
        finally:
            self._inflight.discard(me)
            if watch is not None:
                watch.cancel()

    def _storage_full(self, e: StorageFullError, tid: str) -> StorageFullError:
        info = self._state.info
        label = f"{info.name!r} ({info.id})"
        return with_context(e, session_id=info.id, label=label, task_id=tid)

    def abandon(self) -> None:
        """A shutdown's grace is over: the attempts in flight end now, each as a
        ShutDown outcome that leaves its committed intent (runtime/shutdown.py)."""
        self._signals.abandoning = True
        for t in list(self._inflight):
            t.cancel()

    def _too_slow(self, tid: str, limit: float) -> None:
        st = self._state
        if st.records[tid].status != "running":
            return
        why = (
            f"anomaly: task {tid!r} has run over {limit:g}s "
            f"({self._options.anomaly_factor:g}x its expected time); no new task "
            "starts until you look: run() again to go on, or pause()"
        )
        st.commit(
            events=[
                st.event(
                    "anomaly",
                    tid,
                    what="slow",
                    detail=why,
                    limit_s=limit,
                )
            ]
        )
        self._signals.request_pause(why)
        self._signals.wake_up()

    # -- the loops -----------------------------------------------------------

    async def run(self) -> RunResult:
        """Runs ready tasks (up to the concurrency) until nothing more can run."""
        st, sig = self._state, self._signals
        if st.info.status == "succeeded" and all(
            s in DONE for s in st.records.status.values()
        ):
            return self._end.result()  # nothing to do: no events, no changes
        self._need_tools()
        if not self._end.start():
            return self._end.result()
        running: set[asyncio.Task[None]] = set()
        breath = time.perf_counter()
        wake = sig.wake
        assert wake is not None
        try:
            while True:
                # An attempt whose success waits for its group commit holds
                # no slot: its call is over (Settler.settling, outcomes.py).
                while (
                    sig.pause_requested is None
                    and len(running) - self._settler.settling
                    < self._options.concurrency
                    and (tid := self._pop_ready()) is not None
                ):
                    rest = self.begin(tid)
                    if rest is not None:
                        task = asyncio.create_task(rest)
                        task.add_done_callback(lambda _: sig.wake_up())
                        running.add(task)
                    elif (now := time.perf_counter()) - breath > BREATHE_S:
                        # Steps that end without awaiting (quick inline calls)
                        # need no Task, but the loop must still serve others
                        # now and then: calls on threads ending, timers, a
                        # person's approve or skip.
                        await asyncio.sleep(0)
                        breath = now
                if not running and (sig.pause_requested or not st.timers):
                    break
                wake.clear()
                if not any(t.done() for t in running):
                    await wake.wait()
                for t in [t for t in running if t.done()]:
                    running.discard(t)
                    t.result()  # re-raise store errors (ConcurrentSession, Corrupt)
        except BaseException:
            for t in running:
                t.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            raise
        # The outermost call gives the lease back in the run's last commit
        # (when the status changes), sparing the release its own transaction.
        return self._end.finish(release=st.lease.active == 1)

    def _need_tools(self) -> None:
        """Refuses a run that would call a tool this session was not given
        (a reopen without ``tools=``): nothing runs and nothing is committed,
        where the task reaching it would fail and need a retry."""
        st = self._state
        status, tools = st.records.status, st.tools
        missing: dict[str, list[str]] = {}
        for tid, task in st.tasks.items():
            name = task.tool
            if not name or name in tools or name == EXPAND_TOOL or task.kind != "tool":
                continue  # (an HTN placeholder is the planner's to expand)
            if status.get(tid, "pending") in ("pending", "running"):
                missing.setdefault(name, []).append(tid)
        if missing:
            name = st.info.name
            known = ", ".join(sorted(st.tools)) or "none"
            needs = "; ".join(
                f"{tool!r} (task{'s' if len(ids) > 1 else ''} "
                f"{', '.join(map(repr, ids[:3]))}{', ...' if len(ids) > 3 else ''})"
                for tool, ids in sorted(missing.items())
            )
            raise SessionStateError(
                f"session {name!r} needs tools it was not given: {needs}; it has: "
                f"{known}. Hand them in with s.update_tools(...), or reopen it "
                f"with ws.open({name!r}, tools=[...]), then run again (nothing ran)",
                session_id=st.info.id,
            )

    async def step(self) -> list[TaskRecord]:
        """Runs the next ready task(s) once; returns their records."""
        st, sig = self._state, self._signals
        self._need_tools()
        if self._end.in_doubt_reason():
            self._end.start()
            return []
        ids = self._take_ready()
        while not ids and st.timers:
            assert sig.wake is not None
            sig.wake.clear()
            await sig.wake.wait()
            ids = self._take_ready()
        if not ids:
            self._end.finish()
            return []
        tasks = [asyncio.create_task(self.execute(t)) for t in ids]
        try:
            await asyncio.gather(*tasks)
        except BaseException:  # no attempt may outlive the lease
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if sig.pause_requested is not None:  # e.g. a budget ran out
            self._end.pause_now(sig.why_paused())
        elif not st.sched.has_ready() and not st.timers:
            self._end.finish()
        elif st.info.status not in ("paused",):
            self._end.pause_now("stepping: call step() or run() to go on")
        # A task a plan patch took out in this step (it failed and was
        # backtracked or replanned) is retired: its record says how it ended.
        return [st.retired[t] if t in st.retired else st.records[t] for t in ids]

    def _pop_ready(self) -> str | None:
        """The next ready task, unless it has a breakpoint not yet passed."""
        st = self._state
        tid = st.sched.pop()
        while tid is not None and not st.timers.get(tid):
            # A retry delay committed by an earlier run (or process) that
            # has not passed yet: the task waits it out, as in that run.
            wait = self._retry_wait(tid)
            if wait <= 0:
                break
            st.sched.set(tid, "running")
            self._settler.hold(tid, wait)
            tid = st.sched.pop()
        if tid is None or tid not in st.info.breakpoints:
            return tid
        if tid in self._bp_passed:  # continuing from this breakpoint
            self._bp_passed.discard(tid)
            return tid
        self._bp_passed.add(tid)
        st.sched.set(tid, "pending")
        self._signals.request_pause(
            f"breakpoint before task {tid!r}; run() or step() goes on from it"
        )
        return None

    def _retry_wait(self, tid: str) -> float:
        """Seconds ready task ``tid`` has still to wait for its committed
        retry delay, counted once from when this run first saw it."""
        rec = self._state.records[tid]
        at = rec.next_attempt_at
        seen = self._due.get(tid)
        now = time.monotonic()
        if at is None:
            left = 0.0
        elif seen is not None and seen[0] == at:
            left = seen[1] - now
        else:
            left = _retry_wait(rec, self._state.now())
            self._due[tid] = (at, now + left)
        if left <= 0:
            self._due.pop(tid, None)
        return left

    def _take_ready(self) -> list[str]:
        ids: list[str] = []
        while len(ids) < self._options.concurrency and (t := self._pop_ready()):
            ids.append(t)
        return ids


def _retry_wait(rec: TaskRecord, now: float) -> float:
    """Seconds task ``rec`` has still to wait for its committed retry delay.

    ``next_attempt_at`` is wall-clock time, which may have been set back
    since (NTP, a VM restored, a dead RTC battery): a wait longer than the
    delay that set it is cut to that delay, never stretched by the jump. A
    record from before ``retry_delay`` was kept is bounded by its attempt's
    start instead (delay plus that attempt's duration). A clock set forward
    only makes the wait shorter, at worst none."""
    at = rec.next_attempt_at
    if at is None:
        return 0.0
    wait = at - now
    if rec.retry_delay is not None:
        return min(wait, rec.retry_delay)
    if rec.started is not None:
        return min(wait, at - rec.started)
    return wait
