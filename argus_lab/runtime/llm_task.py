"""LLM tasks: a model works on a task in a bounded tool-use loop.

A task of kind "llm" gets a prompt from the context builder (its description and
expected output, its args and dependency results, the goal and constraints,
under a token budget). The model may call the task's ``llm_tools``; each call
is a ``tool_call`` event. Every model request goes through the session's replay
cache (invariant 9) and is an ``llm_call`` event with tokens and cost; budgets
are checked before each one. The final answer (text, or the input of a forced
``final_answer`` tool when the task has an ``output_schema``) is the result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from argus_lab.errors import ApprovalRequired, BudgetExceeded, InDoubtError, ToolError
from argus_lab.llm.recording import COUNTED, recorded_reply, replay_key
from argus_lab.model import Task
from argus_lab.runtime.budget import BudgetChecker, BudgetHit
from argus_lab.runtime.options import SessionOptions
from argus_lab.runtime.state import SessionState
from argus_lab.runtime.toolcall import await_tool, call_tool, error_text
from argus_lab.tools.approval import require_approval
from argus_lab.tools.registry import Tool, ToolContext

if TYPE_CHECKING:
    from argus_lab.llm.base import Model, ModelRequest, ModelResponse
    from argus_lab.workspace import Workspace

__all__ = ["FINAL_ANSWER", "LlmTaskRunner"]

log = logging.getLogger("argus_lab")

FINAL_ANSWER = "final_answer"
TOOL_RESULT_CHARS = 20_000
"""The most of a tool result's JSON the model reads (cut before a secret that
runs across the limit: ``_clipped``)."""
SYSTEM = (
    "You are one step of a larger plan run by Argus Lab. Do exactly the task "
    "described, using the tools offered when they help, then give the final "
    "answer. Be concise; the answer is passed to later steps as data."
)


def _fill(
    call: concurrent.futures.Future[Any], fn: Any, kwargs: dict[str, Any]
) -> None:
    """Runs a sync tool into ``call`` on an executor thread: a future the
    abandoned-call registry can watch if the LLM task stops meanwhile."""
    if not call.set_running_or_notify_cancel():
        return  # cancelled before it began
    try:
        call.set_result(call_tool(fn, kwargs))
    except BaseException as e:  # handed to the awaiting task, as a pool does
        call.set_exception(e)


class LlmTaskRunner:
    """Runs tasks of kind "llm" through the session's models.

    An LLM task is run like any other: this part hands the attempt runner a
    tool whose call is the model loop (``tool_for``).

    Args:
        state: The session state (the only writer).
        budget: Checks cost and tokens before each model call.
        options: models, context_tokens, approvals.
        workspace: Where memories are searched for the prompt.
    """

    def __init__(
        self,
        state: SessionState,
        budget: BudgetChecker,
        options: SessionOptions,
        workspace: Workspace,
    ) -> None:
        self._state = state
        self._budget = budget
        self._options = options
        self._workspace = workspace
        self._in_flight = (0.0, 0.0)  # expected cost, tokens of calls under way
        self._seen_costs: dict[str, list[tuple[float, int]]] = {}  # model -> calls
        self._budget_hits: dict[str, BudgetHit] = {}  # task -> hit mid-attempt

    def take_budget_hit(self, task_id: str) -> BudgetHit | None:
        """The budget limit a model call of ``task_id`` stopped at (once)."""
        return self._budget_hits.pop(task_id, None)

    def tool_for(self, task: Task) -> Tool:
        """The tool an LLM task calls: its model loop, with a code hash of
        what shapes its answers."""

        async def llm(*, ctx: ToolContext, **inputs: Any) -> Any:
            return await self._llm_loop(task, inputs, ctx)

        llm.__doc__ = f"LLM task {task.id}"
        tool = Tool(llm, name="llm", timeout=None, retries=3)  # 429, 529, 5xx
        # The "code" of an LLM task is what shapes its answers: the task's
        # instructions, its model and its tools. Changing any makes it stale and
        # misses the fork replay cache.
        spec = task.model_dump(
            mode="json",
            include={
                "description",
                "expected_output",
                "model",
                "llm_tools",
                "max_turns",
                "output_schema",
                "title",
            },
        )
        tools = self._state.tools
        spec["tools"] = {n: tools[n].code_hash for n in task.llm_tools if n in tools}
        tool.__dict__["code_hash"] = hashlib.sha256(
            json.dumps(spec, sort_keys=True).encode()
        ).hexdigest()[:16]
        return tool

    def _model_for(self, task: Task) -> Model:
        models = self._options.models
        if models is None:
            raise ToolError(
                f"LLM task {task.id!r} needs a model: pass models=al.AnthropicModel() "
                "(or al.llm.testing.FunctionModel / ReplayModel offline) to "
                "ws.new_session or ws.open"
            )
        if not isinstance(models, Mapping):
            models = {"default": models}
        name = task.model or "default"
        if name not in models:
            raise ToolError(
                f"LLM task {task.id!r} asks for model {name!r}; the session has "
                f"{', '.join(sorted(models))}"
            )
        model: Model = models[name]
        return model

    def _prompt(self, task: Task, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The task's prompt under the token budget, and what went in or not."""
        from argus_lab.runtime.context import build_context

        st = self._state
        deps = {d: st.result_of(d) for d in task.deps if d in st.records}
        memories: list[Any] = []
        if (self._workspace.path / "memory").exists():  # what earlier steps learned
            query = " ".join(p for p in (task.title, task.description) if p) or task.id
            try:
                memories = self._workspace.memory.search(query, k=8)
            except Exception:  # memory helps a task; it must never fail one
                log.exception("memory search failed for LLM task %s", task.id)
        ctx = build_context(
            task=task,
            goal=st.plan.goal,
            constraints=st.plan.constraints,
            dep_results={**deps, **{f"arg:{k}": v for k, v in inputs.items()}},
            memories=memories,
            session_id=st.info.id,
            budget_tokens=self._options.context_tokens,
        )
        return ctx.prompt, ctx.event_payload()

    async def _llm_loop(
        self, task: Task, inputs: dict[str, Any], ctx: ToolContext
    ) -> Any:
        from argus_lab.llm.base import Message, ModelRequest, ToolResultBlock

        st = self._state
        model = self._model_for(task)
        tools = {n: st.tools[n] for n in task.llm_tools if n in st.tools}
        schemas = [t.schema() for t in tools.values()]
        choice: dict[str, Any] | None = None
        if task.output_schema is not None:
            schemas.append(
                {
                    "name": FINAL_ANSWER,
                    "description": "Give the task's final answer.",
                    "input_schema": task.output_schema,
                }
            )
            if not tools:
                choice = {"type": "tool", "name": FINAL_ANSWER}
        prompt, context = self._prompt(task, inputs)
        st.commit(
            events=[st.event("context_built", task.id, attempt=ctx.attempt, **context)]
        )
        messages = [Message.user(prompt)]
        wrong: str | None = None
        for _turn in range(task.max_turns):
            req = ModelRequest(
                messages=messages,
                system=SYSTEM,
                tools=schemas,
                tool_choice=choice,
                purpose="llm_task",
            )
            resp = await self._call_model(model, req, task.id, ctx.attempt)
            uses = resp.tool_uses
            final = next((u for u in uses if u.name == FINAL_ANSWER), None)
            # An answer off its output_schema goes back to the model, like a
            # bad tool call, within max_turns (it was returned as the result).
            wrong = None if final is None else _off_schema(final.input, task)
            if final is not None and wrong is None:
                return final.input
            if not uses:
                if task.output_schema is None:
                    return resp.text
                try:
                    answer = json.loads(resp.text)
                except json.JSONDecodeError:
                    raise ToolError(
                        f"LLM task {task.id!r} answered in text, not with "
                        "final_answer matching its output_schema"
                    ) from None
                if (wrong := _off_schema(answer, task)) is None:
                    return answer
                messages = [*messages, resp.as_message(), Message.user(wrong)]
                continue
            results = []
            for use in uses:
                if use is final:
                    content, is_error = str(wrong), True
                else:
                    content, is_error = await self._llm_tool_call(task, tools, use, ctx)
                results.append(
                    ToolResultBlock(
                        tool_use_id=use.id, content=content, is_error=is_error
                    )
                )
            messages = [*messages, resp.as_message(), Message.user(*results)]
        raise ToolError(
            f"LLM task {task.id!r} gave no final answer in {task.max_turns} model "
            "calls"
            + (f" (the last one: {wrong})" if wrong else "")
            + "; raise max_turns or simplify the task"
        )

    async def _llm_tool_call(
        self, task: Task, tools: dict[str, Tool], use: Any, ctx: ToolContext
    ) -> tuple[str, bool]:
        st = self._state
        tool = tools.get(use.name)
        args = dict(use.input or {})
        error_type: str | None = None
        if tool is None:
            content, ok = (
                f"no tool named {use.name!r}; use one of {sorted(tools)}",
                False,
            )
        else:
            try:
                require_approval(self._options.policies, tool, args)
            except ApprovalRequired as e:
                content, ok, error_type = e.message, False, "ApprovalRequired"
            else:
                # A retried LLM task replays its model turns, tool_use ids and
                # all: a write that already ran is answered from the record.
                once = tool.unsafe_to_repeat
                done_key = f"llmtool:{ctx.idempotency_key}:{use.id}"
                done = st.get_replay(done_key) if once else None
                if done is not None:
                    content, ok = done["content"], done["ok"]
                else:
                    call: concurrent.futures.Future[Any] | None = None
                    try:
                        kwargs = tool.validate(args)
                        if tool.takes_ctx:
                            # A key per call, stable as the turn is replayed:
                            # the task's key alone made a remote that dedupes
                            # by key drop the model's second, different call.
                            kwargs["ctx"] = replace(
                                ctx, idempotency_key=f"{ctx.idempotency_key}:{use.id}"
                            )
                        if tool.is_async:
                            out = await await_tool(tool.fn, kwargs)
                        else:
                            call = concurrent.futures.Future()
                            asyncio.get_running_loop().run_in_executor(
                                None, _fill, call, tool.fn, kwargs
                            )
                            out = await asyncio.wrap_future(call)
                        text = json.dumps(out, default=str)
                        content, ok = _clipped(st, text, TOOL_RESULT_CHARS), True
                    except asyncio.CancelledError:
                        if not once:
                            raise
                        # Abandoned mid-call (the task's timeout, a shutdown):
                        # it may still take effect; a retry would make it again,
                        # so a sync call still running is kept (abandoned.py)
                        # and s.retry refuses until it ends, as for a tool task.
                        if call is not None and not call.done():
                            from argus_lab.runtime.executor import keep_abandoned

                            keep_abandoned(
                                tool,
                                ctx,
                                call,
                                f"ran on when LLM task {task.id!r} stopped",
                            )
                        raise InDoubtError(
                            f"LLM task {task.id!r} was stopped while its model's "
                            f"call of {use.name!r} (a write that is not "
                            "idempotent) ran: it may or may not have taken effect",
                            session_id=st.info.id,
                            task_id=task.id,
                        ) from None
                    except Exception as e:  # the model reads the error and adapts
                        content, ok = f"{type(e).__name__}: {error_text(e)}", False
                        error_type = type(e).__name__
                    if once:
                        st.put_replay(done_key, {"content": content, "ok": ok})
        st.commit(
            events=[
                st.event(
                    "tool_call",
                    task.id,
                    attempt=ctx.attempt,
                    tool=use.name,
                    args=args,
                    ok=ok,
                    error=None if ok else content,
                    error_type=error_type,
                )
            ]
        )
        return content, not ok

    async def _call_model(
        self, model: Model, req: ModelRequest, tid: str, attempt: int
    ) -> ModelResponse:
        """One model request: replay cache, budget check, event, usage."""
        st = self._state
        key = replay_key(model, req)
        t0 = time.perf_counter()
        # The reply is recorded before the step that counts it commits, so a
        # crash never pays for it twice; ``counted`` follows that commit. A
        # reply without it was paid for and never counted: counted now.
        got = recorded_reply(st, key)
        if got is not None:
            resp = got[0]
        else:
            need = self._expected_cost(model)
            # Calls already in flight (concurrent LLM tasks) count as spent.
            hit = self._budget.check(
                tid,
                {
                    "cost_usd": need[0] + self._in_flight[0],
                    "tokens": need[1] + self._in_flight[1],
                },
            )
            if hit is not None:
                self._budget_hits[tid] = hit
                raise BudgetExceeded(hit.message(), session_id=st.info.id, task_id=tid)
            self._in_flight = (
                self._in_flight[0] + need[0],
                self._in_flight[1] + need[1],
            )
            try:
                resp = await model.complete(req)
            finally:
                self._in_flight = (
                    self._in_flight[0] - need[0],
                    self._in_flight[1] - need[1],
                )
            st.put_replay(key, resp.model_dump(mode="json"))
        spent = 0.0 if resp.cached else (resp.cost_usd or 0.0)
        tokens = 0 if resp.cached else resp.usage.total_tokens
        st.usage["cost_usd"] = st.usage.get("cost_usd", 0.0) + spent
        st.usage["tokens"] = st.usage.get("tokens", 0.0) + tokens
        if not resp.cached:
            self._seen_costs.setdefault(model.name, []).append((spent, tokens))
        rec = st.records[tid]
        rec = rec.model_copy(
            update={"cost_usd": rec.cost_usd + spent, "tokens": rec.tokens + tokens}
        )
        ev = st.event(
            "llm_call",
            tid,
            attempt=attempt,
            duration=time.perf_counter() - t0,
            **resp.event_payload("llm_task"),
        )
        st.commit([rec], [ev])
        if not resp.cached:
            st.put_replay(COUNTED + key, {})
        return resp

    def _expected_cost(self, model: Model) -> tuple[float, float]:
        """What the next call of ``model`` will likely cost: the dearest seen so far
        in this session (nothing known yet: 0, so the first call always runs)."""
        seen = self._seen_costs.get(model.name, [])
        if not seen:
            return 0.0, 0.0
        return max(c for c, _ in seen), float(max(t for _, t in seen))


def _clipped(st: SessionState, text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, before a secret that runs across
    the cut: a prefix of one (21 of a token's 24 characters) is no secret to
    any mask, and the model may quote it in its reply, which is stored. The
    model gets the result unmasked (a token a later call needs), each secret
    whole or not at all. Sought with the session's redactor (a secret a tool
    just set in os.environ too) and every secret of this process, which
    memory's masking knows; a result under the limit costs nothing."""
    if len(text) <= limit:
        return text
    from argus_lab.redact import cut_clear

    st.redactor.learn_new_env()
    return cut_clear(text, limit, st.redactor)


def _off_schema(answer: Any, task: Task) -> str | None:
    """Why ``answer`` does not match the task's output_schema, for the model."""
    if task.output_schema is None:
        return None
    from argus_lab.runtime.executor import check_success

    why = check_success(answer, task.output_schema)
    if why is None:
        return None
    return why.replace("the task's success schema", "output_schema") + (
        "; call final_answer again with an answer that matches"
    )
