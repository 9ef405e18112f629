"""What the magics read from the notebook: cell text, plan bodies, goals, tools.

The ``%%argus`` body gets ``{var}`` replaced by notebook variables
(:func:`interpolate`) and is then either a YAML plan (:func:`as_plan_data`) or
goal text, which for the HTN planner is a task call over notebook variables
(:func:`goal_call`); :func:`plan_cell` makes the plan from it. ``--tools`` and
``--domain`` name notebook variables or importable modules (:func:`find_tools`,
:func:`find_object`). Every function raises IPython's ``UsageError`` with what
to write instead; none keeps state.
"""

from __future__ import annotations

import importlib
import json
import re
import types
from collections.abc import Iterable, Mapping
from typing import Any

from IPython.core.error import UsageError

import argus_lab as al
from argus_lab.errors import ArgusError, PlanError
from argus_lab.tools.registry import Tool, as_toolset

__all__ = [
    "as_plan_data",
    "find_object",
    "find_tools",
    "goal_call",
    "interpolate",
    "plan_cell",
]

_VAR = re.compile(r"\{\{([A-Za-z_]\w*)\}\}|(?<!\$)\{([A-Za-z_]\w*)\}")


def interpolate(text: str, namespace: Mapping[str, Any]) -> str:
    """Replaces ``{name}`` with the value of ``name`` in the namespace.

    Only bare names defined in the namespace are replaced; ``${task.result.x}``
    references, YAML flow mappings and unknown names are left alone, and
    ``{{name}}`` stands for a literal ``{name}``. Strings and numbers are
    inserted as text, anything else as JSON (which is valid YAML).
    """

    def sub(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return "{" + m.group(1) + "}"
        name = m.group(2)
        if name not in namespace:
            return m.group(0)
        v = namespace[name]
        if isinstance(v, str):
            return v
        if isinstance(v, int | float) and not isinstance(v, bool):
            return str(v)
        return json.dumps(v, default=str)

    return _VAR.sub(sub, text)


_TASKS_KEY = re.compile(r"^tasks\s*:", re.MULTILINE)
_PLAN_KEY = re.compile(r"^(tasks|goal)\s*:", re.MULTILINE)


def as_plan_data(body: str, *, guess: bool = True) -> dict[str, Any] | None:
    """The body as plan data when it is a YAML mapping with ``tasks``, else None.

    ``guess``: the body may be goal text too (``--planner auto``): then a
    body that was plainly meant as a plan but is not one is refused rather
    than sent to a planner as a goal (a model would plan, and bill, a typo).

    Raises:
        UsageError: the body has a top-level ``tasks:`` key but is not valid
            YAML (so it was meant as a plan, not as goal text); with
            ``guess``, a ``goal:`` key too, or it is a mapping with plan keys
            and no ``tasks`` (``task:``, ``steps:``, a list of tool calls).
    """
    import yaml

    try:
        data = yaml.safe_load(body)
    except yaml.YAMLError as e:
        if (_PLAN_KEY if guess else _TASKS_KEY).search(body):
            raise UsageError(f"%%argus: the plan is not valid YAML: {e}") from None
        return None
    if not isinstance(data, dict):
        return None
    if "tasks" in data:
        return data
    if guess and (why := _meant_as_plan(data)) is not None:
        raise UsageError(
            f"%%argus: the body is a YAML mapping with no 'tasks' list ({why}), "
            "so it is neither a plan nor goal text; a plan is a mapping with "
            "'goal' and 'tasks' (see Plan.from_yaml); goal text for a planner "
            "is plain text, or pass --planner llm to plan it as it is"
        )
    return None


def _meant_as_plan(data: dict[Any, Any]) -> str | None:
    """Why a mapping without ``tasks`` was meant as a plan, or None (it may be
    goal text that happens to parse, ``Analyse: the penguins``)."""
    import difflib

    keys = [str(k) for k in data]
    for k in keys:
        if k.lower() in ("task", "steps", "step", "todo", "todos") or (
            difflib.get_close_matches(k.lower(), ["tasks"], n=1, cutoff=0.75)
        ):
            return f"did you mean 'tasks' for {k!r}?"
    for k, v in data.items():
        if (
            isinstance(v, list)
            and v
            and all(isinstance(t, dict) and ("tool" in t or "id" in t) for t in v)
        ):
            return f"{str(k)!r} lists tasks: name that key 'tasks'"
    if "goal" in keys and len(keys) > 1:
        return "it has 'goal' and " + ", ".join(repr(k) for k in keys if k != "goal")
    return None


def goal_call(
    text: str, ns: Mapping[str, Any]
) -> tuple[str, list[Any], dict[str, Any]]:
    """An HTN goal written as a call, ``trip("alice", "paris", days=2)`` or a bare
    task name; arguments are Python expressions over the notebook's variables."""
    import ast

    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        node = None
    if isinstance(node, ast.Name):
        return node.id, [], {}
    if (
        not isinstance(node, ast.Call)
        or not isinstance(node.func, ast.Name)
        or any(isinstance(x, ast.Starred) for x in node.args)
        or any(k.arg is None for k in node.keywords)
    ):
        raise UsageError(
            "%%argus --planner htn: write the goal as a task call, e.g. "
            f"trip('alice', 'paris', days=2), not {text.strip()[:60]!r}"
        )

    def value(expr: ast.expr) -> Any:
        code = compile(ast.Expression(expr), "<%%argus goal>", "eval")
        # eval is the point: the goal's arguments are the user's own notebook code.
        return eval(code, dict(ns))

    args = [value(x) for x in node.args]
    kwargs = {str(k.arg): value(k.value) for k in node.keywords}
    return node.func.id, args, kwargs


def _tools_in(obj: Any, name: str) -> list[Any]:
    if isinstance(obj, Tool):
        return [obj]
    if isinstance(obj, types.ModuleType):
        listed = getattr(obj, "TOOLS", None)
        if isinstance(listed, list | tuple):
            return list(listed)
        tools = [v for v in vars(obj).values() if isinstance(v, Tool)]
        if not tools:
            raise UsageError(f"--tools {name!r}: module has no al.tool objects")
        return tools
    if isinstance(obj, Iterable) and not isinstance(obj, str | bytes | Mapping):
        items = list(obj)
        if all(isinstance(t, Tool) or callable(t) for t in items):
            return items
    elif callable(obj):
        return [obj]
    raise UsageError(
        f"--tools {name!r} is a {type(obj).__name__}, not a tool, a list of tools "
        "or a module"
    )


def find_tools(spec: str, ns: Mapping[str, Any]) -> dict[str, Tool]:
    """The tools ``--tools SPEC`` names, by name.

    SPEC is comma-separated notebook variables (a tool or a list of tools) or
    importable modules; empty: every al.tool defined in the notebook.
    """
    if not spec:
        # Every tool defined in the notebook; when two share a name (a tool
        # redefined under a new variable) the one defined last wins.
        latest: dict[str, Tool] = {}
        for k, v in ns.items():
            if isinstance(v, Tool) and not k.startswith("_"):
                latest[v.name] = v
        return latest
    found: list[Tool | Any] = []
    for name in (n.strip() for n in spec.split(",")):
        if not name:
            continue
        if name in ns:
            found += _tools_in(ns[name], name)
            continue
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            raise UsageError(
                f"--tools {name!r} is neither a variable of this notebook nor an "
                f"importable module ({e})"
            ) from None
        found += _tools_in(mod, name)
    try:
        return as_toolset(found)
    except (TypeError, ValueError) as e:
        raise UsageError(f"--tools: {e}") from None


def find_object(ref: str, flag: str, ns: Mapping[str, Any]) -> Any:
    """The object ``flag REF`` names: ``MODULE:OBJ`` or a notebook variable."""
    if ":" not in ref:
        if ref in ns:
            return ns[ref]
        raise UsageError(
            f"{flag} {ref!r}: write MODULE:OBJ or the name of a notebook variable"
        )
    mod_name, _, attr = ref.partition(":")
    try:
        return getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise UsageError(f"{flag} {ref!r}: {e}") from None


def plan_cell(
    body: str,
    *,
    planner: str,
    name: str | None,
    domain: str | None,
    model: str,
    tools: dict[str, Tool],
    ns: Mapping[str, Any],
) -> tuple[al.Plan, Any]:
    """The plan a ``%%argus`` body becomes, and the planner that made it.

    Args:
        body: The cell body, already interpolated.
        planner: "auto", "yaml", "htn" or "llm"; auto: a YAML plan body as it
            is, goal text with ``domain`` by HTN, else by the LLM planner.
        name: The session name (a YAML plan without a goal gets it).
        domain: ``--domain``: MODULE:OBJ or a notebook variable.
        model: Model name or notebook variable for the LLM planner ("": default).
        tools: The tools the LLM planner may plan with.
        ns: The notebook's namespace.

    Returns:
        The plan, and the HTN or LLM planner the session should keep (to expand,
        backtrack and replan with), or None for a YAML plan.

    Raises:
        UsageError: the body, the options or the planning failed, saying why.
    """
    data = as_plan_data(body, guess=planner in ("auto", "yaml"))
    if planner == "auto":
        planner = "yaml" if data is not None else ("htn" if domain else "llm")
    try:
        if planner == "yaml":
            if data is None:
                raise UsageError(
                    "%%argus --planner yaml: the body is not a YAML plan (a "
                    "mapping with a 'tasks' list); see Plan.from_yaml"
                )
            plan = al.Plan.from_dict(data)
            if name and not plan.goal:
                plan = plan.model_copy(update={"goal": name})
            return plan, None
        goal = body.strip()
        if planner == "htn":
            return _plan_htn(goal, domain, ns)
        return _plan_llm(goal, model, tools, ns)
    except (PlanError, TypeError) as e:
        raise UsageError(f"%%argus: {e}") from None
    except ArgusError as e:  # e.g. no API key: say it plainly, no traceback
        raise UsageError(f"%%argus: planning failed: {e}") from None


def _plan_htn(
    goal: str, domain_ref: str | None, ns: Mapping[str, Any]
) -> tuple[al.Plan, Any]:
    if not domain_ref:
        raise UsageError("%%argus --planner htn needs --domain MODULE:OBJ")
    domain = find_object(domain_ref, "--domain", ns)
    task, args, kwargs = goal_call(goal, ns)
    # The session expands lazy compounds and backtracks with the same planner.
    planner = al.HTNPlanner(domain)
    plan: al.Plan = planner.plan(task, *args, **kwargs)
    return plan, planner


def _plan_llm(
    goal: str, model: str, tools: dict[str, Tool], ns: Mapping[str, Any]
) -> tuple[al.Plan, Any]:
    if model and model in ns and not isinstance(ns[model], str):
        llm = ns[model]  # a model object, e.g. a ReplayModel for offline runs
    else:
        llm = al.AnthropicModel(model) if model else al.AnthropicModel()
    # The session records the planning calls and replans with this planner.
    planner = al.LLMPlanner(llm)
    plan: al.Plan = planner.plan(goal, tools=list(tools.values()))
    return plan, planner
