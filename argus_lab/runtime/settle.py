"""The settler: carries out what the failure policy decided about an outcome.

``Settler.settle`` asks the policy (policy.py) for a decision and writes what
it means for the task, as one commit each: the result kept (inline or as an
artifact), a retry scheduled, the task in doubt or waiting for budget, or the
task given up (after the replanner's remedies had their chance), failed with
its dependents blocked, or skipped. ``Settler.settled``, which an attempt
awaits, writes a success in a group commit with the other outcomes settling
beside it (outcomes.py).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from argus_lab.events import EventBase
from argus_lab.model import TaskRecord, updated
from argus_lab.runtime.budget import BudgetHit
from argus_lab.runtime.outcome import (
    Failure,
    Outcome,
    ShutDown,
    Succeeded,
    ended_record,
    failure_fields,
)
from argus_lab.runtime.outcomes import OutcomeBatch, success_of
from argus_lab.runtime.policy import (
    Accept,
    AskInDoubt,
    Decision,
    FailurePolicy,
    GiveUp,
    LeaveIntent,
    RetryLater,
    StopForBudget,
)

if TYPE_CHECKING:
    from argus_lab.runtime.options import SessionOptions
    from argus_lab.runtime.remember import MemoryFeed
    from argus_lab.runtime.signals import Signals
    from argus_lab.runtime.state import SessionState
    from argus_lab.runtime.supervisor import Supervisor

__all__ = ["Settler"]


class Settler:
    """Writes the consequences of an attempt's outcome.

    Args:
        state: The session state (the only writer).
        policy: Decides what an outcome means.
        replanner: Offers the remedies (HTN repair, fallback, replan).
        signals: Where a pause is requested.
        memory: Remembers results and lessons.
        options: inline_result_bytes, max_consecutive_failures.
    """

    def __init__(
        self,
        state: SessionState,
        policy: FailurePolicy,
        replanner: Supervisor,
        signals: Signals,
        memory: MemoryFeed,
        options: SessionOptions,
    ) -> None:
        self._state = state
        self._policy = policy
        self._replanner = replanner
        self._signals = signals
        self._memory = memory
        self._options = options
        self._outcomes = OutcomeBatch(state)
        self.failures_in_a_row = 0
        self.settling = 0
        """Attempts whose call is over and whose success waits for its group
        commit: they hold no concurrency slot (RunLoop.run)."""

    def settle(
        self,
        tid: str,
        rec: TaskRecord,
        out: Outcome,
        *,
        tool_hash: str | None = None,
        retries: int = 0,
        extra: list[EventBase] | None = None,
        intent: dict[str, Any] | None = None,
    ) -> None:
        """Decides about ``out`` (attempt ``rec.attempts`` of ``tid``), writes it.

        Args:
            tid: The task.
            rec: Its record as the attempt left it.
            out: How the attempt ended.
            tool_hash: The code hash of the tool that ran (kept on success).
            retries: How many transient failures the task may retry.
            extra: Events that belong in the same commit (e.g. a rejection).
            intent: The attempt's intent fields, not in ``rec`` yet (a quick
                call inline, whose intent record is never written on its own).
        """
        if isinstance(out, Succeeded):  # the policy accepts every success
            st = self._state
            self.failures_in_a_row = 0
            limit = self._options.inline_result_bytes
            done, ev = success_of(st, tid, rec, out, tool_hash, limit, intent)
            st.commit([done], [ev])
            st.sched.set(tid, "succeeded")
            self._memory.result(tid)
            return
        rec = rec if intent is None else updated(rec, intent)
        decision = self._decide(tid, rec, out, retries)
        self._carry_out(tid, rec, out, decision, tool_hash, extra)

    async def settled(
        self,
        tid: str,
        rec: TaskRecord,
        out: Outcome,
        *,
        tool_hash: str | None = None,
        retries: int = 0,
        intent: dict[str, Any] | None = None,
    ) -> None:
        """``settle`` for an attempt that can wait: a success joins the
        outcomes settling beside it, all written in one transaction
        (outcomes.py), and this returns once it is durable; any other
        decision is carried out at once, as by ``settle``."""
        if not isinstance(out, Succeeded):  # the policy accepts every success
            rec = rec if intent is None else updated(rec, intent)
            decision = self._decide(tid, rec, out, retries)
            self._carry_out(tid, rec, out, decision, tool_hash, None)
            return
        st = self._state
        self.failures_in_a_row = 0
        done, ev = success_of(
            st, tid, rec, out, tool_hash, self._options.inline_result_bytes, intent
        )
        # An intent deferred into this commit (a quick call on the loop, which
        # nothing else ran beside) goes with the outcome, in the same batch.
        events = [*st.take_deferred(), ev]

        def after() -> None:
            st.sched.set(tid, "succeeded")
            self._memory.result(tid, seq=ev.seq)

        # The call is over: the attempt no longer holds a concurrency slot, and
        # the run loop may start another task while this outcome waits; but
        # only if a crash before the batch is written reruns this task (its
        # tool is idempotent). A non-idempotent one would be in doubt then, and
        # starting the next call beside it would put a second task in doubt:
        # no more tasks are in doubt after a crash than calls run at once.
        name = st.tasks[tid].tool
        tool = st.tools.get(name) if name else None
        frees = tool is not None and tool.idempotent
        if frees:
            self.settling += 1
            self._signals.wake_up()
        try:
            await self._outcomes.commit(done, events, after)
        except asyncio.CancelledError:
            if not self._signals.absorbed_shutdown():
                raise
            # The shutdown's own cancellation (RunLoop.abandon): the queued
            # outcome is written all the same; the attempt waits for that and
            # ends as finished, not cancelled.
            await self._outcomes.drained()
        finally:
            if frees:
                self.settling -= 1

    def _decide(
        self, tid: str, rec: TaskRecord, out: Outcome, retries: int
    ) -> Decision:
        task = self._state.tasks[tid]
        return self._policy.decide(
            task,
            out,
            attempt=rec.attempts,
            retries=retries,
            jitter=random.random(),
            can_repair=self._replanner.can_repair(task),
            can_replan=self._replanner.can_replan(),
        )

    def _carry_out(
        self,
        tid: str,
        rec: TaskRecord,
        out: Outcome,
        decision: Decision,
        tool_hash: str | None,
        extra: list[EventBase] | None,
    ) -> None:
        match decision:
            case Accept():
                assert isinstance(out, Succeeded)
                self.settle(tid, rec, out, tool_hash=tool_hash)
            case RetryLater(delay):
                assert not isinstance(out, Succeeded | ShutDown)
                self._retry_later(tid, rec, out, delay)
            case AskInDoubt(reason):
                assert not isinstance(out, Succeeded | ShutDown)
                self.in_doubt(tid, rec, reason, out.error)
            case StopForBudget(hit):
                self.budget_stop(tid, hit)
            case GiveUp():
                self._give_up(tid, rec, decision, list(extra or []))
            case LeaveIntent(why, started):
                self._leave(tid, rec, why, started)

    def _leave(self, tid: str, rec: TaskRecord, why: str, started: bool) -> None:
        """Shutting down: no outcome is written, and the run stops starting tasks.

        A call that may have begun keeps its committed intent (status running),
        which the next open decides about exactly as after a crash; a call that
        never began is pending again, with nothing to decide.
        """
        st = self._state
        if self._signals.pause_requested is None:
            self._signals.request_pause(f"interrupted by a shutdown: {why}")
        if started:
            self._signals.left.append(tid)
            return
        back = rec.model_copy(update={"status": "pending"})
        ev = st.event(
            "resumed",
            tid,
            attempt=rec.attempts,
            recovered="not started: shutting down",
            why=why,
        )
        st.commit([back], [ev])
        st.sched.set(tid, "pending")

    def _retry_later(
        self, tid: str, rec: TaskRecord, out: Failure, delay: float
    ) -> None:
        st = self._state
        rec = rec.model_copy(
            update={
                "status": "pending",
                "error": out.error,
                "error_type": out.error_type,
                "traceback": out.traceback,
                "next_attempt_at": st.now() + delay,
                "retry_delay": delay,
            }
        )
        ev = st.event(
            "retry_scheduled",
            tid,
            attempt=rec.attempts,
            duration=out.duration,
            delay=delay,
            error=out.error,
            error_type=out.error_type,
        )
        st.commit([rec], [ev])
        self.hold(tid, delay)

    def hold(self, tid: str, delay: float) -> None:
        """Keeps pending task ``tid`` from starting for ``delay`` seconds (a
        retry delay): the scheduler counts it as running until then."""
        st = self._state
        loop = asyncio.get_running_loop()

        def due() -> None:
            st.timers.pop(tid, None)
            try:  # gone (a plan patch) or changed (reloaded from disk): leave it
                rec = st.records.get(tid)
                if rec is not None and rec.status == "pending":
                    st.sched.set(tid, "pending")
            finally:
                self._signals.wake_up()

        st.timers[tid] = loop.call_later(delay, due)

    def in_doubt(self, tid: str, rec: TaskRecord, why: str, error: str) -> None:
        """The task may have taken effect: a person decides; the run pauses."""
        st = self._state
        doubt = rec.model_copy(
            update={"status": "in_doubt", "reason": why, "error": error}
        )
        st.commit(
            [doubt],
            [st.event("in_doubt", tid, attempt=rec.attempts, reason=why)],
        )
        st.sched.set(tid, "in_doubt")
        self._signals.request_pause(why)

    def budget_stop(self, tid: str, hit: BudgetHit) -> None:
        """The task waits (pending) and the run pauses, saying what ran out."""
        st = self._state
        rec = st.records[tid]
        if rec.status == "running":  # stopped inside an attempt (a model call)
            rec = rec.model_copy(update={"status": "pending"})
        self._signals.request_pause(hit.message())
        st.commit([rec], [st.event("budget_exceeded", tid, **hit.event_fields())])
        st.sched.set(tid, "pending")

    def _give_up(
        self, tid: str, rec: TaskRecord, decision: GiveUp, extra: list[EventBase]
    ) -> None:
        st = self._state
        out = decision.outcome
        held = self._replanner.waits_for(decision.remedies, tid)
        if held:
            self._remedies_wait(tid, rec, decision, held, extra)
            return
        if "replan" in decision.remedies and self._replanner.can_replan():
            hit = self._replanner.replan_budget(tid)
            if hit is not None:
                self._replan_over_budget(tid, rec, decision, hit, extra)
                return
            stop = self._replanner.replan_stop()
            if stop is not None:
                out = replace(out, error=f"{out.error} ({stop})")
                decision = replace(
                    decision,
                    outcome=out,
                    remedies=tuple(r for r in decision.remedies if r != "replan"),
                )
        for remedy in decision.remedies:
            if self._replanner.remedy(remedy, tid, rec, out, extra):
                return
        if decision.then == "skip":
            skipped = ended_record(
                rec,
                out,
                st.now(),
                status="skipped",
                reason=f"failed, skipped by its on_failure policy: {out.error}",
            )
            st.commit(
                [skipped],
                [
                    *extra,
                    self._failed_event(tid, rec, out, blocked=0, policy="skip"),
                    st.event("task_skipped", tid, reason="on_failure=skip"),
                ],
            )
            st.sched.set(tid, "skipped")
            return
        seq = self.fail(tid, rec, out, extra)
        if not decision.counted:
            return
        self._memory.lesson(tid, rec.attempts, seq)  # for the next session
        if decision.ask:
            self._signals.request_pause(
                f"task {tid!r} failed and asks a person: {out.error}; call "
                f"s.retry({tid!r}) or s.skip({tid!r})"
            )
        self.failures_in_a_row += 1
        most = self._options.max_consecutive_failures
        if most is not None and self.failures_in_a_row >= most:
            why = (
                f"anomaly: {self.failures_in_a_row} tasks failed in a row (the "
                f"last: {tid!r}); look before going on: run() again to continue"
            )
            st.commit(
                events=[
                    st.event(
                        "anomaly",
                        tid,
                        what="consecutive_failures",
                        detail=why,
                        count=self.failures_in_a_row,
                    )
                ]
            )
            self.failures_in_a_row = 0
            self._signals.request_pause(why)

    def _replan_over_budget(
        self,
        tid: str,
        rec: TaskRecord,
        decision: GiveUp,
        hit: BudgetHit,
        extra: list[EventBase],
    ) -> None:
        """A replan's model calls would cross the budget: the task fails, its
        error saying its replan waits, and the run pauses saying what ran
        out; once the budget is raised, ``s.retry(tid)`` replans if it
        fails again."""
        st = self._state
        then = f"then s.retry({tid!r}): it failed and its replan waits"
        out = replace(
            decision.outcome,
            error=f"{decision.outcome.error} (its replan would cross the budget: "
            f"{hit.message()}; {then})",
        )
        budget = st.event("budget_exceeded", tid, **hit.event_fields())
        self.fail(tid, rec, out, [*extra, budget], policy="waiting")
        self._signals.request_pause(f"{hit.message()}; {then}")

    def _remedies_wait(
        self,
        tid: str,
        rec: TaskRecord,
        decision: GiveUp,
        held: dict[str, str],
        extra: list[EventBase],
    ) -> None:
        """The remedies would remove or replace a task in doubt (or one whose
        abandoned call still runs): not now. A backtrack or a replan could put
        in a new call repeating the effect the person is asked about, and
        would lose the question (invariant 2). The task fails, its error says
        why, and the run pauses with the question first; once it is answered,
        ``s.retry(tid)`` runs the task again, and if it fails again the
        remedies get their chance with nothing held."""
        names = {"repair": "backtracking", "fallback": "fallback", "replan": "replan"}
        what = " or ".join(names[r] for r in decision.remedies)
        error = decision.outcome.error
        which = "; ".join(f"task {h!r} {why}" for h, why in held.items())
        out = replace(
            decision.outcome,
            error=f"{error} ({what} waits while {which}; once that is settled, "
            f"s.retry({tid!r}) tries again)",
        )
        seq = self.fail(tid, rec, out, extra, policy="waiting")
        if decision.counted:
            self._memory.lesson(tid, rec.attempts, seq)
        then = (
            f"s.retry({tid!r}): it failed ({error}) and its {what} waits for "
            "that answer"
        )
        # The question the person is asked (a task in doubt paused the run)
        # stays first and answerable.
        first = self._signals.pause_requested
        if first is not None and all(repr(h) in first for h in held):
            why = f"{first}. Then {then}"
        else:
            why = f"{which}. Then {then}"
            if first is not None:
                why = f"{first}; and {why}"
        self._signals.request_pause(why)

    def fail(
        self,
        tid: str,
        rec: TaskRecord,
        out: Failure,
        extra: list[EventBase],
        **more: Any,
    ) -> int:
        """Fails the task for good and blocks what waits on it; returns the seq
        of its ``task_failed`` event."""
        st = self._state
        rec = ended_record(rec, out, st.now(), next_attempt_at=None)
        blocked = [
            st.records[d].model_copy(
                update={
                    "status": "blocked",
                    "reason": f"blocked by failed task {tid!r}",
                }
            )
            for d in st.sched.descendants(tid)
            if st.records[d].status == "pending"
        ]
        failed = self._failed_event(tid, rec, out, blocked=len(blocked), **more)
        events = [
            *extra,
            failed,
            *(st.event("task_blocked", b.task_id, by=tid) for b in blocked),
        ]
        st.commit([rec, *blocked], events)
        st.sched.set(tid, "failed")
        for b in blocked:
            st.sched.set(b.task_id, "blocked")
        return failed.seq

    def _failed_event(
        self, tid: str, rec: TaskRecord, out: Failure, *, blocked: int, **more: object
    ) -> EventBase:
        return self._state.event(
            "task_failed",
            tid,
            attempt=rec.attempts,
            duration=out.duration,
            **failure_fields(out, blocked=blocked, **more),
        )
