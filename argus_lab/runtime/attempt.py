"""The attempt runner: one attempt of one task, from its gate to its outcome.

In order: find the tool (an LLM task's is its model loop), resolve the
arguments, serve a fork's recorded result, ask the approval policies, check
the step budget, commit the intent (invariant 2: before any side effect), call
the tool (executor.py), and hand the typed outcome to the settler, which asks
the failure policy what it means.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from argus_lab.errors import StorageError, UnresolvedReferenceError
from argus_lab.events import EventBase
from argus_lab.model import Task, TaskRecord, updated
from argus_lab.plan.graph import resolve_args
from argus_lab.runtime.budget import BudgetChecker
from argus_lab.runtime.executor import InlineGate, call_inline, run_attempt
from argus_lab.runtime.gates import (
    approved,
    edited_args,
    hold_or_refuse,
    make_workdir,
    serve_replay,
    watch_env,
)
from argus_lab.runtime.intents import IntentBatch
from argus_lab.runtime.llm_task import LlmTaskRunner
from argus_lab.runtime.options import (
    SessionOptions,
    input_hashes,
    plain_args,
    tool_replay_key,
)
from argus_lab.runtime.outcome import (
    Failed,
    Outcome,
    OverBudget,
    ShutDown,
    Succeeded,
)
from argus_lab.runtime.policy import unsafe
from argus_lab.runtime.settle import Settler
from argus_lab.runtime.signals import Signals
from argus_lab.runtime.state import SessionState
from argus_lab.tools.approval import decide
from argus_lab.tools.registry import Tool, ToolContext

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["AttemptRunner"]


@dataclass(slots=True)
class _Call:
    """What an attempt calls: its task, tool, arguments, context and timeout."""

    task: Task
    tool: Tool
    args: dict[str, Any]
    ctx: ToolContext | None  # None: a call inline of a tool that takes none
    timeout: float | None

    def retries(self) -> int:
        """How many transient failures the call's task may retry."""
        retries = self.task.retries
        return self.tool.retries if retries is None else retries


