"""Demo sessions: create one, reopen one after a stop or a crash, rerun one cached.

A session stores its plan, records and events, but not its code: tools, the HTN
planner and the approval policies are handed in again each time a session is
opened. These helpers do that for demo sessions, so the CLI, the benchmark and the
tests all open them the same way::

    s = new_session(ws, name="demo", out="./argus-report")
    s.run()                          # pauses before publishing: it asks
    s.approve("write_up/publish")
    s.run()
    again = rerun_cached(ws, "demo")  # a fork replaying every result
    again.run()
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argus_lab import HTNPlanner, Plan, Session, Workspace

__all__ = [
    "BACKOFF",
    "PUBLISH",
    "is_demo_plan",
    "new_planner",
    "new_session",
    "open_session",
    "rerun_cached",
    "session_options",
]

BACKOFF = (0.05, 1.0)
"""Retry delays of the demo (first, largest): the flaky citation is retried fast."""
PUBLISH = "write_up/publish"
"""The task that asks for approval (copying the report out of the session)."""


def new_planner() -> HTNPlanner:
    """A planner for the demo's HTN domain (it expands the lazy compounds)."""
    import argus_lab as al
    from argus_lab.demo.domain import DOMAIN

    return al.HTNPlanner(DOMAIN)


def session_options(planner: HTNPlanner | None = None) -> dict[str, Any]:
    """Tools, planner, approval policies and backoff a demo session runs with."""
    from argus_lab.demo import POLICIES, TOOLS

    return {
        "tools": TOOLS,
        "planner": planner or new_planner(),
        "approvals": POLICIES,
        "backoff": BACKOFF,
    }


def new_session(
    ws: Workspace, *, name: str | None, out: str | Path, **options: Any
) -> Session:
    """Plan the study and create a session for it.

    Args:
        ws: The workspace.
        name: Session name (None: derived from the goal).
        out: Folder ``write_up/publish`` copies the report to (made absolute
            now, so it does not depend on where the session is resumed from).
        **options: Session options overriding the demo's (e.g. ``backoff``).
    """
    from argus_lab.demo.domain import GOAL, study_tasks

    planner = new_planner()
    plan = planner.plan(study_tasks(str(Path(out).expanduser().resolve())))
    return ws.new_session(
        goal=GOAL, plan=plan, name=name, **(session_options(planner) | options)
    )


def open_session(ws: Workspace, name: str, **options: Any) -> Session:
    """Reopen a demo session exactly where it stopped (after a pause or a crash)."""
    return ws.open(name, **(session_options() | options))


def is_demo_plan(plan: Plan) -> bool:
    """Whether every task of ``plan`` calls a demo tool (or is a demo placeholder)."""
    from argus_lab.demo import TOOLS
    from argus_lab.plan.htn import is_placeholder

    names = {t.name for t in TOOLS}
    return bool(plan.tasks) and all(
        t.tool in names
        or (is_placeholder(t) and t.args.get("task") in _lazy_compounds())
        for t in plan.tasks
    )


def _lazy_compounds() -> set[str]:
    from argus_lab.demo.domain import DOMAIN

    return set(DOMAIN.compounds)


def rerun_cached(
    ws: Workspace, name: str, *, new_name: str | None = None, **options: Any
) -> Session:
    """Fork a finished demo session at its root, replaying every recorded result.

    Every task descends from the root, so each one runs again in the fork, and
    each is served from the parent's recordings (same inputs, same tool code)
    instead of being computed: nothing is recomputed, redrawn or re-published.

    Args:
        ws: The workspace.
        name: The session to rerun (it should have succeeded).
        new_name: The fork's name (default ``<name>-fork-<4 hex>``).
        **options: Session options for opening the parent.

    Returns:
        The fork, not yet run.
    """
    from argus_lab.demo.domain import ROOT

    with open_session(ws, name, **options) as parent:
        return parent.fork(at=ROOT, name=new_name, reuse="cached")
