"""Plan validation, ``${task.result.path}`` references and the networkx view."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from argus_lab.errors import PlanError, UnresolvedReferenceError
from argus_lab.model import Task
from argus_lab.plan._model import Plan
from argus_lab.plan._refs import (
    REFERENCE,
    Reference,
    iter_references,
    sub_references,
    whole_reference,
)
from argus_lab.plan._text import check_json

if TYPE_CHECKING:
    import networkx as nx

    from argus_lab.tools.registry import Tool

EXPAND_TOOL = "htn:expand"
"""The tool name of a lazy HTN compound waiting to be expanded (never a real tool)."""

__all__ = [
    "EXPAND_TOOL",
    "REFERENCE",
    "Reference",
    "descendants",
    "find_cycle",
    "iter_references",
    "plan_graph",
    "resolve_args",
    "sub_references",
    "validate_plan",
    "whole_reference",
]

_UNREFERABLE = re.compile(r"\.result(?:\.|$)")
"""An id that holds ``.result.`` or ends in ``.result``: references split there."""


def _arg_names_with_refs(args: dict[str, Any]) -> set[str]:
    return {k for k, v in args.items() if any(True for _ in iter_references(v))}


def descendants(deps: Mapping[str, Iterable[str]], task_id: str) -> list[str]:
    """Every task downstream of ``task_id``, in breadth-first order.

    Args:
        deps: Task id -> the ids it depends on (a plan's ``deps``).
        task_id: Where to start.
    """
    children: dict[str, list[str]] = {}
    for t, ds in deps.items():
        for d in ds:
            children.setdefault(d, []).append(t)
    seen: dict[str, None] = {}
    frontier = list(children.get(task_id, ()))
    while frontier:
        nxt: list[str] = []
        for c in frontier:
            if c not in seen:
                seen[c] = None
                nxt.extend(children.get(c, ()))
        frontier = nxt
    return list(seen)


def find_cycle(deps: dict[str, list[str]]) -> list[str] | None:
    """Returns one cycle as [a, b, ..., a] in dependency order, or None if acyclic."""
    color: dict[str, int] = {}  # 1 = on the DFS stack, 2 = finished
    for root in deps:
        if color.get(root):
            continue
        stack: list[tuple[str, Iterator[str]]] = [(root, iter(deps.get(root, ())))]
        path = [root]
        color[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                path.pop()
                color[node] = 2
                continue
            if nxt not in deps:
                continue
            state = color.get(nxt)
            if state == 1:
                cycle = [*path[path.index(nxt) :], nxt]
                # deps point backwards in time: reverse to read "a runs before b"
                return cycle[::-1]
            if state is None:
                color[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(deps.get(nxt, ()))))
    return None


def validate_plan(plan: Plan, tools: dict[str, Tool] | None = None) -> Plan:
    """Validates a plan and returns a copy whose deps include referenced tasks.

    Raises:
        PlanError: listing every problem, each naming the tasks involved.
    """
    problems: list[str] = []
    ids: set[str] = set()
    for t in plan.tasks:
        if t.id in ids:
            problems.append(f"duplicate task id {t.id!r}: each task needs its own id")
        ids.add(t.id)
        if (m := _UNREFERABLE.search(t.id)) is not None:
            cut = m.start()
            problems.append(
                f"task id {t.id!r} cannot be referenced: ${{{t.id}.result}} reads "
                f"as the result of task {t.id[:cut]!r}; rename it (e.g. "
                f"{t.id.replace('.result', '_result')!r})"
            )

    new_tasks: list[Task] = []
    deps_map: dict[str, list[str]] = {}
    for t in plan.tasks:
        try:  # made in Python (an HTN operator, a patch): JSON only, as from a file
            check_json({"args": t.args}, name=f"task {t.id!r}")
        except PlanError as e:
            problems.append(e.message)
            new_tasks.append(t)
            continue
        problems += _schema_problems(t)
        if t.on_failure == "fallback" and t.fallback and t.fallback == t.tool:
            problems.append(
                f"task {t.id!r} falls back to its own tool {t.tool!r}, which would "
                "fail the same way; name another tool as its fallback"
            )
        deps = list(dict.fromkeys(t.deps))  # a dependency named twice counts once
        for text, ref in iter_references(t.args):
            if ref is None:
                problems.append(
                    f"task {t.id!r} has a bad reference {text}: "
                    + ("close it with '}'; " if not text.endswith("}") else "")
                    + "write ${TASK.result}, ${TASK.result.key.path} or "
                    + "${env.NAME}, or $${ for a literal ${ (as in 'echo $${HOME}')"
                )
            elif any("[" in p or "]" in p for p in ref.path):
                dotted = re.sub(r"\[\s*(-?\w+)\s*\]", r".\1", text)
                problems.append(
                    f"task {t.id!r} has a bad reference {text}: a list index is "
                    f"one more path part, as in {dotted}"
                )
            elif ref.is_env:
                continue
            elif ref.task_id == t.id:
                problems.append(f"task {t.id!r} references its own result in {text}")
            elif ref.task_id not in ids:
                problems.append(
                    f"task {t.id!r} references {text}, but there is no task "
                    f"{ref.task_id!r} in the plan"
                )
            elif ref.task_id not in deps:
                deps.append(ref.task_id)
        for d in t.deps:
            if d not in ids:
                problems.append(
                    f"task {t.id!r} depends on {d!r}, which is not in the plan"
                )
            elif d == t.id:
                problems.append(f"task {t.id!r} depends on itself")
        deps_map[t.id] = [d for d in deps if d in ids and d != t.id]
        new_tasks.append(t if deps == t.deps else t.model_copy(update={"deps": deps}))

    cycle = find_cycle(deps_map)
    if cycle is not None:
        problems.append("cycle: " + " -> ".join(cycle))

    if tools is not None:
        known = ", ".join(sorted(tools)) or "(none registered)"
        for t in plan.tasks:
            if t.tool == EXPAND_TOOL:
                continue  # expanded by the session's HTN planner when it is ready
            if t.kind == "llm":
                for name in t.llm_tools:
                    if name not in tools:
                        problems.append(
                            f"LLM task {t.id!r} may call tool {name!r}, which is not "
                            f"registered; known tools: {known}"
                        )
                continue
            if t.tool is None:
                problems.append(f"task {t.id!r} names no tool; known tools: {known}")
                continue
            tool = tools.get(t.tool)
            if tool is None:
                problems.append(
                    f"task {t.id!r} uses tool {t.tool!r}, which is not registered; "
                    f"known tools: {known}"
                )
                continue
            for p in tool.check_args(t.args, deferred=_arg_names_with_refs(t.args)):
                problems.append(f"task {t.id!r}: {p}")
            if t.on_failure == "fallback" and t.fallback not in tools:
                problems.append(
                    f"task {t.id!r} falls back to tool {t.fallback!r}, which is not "
                    f"registered; known tools: {known}"
                )

    if problems:
        head = f"plan {plan.goal[:60]!r} is invalid" if plan.goal else "invalid plan"
        raise PlanError(head + ":\n- " + "\n- ".join(problems), problems=problems)
    return plan.model_copy(update={"tasks": new_tasks})


def _schema_problems(t: Task) -> list[str]:
    """A schema that is not JSON Schema would accept or refuse every result."""
    out = []
    for field, schema in (("output_schema", t.output_schema), ("success", t.success)):
        if schema is None:
            continue
        import jsonschema

        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as e:
            at = "".join(f"[{p!r}]" for p in e.path)
            out.append(
                f"task {t.id!r}: {field}{at} is not valid JSON Schema: {e.message}"
            )
    return out


def _walk(value: Any, ref: Reference) -> Any:
    if ref.is_env:
        name = ref.path[0]
        if name not in os.environ:
            raise UnresolvedReferenceError(
                f"{ref.text}: environment variable {name} is not set in the "
                "process running the session"
            )
        return os.environ[name]
    cur = value
    walked: list[str] = []
    for part in ref.path:
        if isinstance(cur, dict):
            if part not in cur:
                keys = ", ".join(map(str, list(cur)[:20]))
                at = ".".join(walked) or "the top"
                raise UnresolvedReferenceError(
                    f"{ref.text}: the result of {ref.task_id!r} has no key "
                    f"{part!r} at {at} (keys: {keys})"
                )
            cur = cur[part]
        elif isinstance(cur, list) and part.lstrip("-").isdigit():
            i = int(part)
            if not -len(cur) <= i < len(cur):
                raise UnresolvedReferenceError(
                    f"{ref.text}: index {i} is out of range for a list of {len(cur)}"
                )
            cur = cur[i]
        else:
            raise UnresolvedReferenceError(_not_found_in(cur, part, walked, ref))
        walked.append(part)
    return cur


def _not_found_in(cur: Any, part: str, walked: list[str], ref: Reference) -> str:
    """Why ``part`` cannot be looked up in ``cur`` (no mapping, or a list
    given a key), with the reference that reaches what is there."""
    at = "${" + ".".join([ref.task_id, "result", *walked]) + "}"
    kind = type(cur).__name__
    if isinstance(cur, list):
        return (
            f"{ref.text}: {at} is a list of {len(cur)}: look its items up by "
            f"index ({at[:-1]}.0}}), not by {part!r}"
        )
    shown = repr(cur)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    article = "an" if kind[:1] in "aeiou" else "a"
    return (
        f"{ref.text}: {at} is {article} {kind} ({shown}), not a mapping: it "
        f"has no {part!r}; refer to {at} for the value itself"
    )


def resolve_args(args: Any, result_of: Callable[[str], Any]) -> Any:
    """Replaces references with dependency results.

    A string that is exactly one reference becomes the referenced value with its
    type; references inside longer strings are interpolated as text. ``$${``
    becomes a literal ``${`` (``plan/_refs.py``).

    Raises:
        UnresolvedReferenceError: naming the reference and what was missing.
    """
    if isinstance(args, str):
        if "${" not in args:
            return args
        ref = whole_reference(args)
        if ref is not None:
            return _walk(None if ref.is_env else result_of(ref.task_id), ref)

        def sub(ref: Reference | None, _: str) -> str | None:
            if ref is None:
                return None
            v = _walk(None if ref.is_env else result_of(ref.task_id), ref)
            return v if isinstance(v, str) else _json_text(v)

        return sub_references(args, sub, unescape=True)
    if isinstance(args, dict):
        return {k: resolve_args(v, result_of) for k, v in args.items()}
    if isinstance(args, list):
        return [resolve_args(v, result_of) for v in args]
    return args


def _json_text(v: Any) -> str:
    import json

    return json.dumps(v, ensure_ascii=False)


def plan_graph(plan: Plan) -> nx.DiGraph:
    """Returns the plan as a DiGraph (edges dep -> task; node attrs from Task)."""
    import networkx as nx

    g = nx.DiGraph(goal=plan.goal, constraints=list(plan.constraints))
    for t in plan.tasks:
        g.add_node(t.id, **t.model_dump(exclude={"id"}))
    for t in plan.tasks:
        refs = iter_references(t.args)
        deps = set(t.deps) | {r.task_id for _, r in refs if r and not r.is_env}
        for d in deps:
            if d in g:
                g.add_edge(d, t.id)
    return g
