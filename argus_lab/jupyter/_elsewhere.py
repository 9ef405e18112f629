"""A session that another process runs: a second notebook's kernel, ``argus run``.

The widget's Session object is then not the runner: its records are those of
the moment it was opened, and no event of that run reaches it. So while the
session is stored as running and this object is not running it, the widget
shows what the store says (:func:`run_elsewhere`, ``Workspace.progress``) and
looks again every :data:`POLL_S` seconds until that run ends; otherwise it
would claim "running" for good, with the counts of the moment it opened.
"""

from __future__ import annotations

from typing import Any

from argus_lab.errors import ArgusError
from argus_lab.runtime.session import Session

__all__ = ["POLL_S", "run_elsewhere"]

POLL_S = 1.0
"""Seconds between two looks at the store while another process runs it."""


def run_elsewhere(session: Any) -> dict[str, Any] | None:
    """The store's progress of ``session`` when it is stored as running but
    not by this object (another process runs it, or did and died); else None.

    The reason names the live runner, so the widget says where the run is.
    """
    # A LangGraph thread view polls its saver itself.
    if not isinstance(session, Session):
        return None
    if session.running or session.status != "running":
        return None
    try:
        now: dict[str, Any] = session.workspace.progress(session.id)
    except (ArgusError, KeyError, OSError):
        return None
    runner = now["runner"]
    if now["status"] == "running" and runner:
        now["reason"] = (
            f"being run by process {runner['pid']} on {runner['host']}: shown "
            "as it commits; pause or approve it there"
        )
    return now
