"""The Plan model: a goal and the DAG of tasks that reaches it.

It lives here, beside its constructors (static.py) and validation (graph.py),
so the records module (argus_lab.model) needs nothing above it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from argus_lab.errors import PlanError
from argus_lab.model import Task

if TYPE_CHECKING:
    import networkx as nx

    from argus_lab.tools.registry import Tool

__all__ = ["Plan"]


class Plan(BaseModel):
    """A goal and the DAG of tasks that reaches it.

    Build one with :meth:`from_yaml` / :meth:`from_dict` or a planner; a plan is
    validated (ids, dependencies, cycles, references and, given tools, tool names
    and arguments) by :meth:`validate_against`, which Sessions call for you.
    """

    model_config = ConfigDict(extra="forbid")

    goal: str = ""
    """What the plan is for, in the user's words."""
    constraints: list[str] = Field(default_factory=list)
    """Free-text constraints (budget, deadline, style) carried to planners and LLMs."""
    tasks: list[Task] = Field(default_factory=list)
    """The tasks, in the order they were written."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """Builds and structurally validates a plan from a dict (YAML/JSON shape)."""
        from argus_lab.plan.static import plan_from_dict

        with _masked_errors():
            return plan_from_dict(data)

    @classmethod
    def from_yaml(cls, text_or_path: str | Path) -> Plan:
        """Builds a plan from YAML text or from the path of a .yaml/.yml/.json file."""
        from argus_lab.plan.static import plan_from_yaml

        with _masked_errors():
            return plan_from_yaml(text_or_path)

    def to_dict(self) -> dict[str, Any]:
        """Returns the plan as plain data; ``Plan.from_dict`` reads it back."""
        return self.model_dump(mode="json", exclude_defaults=True)

    def to_yaml(self) -> str:
        """Returns the plan as YAML text; ``Plan.from_yaml`` reads it back."""
        from argus_lab.plan.static import plan_to_yaml

        return plan_to_yaml(self)

    @property
    def graph(self) -> nx.DiGraph:
        """The plan as a networkx DiGraph: an edge dep -> task, node attrs from Task."""
        from argus_lab.plan.graph import plan_graph

        return plan_graph(self)

    def validate_against(self, tools: dict[str, Tool] | None = None) -> Plan:
        """Checks the plan and returns it with implied dependencies added.

        Args:
            tools: Known tools by name; when given, tool names and literal
                arguments are checked too.

        Raises:
            PlanError: naming every problem found.
        """
        from argus_lab.plan.graph import validate_plan

        return validate_plan(self, tools)

    def task(self, task_id: str) -> Task:
        """Returns the task with this id (KeyError naming the known ids if absent)."""
        for t in self.tasks:
            if t.id == task_id:
                return t
        known = ", ".join(t.id for t in self.tasks[:20])
        raise KeyError(f"no task {task_id!r} in this plan (tasks: {known})")


@contextlib.contextmanager
def _masked_errors() -> Iterator[None]:
    """A PlanError's message with secrets masked, as ``ws.new_session`` masks
    it (it quotes the plan: a key, an id, a reference; a notebook saves it)."""
    try:
        yield
    except PlanError as e:
        from argus_lab.plan.static import masked_error
        from argus_lab.redact import Redactor, known_secrets

        raise masked_error(e, Redactor(known_secrets())) from None
