"""``LLMPlanner``: a model writes the plan; Argus checks it and asks for fixes.

The model is given one tool, ``submit_plan``, whose input schema is the Plan JSON
schema, and the session's tools (names, descriptions, input schemas) in the
system prompt. Each submitted plan goes through the same checks as a YAML plan
(``Plan.from_dict(...).validate_against(tools)``); the problems go back as an
``is_error`` tool result and the model tries again, up to ``max_rounds``. Every
round is recorded (``planner.rounds``) and reported as an ``llm_call`` event.

Claude Opus 5.5, Sonnet 5.5 and Fable/Mythos 5.1+ reject a forced
``tool_choice`` (HTTP 400), so on those the planner asks for the call in the
prompt with ``tool_choice`` left to the model; a 400 about ``tool_choice`` on any
other model switches to that mode too.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from argus_lab.errors import PlanError, TransientError
from argus_lab.llm.base import (
    Message,
    Model,
    ModelError,
    ModelRequest,
    ModelResponse,
    RetryPolicy,
    TextBlock,
    ToolResultBlock,
    complete_with_retries,
    run_sync,
)
from argus_lab.llm.recording import recorded
from argus_lab.plan._llm_prompt import (
    _SYSTEM,
    SUBMIT_PLAN,
    _tools_text,
    accepts_forced_tool_choice,
    plan_tool_schema,
)
from argus_lab.plan._model import Plan
from argus_lab.plan._replan import _ReplanMixin
from argus_lab.tools.registry import Tool, as_toolset

__all__ = [
    "SUBMIT_PLAN",
    "LLMPlanner",
    "accepts_forced_tool_choice",
    "plan_tool_schema",
]

OnEvent = Callable[[str, dict[str, Any]], None]
"""``on_event(kind, payload)``: kind is "llm_call"; payload as events.LlmCall."""

Checker = Callable[[dict[str, Any]], "tuple[Plan | None, list[str]]"]
"""Validates a submitted plan: (plan, []) or (None, problems)."""


class LLMPlanner(_ReplanMixin):
    """Plans a goal with a model, validating and repairing for up to N rounds.

    Args:
        model: Any ``al.llm.Model`` (AnthropicModel, FunctionModel, ReplayModel).
        max_rounds: Model replies to read before giving up.
        retry: How transient errors (429, 529, 5xx, timeouts) are retried.
        on_event: Called with ("llm_call", payload) after every round.
        tool_choice: "force" (``{"type": "tool", "name": "submit_plan"}``),
            "auto" (ask for the call in the prompt), or None to pick by model.
        max_tokens: Output limit per reply; None takes the model's default.
        max_replans: Failed tasks a session may replan with it (``on_failure:
            replan``); past it a failure fails as ``on_failure: fail`` does.
            None: no limit (a budget, ``max_cost_usd``, still stops it).

    Attributes:
        rounds: One dict per model call of the last ``plan``: the ``llm_call``
            payload (tokens, cost, request_hash, ...) plus round, problems,
            retries and duration.
    """

    def __init__(
        self,
        model: Model,
        *,
        max_rounds: int = 3,
        retry: RetryPolicy | None = None,
        on_event: OnEvent | None = None,
        tool_choice: Literal["force", "auto"] | None = None,
        max_tokens: int | None = None,
        max_replans: int | None = 20,
    ) -> None:
        if not callable(getattr(model, "complete", None)):
            what = "a model name" if isinstance(model, str) else type(model).__name__
            raise TypeError(
                f"LLMPlanner needs a model object, got {what}: "
                "LLMPlanner(al.AnthropicModel('claude-...')), or "
                "al.llm.testing.FunctionModel(...) offline"
            )
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
        if max_replans is not None and (
            not isinstance(max_replans, int)
            or isinstance(max_replans, bool)
            or max_replans < 0
        ):
            raise ValueError(
                "max_replans must be an int >= 0 or None (no limit), "
                f"got {max_replans!r}"
            )
        self.model = model
        self.max_rounds = max_rounds
        self.retry = retry or RetryPolicy()
        self.on_event = on_event
        self.tool_choice = tool_choice
        self.max_tokens = max_tokens
        self.max_replans = max_replans
        self.rounds: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        return f"LLMPlanner({self.model!r}, max_rounds={self.max_rounds})"

    @property
    def cost_usd(self) -> float:
        """USD spent by the last ``plan`` (unknown costs count as 0)."""
        return sum(r.get("cost_usd") or 0.0 for r in self.rounds)

    def plan(
        self,
        goal: str,
        *,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        constraints: Sequence[str] = (),
        context: str = "",
    ) -> Plan:
        """Plans goal; see ``aplan``. Works in scripts and inside Jupyter."""
        return run_sync(
            self.aplan(goal, tools=tools, constraints=constraints, context=context)
        )

    async def aplan(
        self,
        goal: str,
        *,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        constraints: Sequence[str] = (),
        context: str = "",
        check: Checker | None = None,
    ) -> Plan:
        """Asks the model for a plan of goal and returns it validated.

        Args:
            goal: What the plan is for.
            tools: The tools the plan may use (their schemas go in the prompt and
                every task is checked against them).
            constraints: Free-text constraints, given to the model and kept on
                the plan.
            context: Anything else the model should know (results so far, ...).
            check: Validates a submitted plan instead of the standalone check
                (``replan`` uses it to accept references to finished tasks).

        Raises:
            PlanError: no valid plan after ``max_rounds``; lists the last problems.
            TransientError: the model stayed unavailable through the retries.
            ModelError: a permanent model error (bad request, no key, ...).
        """
        if check is None and (not isinstance(goal, str) or not goal.strip()):
            # Before a paid call that could only guess (a replan, with its
            # checker, has the failed plan as context even without a goal).
            raise PlanError(
                f"the LLM planner needs a goal in words, got {goal!r}; nothing "
                "was sent to the model"
            )
        toolset = as_toolset(tools)
        if isinstance(constraints, str):  # one constraint, not its letters
            constraints = [constraints]
        self.rounds = []
        force = (
            self.tool_choice == "force"
            if self.tool_choice is not None
            else accepts_forced_tool_choice(self.model.name)
        )
        system = _SYSTEM + _tools_text(toolset)
        ask = f"Goal: {goal}"
        if constraints:
            ask += "\nConstraints:\n" + "\n".join(f"- {c}" for c in constraints)
        if context:
            ask += f"\n\nContext:\n{context}"
        ask += "\n\nCall submit_plan with the plan."
        messages = [Message.user(ask)]
        problems: list[str] = []
        n = 0
        while n < self.max_rounds:
            n += 1
            request = ModelRequest(
                system=system,
                messages=list(messages),
                tools=[plan_tool_schema()],
                tool_choice={"type": "tool", "name": SUBMIT_PLAN} if force else None,
                max_tokens=self.max_tokens,
                purpose="plan",
            )
            try:
                response = await self._call(request, n, force)
            except ModelError as e:
                if force and e.status_code == 400 and "tool_choice" in e.message:
                    force = False  # this model rejects a forced tool: ask instead
                    n -= 1
                    continue
                raise
            try:
                plan, problems, reply = self._read(
                    response, goal, constraints, toolset, check
                )
            except PlanError as e:  # a refusal: no point in asking again
                problems = [e.message]
                raise
            finally:
                self.rounds[-1]["problems"] = problems
                self._emit(self.rounds[-1])
            if plan is not None:
                return plan
            if response.content:  # the API refuses an empty assistant turn
                messages.append(response.as_message())
            messages.append(reply)
        raise PlanError(
            f"the LLM planner ({self.model.name}) found no valid plan for "
            f"{goal[:60]!r} in {self.max_rounds} rounds; the last problems:\n- "
            + "\n- ".join(problems)
            + "\nTry more rounds (max_rounds=...), a stronger model, clearer tool "
            "docstrings, or write the plan as YAML.",
            problems=problems,
        )

    async def _call(self, request: ModelRequest, n: int, force: bool) -> ModelResponse:
        retries: list[dict[str, Any]] = []

        def on_retry(k: int, e: TransientError, delay: float) -> None:
            retries.append(
                {
                    "retry": k,
                    "error": e.message,
                    "retry_after": e.retry_after,
                    "delay": delay,
                }
            )

        t0 = time.monotonic()
        base = {"round": n, "tool_choice": "tool" if force else "auto"}
        try:
            response = await complete_with_retries(
                recorded(self.model), request, policy=self.retry, on_retry=on_retry
            )
        except (ModelError, TransientError) as e:
            failed = {
                "model": request.model or self.model.name,
                "purpose": "plan",
                "request_hash": request.hash(),
                "cached": False,
                "cost_usd": 0.0,
                "error": e.message,
                "error_type": type(e).__name__,
            }
            row = {**failed, **base, "retries": retries}
            row["duration"] = time.monotonic() - t0
            self.rounds.append(row)
            self._emit(row)
            raise
        row = {**response.event_payload(purpose="plan"), **base, "retries": retries}
        row["duration"] = time.monotonic() - t0
        self.rounds.append(row)
        return response

    def _emit(self, row: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event("llm_call", dict(row))

    def _read(
        self,
        response: ModelResponse,
        goal: str,
        constraints: Sequence[str],
        toolset: dict[str, Tool],
        check: Checker | None = None,
    ) -> tuple[Plan | None, list[str], Message]:
        """The plan if valid, else the problems and the message that reports them."""
        if response.stop_reason == "refusal":
            raise PlanError(
                f"the model refused to plan {goal[:60]!r}: "
                f"{response.text[:300] or '(no reason given)'}"
            )
        uses = response.tool_uses
        submits = [u for u in uses if u.name == SUBMIT_PLAN]
        plan: Plan | None = None
        problems: list[str] = []
        if not submits:
            if response.stop_reason == "max_tokens":
                problems = [
                    "the reply was cut off at max_tokens before submit_plan was "
                    "called; submit a shorter plan"
                ]
            else:
                problems = ["the reply did not call submit_plan"]
        else:
            if check is not None:
                plan, problems = check(submits[0].input)
            else:
                plan, problems = _check(submits[0].input, goal, constraints, toolset)
        results: list[TextBlock | ToolResultBlock] = []
        for u in uses:
            if u is (submits[0] if submits else None):
                text = (
                    "The plan is invalid:\n- "
                    + "\n- ".join(problems)
                    + "\nFix every problem and call submit_plan again with the "
                    "whole corrected plan."
                )
                results.append(
                    ToolResultBlock(tool_use_id=u.id, content=text, is_error=True)
                )
            else:
                why = (
                    "ignored: only the first submit_plan call of a reply is read"
                    if u.name == SUBMIT_PLAN
                    else f"unknown tool {u.name!r}: the only tool is submit_plan"
                )
                results.append(
                    ToolResultBlock(tool_use_id=u.id, content=why, is_error=True)
                )
        if not submits:
            results.append(
                TextBlock(
                    text=f"{problems[0]}. Call submit_plan with the whole plan; "
                    "do not answer in text."
                )
            )
        return plan, problems, Message(role="user", content=list(results))


def _check(
    data: dict[str, Any],
    goal: str,
    constraints: Sequence[str],
    toolset: dict[str, Tool],
) -> tuple[Plan | None, list[str]]:
    d = dict(data)
    if isinstance(d.get("tasks"), str):  # some replies send the list as JSON text
        with contextlib.suppress(json.JSONDecodeError):
            d["tasks"] = json.loads(d["tasks"])
    d["goal"] = goal  # the plan is for the user's goal, in the user's words
    if constraints:
        d["constraints"] = list(constraints)
    try:
        plan = Plan.from_dict(d)
        if toolset:
            plan = plan.validate_against(toolset)
        if not plan.tasks:  # valid as a file, but no plan for a goal
            raise PlanError(
                "the plan has no tasks: submit the tasks that reach the goal"
            )
    except PlanError as e:
        problems = getattr(e, "problems", None)
        if not problems:
            text = e.message
            _, _, tail = text.partition(":\n- ")
            problems = tail.split("\n- ") if tail else [text]
        return None, list(problems)
    return plan, []
