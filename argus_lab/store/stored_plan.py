"""The stored plan, read for running: dependencies at once, tasks when needed.

A reopened 50,000-task session needs every task's dependencies (the scheduler)
but the validated ``Task`` of only the tasks that run next, and the whole
``Plan`` only for a view or a plan patch. Validating it all took a third of a
reopen, so ``StoredPlan`` keeps the plan's JSON (checksum verified, parsed with
``json.loads``) and validates a task when it is first read (``PlanTasks``) and
the ``Plan`` when it is first asked for. A plan of an older schema is migrated
and validated at once, as before. Text that passed its checksum but is not a
valid plan (only a faulty writer makes one) raises ``CorruptCheckpointError``
naming the ``plan`` key when the part that is wrong is first read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

from pydantic import ValidationError

from argus_lab.model import Task
from argus_lab.plan import Plan
from argus_lab.store._bulk import paused_gc
from argus_lab.store._lazy import LazyMap

__all__ = ["PlanTasks", "StoredPlan"]

Invalid = Callable[[str], Exception]
"""Why the stored plan is invalid -> the error to raise (names the key)."""


def _invalid(why: str) -> Exception:
    return ValueError(f"invalid plan: {why}")


class PlanTasks(LazyMap[Task]):
    """A plan's tasks by id, in plan order; each validated when first read."""

    def __init__(self, entries: dict[str, Any], invalid: Invalid = _invalid) -> None:
        super().__init__(entries, Task)
        self._invalid = invalid

    def _make(self, key: str, raw: Any) -> Task:
        try:
            return Task.model_validate(raw)
        except ValidationError as e:
            raise self._invalid(f"task {key!r}: {e}") from None


class StoredPlan:
    """A plan as stored: its tasks' ids and dependencies, the Plan on demand.

    Args:
        plan: An already validated plan (then nothing is deferred).
    """

    def __init__(self, plan: Plan) -> None:
        self._plan: Plan | None = plan
        self._data: dict[str, Any] = {}
        self._by_id: dict[str, dict[str, Any]] = {}
        self._deps: dict[str, Sequence[str]] = {}
        self._invalid: Invalid = _invalid

    @classmethod
    def from_json(cls, text: str, invalid: Invalid = _invalid) -> StoredPlan:
        """The plan in ``text`` (checksum verified), checked only for the shape
        the scheduler relies on: a list of tasks, each with an id and a list of
        dependencies."""
        try:
            data = json.loads(text)
            tasks = data.get("tasks", [])
            if not isinstance(tasks, list):
                raise TypeError("tasks is not a list")
            # Column by column in C (map, zip): a plan of 50,000 tasks is read
            # on every reopen. Every id a str, every deps list a list.
            ids = list(map(itemgetter("id"), tasks))
            deps_of = list(map(dict.get, tasks, repeat("deps"), repeat(())))
            if not set(map(type, ids)) <= {str}:
                raise TypeError("a task id is not a string")
            if not set(map(type, deps_of)) <= {list, tuple}:
                raise TypeError("a task's deps are not a list")
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise invalid(str(e)) from None
        by_id: dict[str, dict[str, Any]] = dict(zip(ids, tasks, strict=True))
        deps: dict[str, Sequence[str]] = dict(zip(ids, deps_of, strict=True))
        self = cls.__new__(cls)
        self._plan, self._data, self._invalid = None, data, invalid
        self._by_id, self._deps = by_id, deps
        return self

    @property
    def plan(self) -> Plan:
        """The whole plan, validated (on first use)."""
        if self._plan is None:
            try:
                with paused_gc():  # a Task per task: many objects, no garbage
                    self._plan = Plan.model_validate(self._data)
            except ValidationError as e:
                raise self._invalid(str(e)) from None
            self._data, self._by_id, self._deps = {}, {}, {}
        return self._plan

    def tasks(self) -> PlanTasks:
        """Task id -> Task, in plan order (validated when read)."""
        if self._plan is not None:
            return PlanTasks({t.id: t for t in self._plan.tasks})
        return PlanTasks(dict(self._by_id), self._invalid)

    def deps(self) -> dict[str, Sequence[str]]:
        """Task id -> the ids it depends on, in plan order."""
        if self._plan is not None:
            return {t.id: t.deps for t in self._plan.tasks}
        return dict(self._deps)

    def distinct(self, field: str) -> set[Any]:
        """The values one (hashable) field takes over all tasks, defaults
        included, read without validating a task."""
        if self._plan is not None:
            return {getattr(t, field) for t in self._plan.tasks}
        default = Task.model_fields[field].get_default(call_default_factory=True)
        return set(map(dict.get, self._by_id.values(), repeat(field), repeat(default)))
