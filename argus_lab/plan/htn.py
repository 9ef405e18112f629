"""HTN planning: a goal decomposed into a Plan, expanded lazily, repaired at run time.

```python
planner = HTNPlanner(domain, max_backtracks=3, on_decision=print)
plan = planner.plan("trip", "alice", "home", "paris", 2)   # or ("trip", ...)
```

**Ids.** A subtask's id is ``<parent compound id>/<local id>``, e.g.
``trip/to_airport/call_taxi``, and its ``Task.parent`` is the compound's id, so
a subtree is every task whose ``parent`` is the compound or starts with it plus
``/``. Compound tasks are not tasks of the plan (they call no tool); only their
leaves are. A method whose last subtask is the same compound again (GTPyhop's
loop idiom, ``[("move_one", b, to), ("achieve", goal)]``) continues at the
same level, so loops give ``achieve/move_one``, ``achieve/move_one-2`` ... and
never ids too deep to store.

**Lazy compounds** stay in the plan as one placeholder Task with
``tool == EXPAND_TOOL`` (``"htn:expand"``, a name no tool can have) and args
``{"task": name, "args": [...], "kwargs": {...}}``. ``${...}`` references in
those args make the placeholder depend on what it needs.

**The Session's part** (run time):

- When a placeholder becomes ready: ``patch = planner.expand(plan, task_id,
  results)`` with the results of (at least) its dependencies, then
  ``plan = apply_patch(plan, patch, protected=finished)``. A PlanError from
  ``expand`` means no method applies: fail the placeholder and repair.
- When a task fails permanently: ``patch = planner.repair(plan, task_id,
  protected=finished, dep_results=results)`` walks up its compounds and returns
  the first one's next applicable method as a patch (None: none left within
  ``max_backtracks`` each). Its finished tasks stay in the plan; the rest of the
  old subtree goes; the new subtree takes new ids, and whoever depended on the
  old subtree now depends on the new one.
- Every decision reaches ``on_decision(payload)``: commit it as an
  ``htn_decision`` event. After a restart, ``planner.restore(payloads)``
  rebuilds what ``backtrack`` needs to know about compounds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from argus_lab.errors import PlanError, UnresolvedReferenceError
from argus_lab.model import Task
from argus_lab.plan._build import CompoundInfo
from argus_lab.plan._decompose import _Node
from argus_lab.plan._model import Plan
from argus_lab.plan._repair import _Repair, _replace, _results_of
from argus_lab.plan._subtask import NotApplicable, Subtask, SubtaskLike, call_text
from argus_lab.plan.domain import HTNContext, HTNDomain
from argus_lab.plan.graph import (
    EXPAND_TOOL,
    Reference,
    _walk,
    sub_references,
    validate_plan,
    whole_reference,
)
from argus_lab.plan.patch import PlanPatch, apply_patch

__all__ = [
    "EXPAND_TOOL",
    "CompoundInfo",
    "HTNContext",
    "HTNDomain",
    "HTNPlanner",
    "NotApplicable",
    "PlanPatch",
    "Subtask",
    "apply_patch",
    "is_placeholder",
]


def is_placeholder(task: Task) -> bool:
    """Whether a task is a lazy compound waiting for ``HTNPlanner.expand``."""
    return task.tool == EXPAND_TOOL


class HTNPlanner(_Repair):
    """Plans goals with an HTNDomain: eagerly ahead, lazily and by repair at run time.

    Args:
        domain: Operators, compound tasks and methods.
        max_backtracks: Run-time re-decompositions allowed per compound (its
            first method plus this many others). Planning ahead backtracks
            without this bound, like GTPyhop.
        max_expansions: Method calls one search may make before giving up (a
            guard against domains that recurse forever).
        on_decision: Called with each decision's payload as it is made.

    Attributes:
        decisions: Every decision so far, oldest first: dicts with compound,
            task, call, method, decision (tried, chosen, rejected, backtracked),
            reason and phase (plan, expand, backtrack); a chosen one also has
            args, kwargs, parent and subtasks.
        compounds: What ``backtrack`` knows of each compound, by id.
    """

    def __init__(
        self,
        domain: HTNDomain,
        *,
        max_backtracks: int = 3,
        max_expansions: int = 100_000,
        on_decision: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if not isinstance(domain, HTNDomain):
            raise TypeError(
                f"HTNPlanner needs an al.HTNDomain, got {type(domain).__name__}: "
                "d = al.HTNDomain('name'), then d.operator(...) and @d.method(...)"
            )
        if max_backtracks < 0:
            raise ValueError(f"max_backtracks must be >= 0, got {max_backtracks}")
        self.domain = domain
        self.max_backtracks = max_backtracks
        self.max_expansions = max_expansions
        self.on_decision = on_decision
        self.decisions: list[dict[str, Any]] = []
        self.compounds: dict[str, CompoundInfo] = {}
        self._issued: set[str] = set()
        self._calls = 0

    def __repr__(self) -> str:
        return f"<HTNPlanner {self.domain.name} max_backtracks={self.max_backtracks}>"

    # -- the entry points (backtrack, repair, restore: see _repair) ----------

    def plan(
        self,
        goal: SubtaskLike | Sequence[SubtaskLike],
        *args: Any,
        state: Any = None,
        **kwargs: Any,
    ) -> Plan:
        """Decomposes a goal into a validated Plan, as far as it can ahead of time.

        Args:
            goal: A task name (its arguments follow, positional and keyword), a
                ``(task, *args)`` tuple, a Subtask, or a list of those (done in
                list order, as a method's subtasks are).
            *args: Positional arguments of the goal task, after a name.
            state: The planning state operators' effects update (GTPyhop style);
                None skips effects.
            **kwargs: Keyword arguments of the goal task, after a name.

        Returns:
            The plan; its goal text is the goal call, e.g. ``trip('alice', ...)``.

        Raises:
            PlanError: when no decomposition exists (naming the first blocker;
                ``decisions`` has every step) or a method returns bad subtasks.
        """
        if isinstance(goal, str):
            items: list[SubtaskLike] = [Subtask(goal, *args, **kwargs)]
        elif args or kwargs:
            raise TypeError(
                "give the goal's arguments either after its name or inside the "
                "tuple/Subtask, not both"
            )
        elif isinstance(goal, Subtask | tuple):
            items = [goal]
        elif isinstance(goal, list):
            items = goal
        else:
            raise TypeError(
                f"goal must be a task name, tuple, Subtask or list: {goal!r}"
            )
        top = _Node(Subtask("goal"), "compound", "", None, None, [])
        roots = self._children(top, items, set(), "the goal")
        text = "; ".join(call_text(r.spec) for r in roots)
        self._search(roots, state, "plan", set(), text)
        tasks, _ = self._build(roots)
        self._remember(roots)
        return validate_plan(Plan(goal=text, tasks=tasks))

    def expand(
        self,
        plan: Plan,
        task_id: str,
        dep_results: Mapping[str, Any],
        *,
        reserved: Collection[str] = (),
    ) -> PlanPatch:
        """Decomposes a lazy placeholder now that its dependencies have results.

        Args:
            plan: The current plan.
            task_id: The placeholder task (``tool == EXPAND_TOOL``).
            dep_results: Results by task id; needs at least the placeholder's
                deps (a lazy mapping over the session's records will do).
            reserved: Ids that new tasks must not take (ids used before).

        Returns:
            A patch removing the placeholder and adding its subtree; whatever
            depended on the placeholder now depends on the subtree's last tasks.

        Raises:
            PlanError: when it is not a placeholder, a result it references is
                missing, or no method applies (the placeholder then failed).
        """
        t = plan.task(task_id)
        if t.tool != EXPAND_TOOL:
            raise PlanError(
                f"task {task_id!r} is not an HTN placeholder (its tool is "
                f"{t.tool!r}, not {EXPAND_TOOL!r})",
                task_id=task_id,
            )
        a = t.args
        if not isinstance(a.get("task"), str) or set(a) - {"task", "args", "kwargs"}:
            raise PlanError(
                f"placeholder {task_id!r} needs args {{task, args, kwargs}}, got {a}",
                task_id=task_id,
            )
        try:
            args = _resolve(list(a.get("args", [])), dep_results, task_id)
            kwargs = _resolve(dict(a.get("kwargs", {})), dep_results, task_id)
        except UnresolvedReferenceError as e:
            raise PlanError(
                f"cannot expand {task_id!r}: {e}", task_id=task_id
            ) from None
        spec = Subtask(a["task"], *args, **kwargs)
        if self.domain.kind(spec.task) != "compound":
            raise PlanError(
                f"placeholder {task_id!r} names {spec.task!r}, which is not a "
                f"compound task of {self.domain.name!r} ({self.domain.known()})",
                task_id=task_id,
            )
        info = self.compounds.get(task_id)
        root = _Node(spec, "compound", task_id, None, t.parent, [], args=tuple(args))
        root.kwargs = kwargs
        root.ext_deps = list(t.deps)
        root.results = _results_of(t.deps, dep_results, t.parent)
        taken = self._taken(plan, reserved)
        state = info.state if info else None
        self._search([root], state, "expand", taken, call_text(spec))
        tasks, sinks = self._build([root])
        self._remember([root])
        rewired = {
            o.id: _replace(o.deps, {task_id}, sinks)
            for o in plan.tasks
            if task_id in o.deps
        }
        return PlanPatch(
            added=tasks,
            removed=[task_id],
            rewired=rewired,
            reason=f"expanded {call_text(spec)} by {root.method}",
            compound=task_id,
            method=root.method,
        )


# -- helpers -------------------------------------------------------------------


def _resolve(value: Any, results: Mapping[str, Any], task_id: str) -> Any:
    """Replaces result references by values; ``${env.X}`` stays for the tools."""

    def result_of(tid: str) -> Any:
        if tid not in results:
            raise UnresolvedReferenceError(f"it needs the result of {tid!r}, not given")
        return results[tid]

    if isinstance(value, str):
        ref = whole_reference(value)
        if ref is not None and not ref.is_env:
            return _walk(result_of(ref.task_id), ref)

        def sub(r: Reference | None, _: str) -> str | None:
            if r is None or r.is_env:
                return None
            v = _walk(result_of(r.task_id), r)
            return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)

        # Escapes stay as written: the task's args are resolved again to run.
        return sub_references(value, sub, unescape=False)
    if isinstance(value, dict):
        return {k: _resolve(v, results, task_id) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_resolve(v, results, task_id) for v in value]
    return value
