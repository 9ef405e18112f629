"""The supervisor: what happens to the plan itself while it runs.

An HTN planner handed to the session (``planner=``) expands lazy compound tasks
when they become ready, and when a task of a compound's subtree fails for good
it backtracks that compound to its next method. Each change is one commit: the
new plan, ``plan_version`` + 1, the planner's decisions as ``htn_decision``
events and a ``plan_patched`` event naming what was added, removed and rewired.
Finished tasks are never changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from argus_lab.errors import PlanError
from argus_lab.events import EventBase
from argus_lab.model import TaskRecord
from argus_lab.plan.graph import EXPAND_TOOL, ReferenceError_
from argus_lab.runtime.attempts import Attempts
from argus_lab.runtime.executor import Outcome
from argus_lab.runtime.scheduler import DONE, Scheduler

__all__ = ["Supervisor"]

R = TypeVar("R")


class _Results(Mapping[str, Any]):
    """Finished tasks' results, read on demand (what planners may look at)."""

    def __init__(self, sup: Supervisor) -> None:
        self._sup = sup

    def __getitem__(self, task_id: str) -> Any:
        if task_id not in self._sup._records:
            raise KeyError(task_id)
        try:
            return self._sup._result_of(task_id)
        except ReferenceError_:
            raise KeyError(task_id) from None

    def __iter__(self) -> Iterator[str]:
        return (t for t, r in self._sup._records.items() if r.status == "succeeded")

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Supervisor(Attempts):
    """Expands lazy HTN compounds and backtracks failed subtrees."""

    _planner_restored = False

    async def _execute(self, tid: str) -> None:
        if self._tasks[tid].tool == EXPAND_TOOL:
            self._expand(tid)
            return
        await super()._execute(tid)

    def _htn_call(self, fn: Callable[[], R]) -> tuple[R, list[EventBase]]:
        """Calls the planner, turning the decisions it reports into events."""
        planner = self.options.planner
        self._restore_planner()
        seen: list[dict[str, Any]] = []
        before = getattr(planner, "on_decision", None)
        planner.on_decision = seen.append
        try:
            out = fn()
        finally:
            planner.on_decision = before
        return out, [self._event("htn_decision", payload=dict(d)) for d in seen]

    def _restore_planner(self) -> None:
        # After a restart the planner has forgotten which methods it tried; the
        # decisions are in the trajectory.
        if self._planner_restored or not hasattr(self.options.planner, "restore"):
            return
        self._planner_restored = True
        past = [
            e.payload for e in self._store.read_events() if e.kind == "htn_decision"
        ]
        if past:
            self.options.planner.restore(past)

    def _finished(self) -> set[str]:
        return {t for t, r in self._records.items() if r.status in DONE}

    def _ever_ids(self) -> set[str]:
        return set(self._records) | set(self._retired)

    def _expand(self, tid: str) -> None:
        rec = self._records[tid]
        self._sched.set(tid, "running")
        planner = self.options.planner
        if planner is None or not hasattr(planner, "expand"):
            self._fail(
                tid,
                rec,
                Outcome(
                    ok=False,
                    error_type="PlanError",
                    error=(
                        f"task {tid!r} is a lazy HTN compound; open the session with "
                        "planner=HTNPlanner(domain) to expand it, then retry it"
                    ),
                ),
            )
            return
        try:
            patch, events = self._htn_call(
                lambda: planner.expand(
                    self._plan, tid, _Results(self), reserved=self._ever_ids()
                )
            )
        except PlanError as e:
            self._fail(
                tid, rec, Outcome(ok=False, error=e.message, error_type="PlanError")
            )
            return
        done = rec.model_copy(
            update={
                "status": "succeeded",
                "started": self._now(),
                "ended": self._now(),
                "result": {"expanded_into": [t.id for t in patch.added]},
            }
        )
        self._apply_patch(patch, [done], events)

    def _fail(
        self,
        tid: str,
        rec: TaskRecord,
        out: Outcome,
        extra: list[EventBase] | None = None,
    ) -> None:
        planner = self.options.planner
        task = self._tasks[tid]
        if (
            planner is None
            or not hasattr(planner, "repair")
            or not task.parent
            or out.error_type == "Rejected"
        ):  # a person said no: respect it
            super()._fail(tid, rec, out, extra)
            return
        try:
            patch, events = self._htn_call(
                lambda: planner.repair(
                    self._plan,
                    tid,
                    reason=out.error or "",
                    dep_results=_Results(self),
                    protected=self._finished(),
                    reserved=self._ever_ids(),
                )
            )
        except PlanError:
            patch, events = None, []
        if patch is None or tid not in patch.removed:
            super()._fail(tid, rec, out, (extra or []) + events)
            return
        failed = rec.model_copy(
            update={
                "status": "failed",
                "ended": self._now(),
                "error": out.error,
                "error_type": out.error_type,
                "traceback": out.traceback,
                "reason": f"backtracked: {patch.compound} now uses {patch.method}",
            }
        )
        ev = self._event(
            "task_failed",
            tid,
            attempt=rec.attempts,
            duration=out.duration,
            payload={
                "error": out.error,
                "error_type": out.error_type,
                "blocked": 0,
                "backtracked": patch.compound,
            },
        )
        self._apply_patch(patch, [failed], [*(extra or []), ev, *events])

    def _apply_patch(
        self, patch: Any, records: list[TaskRecord], events: list[EventBase]
    ) -> None:
        """Commits a plan patch with the records and events that caused it."""
        from argus_lab.plan.htn import apply_patch

        new_plan = apply_patch(
            self._plan, patch, protected=self._finished(), tools=self._tools
        )
        version = self._info.plan_version + 1
        deps = {t.id: t.deps for t in new_plan.tasks}
        order = Scheduler(deps, dict.fromkeys(deps, "pending")).topo
        status = {t: r.status for t, r in self._records.items()}
        status.update({r.task_id: r.status for r in records})
        changed = list(records)
        for t in order:  # what the removed subtree blocked may run again
            if status.get(t) == "blocked" and not any(
                status.get(d) in ("failed", "blocked", "in_doubt") for d in deps[t]
            ):
                status[t] = "pending"
                changed.append(
                    self._records[t].model_copy(
                        update={"status": "pending", "reason": None}
                    )
                )
        meta = self._info.model_copy(
            update={"plan_version": version, "n_tasks": len(new_plan.tasks)}
        )
        ev = self._event(
            "plan_patched", payload={**patch.summary(), "version": version}
        )
        self._commit(changed, [*events, ev], meta=meta, plan=new_plan)
        for tid in patch.removed:
            if tid in self._records:
                self._retired[tid] = self._records.pop(tid)
        self._plan = new_plan
        self._tasks = {t.id: t for t in new_plan.tasks}
        for t in self._tasks:
            self._records.setdefault(t, TaskRecord(task_id=t))
        self._sched = Scheduler(deps, {t: r.status for t, r in self._records.items()})
        for t in self._timers:  # waiting out a retry delay: not ready yet
            if t in self._tasks:
                self._sched.set(t, "running")
