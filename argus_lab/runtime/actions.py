"""A person's decisions: retry, skip, approve, reject, and rerunning stale work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from argus_lab.errors import SessionStateError
from argus_lab.model import Budget, TaskRecord
from argus_lab.plan.graph import ReferenceError_, resolve_args
from argus_lab.runtime.engine import Engine
from argus_lab.runtime.executor import Outcome
from argus_lab.runtime.options import RunResult, input_hash
from argus_lab.runtime.scheduler import DONE

if TYPE_CHECKING:
    pass

__all__ = ["Actions"]


class Actions(Engine):
    """What a person decides about tasks, applied on the loop thread."""

    def stale(self) -> list[str]:
        """Succeeded tasks whose tool code or inputs changed, and their dependents.

        A task is stale when its tool's code hash differs from the one recorded
        when it succeeded, when its arguments resolve differently now (an
        upstream result changed), or when a dependency is stale or not done.
        """
        stale: set[str] = set()
        for tid in self._sched.topo:
            rec = self._records[tid]
            if rec.status != "succeeded":
                continue
            task = self._tasks[tid]
            if any(
                d in stale or self._records[d].status not in DONE for d in task.deps
            ):
                stale.add(tid)
                continue
            tool = self._tools.get(task.tool or "")
            if tool is None:
                continue  # unknown now: nothing to compare against
            if rec.tool_hash is not None and rec.tool_hash != tool.code_hash:
                stale.add(tid)
                continue
            try:
                args = resolve_args(task.args, self._result_of)
            except ReferenceError_:
                stale.add(tid)
                continue
            if (
                rec.input_hash is not None
                and input_hash(tool.name, args) != rec.input_hash
            ):
                stale.add(tid)
        return [t for t in self._tasks if t in stale]

    def _unblock_downstream(self, tid: str) -> list[TaskRecord]:
        """Blocked descendants whose dependencies no longer fail become pending."""
        status = {t: r.status for t, r in self._records.items()}
        changed: list[TaskRecord] = []
        order = self._sched.descendants(tid)
        # Repeat until stable: descendants() is breadth-first, not topological.
        progress = True
        while progress:
            progress = False
            for d in order:
                if status[d] != "blocked":
                    continue
                if not any(
                    status[p] in ("failed", "blocked", "in_doubt")
                    for p in self._tasks[d].deps
                ):
                    status[d] = "pending"
                    changed.append(
                        self._records[d].model_copy(
                            update={"status": "pending", "reason": None}
                        )
                    )
                    progress = True
        return changed

    async def _retry(self, tid: str) -> None:
        rec = self._records[tid]
        if rec.status not in ("failed", "in_doubt", "blocked", "skipped"):
            raise SessionStateError(
                f"task {tid!r} of session {self.name!r} is {rec.status}; only failed, "
                "in-doubt, blocked or skipped tasks can be retried",
                session_id=self.id,
                task_id=tid,
            )
        # A failed attempt gets a fresh idempotency key; an in-doubt one keeps
        # its key so a remote that deduplicates can still recognise it.
        gen = rec.generation + (0 if rec.status == "in_doubt" else 1)
        new = rec.model_copy(
            update={
                "status": "pending",
                "generation": gen,
                "reason": None,
                "next_attempt_at": None,
                "approval": None if gen != rec.generation else rec.approval,
            }
        )
        self._records[tid] = new
        try:
            changed = [new, *self._unblock_downstream(tid)]
        finally:
            self._records[tid] = rec
        self._commit(
            changed,
            [
                self._event(
                    "task_retried",
                    tid,
                    payload={"from": rec.status, "unblocked": len(changed) - 1},
                )
            ],
        )
        for r in changed:
            self._sched.set(r.task_id, "pending")
        self._wake_up()

    def _waiting_for_approval(self, tid: str) -> TaskRecord:
        rec = self._records[tid]
        if rec.status != "awaiting_approval":
            raise SessionStateError(
                f"task {tid!r} of session {self.name!r} is {rec.status}, not waiting "
                "for approval",
                session_id=self.id,
                task_id=tid,
            )
        return rec

    async def _approve(self, tid: str, args: dict[str, Any] | None, by: str) -> None:
        rec = self._waiting_for_approval(tid)
        tool = self._tools.get(self._tasks[tid].tool or "")
        if args is not None and tool is not None:
            tool.validate(args)  # fail now, naming the field, not at run time
        asked = rec.approval or {}
        new = rec.model_copy(
            update={
                "status": "pending",
                "approval": {
                    **asked,
                    "state": "approved",
                    "by": by,
                    "at": self._now(),
                    "edited_args": args,
                },
            }
        )
        ev = self._event(
            "approval_granted",
            tid,
            payload={"by": by, "args": asked.get("args"), "edited_args": args},
        )
        self._commit([new], [ev])
        self._sched.set(tid, "pending")
        self._wake_up()

    async def _reject(self, tid: str, reason: str, by: str) -> None:
        rec = self._waiting_for_approval(tid)
        asked = rec.approval or {}
        rec = rec.model_copy(
            update={
                "approval": {
                    **asked,
                    "state": "rejected",
                    "by": by,
                    "at": self._now(),
                    "reason": reason,
                }
            }
        )
        self._fail(
            tid,
            rec,
            Outcome(
                ok=False, error_type="Rejected", error=f"rejected by {by}: {reason}"
            ),
            extra=[
                self._event(
                    "approval_rejected",
                    tid,
                    payload={"by": by, "reason": reason, "args": asked.get("args")},
                )
            ],
        )
        self._wake_up()

    async def _rerun_stale(self) -> RunResult:
        stale = self.stale()
        if stale:
            changed = [
                self._records[t].model_copy(
                    update={
                        "status": "pending",
                        "generation": self._records[t].generation + 1,
                        "approval": None,
                        "reason": None,
                    }
                )
                for t in stale
            ]
            events = [
                self._event(
                    "task_retried", t, payload={"from": "succeeded", "why": "stale"}
                )
                for t in stale
            ]
            self._commit(changed, events)
            for t in stale:
                self._sched.set(t, "pending")
        return await self._run()

    async def _skip(self, tid: str, reason: str) -> None:
        rec = self._records[tid]
        if rec.status in ("succeeded", "skipped", "running"):
            raise SessionStateError(
                f"task {tid!r} of session {self.name!r} is {rec.status} and cannot "
                "be skipped",
                session_id=self.id,
                task_id=tid,
            )
        new = rec.model_copy(
            update={"status": "skipped", "reason": reason, "ended": self._now()}
        )
        self._records[tid] = new
        try:
            changed = [new, *self._unblock_downstream(tid)]
        finally:
            self._records[tid] = rec
        timer = self._timers.pop(tid, None)
        if timer is not None:
            timer.cancel()
        self._commit(
            changed,
            [
                self._event(
                    "task_skipped", tid, payload={"reason": reason, "from": rec.status}
                )
            ],
        )
        for r in changed:
            self._sched.set(r.task_id, r.status)
        self._wake_up()

    async def _set_budget(self, scope: str, budget: Budget) -> None:
        await self._set_meta(budgets={**self._info.budgets, scope: budget})

    async def _set_meta(self, **fields: Any) -> None:
        self._commit(meta=self._info.model_copy(update=fields))
