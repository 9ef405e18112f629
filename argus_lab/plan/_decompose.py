"""The HTN planner's search: goals decomposed by methods into a tree of nodes.

``HTNPlanner`` (``argus_lab.plan.htn``) builds on ``_Search``; ``_build._Build`` turns
the tree into plan tasks.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from pydantic_core import to_jsonable_python

from argus_lab.errors import ArgusError, PlanError
from argus_lab.plan._subtask import (
    NotApplicable,
    Subtask,
    as_subtask,
    call_text,
    short_repr,
)
from argus_lab.plan.domain import NAME, HTNContext, HTNDomain, Phase
from argus_lab.plan.graph import Reference, iter_references, sub_references

_MAX_ID: Final = 200
Decision: TypeAlias = Literal["tried", "chosen", "rejected", "backtracked"]
_Kind: TypeAlias = Literal["op", "compound", "lazy"]


class _NoPlan(PlanError):
    """The search ran out of methods (as opposed to a broken domain)."""


@dataclass(eq=False, slots=True)
class _Node:
    spec: Subtask
    kind: _Kind
    id: str
    parent: _Node | None  # the compound it came from (None: a root)
    group: str | None  # Task.parent of this node
    sib_deps: list[_Node]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    tool_args: dict[str, Any] = field(default_factory=dict)
    ns_used: frozenset[str] = frozenset()  # local names taken in this id's namespace
    continuation: bool = False
    children: list[_Node] = field(default_factory=list)
    method: str | None = None
    state: Any = None
    ext_deps: list[str] = field(default_factory=list)
    results: Mapping[str, Any] = field(default_factory=dict)
    skip: frozenset[str] = frozenset()


_Agenda: TypeAlias = "tuple[_Node, _Agenda] | None"


@dataclass(slots=True)
class _Frame:
    node: _Node
    rest: _Agenda
    state: Any
    index: int


class _Search:
    """``HTNPlanner``'s search: a goal to a tree of nodes, backtracking over methods.

    The attributes are ``HTNPlanner``'s (set in its ``__init__``).
    """

    domain: HTNDomain
    max_expansions: int
    on_decision: Callable[[dict[str, Any]], None] | None
    decisions: list[dict[str, Any]]
    _calls: int

    # -- search ----------------------------------------------------------------

    def _search(
        self, roots: list[_Node], state: Any, phase: Phase, taken: set[str], goal: str
    ) -> None:
        """Depth-first over the agenda, backtracking over method choices."""
        self._calls = 0
        agenda = _prepend(roots, None)
        frames: list[_Frame] = []
        first: str | None = None
        while agenda is not None:
            node, rest = agenda
            if node.kind == "lazy":
                node.state = state
                agenda = rest
                continue
            if node.kind == "op":
                ok, new_state = self._apply(node, state)
                if ok:
                    state, agenda = new_state, rest
                    continue
                failure = f"operator {call_text(node.spec)} does not apply in the state"
            else:
                node.state = state
                index, failure = self._decompose(node, state, 0, phase, taken)
                if index is not None:
                    frames.append(_Frame(node, rest, state, index))
                    agenda = _prepend(node.children, rest)
                    continue
            first = first or failure
            while True:
                if not frames:
                    raise _NoPlan(
                        f"no HTN plan for {goal}: {first} (planner.decisions lists "
                        "every method tried)"
                    )
                f = frames.pop()
                self._decide(
                    f.node,
                    f.node.method,
                    "backtracked",
                    f"a later step failed: {failure}",
                    phase,
                )
                index, more = self._decompose(
                    f.node, f.state, f.index + 1, phase, taken
                )
                if index is not None:
                    frames.append(_Frame(f.node, f.rest, f.state, index))
                    agenda = _prepend(f.node.children, f.rest)
                    state = f.state
                    break
                failure = more

    def _decompose(
        self, node: _Node, state: Any, start: int, phase: Phase, taken: set[str]
    ) -> tuple[int | None, str]:
        """Tries methods from ``start``; sets children. Returns (index, failure)."""
        methods = self.domain.methods_for(node.spec.task)
        reasons: list[str] = []
        ctx = HTNContext(state, node.spec, node.results, phase, self.domain)
        for i in range(start, len(methods)):
            m = methods[i]
            if m.name in node.skip:
                continue
            self._calls += 1
            if self._calls > self.max_expansions:
                raise PlanError(
                    f"HTN search gave up after {self.max_expansions} method calls "
                    f"at {call_text(node.spec)}: does a method recurse forever? "
                    "(raise HTNPlanner(max_expansions=...) for huge problems)"
                )
            self._decide(node, m.name, "tried", "", phase)
            m.check_call(ctx)
            who = f"{'decomposer' if m.fallback else 'method'} {m.name!r} of "
            try:
                out = m.fn(ctx, *node.spec.args, **node.spec.kwargs)
            except NotApplicable as e:
                why = e.reason or "not applicable"
            except ArgusError:
                raise  # a decomposer's model error: already says what to do
            except Exception as e:  # a domain bug: it escaped s.run() bare
                raise PlanError(
                    f"{who}{call_text(node.spec)} raised {type(e).__name__}: {e} "
                    "(a bug in the domain: fix the method, or raise "
                    "NotApplicable / return None when it does not apply)"
                ) from e
            else:
                why = "returned None (does not apply)" if out is None else ""
            if not why:
                try:
                    node.children = self._children(
                        node, out, taken, who + call_text(node.spec)
                    )
                except PlanError as e:
                    if not m.fallback:
                        raise
                    why = f"invalid subtasks: {e.message}"
            if why:
                reasons.append(f"{m.name}: {why}")
                self._decide(node, m.name, "rejected", why, phase)
                continue
            node.method = m.name
            self._decide(
                node,
                m.name,
                "chosen",
                f"{len(node.children)} subtask(s)"
                + (f" after {'; '.join(reasons)}" if reasons else ""),
                phase,
                args=_jsonable(list(node.spec.args)),
                kwargs=_jsonable(node.spec.kwargs),
                parent=node.group,
                subtasks=[c.id for c in node.children],
                continuation=node.continuation,
            )
            return i, ""
        node.children, node.method = [], None
        if not methods:
            return None, f"{node.spec.task!r} has no methods and no decomposer"
        detail = f" ({'; '.join(reasons)})" if reasons else ""
        return None, f"no method of {call_text(node.spec)} applies{detail}"

    def _children(
        self, owner: _Node, out: object, taken: set[str], who: str
    ) -> list[_Node]:
        """Validates a method's output and makes nodes with their final ids."""
        if isinstance(out, tuple) and out and isinstance(out[0], str):
            raise PlanError(f"{who} returned one task {out!r}: return a list of them")
        if not isinstance(out, list | tuple):
            raise PlanError(
                f"{who} must return a list of subtasks or None, not "
                f"{type(out).__name__}"
            )
        try:
            specs = [as_subtask(x) for x in out]
        except PlanError as e:
            raise PlanError(f"{who}: {e.message}") from None
        top = owner.id == ""
        explicit = {s.id for s in specs if s.id is not None}
        local: dict[str, _Node] = {}
        used = set(owner.ns_used)
        nodes: list[_Node] = []
        for k, s in enumerate(specs):
            kind = self.domain.kind(s.task)
            if kind is None:
                raise PlanError(
                    f"{who}: unknown task {s.task!r} ({self.domain.known()})"
                )
            name = s.id if s.id is not None else s.task
            if not NAME.match(name):
                raise PlanError(f"{who}: bad subtask id {name!r} (no '/'; 1-64 chars)")
            if s.id is None:
                name = _fresh(name, lambda n: n in local or n in explicit)
            elif name in local:
                raise PlanError(f"{who}: two subtasks have the id {name!r}")
            if s.deps is None:
                sib = nodes[-1:]
            else:
                missing = [d for d in s.deps if d not in local]
                if missing:
                    raise PlanError(
                        f"{who}: subtask {name!r} depends on {missing}, which are "
                        f"not earlier siblings (earlier: {list(local) or 'none'})"
                    )
                sib = [local[d] for d in s.deps]
            mapping: dict[str, str] = {}
            needs_results = False
            for text, ref in iter_references([list(s.args), s.kwargs]):
                if ref is None or ref.is_env:
                    continue
                needs_results = True
                target = local.get(ref.task_id)
                if target is None:
                    later = {x.id if x.id is not None else x.task for x in specs[k:]}
                    if ref.task_id in later:
                        raise PlanError(
                            f"{who}: {text} in {name!r} refers to itself or a later "
                            "sibling; results flow from earlier siblings only"
                        )
                    continue  # a full task id elsewhere in the plan
                if target.kind != "op":
                    raise PlanError(
                        f"{who}: {text} refers to compound sibling {ref.task_id!r}, "
                        "which has no result of its own"
                    )
                mapping[ref.task_id] = target.id
                if target not in sib:
                    sib = [*sib, target]
            nkind: _Kind = "op"
            if kind == "compound":
                lazy = s.lazy or self.domain.compounds[s.task].lazy or needs_results
                nkind = "lazy" if lazy else "compound"
            elif s.lazy:
                raise PlanError(
                    f"{who}: lazy=True applies to compound tasks, not {name!r}"
                )
            cont = (
                not top
                and k == len(specs) - 1
                and nkind == "compound"
                and s.task == owner.spec.task
            )
            if cont:
                nid = owner.id
            else:
                ns_name = _fresh(
                    name, lambda n: n in used or _join(owner.id, n) in taken
                )
                used.add(ns_name)
                nid = _join(owner.id, ns_name)
                if len(nid) > _MAX_ID:
                    raise PlanError(
                        f"{who}: task id {nid[:60]}... is longer than {_MAX_ID} "
                        "characters; nest compounds less deeply or use shorter ids"
                    )
            node = _Node(
                s,
                nkind,
                nid,
                None if top else owner,
                owner.group if cont else (None if top else owner.id),
                sib,
                args=tuple(_rewrite(list(s.args), mapping)),
                kwargs=_rewrite(s.kwargs, mapping),
                continuation=cont,
            )
            if nkind == "op":
                op = self.domain.operators[s.task]
                try:
                    node.tool_args = op.tool_args(node.args, node.kwargs)
                except PlanError as e:
                    raise PlanError(f"{who}: {e.message}") from None
            local[name] = node
            nodes.append(node)
        if nodes and nodes[-1].continuation:
            nodes[-1].ns_used = frozenset(used)
        return nodes

    def _apply(self, node: _Node, state: Any) -> tuple[bool, Any]:
        op = self.domain.operators[node.spec.task]
        if state is None or op.effect is None:
            return True, state
        new = op.effect(copy.deepcopy(state), *node.spec.args, **node.spec.kwargs)
        if new is None or new is False:
            return False, state
        return True, new

    def _decide(
        self,
        node: _Node,
        method: str | None,
        decision: Decision,
        reason: str,
        phase: Phase,
        **extra: Any,
    ) -> None:
        payload: dict[str, Any] = {
            "compound": node.id,
            "task": node.spec.task,
            "call": call_text(node.spec),
            "method": method,
            "decision": decision,
            "reason": reason,
            "phase": phase,
            **extra,
        }
        self.decisions.append(payload)
        if self.on_decision is not None:
            self.on_decision(payload)


