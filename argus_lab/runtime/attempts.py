"""One attempt of one task, end to end: approval gate, intent, call, outcome."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import random
from typing import TYPE_CHECKING, Any

from argus_lab.events import EventBase
from argus_lab.model import Task, TaskRecord
from argus_lab.plan.graph import ReferenceError_, iter_references, resolve_args
from argus_lab.runtime.budget import BudgetHit
from argus_lab.runtime.budget import check as check_budget
from argus_lab.runtime.core import _Core
from argus_lab.runtime.executor import Outcome, run_attempt
from argus_lab.runtime.options import idempotency_key, input_hash, tool_replay_key
from argus_lab.tools.approval import ApprovalPolicy, decide
from argus_lab.tools.registry import Tool, ToolContext

if TYPE_CHECKING:
    pass

__all__ = ["Attempts"]


class Attempts(_Core):
    """Runs one attempt of a task and commits what came of it."""

    def _ctx(self, task_id: str, attempt: int, key: str) -> ToolContext:
        workdir = self.workspace.path / "files" / self.id
        if not self._workdir_made:
            workdir.mkdir(parents=True, exist_ok=True)
            self._workdir_made = True
        return ToolContext(
            session_id=self.id,
            task_id=task_id,
            attempt=attempt,
            idempotency_key=key,
            workspace=self.workspace.path,
            workdir=workdir,
            redactor=self._redactor,
        )

    def _thread_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.options.concurrency, thread_name_prefix="argus-tool"
            )
        return self._pool

    async def _execute(self, tid: str) -> None:
        task = self._tasks[tid]
        rec = self._records[tid]
        self._sched.set(tid, "running")
        tool = self._tool_for(task)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            self._fail(
                tid,
                rec,
                Outcome(
                    ok=False,
                    error_type="ToolError",
                    error=(
                        f"tool {task.tool!r} of task {tid!r} is not registered in this "
                        f"session (tools: {known}); reopen with "
                        f"ws.open({self.name!r}, tools=[...]) and retry the task"
                    ),
                ),
            )
            return
        for _, ref in iter_references(task.args):  # ${env.NAME}: never stored
            if ref is not None and ref.is_env and ref.path[0] in os.environ:
                self._redactor.add(os.environ[ref.path[0]])
        try:
            args = resolve_args(task.args, self._result_of)
        except ReferenceError_ as e:
            self._fail(
                tid, rec, Outcome(ok=False, error=str(e), error_type="PlanError")
            )
            return
        in_hash = input_hash(tool.name, args)
        cached = (
            self._store.get_replay(tool_replay_key(tid, in_hash, tool.code_hash))
            if self._tool_replays
            else None
        )
        if cached is not None:  # a fork re-running what its parent already did
            self._replayed(tid, rec, cached, in_hash, tool)
            return
        approval = rec.approval or {}
        if approval.get("state") == "approved":
            if approval.get("edited_args") is not None:
                args = approval["edited_args"]
        else:
            decision, policy = decide(self._policies, tool, args)
            if decision != "approve":
                self._gate(tid, rec, tool, args, decision, policy)
                return
        key = idempotency_key(self.id, tid, rec.generation)
        attempt = rec.attempts + 1
        hit = self._check_budget(tid, {"steps": 1})
        if hit is not None:
            self._budget_stop(tid, hit)
            return
        self._usage["steps"] = self._usage.get("steps", 0) + 1
        # Invariant 2: the intent is durable before the side effect can happen.
        rec = rec.model_copy(
            update={
                "status": "running",
                "attempts": attempt,
                "started": self._now(),
                "ended": None,
                "idempotency_key": key,
                "input_hash": in_hash,
                "next_attempt_at": None,
            }
        )
        # A tool without side effects loses nothing if this intent is lost to a
        # power cut (the attempt just runs again): no fsync for it under "full".
        self._commit(
            [rec],
            [
                self._event(
                    "task_started", tid, attempt=attempt, payload={"tool": tool.name}
                )
            ],
            relaxed=tool.side_effect != "write",
        )
        out = await run_attempt(
            tool,
            args,
            self._ctx(tid, attempt, key),
            timeout=task.timeout or tool.timeout,
            success=task.success,
            pool=self._thread_pool(),
            artifacts=self.workspace.artifacts.redacting(self._redactor, tid),
            remote=self.options.executor,
        )
        rec = self._records[tid]  # an LLM task's calls added their cost to it
        if out.error_type == "InDoubtError":  # e.g. a cluster lost a write
            why = (
                f"task {tid!r} is in doubt: {out.error}; check, then "
                f"s.retry({tid!r}) or s.skip({tid!r})"
            )
            doubt = rec.model_copy(
                update={"status": "in_doubt", "reason": why, "error": out.error}
            )
            self._commit(
                [doubt],
                [
                    self._event(
                        "in_doubt", tid, attempt=rec.attempts, payload={"reason": why}
                    )
                ],
            )
            self._sched.set(tid, "in_doubt")
            self._pause_requested = why
            return
        hit = self._budget_hits.pop(tid, None)
        if hit is not None and out.error_type == "BudgetExceeded":
            self._budget_stop(tid, hit)
            return
        retries = task.retries if task.retries is not None else tool.retries
        if out.ok:
            self._succeed(tid, rec, out, tool)
        elif out.transient and attempt <= retries:
            self._schedule_retry(tid, rec, out)
        else:
            if out.transient:
                out.error = f"{out.error} (gave up after {attempt} attempt(s))"
            self._fail(tid, rec, out)

    def _replayed(
        self,
        tid: str,
        rec: TaskRecord,
        cached: dict[str, Any],
        in_hash: str,
        tool: Tool,
    ) -> None:
        now = self._now()
        rec = rec.model_copy(
            update={
                "status": "succeeded",
                "result": cached.get("result"),
                "result_ref": cached.get("result_ref"),
                "input_hash": in_hash,
                "tool_hash": tool.code_hash,
                "started": now,
                "ended": now,
                "error": None,
                "error_type": None,
                "traceback": None,
                "reason": None,
            }
        )
        ev = self._event(
            "task_succeeded",
            tid,
            attempt=rec.attempts,
            duration=0.0,
            payload={"cached": True},
        )
        self._commit([rec], [ev])
        self._sched.set(tid, "succeeded")

    def _tool_for(self, task: Task) -> Tool | None:
        """The tool a task calls (LLM tasks get theirs from the layer above)."""
        return self._tools.get(task.tool or "")

    def _check_budget(
        self, tid: str | None, need: dict[str, float]
    ) -> BudgetHit | None:
        task = self._tasks.get(tid) if tid is not None else None
        return check_budget(
            self._info.budgets,
            self._usage,
            self._records,
            tid,
            need,
            task.budget if task is not None else None,
        )

    def _budget_stop(self, tid: str, hit: BudgetHit) -> None:
        """The task waits (pending) and the run pauses, saying what ran out."""
        rec = self._records[tid]
        if rec.status == "running":  # stopped inside an attempt (a model call)
            rec = rec.model_copy(update={"status": "pending"})
        self._pause_requested = hit.message()
        self._commit(
            [rec], [self._event("budget_exceeded", tid, payload=hit.payload())]
        )
        self._sched.set(tid, "pending")

    def _gate(
        self,
        tid: str,
        rec: TaskRecord,
        tool: Tool,
        args: dict[str, Any],
        decision: str,
        policy: ApprovalPolicy | None,
    ) -> None:
        """A policy said "ask" or "reject" for this call."""
        rule = policy.describe() if policy else None
        if decision == "reject":
            reason = (policy.reason if policy else "") or "refused by policy"
            rec = rec.model_copy(
                update={
                    "approval": {
                        "state": "rejected",
                        "by": "policy",
                        "at": self._now(),
                        "args": args,
                        "policy": rule,
                        "reason": reason,
                    }
                }
            )
            self._fail(
                tid,
                rec,
                Outcome(
                    ok=False, error_type="Rejected", error=f"rejected by policy {rule}"
                ),
                extra=[
                    self._event(
                        "approval_rejected",
                        tid,
                        payload={
                            "by": "policy",
                            "reason": reason,
                            "tool": tool.name,
                            "args": args,
                            "policy": rule,
                        },
                    )
                ],
            )
            return
        rec = rec.model_copy(
            update={
                "status": "awaiting_approval",
                "approval": {
                    "state": "asked",
                    "at": self._now(),
                    "args": args,
                    "policy": rule,
                    "reason": policy.reason if policy else "",
                },
            }
        )
        self._commit(
            [rec],
            [
                self._event(
                    "approval_requested",
                    tid,
                    payload={
                        "tool": tool.name,
                        "args": args,
                        "policy": rule,
                        "reason": policy.reason if policy else "",
                    },
                )
            ],
        )
        self._sched.set(tid, "awaiting_approval")

    def _succeed(self, tid: str, rec: TaskRecord, out: Outcome, tool: Tool) -> None:
        assert out.result_json is not None
        size = len(out.result_json)
        upd: dict[str, Any] = {
            "status": "succeeded",
            "ended": self._now(),
            "error": None,
            "error_type": None,
            "traceback": None,
            "reason": None,
            "tool_hash": tool.code_hash,
        }
        if size > self.options.inline_result_bytes:
            # Redacted like an inline result before it lands (invariant 7).
            text = json.dumps(self._redactor.value(out.result), ensure_ascii=False)
            upd["result_ref"] = self.workspace.artifacts.put_bytes(text.encode())
            upd["result"] = None
        else:
            upd["result"], upd["result_ref"] = out.result, None
        rec = rec.model_copy(update=upd)
        ev = self._event(
            "task_succeeded",
            tid,
            attempt=rec.attempts,
            duration=out.duration,
            payload={"bytes": size},
        )
        self._commit([rec], [ev])
        self._sched.set(tid, "succeeded")

    def _schedule_retry(self, tid: str, rec: TaskRecord, out: Outcome) -> None:
        base, cap = self.options.backoff
        delay = min(cap, base * 2 ** (rec.attempts - 1)) * (0.5 + random.random() / 2)
        if out.retry_after is not None:
            delay = max(delay, min(out.retry_after, max(cap, out.retry_after)))
        rec = rec.model_copy(
            update={
                "status": "pending",
                "error": out.error,
                "error_type": out.error_type,
                "traceback": out.traceback,
                "next_attempt_at": self._now() + delay,
            }
        )
        ev = self._event(
            "retry_scheduled",
            tid,
            attempt=rec.attempts,
            duration=out.duration,
            payload={"delay": delay, "error": out.error, "error_type": out.error_type},
        )
        self._commit([rec], [ev])
        loop = asyncio.get_running_loop()

        def due() -> None:
            self._timers.pop(tid, None)
            try:  # gone (a plan patch) or changed (reloaded from disk): leave it
                rec = self._records.get(tid)
                if rec is not None and rec.status == "pending":
                    self._sched.set(tid, "pending")
            finally:
                self._wake_up()

        # The scheduler keeps the task "running" until the delay is over.
        self._timers[tid] = loop.call_later(delay, due)

    def _ended(self, rec: TaskRecord, out: Outcome, **update: Any) -> TaskRecord:
        """The record of a task that failed for good with ``out`` (status
        "failed" unless ``update`` says otherwise)."""
        return rec.model_copy(
            update={
                "status": "failed",
                "ended": self._now(),
                "error": out.error,
                "error_type": out.error_type,
                "traceback": out.traceback,
                **update,
            }
        )

    def _failure(
        self, tid: str, rec: TaskRecord, out: Outcome, *, blocked: int, **more: Any
    ) -> EventBase:
        """The ``task_failed`` event for an attempt that failed for good."""
        return self._event(
            "task_failed",
            tid,
            attempt=rec.attempts,
            duration=out.duration,
            payload={
                "error": out.error,
                "error_type": out.error_type,
                "blocked": blocked,
                **more,
            },
        )

    def _fail(
        self,
        tid: str,
        rec: TaskRecord,
        out: Outcome,
        extra: list[EventBase] | None = None,
    ) -> None:
        rec = self._ended(rec, out, next_attempt_at=None)
        blocked = [
            self._records[d].model_copy(
                update={
                    "status": "blocked",
                    "reason": f"blocked by failed task {tid!r}",
                }
            )
            for d in self._sched.descendants(tid)
            if self._records[d].status == "pending"
        ]
        events = [self._failure(tid, rec, out, blocked=len(blocked))]
        events += [
            self._event("task_blocked", b.task_id, payload={"by": tid}) for b in blocked
        ]
        events = (extra or []) + events
        self._commit([rec, *blocked], events)
        self._failed_seq = next(e.seq for e in events if e.kind == "task_failed")
        self._sched.set(tid, "failed")
        for b in blocked:
            self._sched.set(b.task_id, "blocked")
