"""Hybrid HTN planning: a model decomposes compound tasks no method covers.

``HTNDomain(..., decomposer=LLMDecomposer(model))`` (or per compound) asks the
model, only after every hand-written method was rejected, for the subtasks of
the compound: operators and compounds of the domain, with their arguments and
an order. The planner validates its answer exactly as a method's; an invalid
answer is rejected with the reason, recorded among the HTN decisions.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from argus_lab.plan.domain import HTNContext, Subtask

if TYPE_CHECKING:
    from argus_lab.llm.base import Model

__all__ = ["SUBMIT_SUBTASKS", "LLMDecomposer"]

SUBMIT_SUBTASKS = "submit_subtasks"
_SCHEMA = {
    "type": "object",
    "properties": {
        "subtasks": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "operator or compound"},
                    "args": {"type": "array", "description": "positional arguments"},
                    "id": {"type": "string", "description": "local id (optional)"},
                    "deps": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "local ids of earlier subtasks to wait for; "
                        "omit to run after the previous one, [] to run at once",
                    },
                },
                "required": ["task"],
            },
        },
        "not_applicable": {
            "type": "string",
            "description": "set instead of subtasks when the task cannot be done",
        },
    },
}


class LLMDecomposer:
    """A decomposer that asks a model (the LLM side of hybrid HTN).

    Args:
        model: Any ``al.llm`` Model (AnthropicModel, FunctionModel, ReplayModel).
        max_tokens: The reply's token limit.

    Attributes:
        calls: One dict per model call (the ``llm_call`` payload fields), so a
            session or notebook can account for tokens and cost.
    """

    def __init__(self, model: Model, *, max_tokens: int | None = None) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.calls: list[dict[str, Any]] = []
        self.__name__ = "llm_decomposer"  # named in the HTN decisions

    def _prompt(self, ctx: HTNContext) -> str:
        dom = ctx.domain
        ops = []
        for name, op in dom.operators.items():
            params = ", ".join(op.params) if isinstance(op.params, tuple) else "..."
            ops.append(f"- {name}({params}): {op.description or 'tool ' + op.tool}")
        compounds = [f"- {name}" for name in dom.compounds]
        call = f"{ctx.task.task}({', '.join(map(repr, ctx.task.args))})"
        parts = [
            f"Decompose the task {call} of the HTN domain {dom.name!r} into "
            f"subtasks, and call {SUBMIT_SUBTASKS}.",
            "Operators (primitive steps):\n" + "\n".join(ops),
        ]
        if compounds:
            parts.append(
                "Compound tasks (decomposed further):\n" + "\n".join(compounds)
            )
        if ctx.results:
            shown = {k: ctx.results[k] for k in list(ctx.results)[:20]}
            parts.append("Results so far: " + json.dumps(shown, default=str)[:4000])
        return "\n\n".join(parts)

    def __call__(
        self, ctx: HTNContext, *args: Any, **kwargs: Any
    ) -> list[Subtask] | None:
        from argus_lab.llm.base import Message, ModelRequest, run_sync
        from argus_lab.llm.recording import recorded

        req = ModelRequest(
            messages=[Message.user(self._prompt(ctx))],
            system="You are the fallback planner of an HTN domain: you break a "
            "task no hand-written method covers into the domain's steps.",
            tools=[
                {
                    "name": SUBMIT_SUBTASKS,
                    "description": "Submit the subtasks, in order.",
                    "input_schema": _SCHEMA,
                }
            ],
            max_tokens=self.max_tokens,
            purpose="decompose",
        )
        resp = run_sync(recorded(self.model).complete(req))
        self.calls.append(resp.event_payload("decompose"))
        use = next((u for u in resp.tool_uses if u.name == SUBMIT_SUBTASKS), None)
        if use is None:
            ctx.reject("the model did not call submit_subtasks")
        data = use.input
        if data.get("not_applicable"):
            ctx.reject(f"the model says: {data['not_applicable']}")
        out: list[Subtask] = []
        for item in data.get("subtasks") or []:
            if not isinstance(item, dict) or not isinstance(item.get("task"), str):
                ctx.reject(f"a subtask is not an object with a task name: {item!r}")
            out.append(
                Subtask(
                    item["task"],
                    *(item.get("args") or []),
                    id=item.get("id"),
                    deps=item.get("deps"),
                )
            )
        if not out:
            ctx.reject("the model proposed no subtasks")
        return out
