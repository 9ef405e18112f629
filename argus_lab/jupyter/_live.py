"""The sessions the magics hold in this kernel: one Session object per session.

A second Session object on the same session would contend for the runner lease
with the first, so every ``%%argus`` cell and ``%argus`` command that names a
session goes through one :class:`LiveSessions`: it keeps the workspaces it
opened (by folder) and the sessions it opened or created (by workspace and id),
and hands back the live one when a name comes again.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError

import argus_lab as al
from argus_lab.errors import ArgusError, PlanError
from argus_lab.tools.registry import Tool

__all__ = ["LiveSessions", "missing_tools"]


class LiveSessions:
    """Workspaces and sessions opened by the magics, kept for the kernel's life."""

    def __init__(self) -> None:
        self._workspaces: dict[Path, al.Workspace] = {}
        self._live: dict[tuple[Path, str], al.Session] = {}

    def workspace(self, folder: str) -> al.Workspace:
        """The workspace in ``folder`` (empty: $ARGUS_HOME, else ./.argus)."""
        path = Path(folder).expanduser().resolve() if folder else None
        ws = al.Workspace(path)
        known = self._workspaces.get(ws.path)
        if known is not None:
            ws.close()
            return known
        self._workspaces[ws.path] = ws
        return ws

    def add(self, session: al.Session) -> None:
        """Keeps a session made elsewhere (a fork) as the live one."""
        self._live[(session.workspace.path, session.id)] = session

    def find(self, ws: al.Workspace, name: str) -> al.Session | None:
        """The live session of ``ws`` named (or with id) ``name``, if any."""
        for key, s in list(self._live.items()):
            if key[0] == ws.path and (s.name == name or s.id == name):
                if s.closed:
                    # Closed in a cell (s.close()): every action of that object
                    # fails, so the name must open the session again.
                    del self._live[key]
                    return None
                return s
        return None

    def open(
        self,
        ws: al.Workspace,
        name: str,
        tools: dict[str, Tool],
        options: Mapping[str, Any],
    ) -> al.Session:
        """The live session ``name`` (its tools refreshed), else opened from disk.

        Raises:
            UsageError: no session of that name or id in the workspace.
        """
        live = self.find(ws, name)
        if live is not None:
            # One Session object per session in this kernel: a second one
            # would contend for the runner lease with the first.
            if tools:
                live.update_tools(*tools.values())
            return live
        try:
            s = ws.open(name, tools=tools.values(), **options)
        except KeyError as e:
            raise UsageError(f"%argus: {e.args[0]}") from None
        self.add(s)
        return s

    def for_plan(
        self,
        ws: al.Workspace,
        plan: al.Plan,
        tools: dict[str, Tool],
        name: str | None,
        options: Mapping[str, Any],
        *,
        new: bool = False,
    ) -> al.Session:
        """The session a ``%%argus`` cell shows: the existing one of that name
        when its plan is the same, else a new one.

        A cell without a name shows the newest session with its plan (made
        by an earlier run of the cell, in this kernel or one before a
        restart), so that running the notebook again resumes it rather than
        repeating its side effects; ``new`` makes a new session anyway.

        Raises:
            UsageError: ``name`` exists with another plan, or the session
                cannot be made (the message says why).
        """
        if name is None and not new:
            name = self._same_plan(ws, plan, tools, options)
        try:
            if name is not None and (
                self.find(ws, name) is not None
                or any(i.name == name for i in ws.sessions())
            ):
                s = self.open(ws, name, tools, options)
                same = _as_stored(plan, tools, options) == s.plan.to_dict()
                if not same:
                    raise UsageError(
                        f"%%argus: a session named {name!r} already exists with "
                        "another plan; choose another NAME, or continue it with "
                        f"%argus open {name}, or fork it with "
                        f"%argus fork {name} --at TASK"
                    )
                return s
            s = ws.new_session(plan=plan, tools=tools.values(), name=name, **options)
        except (PlanError, ValueError) as e:
            raise UsageError(f"%%argus: {e}") from None
        except ArgusError as e:
            raise UsageError(f"%%argus: {e}") from None
        self.add(s)
        return s

    def _same_plan(
        self,
        ws: al.Workspace,
        plan: al.Plan,
        tools: dict[str, Tool],
        options: Mapping[str, Any],
    ) -> str | None:
        """The id of the newest session (not a fork) with ``plan``, if any."""
        try:
            want = _as_stored(plan, tools, options)
        except (PlanError, ValueError):
            return None  # for_plan says what is wrong with it
        goal = want.get("goal", "")  # left out when empty
        infos = [i for i in ws.sessions() if i.goal == goal and not i.parent]
        for info in sorted(infos, key=lambda i: i.created, reverse=True):
            s = self.find(ws, info.id)
            opened = s is None
            if s is None:
                try:
                    s = ws.open(info.id, tools=tools.values(), **options)
                except (ArgusError, KeyError):
                    continue  # damaged, or gone meanwhile: not this cell's
            if s.plan.to_dict() == want:
                if opened:
                    self.add(s)
                return info.id
            if opened:
                s.close()
        return None


def _as_stored(
    plan: al.Plan, tools: dict[str, Tool], options: Mapping[str, Any]
) -> dict[str, Any]:
    """``plan`` as its session stores it: validated, and masked (a goal
    quoting a secret is stored [REDACTED]), to compare with ``s.plan``."""
    from argus_lab.redact import Redactor

    red = Redactor(options.get("secrets") or ())
    out: dict[str, Any] = red.value(plan.validate_against(tools).to_dict())
    return out


def missing_tools(s: al.Session) -> list[str]:
    """Tools that tasks still to run call and this kernel has not given ``s``."""
    from argus_lab.plan.graph import EXPAND_TOOL

    have = s.tools
    return sorted(
        {
            t.tool
            for t in s.plan.tasks
            if t.tool
            and t.tool != EXPAND_TOOL
            and t.tool not in have
            and s.record(t.id).status not in ("succeeded", "skipped")
        }
    )
