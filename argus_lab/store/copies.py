"""Telling a copy of a session's (or a LangGraph thread's) files from the files
a crashed run left.

A lease left behind is taken over: its holder is gone (a crash, a kernel
restart), so recovery decides about its attempts (DESIGN.md invariant 2). A
copy of the files made while a run held them (``cp -r`` of a workspace, a
backup restored) carries the same lease, and its holder is gone too by the
time the copy runs. But that run may have gone on after the copy: running
the copy would repeat what it did since, side effects included.

Each lease therefore names the files it was written to (``where``: the
database file's inode and the session folder). A lease taken over in other
files than it names is a copy's (or a move's). If the folder it names still
holds the session and has committed past what this copy knows, the run went
on after the copy: the copy is refused until a person says it is the one to
run (``accept_copy``). A move, a copy whose original is gone or unreadable
here (another machine), or one whose original stopped where the copy did (a
copy of a crashed run) is taken over as before. What this cannot see: a copy
run first and its original resumed after, or an original on another machine.

LangGraph threads (``langgraph/_store.py``) are told the same way: resuming
the copy would run again the nodes the original ran since. Typed states are
not: their lease only keeps other writers out of a locked block, and nothing
runs again when a copy's lease is taken over (the block was the original
process's, and it never reruns).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from argus_lab.store.witness import Witness

__all__ = ["went_on_elsewhere", "where"]

SESSION_ACCEPT = (
    "open it with ws.open(name, tools=[...], accept_copy=True) or "
    "`argus resume NAME --accept-copy`"
)
"""How a session's copy is run all the same (``went_on_elsewhere``)."""


def where(directory: Path) -> dict[str, Any]:
    """What a lease names of the files it is written to (inode and folder)."""
    try:
        path = os.path.realpath(directory)
        return {"file": os.stat(os.path.join(path, "cache.db")).st_ino, "dir": path}
    except OSError:
        return {}


def went_on_elsewhere(
    lease: dict[str, Any] | None,
    holder: str,
    here: dict[str, Any],
    known: Callable[[], int | None],
    label: str,
    *,
    repeats: str = "its tool calls",
    accept: str = SESSION_ACCEPT,
) -> str | None:
    """Why a lease left in these files (``here``) must not be taken over: the
    files it was written to went on after they were copied; else None.
    ``known``: the latest version these files witnessed; ``label``: what the
    files hold ("session NAME (ID)"); ``repeats``: what running the copy would
    repeat; ``accept``: how to run the copy all the same (a session's by
    default)."""
    if not lease or lease.get("holder") == holder or not here:
        return None
    there = lease.get("dir")
    if lease.get("file") in (None, here["file"]) or not there or there == here["dir"]:
        return None
    if not os.path.isfile(os.path.join(there, "cache.db")):
        return None  # moved, or the original is gone: nothing else can run it
    theirs = Witness(Path(there), fsync=False).read()
    mine = known()
    if theirs is None or mine is None or theirs <= mine:
        return None
    return (
        f"{label} is a copy of {there}, made while a run held it "
        f"(process {lease.get('pid')} on {lease.get('host')}), and that run went "
        f"on after the copy: the original has committed version {theirs}, this "
        f"copy only {mine}. Running this copy would repeat what the original did "
        f"since ({repeats} and their side effects). To continue, open the "
        f"original; to run this copy all the same, {accept}"
    )
