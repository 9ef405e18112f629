"""The run loop: the lease around a call, recovery, the run and step loops,
and how a run ends (succeeded, failed, or paused and why)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from argus_lab.errors import ArgusError, StorageFullError
from argus_lab.events import EventBase
from argus_lab.model import SessionStatus, TaskRecord
from argus_lab.plan.graph import EXPAND_TOOL
from argus_lab.runtime.attempt import AttemptRunner
from argus_lab.runtime.options import RunResult, SessionOptions, T, log
from argus_lab.runtime.outcome import Interrupted
from argus_lab.runtime.policy import FailurePolicy, Rerun
from argus_lab.runtime.scheduler import DONE
from argus_lab.runtime.settle import Settler
from argus_lab.runtime.signals import Signals
from argus_lab.runtime.state import LeaseArg, SessionState
from argus_lab.runtime.supervisor import Supervisor
from argus_lab.store.space import with_context

__all__ = ["RunLoop"]


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
        self._inflight: set[asyncio.Task[Any]] = set()  # execute() tasks running

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
        self.recover()
        st.lease.start_heartbeat(
            lambda fresh: st.commit(lease=fresh), f"{st.info.name!r} ({st.info.id})"
        )

    def _release(self) -> None:
        st = self._state
        st.lease.stop_heartbeat()
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
        for tid, rec in st.records.where("running"):
            if tid in st.timers:
                continue
            task = st.tasks[tid]
            tool = self._attempts.tool_for(task)
            decision = self._policy.after_interrupt(
                task, Interrupted(rec.attempts), tool, st.tools
            )
            if isinstance(decision, Rerun):
                # Safe to repeat: same generation, so the same idempotency key.
                changed.append(rec.model_copy(update={"status": "pending"}))
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
        st = self._state
        task = st.tasks[tid]
        if task.tool == EXPAND_TOOL:
            rec = st.records[tid]
            failure = self._supervisor.expand(tid)
            if failure is not None:
                self._settler.settle(tid, rec, failure)
            return
        me = asyncio.current_task()
        assert me is not None
        self._inflight.add(me)
        watch = None
        if task.expected_seconds is not None:
            loop = asyncio.get_running_loop()
            limit = task.expected_seconds * self._options.anomaly_factor
            watch = loop.call_later(limit, self._too_slow, tid, limit)
        try:
            await self._attempts.run(tid)
        except StorageFullError as e:  # e.g. an artifact: name session and task
            info = st.info
            label = f"{info.name!r} ({info.id})"
            raise with_context(
                e, session_id=info.id, label=label, task_id=tid
            ) from None
        finally:
            self._inflight.discard(me)
            if watch is not None:
                watch.cancel()

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
            return self.result()  # nothing to do: no events, no changes
        if not self._start_run():
            return self.result()
        running: set[asyncio.Task[None]] = set()
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
                    task = asyncio.create_task(self.execute(tid))
                    task.add_done_callback(lambda _: sig.wake_up())
                    running.add(task)
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
        return self.finish()

    async def step(self) -> list[TaskRecord]:
        """Runs the next ready task(s) once; returns their records."""
        st, sig = self._state, self._signals
        if self._in_doubt_reason():
            self._start_run()
            return []
        ids = self._take_ready()
        while not ids and st.timers:
            assert sig.wake is not None
            sig.wake.clear()
            await sig.wake.wait()
            ids = self._take_ready()
        if not ids:
            self.finish()
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
            self._pause_now(sig.why_paused())
        elif not st.sched.has_ready() and not st.timers:
            self.finish()
        elif st.info.status not in ("paused",):
            self._pause_now("stepping: call step() or run() to go on")
        return [st.records[t] for t in ids]

    def _pop_ready(self) -> str | None:
        """The next ready task, unless it has a breakpoint not yet passed."""
        st = self._state
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

    def _take_ready(self) -> list[str]:
        ids: list[str] = []
        while len(ids) < self._options.concurrency and (t := self._pop_ready()):
            ids.append(t)
        return ids

    # -- how a run ends ------------------------------------------------------

    def _in_doubt_reason(self) -> str | None:
        recs = self._state.records
        doubts = [t for t, s in recs.status.items() if s == "in_doubt"]
        if not doubts:
            return None
        first = recs[doubts[0]].reason or ""
        more = f" (and {len(doubts) - 1} more in doubt)" if len(doubts) > 1 else ""
        return f"in doubt: {first}{more}"

    def _set_status(
        self,
        status: SessionStatus,
        reason: str | None,
        events: list[EventBase],
        *,
        lease: LeaseArg = "keep",
    ) -> None:
        st = self._state
        counts = {k: v for k, v in st.counts().items() if v}
        meta = st.info.model_copy(
            update={
                "status": status,
                "reason": reason,
                "updated": st.now(),
                "counts": counts,
                "n_tasks": len(st.tasks),
            }
        )
        st.commit(events=events, meta=meta, lease=lease)

    def _start_run(self) -> bool:
        """Enters "running"; returns False (after pausing) if a person must decide."""
        why = self._in_doubt_reason()
        if why is not None:
            self._pause_now(why)
            return False
        if self._state.info.status != "running":
            self._set_status("running", None, [self._state.event("resumed")])
        return True

    def _pause_now(self, reason: str) -> None:
        info = self._state.info
        if info.status != "paused" or info.reason != reason:
            self._set_status(
                "paused",
                reason,
                [self._state.event("paused", reason=reason)],
            )

    def finish(self) -> RunResult:
        """Commits how the run ended (only when that changed) and returns it."""
        st = self._state
        c = st.counts()
        if self._signals.pause_requested is not None:
            self._pause_now(self._signals.why_paused())
        elif (why := self._in_doubt_reason()) is not None:
            self._pause_now(why)
        elif c["awaiting_approval"]:
            asked = [
                t for t, s in st.records.status.items() if s == "awaiting_approval"
            ]
            first = asked[0]
            tool = st.tasks[first].tool
            more = f" (and {len(asked) - 1} more)" if len(asked) > 1 else ""
            self._pause_now(
                f"waiting for approval: task {first!r} (tool {tool!r}){more}; call "
                f"s.approve({first!r}) or s.reject({first!r}, reason)"
            )
        elif c["failed"] or c["blocked"]:
            failed = {t: r.error or "" for t, r in st.records.where("failed")}
            summary = "; ".join(f"{t}: {e}" for t, e in list(failed.items())[:5])
            if len(failed) > 5:
                summary += f"; and {len(failed) - 5} more"
            reason = f"{len(failed)} task(s) failed, {c['blocked']} blocked — {summary}"
            if st.info.status != "failed" or st.info.reason != reason:
                self._set_status(
                    "failed",
                    reason,
                    [
                        st.event(
                            "session_failed",
                            failed=failed,
                            summary=reason,
                        )
                    ],
                )
        elif all(s in DONE for s in st.records.status.values()):
            if st.info.status != "succeeded":
                self._set_status("succeeded", None, [st.event("session_succeeded")])
        else:
            waiting = [t for t, s in st.records.status.items() if s not in DONE]
            self._pause_now(f"nothing can run now; waiting: {', '.join(waiting[:10])}")
        return self.result()

    def result(self) -> RunResult:
        """How the session stands, as a RunResult."""
        st = self._state
        failed = {t: r.error or "" for t, r in st.records.where("failed")}
        counts = {k: v for k, v in st.counts().items() if v}
        return RunResult(st.info.status, st.info.reason, counts, failed)
