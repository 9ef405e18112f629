"""Plan patches: tasks added, tasks removed, dependencies rewired.

The HTN planner (``argus_lab.plan.htn``) returns them from ``expand``,
``backtrack`` and ``repair``; ``apply_patch`` makes the changed plan.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from argus_lab.errors import PlanError
from argus_lab.model import Task
from argus_lab.plan._model import Plan
from argus_lab.plan.graph import validate_plan

if TYPE_CHECKING:
    from argus_lab.tools.registry import Tool

__all__ = ["PlanPatch", "apply_patch"]


class PlanPatch(BaseModel):
    """A change to a plan: tasks added, tasks removed, dependencies rewired."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    added: list[Task] = Field(default_factory=list)
    """New tasks, inserted where the first removed task stood (else at the end)."""
    removed: list[str] = Field(default_factory=list)
    """Ids of tasks taken out of the plan."""
    rewired: dict[str, list[str]] = Field(default_factory=dict)
    """Existing task id -> its complete new ``deps`` list."""
    reason: str = ""
    """Why the plan changes."""
    compound: str | None = None
    """The compound task the patch (re)decomposes, if any."""
    method: str | None = None
    """The method that produced the added tasks, if any."""

    def summary(self) -> dict[str, Any]:
        """A JSON payload for a ``plan_patched`` event (ids only)."""
        return {
            "added": [t.id for t in self.added],
            "removed": list(self.removed),
            "rewired": {k: list(v) for k, v in self.rewired.items()},
            "reason": self.reason,
            "compound": self.compound,
            "method": self.method,
        }


def apply_patch(
    plan: Plan,
    patch: PlanPatch,
    *,
    protected: Collection[str] = (),
    tools: dict[str, Tool] | None = None,
) -> Plan:
    """Returns a new, validated plan with the patch applied (``plan`` is unchanged).

    Args:
        plan: The plan to change.
        patch: What to change.
        protected: Ids that must not be removed or rewired (finished tasks,
            and at run time ones in flight or in doubt).
        tools: When given, tool names and arguments are validated too.

    Raises:
        PlanError: when the patch removes or rewires an unknown or protected
            task, or the result is not a valid plan (naming every problem).
    """
    ids = {t.id for t in plan.tasks}
    removed = set(patch.removed)
    guarded = set(protected)
    problems = [
        f"removes {r!r}, which is not in the plan"
        for r in patch.removed
        if r not in ids
    ]
    hit = sorted(removed & guarded)
    if hit:
        problems.append(
            f"would remove protected task(s) {', '.join(hit)}: finished tasks are "
            "immutable, and ones in flight or in doubt stay; leave them in the plan"
        )
    for tid in patch.rewired:
        if tid not in ids:
            problems.append(f"rewires {tid!r}, which is not in the plan")
        elif tid in removed:
            problems.append(f"rewires {tid!r}, which it also removes")
        elif tid in guarded:
            problems.append(f"would rewire protected task {tid!r}")
    if problems:
        raise PlanError("cannot apply the plan patch:\n- " + "\n- ".join(problems))
    tasks: list[Task] = []
    inserted = False
    for t in plan.tasks:
        if t.id in removed:
            if not inserted:
                tasks.extend(patch.added)
                inserted = True
            continue
        if t.id in patch.rewired:
            t = t.model_copy(update={"deps": list(dict.fromkeys(patch.rewired[t.id]))})
        tasks.append(t)
    if not inserted:
        tasks.extend(patch.added)
    return validate_plan(plan.model_copy(update={"tasks": tasks}), tools)
