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
import copy
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

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
from argus_lab.model import Plan, Task

if TYPE_CHECKING:
    from argus_lab.plan.patch import PlanPatch
from argus_lab.tools.registry import Tool, as_toolset

__all__ = [
    "SUBMIT_PLAN",
    "LLMPlanner",
    "accepts_forced_tool_choice",
    "plan_tool_schema",
]

SUBMIT_PLAN = "submit_plan"

OnEvent = Callable[[str, dict[str, Any]], None]
"""``on_event(kind, payload)``: kind is "llm_call"; payload as events.LlmCall."""

_REJECTS_FORCED = re.compile(
    r"^claude-(?:(?:opus|sonnet)-5-5|(?:fable|mythos)-5-[1-9])"
)


def accepts_forced_tool_choice(model: str) -> bool:
    """Whether ``model`` accepts ``tool_choice`` {"type": "tool"} / {"type": "any"}.

    Per Anthropic's migration guides (checked 2026-11-30), Opus 5.5, Sonnet 5.5
    and Fable/Mythos 5.1 and later answer a forced tool choice with HTTP 400.
    """
    return _REJECTS_FORCED.match(model) is None


_FIELD_HELP = {
    "id": "Unique task id: letters, digits and _ . / : - (no spaces).",
    "tool": "Name of one of the available tools.",
    "args": "Arguments matching the tool's input schema; a string may be "
    '"${other_task.result}" or "${other_task.result.key}" to use a result.',
    "deps": "Ids of tasks that must finish before this one.",
    "expected_output": "What a good result looks like, in words.",
}