# -- helpers -------------------------------------------------------------------


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def _fresh(name: str, taken: Callable[[str], bool]) -> str:
    """``name``, else ``name-2``, ``name-3`` ... the first not taken."""
    out, n = name, 2
    while taken(out):
        out, n = f"{name}-{n}", n + 1
    return out


def _prepend(nodes: list[_Node], rest: _Agenda) -> _Agenda:
    for n in reversed(nodes):
        rest = (n, rest)
    return rest


def _rewrite(value: Any, mapping: dict[str, str]) -> Any:
    """Rewrites ``${local.result...}`` of siblings to their plan ids."""
    if not mapping:
        return value
    if isinstance(value, str):

        def sub(ref: Reference | None, _: str) -> str | None:
            if ref is None or ref.is_env or ref.task_id not in mapping:
                return None
            path = "".join("." + p for p in ref.path)
            return "${" + mapping[ref.task_id] + ".result" + path + "}"

        return sub_references(value, sub, unescape=False)
    if isinstance(value, dict):
        return {k: _rewrite(v, mapping) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rewrite(v, mapping) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    # A method's Python arguments, for the decision log: a container inside
    # itself has no JSON form, so it is recorded by its repr.
    try:
        return to_jsonable_python(value, fallback=repr)
    except ValueError:
        return short_repr(value)
