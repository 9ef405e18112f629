"""The supervisor: what happens to the plan itself while it runs.

An HTN planner handed to the session (``planner=``) expands lazy compound tasks
when they become ready, and when a task of a compound's subtree fails for good
it backtracks that compound to its next method. Each change is one commit: the
new plan, ``plan_version`` + 1, the planner's decisions as ``htn_decision``
events and a ``plan_patched`` event naming what was added, removed and rewired.
Finished tasks are never changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from argus_lab.errors import PlanError, StorageFullError
from argus_lab.events import EventBase
from argus_lab.model import TaskRecord
from argus_lab.plan.graph import EXPAND_TOOL, ReferenceError_
from argus_lab.runtime.executor import Outcome
from argus_lab.runtime.llm_task import LlmTasks
from argus_lab.runtime.scheduler import DONE, Scheduler
from argus_lab.store.space import with_context

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


class Supervisor(LlmTasks):
    """Expands lazy HTN compounds and backtracks failed subtrees."""

    _planner_restored = False

    _failures_in_a_row = 0
    _remember_for: object = None
    _remember_auto = False

    async def _execute(self, tid: str) -> None:
        task = self._tasks[tid]
        if task.tool == EXPAND_TOOL:
            self._expand(tid)
            return
        watch = None
        if task.expected_seconds is not None:
            loop = asyncio.get_running_loop()
            limit = task.expected_seconds * self.options.anomaly_factor
            watch = loop.call_later(limit, self._too_slow, tid, limit)
        try:
            await super()._execute(tid)
        except StorageFullError as e:  # e.g. an artifact: name session and task
            label = f"{self.name!r} ({self.id})"
            raise with_context(
                e, session_id=self.id, label=label, task_id=tid
            ) from None
        finally:
            if watch is not None:
                watch.cancel()

    def _too_slow(self, tid: str, limit: float) -> None:
        if self._records[tid].status != "running":
            return
        why = (
            f"anomaly: task {tid!r} has run over {limit:g}s "
            f"({self.options.anomaly_factor:g}x its expected time); no new task "
            "starts until you look: run() again to go on, or pause()"
        )
        self._commit(
            events=[
                self._event(
                    "anomaly",
                    tid,
                    payload={"what": "slow", "detail": why, "limit_s": limit},
                )
            ]
        )
        self._pause_requested = why
        self._wake_up()

    def _succeed(self, tid: str, rec: TaskRecord, out: Outcome, tool: Any) -> None:
        self._failures_in_a_row = 0
        super()._succeed(tid, rec, out, tool)
        if self._remembers():
            done = self._records[tid]
            self._memories.put(
                "result",
                session_id=self.id,
                task_id=tid,
                seq=self._last_seq,
                result=done.result
                if done.result_ref is None
                else f"(a large result, stored as {done.result_ref})",
                title=self._tasks[tid].title or tid,
            )

    def _prepare(self) -> None:
        super()._prepare()
        if self._remembers():
            # Import the memory stack (lancedb, numpy, pyarrow) here, in the
            # thread that makes the session: the memory writer thread importing
            # numpy while user code does too can see a half-initialised module.
            import lancedb  # noqa: F401

            import argus_lab.store.memory  # noqa: F401

    def _remembers(self) -> bool:
        if self.options.remember is not None:
            return self.options.remember
        if self._remember_for is not self._plan:  # once per plan, not per step
            self._remember_for = self._plan
            self._remember_auto = any(
                t.kind == "llm" or (t.tool or "").startswith("memory_")
                for t in self._tasks.values()
            )
        return self._remember_auto

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

    def _untouchable(self, but: set[str] | frozenset[str] = frozenset()) -> set[str]:
        """Tasks a plan patch must keep: finished ones, and ones still running or
        waiting out a retry delay (their attempt is in flight)."""
        busy = {t for t, r in self._records.items() if r.status == "running"}
        return (self._finished() | busy | set(self._timers)) - set(but)

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
        try:
            self._apply_patch(patch, [done], events)
        except PlanError as e:
            self._fail(
                tid, rec, Outcome(ok=False, error=e.message, error_type="PlanError")
            )

    def _fail(
        self,
        tid: str,
        rec: TaskRecord,
        out: Outcome,
        extra: list[EventBase] | None = None,
    ) -> None:
        """A task failed for good: backtrack, degrade, replan, skip, ask or fail."""
        task = self._tasks[tid]
        extra = list(extra or [])
        if out.error_type == "Rejected":  # a person said no: respect it
            super()._fail(tid, rec, out, extra)
            return
        if self._repair(tid, rec, out, extra):
            return
        policy = task.on_failure
        if policy == "fallback" and self._fallback(tid, rec, out, extra):
            return
        if policy == "replan" and self._replan(tid, rec, out, extra):
            return
        if policy == "skip":
            skipped = self._ended(
                rec,
                out,
                status="skipped",
                reason=f"failed, skipped by its on_failure policy: {out.error}",
            )
            self._commit(
                [skipped],
                [
                    *(extra or []),
                    self._failure(tid, rec, out, blocked=0, policy="skip"),
                    self._event(
                        "task_skipped", tid, payload={"reason": "on_failure=skip"}
                    ),
                ],
            )
            self._sched.set(tid, "skipped")
            return
        super()._fail(tid, rec, out, extra)
        if self._remembers():  # a lesson for the next session that tries this
            self._memories.put(
                "lesson",
                session_id=self.id,
                task_id=tid,
                seq=self._failed_seq,
                error=self._records[tid].error or "",
                attempts=rec.attempts,
                tool=task.tool,
                title=task.title or None,
            )
        if policy == "ask":
            self._pause_requested = (
                f"task {tid!r} failed and asks a person: {out.error}; call "
                f"s.retry({tid!r}) or s.skip({tid!r})"
            )
        self._failures_in_a_row += 1
        most = self.options.max_consecutive_failures
        if most is not None and self._failures_in_a_row >= most:
            why = (
                f"anomaly: {self._failures_in_a_row} tasks failed in a row (the "
                f"last: {tid!r}); look before going on: run() again to continue"
            )
            self._commit(
                events=[
                    self._event(
                        "anomaly",
                        tid,
                        payload={
                            "what": "consecutive_failures",
                            "detail": why,
                            "count": self._failures_in_a_row,
                        },
                    )
                ]
            )
            self._failures_in_a_row = 0
            self._pause_requested = why

    def _fallback(
        self, tid: str, rec: TaskRecord, out: Outcome, extra: list[EventBase] | None
    ) -> bool:
        """Degrades to the task's fallback tool: the plan changes, the task reruns."""
        task = self._tasks[tid]
        if not task.fallback or task.fallback == task.tool:
            return False
        new_task = task.model_copy(
            update={"tool": task.fallback, "fallback": None, "on_failure": "fail"}
        )
        new_plan = self._plan.model_copy(
            update={"tasks": [new_task if t.id == tid else t for t in self._plan.tasks]}
        )
        try:
            new_plan = new_plan.validate_against(self._tools)
        except PlanError:
            return False
        version = self._info.plan_version + 1
        again = rec.model_copy(
            update={
                "status": "pending",
                "generation": rec.generation + 1,
                "ended": None,
                "error": out.error,
                "error_type": out.error_type,
                "traceback": out.traceback,
                "approval": None,
                "reason": f"degraded from {task.tool!r} to {task.fallback!r}",
            }
        )
        events = [
            *(extra or []),
            self._failure(tid, rec, out, blocked=0, policy="fallback"),
            self._event(
                "plan_patched",
                tid,
                payload={
                    "version": version,
                    "added": [],
                    "removed": [],
                    "changed": {tid: {"tool": [task.tool, task.fallback]}},
                    "reason": f"fallback after: {out.error}",
                },
            ),
        ]
        meta = self._info.model_copy(update={"plan_version": version})
        self._commit([again], events, meta=meta, plan=new_plan)
        self._plan = new_plan
        self._tasks[tid] = new_task
        self._sched.set(tid, "pending")
        return True

    def _replan(
        self, tid: str, rec: TaskRecord, out: Outcome, extra: list[EventBase] | None
    ) -> bool:
        """Asks the session's planner for a patch replacing what failed."""
        planner = self.options.planner
        if planner is None or not hasattr(planner, "replan"):
            return False
        try:
            patch = planner.replan(
                self._plan,
                tid,
                error=out.error or "",
                finished=self._finished(),
                tools=self._tools,
            )
        except PlanError:
            return False
        if patch is None or tid not in patch.removed:
            return False
        failed = self._ended(rec, out, reason="replanned")
        ev = self._failure(tid, rec, out, blocked=0, policy="replan")
        events = [*(extra or []), ev]
        for r in getattr(planner, "rounds", None) or ():  # the replanning calls
            events.append(
                self._event(
                    "llm_call", tid, duration=r.get("duration"), payload=dict(r)
                )
            )
        try:
            self._apply_patch(patch, [failed], events)
        except PlanError:  # it would touch work in flight: fail as usual
            return False
        return True

    def _repair(
        self, tid: str, rec: TaskRecord, out: Outcome, extra: list[EventBase] | None
    ) -> bool:
        """HTN backtracking: the nearest compound with a method left takes over."""
        planner = self.options.planner
        task = self._tasks[tid]
        if planner is None or not hasattr(planner, "repair") or not task.parent:
            return False
        try:
            patch, events = self._htn_call(
                lambda: planner.repair(
                    self._plan,
                    tid,
                    reason=out.error or "",
                    dep_results=_Results(self),
                    protected=self._untouchable(but={tid}),
                    reserved=self._ever_ids(),
                )
            )
        except PlanError:
            patch, events = None, []
        if patch is None or tid not in patch.removed:
            if extra is not None:  # the decisions belong to the trajectory anyway
                extra.extend(events)
            return False
        failed = self._ended(
            rec, out, reason=f"backtracked: {patch.compound} now uses {patch.method}"
        )
        ev = self._failure(tid, rec, out, blocked=0, backtracked=patch.compound)
        try:
            self._apply_patch(patch, [failed], [*(extra or []), ev, *events])
        except PlanError:  # it would touch work in flight: fail as usual
            return False
        return True

    def _apply_patch(
        self, patch: Any, records: list[TaskRecord], events: list[EventBase]
    ) -> None:
        """Commits a plan patch with the records and events that caused it."""
        from argus_lab.plan.htn import apply_patch

        new_plan = apply_patch(
            self._plan,
            patch,
            protected=self._untouchable(but={r.task_id for r in records}),
            tools=self._tools,
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
        self._commit(changed, [*events, ev], meta=meta, plan=new_plan, notify=False)
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
        # Observers (the widget) see the plan_patched event with the new plan
        # already in place.
        self._notify([*events, ev])