def _inline(node: Any, defs: dict[str, Any], in_properties: bool = False) -> Any:
    if isinstance(node, list):
        return [_inline(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    if in_properties:  # a name -> schema map: keep every key, inline the schemas
        return {k: _inline(v, defs) for k, v in node.items()}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = _inline(copy.deepcopy(defs[ref.removeprefix("#/$defs/")]), defs)
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return {**target, **_inline(rest, defs)}
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in ("$defs", "title"):
            continue
        out[k] = _inline(v, defs, in_properties=k == "properties")
    return out


def plan_tool_schema() -> dict[str, Any]:
    """The ``submit_plan`` tool: the Plan JSON schema with ``$defs`` inlined.

    Inlined (no ``$ref``) and without ``title`` noise, so every provider's
    schema subset accepts it; field help is added where the model needs it.
    """
    raw = Plan.model_json_schema()
    schema: dict[str, Any] = _inline(raw, raw.get("$defs", {}))
    schema["description"] = "A goal and the DAG of tasks that reaches it."
    schema["required"] = ["tasks"]
    task = schema["properties"]["tasks"]["items"]
    for name, text in _FIELD_HELP.items():
        task["properties"][name]["description"] = text
    task["required"] = ["id", "tool"]
    return {
        "name": SUBMIT_PLAN,
        "description": "Submit the whole plan (tasks and their dependencies). "
        "Call it exactly once per reply.",
        "input_schema": schema,
    }


_SYSTEM = """\
You are the planner of Argus Lab. You turn a goal into a plan: a DAG of tasks, \
each task one call of one of the tools listed below. Submit the plan by calling \
the submit_plan tool; do not answer in text.

Rules:
- Every task has a unique id (letters, digits and _ . / : -), a tool from the \
list, and args that match that tool's input schema.
- deps lists the ids of tasks that must finish first. The plan must have no cycle.
- An argument may use an earlier task's result: "${task_id.result}" or \
"${task_id.result.key.path}"; a reference implies the dependency. A string that \
is exactly one reference takes the referenced value with its type.
- Keep the plan as small as the goal allows; tasks without a dependency between \
them run concurrently.
- A step that needs judgement rather than a tool can be an LLM task: \
"kind": "llm" with no tool, a description saying what to do, optional \
"llm_tools" (names of tools it may call) and "output_schema" (a JSON Schema of \
its answer).
- "on_failure" may be "fail" (default), "skip", "ask", "replan" or "fallback" \
(with "fallback": another tool's name).
- If the plan you submit is invalid, the problems come back as the tool result: \
fix every one and call submit_plan again with the whole corrected plan.

"""


def _tools_text(tools: dict[str, Tool]) -> str:
    if not tools:
        return (
            "No tools were given: name in each task the tool it should call; only "
            "the plan's structure is checked."
        )
    specs = [t.schema() for t in tools.values()]
    return (
        "Available tools (name, description, input_schema):\n<tools>\n"
        + json.dumps(specs, indent=1, sort_keys=True, ensure_ascii=False)
        + "\n</tools>"
    )


Checker = Callable[[dict[str, Any]], "tuple[Plan | None, list[str]]"]
"""Validates a submitted plan: (plan, []) or (None, problems)."""


class LLMPlanner:
    """Plans a goal with a model, validating and repairing for up to N rounds.

    Args:
        model: Any ``al.llm.Model`` (AnthropicModel, FunctionModel, ReplayModel).
        max_rounds: Model replies to read before giving up.
        retry: How transient errors (429, 529, 5xx, timeouts) are retried.
        on_event: Called with ("llm_call", payload) after every round.
        tool_choice: "force" (``{"type": "tool", "name": "submit_plan"}``),
            "auto" (ask for the call in the prompt), or None to pick by model.
        max_tokens: Output limit per reply; None takes the model's default.

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
    ) -> None:
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
        self.model = model
        self.max_rounds = max_rounds
        self.retry = retry or RetryPolicy()
        self.on_event = on_event
        self.tool_choice = tool_choice
        self.max_tokens = max_tokens
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
        toolset = as_toolset(tools)
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
        err = PlanError(
            f"the LLM planner ({self.model.name}) found no valid plan for "
            f"{goal[:60]!r} in {self.max_rounds} rounds; the last problems:\n- "
            + "\n- ".join(problems)
            + "\nTry more rounds (max_rounds=...), a stronger model, clearer tool "
            "docstrings, or write the plan as YAML."
        )
        err.problems = problems  # type: ignore[attr-defined]
        raise err

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
                self.model, request, policy=self.retry, on_retry=on_retry
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

    def replan(
        self,
        plan: Plan,
        failed_task_id: str,
        *,
        error: str,
        finished: Iterable[str],
        tools: dict[str, Tool] | Iterable[Tool | Callable[..., Any]] = (),
    ) -> PlanPatch:
        """Asks for tasks replacing a failed task and everything after it.

        Finished tasks are immutable: the new tasks may depend on them and use
        their results (``${id.result...}``), never change them. The answer is
        validated like a plan and returned as a patch for the session to apply
        (it blocks the calling thread for the model call).

        Raises:
            PlanError: no valid replacement after ``max_rounds``.
        """
        return run_sync(
            self.areplan(
                plan, failed_task_id, error=error, finished=finished, tools=tools
            )
        )

    async def areplan(
        self,
        plan: Plan,
        failed_task_id: str,
        *,
        error: str,
        finished: Iterable[str],
        tools: dict[str, Tool] | Iterable[Tool | Callable[..., Any]] = (),
    ) -> PlanPatch:
        """``replan`` for async code."""
        from argus_lab.plan.patch import PlanPatch
        from argus_lab.runtime.scheduler import Scheduler

        toolset = tools if isinstance(tools, dict) else as_toolset(tools)
        done = set(finished)
        deps = {t.id: t.deps for t in plan.tasks}
        sched = Scheduler(deps, dict.fromkeys(deps, "pending"))
        removed = [failed_task_id] + [
            t for t in sched.descendants(failed_task_id) if t not in done
        ]
        kept = [t for t in plan.tasks if t.id in done]
        lines = [
            f"- {t.id} ({t.tool or t.kind}): {t.title or t.description}"
            for t in plan.tasks
            if t.id in removed
        ]
        context = (
            f"Task {failed_task_id!r} failed for good: {error}\n"
            "Finished tasks (immutable; you may depend on them and use their "
            "results as ${id.result...}): "
            + (", ".join(sorted(done)) or "none")
            + "\nReplace these not-yet-run tasks with new ones that reach the goal "
            "another way:\n"
            + "\n".join(lines)
            + "\nSubmit ONLY the new tasks. Their ids must not be any of: "
            + ", ".join(sorted(deps))
        )
        taken = set(deps)

        def check(data: dict[str, Any]) -> tuple[Plan | None, list[str]]:
            tasks = data.get("tasks")
            if isinstance(tasks, str):
                with contextlib.suppress(json.JSONDecodeError):
                    tasks = json.loads(tasks)
            if not isinstance(tasks, list):
                return None, ["submit_plan needs a 'tasks' list of the new tasks"]
            ids = {t.get("id") for t in tasks if isinstance(t, dict)}
            clash = sorted(str(i) for i in ids & taken)
            if clash:
                return None, [f"these ids are taken: {', '.join(clash)}; use new ids"]
            # Checked together with the finished tasks they may depend on.
            combined = {
                **data,
                "tasks": [t.model_dump(mode="json") for t in kept] + tasks,
            }
            whole, problems = _check(combined, plan.goal, plan.constraints, toolset)
            if whole is None:
                return None, problems
            return whole.model_copy(
                update={"tasks": [t for t in whole.tasks if t.id in ids]}
            ), []

        new = await self.aplan(
            plan.goal,
            tools=toolset.values(),
            constraints=plan.constraints,
            context=context,
            check=check,
        )
        added: list[Task] = list(new.tasks)
        return PlanPatch(
            added=added,
            removed=removed,
            reason=f"replanned after {failed_task_id!r} failed: {error}",
        )

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
    except PlanError as e:
        problems = getattr(e, "problems", None)
        if not problems:
            text = e.message
            _, _, tail = text.partition(":\n- ")
            problems = tail.split("\n- ") if tail else [text]
        return None, list(problems)
    return plan, []
