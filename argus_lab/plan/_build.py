"""The HTN planner's tree of nodes made into plan tasks, and what it remembers.

``HTNPlanner`` (``argus_lab.plan.htn``) builds on ``_Build``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from argus_lab.model import Task
from argus_lab.plan._decompose import _Node, _Search
from argus_lab.plan._model import Plan
from argus_lab.plan._subtask import Subtask, call_text
from argus_lab.plan.graph import EXPAND_TOOL


@dataclass(slots=True)
class CompoundInfo:
    """What the planner remembers of a compound task, for run-time backtracking."""

    id: str
    """The compound's id (the prefix of its subtree's task ids)."""
    task: Subtask
    """The compound task with its arguments."""
    parent: str | None
    """The enclosing compound's id."""
    state: Any = None
    """The planning state it was decomposed in (None after ``restore``)."""
    methods: list[str] = field(default_factory=list)
    """Methods chosen for it so far, in order (the last is the current one)."""


class _Build(_Search):
    """``HTNPlanner``'s tree-to-tasks step, and its memory of compounds and ids.

    The attributes are ``HTNPlanner``'s (set in its ``__init__``).
    """

    compounds: dict[str, CompoundInfo]
    _issued: set[str]

    # -- from the tree to tasks ------------------------------------------------

    def _build(self, roots: list[_Node]) -> tuple[list[Task], list[str]]:
        """Tasks in depth-first order with their deps, and the roots' sinks.

        A subtask with sibling deps waits for those siblings' sinks; one without
        inherits its compound's deps; a compound's sinks are its undepended
        children's sinks (an empty one passes its own deps through).
        """
        eff: dict[int, list[str]] = {}
        sinks: dict[int, list[str]] = {}
        tasks: list[Task] = []
        stack: list[tuple[_Node, bool]] = [(r, False) for r in reversed(roots)]
        while stack:
            node, leaving = stack.pop()
            if leaving:
                sinks[id(node)] = (
                    _sinks_of(node.children, sinks) if node.children else eff[id(node)]
                )
                continue
            if node.sib_deps:
                deps = _union(sinks[id(d)] for d in node.sib_deps)
            elif node.parent is not None:
                deps = eff[id(node.parent)]
            else:
                deps = list(node.ext_deps)
            eff[id(node)] = deps
            if node.kind == "compound":
                stack.append((node, True))
                stack.extend((c, False) for c in reversed(node.children))
            else:
                sinks[id(node)] = [node.id]
                tasks.append(self._task(node, deps))
        return tasks, _sinks_of(roots, sinks)

    def _task(self, node: _Node, deps: list[str]) -> Task:
        if node.kind == "op":
            op = self.domain.operators[node.spec.task]
            return Task(
                id=node.id,
                tool=op.tool,
                args=node.tool_args,
                deps=deps,
                parent=node.group,
                retries=op.retries,
                timeout=op.timeout,
                description=op.description,
            )
        decl = self.domain.compounds[node.spec.task]
        return Task(
            id=node.id,
            title=f"{call_text(_spec(node), 80)} (expands when ready)",
            description=decl.description
            or "HTN compound task, decomposed when it becomes ready",
            tool=EXPAND_TOOL,
            args={
                "task": node.spec.task,
                "args": list(node.args),
                "kwargs": dict(node.kwargs),
            },
            deps=deps,
            parent=node.group,
        )

    def _remember(self, roots: list[_Node]) -> None:
        stack = list(roots)
        while stack:
            node = stack.pop()
            self._issued.add(node.id)
            if node.kind != "op" and not node.continuation:
                self.compounds[node.id] = CompoundInfo(
                    node.id,
                    _spec(node),
                    node.group,
                    node.state,
                    [node.method] if node.method else [],
                )
            stack.extend(node.children)

    def _taken(self, plan: Plan, reserved: Collection[str]) -> set[str]:
        taken = self._issued | set(reserved)
        for t in plan.tasks:
            taken.add(t.id)
            parts = t.id.split("/")
            taken.update("/".join(parts[:i]) for i in range(1, len(parts)))
        return taken


# -- helpers -------------------------------------------------------------------


def _spec(node: _Node) -> Subtask:
    """The node's task call with sibling references rewritten to plan ids."""
    return Subtask(node.spec.task, *node.args, **node.kwargs)


def _union(lists: Iterable[list[str]]) -> list[str]:
    return list(dict.fromkeys(x for xs in lists for x in xs))


def _sinks_of(nodes: list[_Node], sinks: dict[int, list[str]]) -> list[str]:
    depended = {id(d) for n in nodes for d in n.sib_deps}
    return _union(sinks[id(n)] for n in nodes if id(n) not in depended)
