"""The supervisor: what happens to the plan itself while it runs.

An HTN planner handed to the session (``planner=``) expands lazy compound tasks
when they become ready. When a task fails for good, the settler (settle.py)
tries the remedies the failure policy (policy.py) named, each implemented
here: HTN repair (backtrack the nearest compound to its next method), fallback
(run the task again with its fallback tool) and replan (a replanning planner's
patch). Each change is one commit: the new plan, ``plan_version`` + 1, the
planner's decisions as ``htn_decision`` events and a ``plan_patched`` event
naming what was added, removed and rewired. Finished tasks are never changed,
nor are tasks in flight or in doubt (invariant 2). While a task is in doubt, or
has a call abandoned while it ran still running (``Supervisor.held``), no
backtrack or replan happens (``Supervisor.waits_for``): it could remove that
task and the question asked about it, and its new tasks could repeat the
effect in question. The failed task fails, saying so, and the run pauses with
the question; once it is answered, a retry of the failed task gives the
remedies their chance again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from argus_lab.errors import PlanError, UnresolvedReferenceError
from argus_lab.events import EventBase, HtnDecision
from argus_lab.llm.recording import COUNTED, Paid, recording
from argus_lab.model import Task, TaskRecord
from argus_lab.plan.patch import PlanPatch
from argus_lab.plan.static import masked_plan, refuse_literal_secrets
from argus_lab.runtime import abandoned
from argus_lab.runtime.budget import BudgetChecker, BudgetHit
from argus_lab.runtime.options import HTNPlanning, Replanning
from argus_lab.runtime.outcome import (
    Failed,
    Failure,
    ended_record,
    failure_fields,
)
from argus_lab.runtime.policy import Remedy
from argus_lab.runtime.scheduler import DONE, Scheduler
from argus_lab.runtime.state import SessionState

__all__ = ["Supervisor"]

log = logging.getLogger("argus_lab")

R = TypeVar("R")


class _Results(Mapping[str, Any]):
    """Finished tasks' results, read on demand (what planners may look at)."""

    def __init__(self, state: SessionState) -> None:
        self._state = state

    def __getitem__(self, task_id: str) -> Any:
        if task_id not in self._state.records:
            raise KeyError(task_id)
        try:
            return self._state.result_of(task_id)
        except UnresolvedReferenceError:
            raise KeyError(task_id) from None

    def __iter__(self) -> Iterator[str]:
        status = self._state.records.status
        return (t for t, st in status.items() if st == "succeeded")

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Supervisor:
    """Expands lazy HTN compounds and offers remedies for failed tasks.

    Args:
        state: The session state (the only writer).
        planner: ``SessionOptions.planner``: an HTN planner (expand, repair),
            a replanning one (replan), or None.
    """

    def __init__(
        self, state: SessionState, planner: HTNPlanning | Replanning | None
    ) -> None:
        self._state = state
        self._htn = planner if isinstance(planner, HTNPlanning) else None
        self._replanner = planner if isinstance(planner, Replanning) else None
        self._restored = False
        self._replan_cost = (0.0, 0.0)
        """The dearest replan so far in this process (USD, tokens): what the
        next one is checked against the budget with (0 before the first)."""

    def can_repair(self, task: Task) -> bool:
        """Whether a failure of ``task`` may be backtracked (HTN repair)."""
        return self._htn is not None and bool(task.parent)

    def can_replan(self) -> bool:
        """Whether the planner can replace a failed task."""
        return self._replanner is not None

    def remedy(
        self,
        which: Remedy,
        tid: str,
        rec: TaskRecord,
        out: Failure,
        extra: list[EventBase],
    ) -> bool:
        """Tries one remedy for a task that failed for good; True if it applied
        (then it committed the failure with the plan change)."""
        if which == "repair":
            return self._repair(tid, rec, out, extra)
        if which == "fallback":
            return self._fallback(tid, rec, out, extra)
        return self._replan(tid, rec, out, extra)

    def _failure(
        self, tid: str, rec: TaskRecord, out: Failure, **more: Any
    ) -> EventBase:
        return self._state.event(
            "task_failed",
            tid,
            attempt=rec.attempts,
            duration=out.duration,
            **failure_fields(out, blocked=0, **more),
        )

    def _htn_call(
        self, planner: HTNPlanning, fn: Callable[[], R]
    ) -> tuple[R, list[EventBase]]:
        """Calls the planner, turning the decisions it reports into events."""
        self._restore(planner)
        seen: list[dict[str, Any]] = []
        paid: Paid = []
        before = planner.on_decision
        planner.on_decision = seen.append
        try:
            with recording(self._state, paid):  # a decomposer's answers kept
                out = fn()
        finally:
            planner.on_decision = before
            # A decomposer's model calls are paid like an LLM task's: counted
            # (once, across a crash), each an llm_call event.
            self._count_paid(
                paid,
                [
                    self._state.event("llm_call", **r.event_payload("decompose"))
                    for _, r in paid
                ],
            )
        return out, [
            self._state.event("htn_decision", **HtnDecision.fields_of(d)) for d in seen
        ]

    def _restore(self, planner: HTNPlanning) -> None:
        # After a restart the planner has forgotten which methods it tried; the
        # decisions are in the trajectory.
        if self._restored:
            return
        self._restored = True
        past = [
            e.as_planner_decision()
            for e in self._state.read_events()
            if isinstance(e, HtnDecision)
        ]
        if past:
            planner.restore(past)

    def _finished(self) -> set[str]:
        return {t for t, st in self._state.records.status.items() if st in DONE}

    def _untouchable(self, but: set[str] | frozenset[str] = frozenset()) -> set[str]:
        """Tasks a plan patch must keep: finished ones, ones still running or
        waiting out a retry delay (their attempt is in flight), and ones in
        doubt or whose abandoned call still runs (``held``)."""
        st = self._state
        busy = {t for t, s in st.records.status.items() if s == "running"}
        return (self._finished() | busy | set(st.timers) | set(self.held())) - set(but)

    def held(self) -> dict[str, str]:
        """Tasks no plan patch may remove or replace now -> why, for a person.

        A task in doubt waits for a person to say whether its effect happened
        (``s.retry`` or ``s.skip`` answers); a call abandoned while it ran
        (past its timeout) may still take effect while it runs in this
        process (invariant 2). Removing such a task would lose the question,
        and new tasks in its place could repeat the effect."""
        st = self._state
        out: dict[str, str] = {}
        for tid, status in st.records.status.items():
            # Only an unsafe call is kept running (abandoned.py), and its
            # task is in doubt then (or failed, by an older policy); a
            # finished one is kept anyway, and answered.
            if status not in ("in_doubt", "failed"):
                continue
            rec = st.records[tid]
            # As s.retry asks: in this session, the one its key came from,
            # or another fork under that key; in any process of this host.
            call = abandoned.still_running(
                st.path.parent, tid, st.info.id, rec.key_of, st.info.parent
            )
            if call is not None:
                runs = f"({call.what()}, which {call.why}) still runs"
                out[tid] = (
                    f"is in doubt and its call {runs}: wait for it to end, check, "
                    f"then s.retry({tid!r}) or s.skip({tid!r})"
                    if status == "in_doubt"
                    else f"has a call that {runs}"
                )
            elif status == "in_doubt":
                out[tid] = (
                    f"is in doubt: check, then s.retry({tid!r}) or s.skip({tid!r})"
                )
        return out

    def waits_for(self, remedies: Iterable[str], tid: str) -> dict[str, str]:
        """Held tasks (``held``) that make the remedies for failed task
        ``tid`` wait -> why they are held; empty: the remedies may go ahead.

        A backtrack or a replan waits while any task is held: it could remove
        the task (and the question asked about it), and its new tasks, a
        method's or a model's, could repeat the effect in question (a second
        charge) without anyone knowing whether the first took place. The run
        is paused for that question anyway. A fallback only replaces ``tid``
        itself, so it waits only while ``tid``'s own abandoned call runs."""
        remedies = list(remedies)
        held = self.held() if remedies else {}
        if not held or any(r in ("repair", "replan") for r in remedies):
            return held
        return {h: why for h, why in held.items() if h == tid}

    def replan_budget(self, tid: str) -> BudgetHit | None:
        """The budget limit one more replan for ``tid`` would cross (priced as
        the dearest so far), or None. The planner's model calls are paid for
        like an LLM task's: checked before, counted after."""
        cost, tokens = self._replan_cost
        return BudgetChecker(self._state).check(
            tid, {"cost_usd": cost, "tokens": tokens}
        )

    def replan_stop(self) -> str | None:
        """Why no more replanning is allowed (the planner's ``max_replans``
        reached in this session), or None. Without it a planner that keeps
        proposing tasks that fail would pay for replans without end."""
        most = getattr(self._replanner, "max_replans", None)
        if most is None:
            return None
        done = sum(1 for r in self._state.retired.values() if r.reason == "replanned")
        if done < most:
            return None
        return (
            f"not replanned: this session was replanned {done} times, its "
            f"planner's max_replans; raise it (LLMPlanner(..., max_replans=N)) "
            "and s.retry the task to replan again"
        )

    def _count_paid(self, paid: Paid, events: list[EventBase]) -> tuple[float, int]:
        """Counts the planner's model calls ``paid`` into the session's usage
        and commits it with ``events`` (their llm_call events), then marks
        each reply counted: a crash before the commit leaves it uncounted,
        and it is counted when the resumed planner reads it again
        (``llm/recording.py``); one after, counted once. Returns what they
        cost (USD, tokens), for the record of the task they were made for."""
        st = self._state
        # A reply an outer replay served (ReplayModel: cached) cost nothing.
        cost = sum(float(r.cost_usd or 0.0) for _, r in paid if not r.cached)
        tokens = sum(r.usage.total_tokens for _, r in paid if not r.cached)
        if not paid and not events:
            return 0.0, 0
        st.usage["cost_usd"] = st.usage.get("cost_usd", 0.0) + cost
        st.usage["tokens"] = st.usage.get("tokens", 0.0) + tokens
        st.commit([], events)
        for key, _ in paid:
            st.put_replay(COUNTED + key, {})
        return cost, tokens

    def _planner_failed(self, what: str, tid: str, e: Exception) -> None:
        """The planner raised (not a PlanError): the failure of ``tid`` is
        committed as it is, without a patch; the reason is logged."""
        log.warning(
            "session %s: %s for task %r failed (%s: %s); the task fails as it "
            "would without a planner, s.retry(%r) tries again",
            self._state.info.id,
            what,
            tid,
            type(e).__name__,
            self._state.redactor.text(str(e)),
            tid,
        )

    def _ever_ids(self) -> set[str]:
        return set(self._state.records) | set(self._state.retired)

    def expand(self, tid: str) -> Failure | None:
        """Expands the lazy compound ``tid`` into its subtasks (one commit).

        Returns the failure to settle when it cannot be expanded, else None.
        """
        st = self._state
        rec = st.records[tid]
        st.sched.set(tid, "running")
        planner = self._htn
        if planner is None:
            return Failed(
                "plan",
                f"task {tid!r} is a lazy HTN compound; open the session with "
                "planner=HTNPlanner(domain) to expand it, then retry it",
                "PlanError",
            )
        try:
            patch, events = self._htn_call(
                planner,
                lambda: planner.expand(
                    st.plan, tid, _Results(st), reserved=self._ever_ids()
                ),
            )
        except PlanError as e:
            return Failed("plan", e.message, "PlanError")
        except Exception as e:  # the decomposer's model failed (a 529, a bug)
            return Failed(
                "plan",
                f"expanding {tid!r} failed: {type(e).__name__}: "
                f"{st.redactor.text(str(e))}; s.retry({tid!r}) tries again",
                type(e).__name__,
            )
        done = rec.model_copy(
            update={
                "status": "succeeded",
                "started": st.now(),
                "ended": st.now(),
                "result": {"expanded_into": [t.id for t in patch.added]},
            }
        )
        try:
            self._apply_patch(patch, [done], events)
        except PlanError as e:
            return Failed("plan", e.message, "PlanError")
        return None

    def _fallback(
        self, tid: str, rec: TaskRecord, out: Failure, extra: list[EventBase]
    ) -> bool:
        """Degrades to the task's fallback tool: the plan changes, the task reruns."""
        st = self._state
        task = st.tasks[tid]
        if not task.fallback or task.fallback == task.tool:
            return False
        new_task = task.model_copy(
            update={"tool": task.fallback, "fallback": None, "on_failure": "fail"}
        )
        new_plan = st.plan.model_copy(
            update={"tasks": [new_task if t.id == tid else t for t in st.plan.tasks]}
        )
        try:
            new_plan = new_plan.validate_against(st.tools)
        except PlanError:
            return False
        version = st.info.plan_version + 1
        again = rec.model_copy(
            update={
                "status": "pending",
                **rec.next_generation(),
                "ended": None,
                "error": out.error,
                "error_type": out.error_type,
                "traceback": out.traceback,
                "reason": f"degraded from {task.tool!r} to {task.fallback!r}",
            }
        )
        events = [
            *extra,
            self._failure(tid, rec, out, policy="fallback"),
            st.event(
                "plan_patched",
                tid,
                version=version,
                added=[],
                removed=[],
                changed={tid: {"tool": [task.tool, task.fallback]}},
                reason=f"fallback after: {out.error}",
            ),
        ]
        meta = st.info.model_copy(update={"plan_version": version})
        st.commit([again], events, meta=meta, plan=new_plan)
        st.swap_task(new_plan, new_task)
        st.sched.set(tid, "pending")
        return True

    def _replan(
        self, tid: str, rec: TaskRecord, out: Failure, extra: list[EventBase]
    ) -> bool:
        """Asks the session's planner for a patch replacing what failed."""
        st = self._state
        planner = self._replanner
        if planner is None:
            return False
        planner.rounds = []  # this replan's calls only, even if it raises early
        paid: Paid = []
        try:
            with recording(st, paid):  # its answers kept (llm/recording.py)
                patch = planner.replan(
                    st.plan,
                    tid,
                    # Masked: the planner's prompt goes to a model (and its
                    # recording), and a model may copy what it read into a task.
                    error=st.redactor.text(out.error or ""),
                    finished=self._finished(),
                    tools=st.tools,
                    # Ids used before, retired ones too: a task under an old
                    # id would take its idempotency keys (find it by the id).
                    reserved=self._ever_ids(),
                )
        except PlanError:
            patch = None
        except Exception as e:  # its model failed (a 529, a bug): no patch,
            # and the task's own failure is committed as it is
            self._planner_failed("replanning", tid, e)
            patch = None
        # Paid whether or not a patch came of it: counted and committed now,
        # with its calls, and on the task's record.
        calls = [st.event("llm_call", tid, **r) for r in planner.rounds or ()]
        cost, tokens = self._count_paid(paid, calls)
        self._replan_cost = (
            max(self._replan_cost[0], cost),
            max(self._replan_cost[1], float(tokens)),
        )
        rec = rec.model_copy(
            update={"cost_usd": rec.cost_usd + cost, "tokens": rec.tokens + tokens}
        )
        if patch is None or tid not in patch.removed:
            return False
        failed = ended_record(rec, out, st.now(), reason="replanned")
        events = [*extra, self._failure(tid, rec, out, policy="replan")]
        try:
            self._apply_patch(patch, [failed], events)
        except PlanError:  # it would touch work in flight: fail as usual
            return False
        return True

    def _repair(
        self, tid: str, rec: TaskRecord, out: Failure, extra: list[EventBase]
    ) -> bool:
        """HTN backtracking: the nearest compound with a method left takes over."""
        st = self._state
        planner = self._htn
        if planner is None or not st.tasks[tid].parent:
            return False
        patch: PlanPatch | None
        try:
            patch, events = self._htn_call(
                planner,
                lambda: planner.repair(
                    st.plan,
                    tid,
                    reason=st.redactor.text(out.error or ""),  # as for replan
                    dep_results=_Results(st),
                    protected=self._untouchable(but={tid}),
                    reserved=self._ever_ids(),
                ),
            )
        except PlanError:
            patch, events = None, []
        except Exception as e:  # a decomposer's model failed: as for a replan
            self._planner_failed("backtracking", tid, e)
            patch, events = None, []
        if patch is None or tid not in patch.removed:
            extra.extend(events)  # the decisions belong to the trajectory anyway
            return False
        failed = ended_record(
            rec,
            out,
            st.now(),
            reason=f"backtracked: {patch.compound} now uses {patch.method}",
        )
        ev = self._failure(tid, rec, out, backtracked=patch.compound)
        try:
            self._apply_patch(patch, [failed], [*extra, ev, *events])
        except PlanError:  # it would touch work in flight: fail as usual
            return False
        return True

    def _apply_patch(
        self, patch: PlanPatch, records: list[TaskRecord], events: list[EventBase]
    ) -> None:
        """Commits a plan patch with the records and events that caused it."""
        from argus_lab.plan.htn import apply_patch

        st = self._state
        new_plan = apply_patch(
            st.plan,
            patch,
            protected=self._untouchable(but={r.task_id for r in records}),
            tools=st.tools,
        )
        # A patch is written by a planner (an LLM's tool call, an HTN method
        # filled from results): a literal secret in a new task's id or args
        # would be stored with the plan, so the patch is refused like one
        # that does not validate (the task fails as usual).
        try:
            refuse_literal_secrets(
                [t for t in new_plan.tasks if st.tasks.get(t.id) != t], st.redactor
            )
        except PlanError as e:
            log.warning("argus: a plan patch was refused: %s", e.message)
            raise
        # Held as it is stored: a new task's title or description quoting a
        # secret showed in tasks_df and the widget (see masked_plan).
        new_plan = masked_plan(new_plan, st.redactor)
        version = st.info.plan_version + 1
        deps = {t.id: t.deps for t in new_plan.tasks}
        order = Scheduler(deps, dict.fromkeys(deps, "pending")).topo
        status = dict(st.records.status)
        status.update({r.task_id: r.status for r in records})
        # A new task under an id that had a record (one a patch retired)
        # starts at the generation after it, so it never runs under the old
        # task's idempotency keys; its record is written with the patch, or a
        # reopen would find the old one under that id.
        before = {
            **st.retired,
            **{t: st.records[t] for t in patch.removed if t in st.records},
            **{r.task_id: r for r in records},
        }
        fresh = {
            t.id: st.fresh_record(t.id, before[t.id])
            for t in patch.added
            if t.id in before
        }
        changed = [r for r in records if r.task_id not in fresh]
        changed.extend(fresh.values())
        for t in order:  # what the removed subtree blocked may run again
            if status.get(t) == "blocked" and not any(
                status.get(d) in ("failed", "blocked", "in_doubt") for d in deps[t]
            ):
                status[t] = "pending"
                changed.append(
                    st.records[t].model_copy(
                        update={"status": "pending", "reason": None}
                    )
                )
        meta = st.info.model_copy(
            update={"plan_version": version, "n_tasks": len(new_plan.tasks)}
        )
        ev = st.event("plan_patched", version=version, **patch.summary())
        st.commit(changed, [*events, ev], meta=meta, plan=new_plan, notify=False)
        st.adopt_plan(new_plan, patch.removed, fresh)
        # Observers (the widget) see the plan_patched event with the new plan
        # already in place.
        st.notify([*events, ev])
