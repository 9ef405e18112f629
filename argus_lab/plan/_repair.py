"""The HTN planner at run time: re-decomposing a compound whose subtree failed.

``HTNPlanner`` (``argus_lab.plan.htn``) builds on ``_Repair``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from argus_lab.errors import PlanError
from argus_lab.model import Task
from argus_lab.plan._build import CompoundInfo, _Build
from argus_lab.plan._decompose import _Node, _NoPlan
from argus_lab.plan._model import Plan
from argus_lab.plan._subtask import Subtask, call_text
from argus_lab.plan.patch import PlanPatch


class _Repair(_Build):
    """``HTNPlanner``'s run-time side: backtrack, repair and restore.

    The attributes are ``HTNPlanner``'s (set in its ``__init__``).
    """

    max_backtracks: int

    def backtrack(
        self,
        plan: Plan,
        compound_id: str,
        tried_methods: Iterable[str] | None = None,
        *,
        reason: str = "",
        dep_results: Mapping[str, Any] | None = None,
        protected: Collection[str] = (),
        reserved: Collection[str] = (),
    ) -> PlanPatch | None:
        """Re-decomposes a compound whose subtree failed, with its next method.

        Args:
            plan: The current plan.
            compound_id: The compound (a ``parent`` of the failed task, or above).
            tried_methods: Methods already used for it, in order (default: what
                this planner chose; the last is the one that failed).
            reason: Why its subtree failed, for the decision record.
            dep_results: Results by task id, for methods that read
                ``ctx.results`` (the subtree's outside dependencies).
            protected: Finished task ids: kept in the plan, never removed.
            reserved: Ids that new tasks must not take (ids used before).

        Returns:
            The patch, or None when no other method applies or
            ``max_backtracks`` re-decompositions were already made.

        Raises:
            PlanError: when the compound is unknown to this planner.
        """
        info = self.compounds.get(compound_id)
        if info is None:
            raise PlanError(
                f"no compound {compound_id!r} known to this planner: backtrack "
                "with the planner that made the plan, or restore() its decisions "
                "first",
                task_id=compound_id,
            )
        tried = list(tried_methods) if tried_methods is not None else info.methods
        tried = list(dict.fromkeys(tried))
        node = _Node(info.task, "compound", compound_id, None, info.parent, [])
        node.args, node.kwargs = info.task.args, info.task.kwargs
        self._decide(
            node,
            tried[-1] if tried else None,
            "backtracked",
            reason or "its subtree failed at run time",
            "backtrack",
        )
        if len(tried) - 1 >= self.max_backtracks:
            self._decide(
                node,
                None,
                "rejected",
                f"max_backtracks={self.max_backtracks} reached "
                f"(tried: {', '.join(tried)})",
                "backtrack",
            )
            return None
        subtree = [t for t in plan.tasks if _in_subtree(t, compound_id)]
        ids = {t.id for t in subtree}
        ext = list(
            dict.fromkeys(d for t in subtree for d in t.deps if d not in ids),
        )
        node.ext_deps = ext
        node.results = _results_of(ext, dep_results or {}, info.parent)
        node.skip = frozenset(tried)
        try:
            self._search(
                [node],
                info.state,
                "backtrack",
                self._taken(plan, reserved),
                call_text(info.task),
            )
        except _NoPlan as e:
            self._decide(node, None, "rejected", e.message, "backtrack")
            return None
        tasks, sinks = self._build([node])
        kept = _closure({i for i in ids if i in protected}, subtree)
        guarded = set(protected)
        rewired = {
            o.id: _replace(o.deps, ids, sinks)
            for o in plan.tasks
            if o.id not in ids and o.id not in guarded and ids & set(o.deps)
        }
        for cid in [c for c in self.compounds if c.startswith(compound_id + "/")]:
            del self.compounds[cid]
        self._remember([node])
        if node.method is not None:
            self.compounds[compound_id].methods = [*tried, node.method]
        return PlanPatch(
            added=tasks,
            removed=[t.id for t in subtree if t.id not in kept],
            rewired=rewired,
            reason=f"backtracked {call_text(info.task)} to {node.method}"
            + (f": {reason}" if reason else ""),
            compound=compound_id,
            method=node.method,
        )

    def repair(
        self,
        plan: Plan,
        failed_task_id: str,
        *,
        reason: str = "",
        tried: Mapping[str, Sequence[str]] | None = None,
        dep_results: Mapping[str, Any] | None = None,
        protected: Collection[str] = (),
        reserved: Collection[str] = (),
    ) -> PlanPatch | None:
        """Backtracks the nearest enclosing compound that still has a method left.

        Args:
            plan: The current plan.
            failed_task_id: The task that failed permanently.
            reason: Why, for the decision records (default names the task).
            tried: Methods used so far per compound id (default: this planner's
                memory).
            dep_results: As for :meth:`backtrack`.
            protected: As for :meth:`backtrack`.
            reserved: As for :meth:`backtrack`.

        Returns:
            The first patch found walking up the compounds, or None.
        """
        why = reason or f"task {failed_task_id!r} failed"
        cid = plan.task(failed_task_id).parent
        while cid:
            info = self.compounds.get(cid)
            if info is not None:
                patch = self.backtrack(
                    plan,
                    cid,
                    tried.get(cid) if tried else None,
                    reason=why,
                    dep_results=dep_results,
                    protected=protected,
                    reserved=reserved,
                )
                if patch is not None:
                    return patch
                cid = info.parent
            else:
                cid = cid.rpartition("/")[0] or None
        return None

    def restore(self, decisions: Iterable[Mapping[str, Any]]) -> None:
        """Rebuilds ``compounds`` from stored decision payloads (after a restart).

        Planning states are not stored, so restored compounds have state None.
        """
        for d in decisions:
            cid, method = d.get("compound"), d.get("method")
            if not isinstance(cid, str) or d.get("continuation"):
                continue
            info = self.compounds.get(cid)
            if d.get("decision") == "chosen" and d.get("args") is not None:
                if info is None or info.task.task != d["task"]:
                    spec = Subtask(d["task"], *d["args"], **(d.get("kwargs") or {}))
                    info = self.compounds[cid] = CompoundInfo(
                        cid, spec, d.get("parent")
                    )
                if isinstance(method, str) and method not in info.methods:
                    info.methods.append(method)
            elif (
                d.get("decision") == "backtracked"
                and d.get("phase") == "plan"
                and info is not None
                and method in info.methods
            ):
                info.methods.remove(method)  # undone while planning


# -- helpers -------------------------------------------------------------------


def _replace(deps: list[str], old: Collection[str], new: list[str]) -> list[str]:
    """deps with the ``old`` ones replaced by ``new`` where the first one stood."""
    out: list[str] = []
    placed = False
    for d in deps:
        if d not in old:
            out.append(d)
        elif not placed:
            out.extend(new)
            placed = True
    return list(dict.fromkeys(out))


def _in_subtree(task: Task, compound_id: str) -> bool:
    p = task.parent
    return task.id == compound_id or (
        p is not None and (p == compound_id or p.startswith(compound_id + "/"))
    )


def _closure(kept: set[str], subtree: list[Task]) -> set[str]:
    """Kept tasks plus the subtree tasks they depend on (those must stay too)."""
    by_id = {t.id: t for t in subtree}
    stack = list(kept)
    while stack:
        for d in by_id[stack.pop()].deps:
            if d in by_id and d not in kept:
                kept.add(d)
                stack.append(d)
    return kept


def _results_of(
    deps: Iterable[str], results: Mapping[str, Any], parent: str | None
) -> dict[str, Any]:
    """Dependency results by id, and by local id for siblings."""
    out: dict[str, Any] = {}
    prefix = f"{parent}/" if parent else ""
    for d in deps:
        if d in results:
            out[d] = results[d]
            if prefix and d.startswith(prefix) and "/" not in d[len(prefix) :]:
                out[d[len(prefix) :]] = results[d]
    return out
