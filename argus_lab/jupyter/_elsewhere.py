"""A session that another process runs: a second notebook's kernel, ``argus run``.

The widget's Session object is then not the runner: its records are those of
the moment it was opened, and no event of that run reaches it. So while the
session is stored as running and this object is not running it, the widget
shows what the store says (:func:`run_elsewhere`, as ``Workspace.progress``)
and looks again every :data:`POLL_S` seconds until that run ends; otherwise it
would claim "running" for good, with the counts of the moment it opened.

Each look reads the session's head alone while the other run commits nothing,
and then only the records its commits touched (``store/progress.py``): a
widget left open on a long run does not reload the whole store every second.
The store stays open for the Session object's lifetime (one per object, shared
by its widgets), until this object runs the session itself.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from argus_lab.errors import ArgusError
from argus_lab.runtime.session import Session
from argus_lab.store.progress import ProgressFollower

__all__ = ["POLL_S", "run_elsewhere"]

POLL_S = 1.0
"""Seconds between two looks at the store while another process runs it."""

_LOCK = threading.Lock()  # looks come from timer threads too
_FOLLOWERS: weakref.WeakKeyDictionary[Session, ProgressFollower] = (
    weakref.WeakKeyDictionary()
)


def run_elsewhere(session: Any) -> dict[str, Any] | None:
    """The store's progress of ``session`` when it is stored as running but
    not by this object (another process runs it, or did and died); else None.

    The reason names the live runner, so the widget says where the run is.
    """
    # A LangGraph thread view polls its saver itself.
    if not isinstance(session, Session):
        return None
    if session.running or session.status != "running":
        _forget(session)  # this object runs it now, or knows it ended
        return None
    with _LOCK:
        try:
            follower = _FOLLOWERS.get(session)
            if follower is None:
                # The store's own opening of a session folder (refused if the
                # folder is not one), kept open between looks.
                store = session.workspace._store(session.id)
                follower = _FOLLOWERS[session] = ProgressFollower(store)
            now = dict(follower.read())
        except (ArgusError, KeyError, OSError):
            _forget(session, locked=True)
            return None
    runner = now["runner"]
    if now["status"] == "running" and runner:
        now["reason"] = (
            f"being run by process {runner['pid']} on {runner['host']}: shown "
            "as it commits; pause or approve it there"
        )
    return now


def _forget(session: Session, *, locked: bool = False) -> None:
    """Closes the store kept for ``session`` (a later look opens it again)."""
    if not locked:
        with _LOCK:
            _forget(session, locked=True)
        return
    follower = _FOLLOWERS.pop(session, None)
    if follower is not None:
        follower.close()
