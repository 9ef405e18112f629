"""The ``LLMPlanner`` prompt: the system prompt, the ``submit_plan`` tool schema, and
which models accept a forced ``tool_choice``.

Any change here changes request hashes, so recorded replay caches stop matching.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from argus_lab.plan._model import Plan
from argus_lab.tools.registry import Tool

__all__ = ["SUBMIT_PLAN", "accepts_forced_tool_choice", "plan_tool_schema"]

SUBMIT_PLAN = "submit_plan"

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
    '"${other_task.result}" or "${other_task.result.key}" to use a result; '
    'write "$${" for a literal "${" (e.g. "echo $${HOME}").',
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
is exactly one reference takes the referenced value with its type. Write "$${" \
for a literal "${" that is no reference (a shell command's "echo $${HOME}").
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