class AttemptRunner:
    """Runs one attempt of a task and settles its outcome.

    Args:
        state: The session state (the only writer).
        settler: Carries out what an outcome means.
        signals: Says whether the session is shutting down.
        budget: Checks the step budget before the intent.
        llm: Supplies the tool of LLM tasks.
        options: concurrency, approvals, executor.
        root: The workspace folder (tools get a working folder under it).
    """

    def __init__(
        self,
        state: SessionState,
        settler: Settler,
        signals: Signals,
        budget: BudgetChecker,
        llm: LlmTaskRunner,
        options: SessionOptions,
        root: Path,
    ) -> None:
        self._state = state
        self._settler = settler
        self._signals = signals
        self._budget = budget
        self._llm = llm
        self._options = options
        self._root = root
        self._workdir: Path | None = None  # once made (gates.make_workdir)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._inline = InlineGate()
        self._intents = IntentBatch(state, lambda: signals.stopping is not None)

    def tool_for(self, task: Task) -> Tool | None:
        """The tool a task calls (None: not registered in this session)."""
        if task.kind == "llm":
            return self._llm.tool_for(task)
        return self._state.tools.get(task.tool or "")

    def _ctx(
        self, task_id: str, attempt: int, key: str, key_of: str | None
    ) -> ToolContext:
        return ToolContext(
            session_id=self._state.info.id,
            task_id=task_id,
            attempt=attempt,
            idempotency_key=key,
            workspace=self._root,
            workdir=self._workdir or self._root / "files" / self._state.info.id,
            redactor=self._state.redactor,
            _key_of=key_of,
        )

    def _thread_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self._options.concurrency, thread_name_prefix="argus-tool"
            )
        return self._pool

    def close(self) -> None:
        """Lets go of the tool threads (a sync tool past its timeout runs on)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def begin(self, tid: str) -> Callable[[], Awaitable[None]] | None:
        """Starts one attempt of ``tid`` now. None: it ended and is settled (a
        gate stopped it, or a quick call ran inline: no await, so no asyncio
        Task is needed); else what finishes it (intent, call, outcome), to
        call and await in a Task (made only when awaited: a Task cancelled
        before it starts leaves no coroutine unawaited)."""
        st = self._state
        task = st.tasks[tid]
        rec = st.records[tid]
        st.sched.set(tid, "running")
        tool = self.tool_for(task)
        if tool is None:
            known = ", ".join(sorted(st.tools)) or "none"
            error = (
                f"tool {task.tool!r} of task {tid!r} is not registered in this "
                f"session (tools: {known}); reopen with "
                f"ws.open({st.info.name!r}, tools=[...]) and retry the task"
            )
            self._settler.settle(tid, rec, Failed("missing_tool", error, "ToolError"))
            return None
        if tool.takes_ctx and self._workdir is None:
            try:  # only a tool that takes ctx knows it: made for the first
                self._workdir = make_workdir(self._root, st.info.id)
            except StorageError:
                st.sched.set(tid, "pending")  # not begun: ready once fixed
                raise
        plain = plain_args(task.args)
        if plain:  # nothing to resolve, no env value to watch
            args = dict(task.args)
        else:
            watch_env(st, task.args)  # ${env.NAME}: never stored nor hashed
            try:
                args = resolve_args(task.args, st.result_of)
            except UnresolvedReferenceError as e:
                failed = Failed("bad_reference", str(e), "PlanError")
                self._settler.settle(tid, rec, failed)
                return None
        # The stored hash first, then the same call's in clear (input_hashes).
        hashes = input_hashes(tool.name, args, None if plain else st.redactor)
        in_hash = hashes[0]
        if st.tool_replays:  # a fork re-running what its parent already did
            for h in hashes:
                cached = st.get_replay(tool_replay_key(tid, h, tool.code_hash))
                if cached is not None:
                    serve_replay(st, tid, rec, cached, in_hash, tool)
                    return None
        approval = rec.approval or {}
        if approved(rec, tool, hashes):
            if approval.get("edited_args") is not None:
                try:  # a person's edits: ${env.NAME} is read now, as in a plan
                    args = edited_args(st, approval["edited_args"])
                except UnresolvedReferenceError as e:
                    failed = Failed("bad_reference", str(e), "PlanError")
                    self._settler.settle(tid, rec, failed)
                    return None
        else:
            decision, policy = decide(self._options.policies, tool, args)
            if decision != "approve":
                hold_or_refuse(
                    st, self._settler, tid, rec, tool, args, in_hash, decision, policy
                )
                return None
        key = rec.key_in(st.info.id)
        attempt = rec.attempts + 1
        if st.info.budgets or task.budget is not None:  # else no limit to cross
            hit = self._budget.check(tid, {"steps": 1})
            if hit is not None:
                self._settler.budget_stop(tid, hit)
                return None
        if self._signals.stopping is not None:  # shutting down: start nothing
            st.sched.set(tid, "pending")
            return None
        st.usage["steps"] = st.usage.get("steps", 0) + 1
        # Invariant 2: the intent is durable before the side effect can happen.
        # Its record is ``updated(rec, running)``, made below only where it is
        # written on its own (a call that awaits): a quick call inline hands
        # the fields to its outcome's record instead (one copy, not two).
        running: dict[str, Any] = {
            "status": "running",
            "attempts": attempt,
            "started": st.now(),
            "ended": None,
            "idempotency_key": key,
            "input_hash": in_hash,
            "next_attempt_at": None,
            # Recovery must judge the code that ran, not a redefinition.
            "unsafe_intent": unsafe(task, tool, st.tools),
        }
        started = st.event("task_started", tid, attempt=attempt, tool=tool.name)
        timeout = task.timeout or tool.timeout
        inline = (
            tool.side_effect != "write"
            and self._options.executor is None
            and self._inline.inline_now(tool, timeout)
        )
        # A frozen dataclass of seven fields, ~2% of a step: a call inline
        # gets one only if its tool takes it (a thread's call, always).
        ctx = (
            self._ctx(tid, attempt, key, rec.key_of)
            if tool.takes_ctx or not inline
            else None
        )
        call = _Call(task, tool, args, ctx, timeout)
        if inline:
            # A quick call on the loop of a tool without side effects: nothing
            # else runs until it returns, and invariant 2 asks nothing of it, so
            # its intent goes into the outcome's commit (one transaction per
            # step). A crash mid-call leaves the task pending: it runs again.
            st.defer([started])
            try:
                out = call_inline(
                    tool,
                    args,
                    call.ctx,
                    success=task.success,
                    artifacts=partial(st.artifacts.redacting, st.redactor, tid),
                    gate=self._inline,
                )
            except BaseException:
                st.drop_deferred()
                raise
            if out is None:
                pass  # refused inside the loop: on a thread, below
            elif isinstance(out, Succeeded) and (
                st.sched.has_ready() or self._settler.settling
            ):
                # Other outcomes can share its commit (a fan-out): it joins
                # their group commit, with its intent (taken now: only this
                # attempt deferred it).
                intent = st.take_deferred()
                return partial(self._settle_later, tid, rec, running, call, out, intent)
            else:
                self._settle(tid, rec, running, call, out)  # alone: now
                return None
            # Refused inside the loop, the call goes to a thread and the loop
            # runs on (other commits, a skip, a pause): its intent is
            # committed first, as for any call on a thread.
            st.drop_deferred()  # only ours: deferred while the loop was held
            call.ctx = call.ctx or self._ctx(tid, attempt, key, rec.key_of)
        return partial(self._call, tid, updated(rec, running), started, call)

    async def _call(
        self, tid: str, rec: TaskRecord, started: EventBase, call: _Call
    ) -> None:
        """The rest of an attempt that awaits: its intent, then its call."""
        st = self._state
        tool, ctx = call.tool, call.ctx
        assert ctx is not None  # a call on a thread always has one (begin)
        # Committed with the intents of the tasks starting beside it (one
        # transaction). A tool without side effects loses nothing if its
        # intent is lost to a power cut (it runs again): no fsync under "full".
        # An LLM task's model may make a write that is not idempotent: fsynced.
        try:
            written = await self._intents.commit(
                rec,
                started,
                relaxed=tool.side_effect != "write" and not rec.unsafe_intent,
            )
        except asyncio.CancelledError:
            if not self._signals.absorbed_shutdown():
                raise
            # The shutdown's own cancellation, before the call began: a
            # written intent goes back to pending (nothing to decide).
            written = st.records[tid].status == "running"
            if written:
                why = self._signals.stopping or "shut down"
                left = ShutDown(why, started=False)
                self._settler.settle(tid, st.records[tid], left)
                return
        if not written:  # shut down while the intent waited: start nothing
            st.usage["steps"] -= 1  # no step was taken
            st.sched.set(tid, "pending")
            return
        out: Outcome
        try:
            out = await run_attempt(
                tool,
                call.args,
                ctx,
                timeout=call.timeout,
                success=call.task.success,
                pool=self._thread_pool(),
                artifacts=partial(st.artifacts.redacting, st.redactor, tid),
                remote=self._options.executor,
                gate=self._inline,
            )
        except asyncio.CancelledError:
            if not self._signals.absorbed_shutdown():
                raise
            # The shutdown's own cancellation (RunLoop.abandon): the call may
            # have begun, so its intent stays for the next open to decide.
            out = ShutDown(self._signals.stopping or "shut down", started=True)
        # An LLM task's calls added their cost to the committed record.
        await self._settled(tid, st.records[tid], call, out)

    def _settle(
        self,
        tid: str,
        rec: TaskRecord,
        running: dict[str, Any],
        call: _Call,
        out: Outcome,
    ) -> None:
        """Settles ``out`` of an inline call now: whatever it means is
        committed at once (``rec`` before its intent's fields ``running``)."""
        out = self._budget_hit(tid, out)
        self._settler.settle(
            tid,
            rec,
            out,
            tool_hash=call.tool.code_hash,
            retries=call.retries(),
            intent=running,
        )

    async def _settled(
        self,
        tid: str,
        rec: TaskRecord,
        call: _Call,
        out: Outcome,
        running: dict[str, Any] | None = None,
    ) -> None:
        """Settles ``out``; a success joins the group commit of the successes
        settling beside it (``Settler.settled``, outcomes.py)."""
        out = self._budget_hit(tid, out)
        await self._settler.settled(
            tid,
            rec,
            out,
            tool_hash=call.tool.code_hash,
            retries=call.retries(),
            intent=running,
        )

    async def _settle_later(
        self,
        tid: str,
        rec: TaskRecord,
        running: dict[str, Any],
        call: _Call,
        out: Outcome,
        intent: list[EventBase],
    ) -> None:
        self._state.defer(intent)  # its own intent goes into its outcome's batch
        await self._settled(tid, rec, call, out, running)

    def _budget_hit(self, tid: str, out: Outcome) -> Outcome:
        hit = self._llm.take_budget_hit(tid)
        if hit is not None and isinstance(out, Failed) and out.kind == "budget":
            return OverBudget(hit, out.error, duration=out.duration)
        return out
