"""``LLMPlanner.replan``: new tasks replacing a failed task and its dependents."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from argus_lab.llm.base import run_sync
from argus_lab.model import Task
from argus_lab.plan._model import Plan
from argus_lab.tools.registry import Tool, as_toolset

if TYPE_CHECKING:
    from argus_lab.plan.llm import Checker
    from argus_lab.plan.patch import PlanPatch

__all__: list[str] = []


class _ReplanMixin:
    """``replan`` and ``areplan`` of ``LLMPlanner`` (which supplies ``aplan``)."""

    if TYPE_CHECKING:

        async def aplan(
            self,
            goal: str,
            *,
            tools: Iterable[Tool | Callable[..., Any]] = (),
            constraints: Sequence[str] = (),
            context: str = "",
            check: Checker | None = None,
        ) -> Plan: ...

    def replan(
        self,
        plan: Plan,
        failed_task_id: str,
        *,
        error: str,
        finished: Iterable[str],
        tools: dict[str, Tool] | Iterable[Tool | Callable[..., Any]] = (),
        reserved: Collection[str] = (),
    ) -> PlanPatch:
        """Asks for tasks replacing a failed task and everything after it.

        Finished tasks are immutable: the new tasks may depend on them and use
        their results (``${id.result...}``), never change them. The answer is
        validated like a plan and returned as a patch for the session to apply
        (it blocks the calling thread for the model call). New tasks take ids
        that are neither the plan's nor in ``reserved`` (ids used before, of
        tasks an earlier patch removed: a task's idempotency key is made of
        its session, id and generation, and a new, different call must not
        get an old one's).

        Raises:
            PlanError: no valid replacement after ``max_rounds``.
        """
        return run_sync(
            self.areplan(
                plan,
                failed_task_id,
                error=error,
                finished=finished,
                tools=tools,
                reserved=reserved,
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
        reserved: Collection[str] = (),
    ) -> PlanPatch:
        """``replan`` for async code."""
        from argus_lab.plan.graph import descendants
        from argus_lab.plan.llm import _check
        from argus_lab.plan.patch import PlanPatch

        toolset = tools if isinstance(tools, dict) else as_toolset(tools)
        done = set(finished)
        deps = {t.id: t.deps for t in plan.tasks}
        # Ids in use or used before (retired by an earlier patch): taken.
        taken = set(deps) | set(reserved)
        removed = [failed_task_id] + [
            t for t in descendants(deps, failed_task_id) if t not in done
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
            + ", ".join(sorted(taken))
        )

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
