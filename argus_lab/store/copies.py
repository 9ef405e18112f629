"""Telling a copy of a session's (or a LangGraph thread's) files from the files
a crashed run left.

A lease left behind is taken over: its holder is gone (a crash, a kernel
restart), so recovery decides about its attempts (DESIGN.md invariant 2). A
copy of the files made while a run held them (``cp -r`` of a workspace, a
backup restored) carries the same lease, and its holder is gone too by the
time the copy runs. But that run may have gone on after the copy: running
the copy would repeat what it did since, side effects included.

Each lease therefore names the database file it was written to (its inode:
a copy is another file), and each session folder's witness file names the
folder a lease of it was last written from, its origin (written once per
store, after its first lease commits; ``witness.py``). A lease taken over in
another file than it names is a copy's (or a move's), and the origin the copy
carries says where it came from. If that folder still holds the session and has
committed past what this copy knows, the run went on after the copy: the
copy is refused until a person says it is the one to run (``accept_copy``).
A move, a copy whose original is gone or unreadable here (another machine),
or one whose original stopped where the copy did (a copy of a crashed run)
is taken over as before. What this cannot see: a copy run first and its
original resumed after, or an original on another machine. The folder is not
in the lease: the head that carries it is rewritten by every commit, and a
path made each step's head row ~80 bytes longer (+0.6% of a step).

LangGraph threads (``langgraph/_store.py``) are told the same way: resuming
the copy would run again the nodes the original ran since. Typed states are
not: their lease only keeps other writers out of a locked block, and nothing
runs again when a copy's lease is taken over (the block was the original
process's, and it never reruns).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from argus_lab.store.witness import Witness

__all__ = [
    "ORIGIN",
    "Origin",
    "touched_a_task",
    "went_on_elsewhere",
    "where",
]

SESSION_ACCEPT = (
    "open it with ws.open(name, tools=[...], accept_copy=True) or "
    "`argus resume NAME --accept-copy`"
)
"""How a session's copy is run all the same (``went_on_elsewhere``)."""


ORIGIN = "origin"
"""The file that named a store's origin before the witness did (read when the
witness and journal name none; removed once the witness does)."""


def where(directory: Path) -> dict[str, Any]:
    """What a lease names of the files it is written to: the database file's
    inode ({} if it cannot be read)."""
    try:
        return {"file": os.stat(os.path.join(directory, "cache.db")).st_ino}
    except OSError:
        return {}


def _origin(directory: Path) -> str | None:
    """The folder this one's origin names, if it is another (a copy or a
    move of it); None if it names this one or cannot be read."""
    path = os.path.realpath(directory)
    there = Witness(Path(path), fsync=False).origin()
    if there is None:  # files an older argus-lab wrote
        try:
            with open(os.path.join(path, ORIGIN), encoding="utf-8") as f:
                there = f.read()
        except (OSError, UnicodeDecodeError):
            return None
    return there if there and there != path else None


def went_on_elsewhere(
    lease: dict[str, Any] | None,
    holder: str,
    directory: Path,
    here: dict[str, Any],
    known: Callable[[], int | None],
    label: str,
    *,
    repeats: str = "its tool calls",
    accept: str = SESSION_ACCEPT,
) -> str | None:
    """Why a lease left in the files of ``directory`` (``here``: their
    ``where``) must not be taken over: the files it was written to went on
    after they were copied; else None. ``known``: the latest version these
    files witnessed; ``label``: what the files hold ("session NAME (ID)");
    ``repeats``: what running the copy would repeat; ``accept``: how to run
    the copy all the same (a session's by default). Only commits that touched
    a task count (``touched_a_task``)."""
    if not lease or lease.get("holder") == holder or not here:
        return None
    if lease.get("file") in (None, here["file"]):
        return None
    there = _origin(directory)
    if there is None:
        return None
    if not os.path.isfile(os.path.join(there, "cache.db")):
        return None  # moved, or the original is gone: nothing else can run it
    original = Witness(Path(there), fsync=False)
    theirs = original.read()
    mine = known()
    if theirs is None or mine is None or theirs <= mine:
        return None
    if not touched_a_task(original, mine, theirs):
        return None
    return (
        f"{label} is a copy of {there}, made while a run held it "
        f"(process {lease.get('pid')} on {lease.get('host')}), and that run went "
        f"on after the copy: the original has committed version {theirs}, this "
        f"copy only {mine}. Running this copy would repeat what the original did "
        f"since ({repeats} and their side effects). To continue, open the "
        f"original; to run this copy all the same, {accept}"
    )


def touched_a_task(original: Witness, mine: int, theirs: int) -> bool:
    """Whether the original's commits after version ``mine`` touched a task
    (a LangGraph thread's journal names ``PROGRESS`` for a checkpoint).

    A session's lease renewals (a heartbeat every ttl / 3 while a long call
    runs) and a release commit touch none: an original that only kept a call
    running, then crashed, stopped where its copy did. True when the
    original's journal cannot say (cut short, or compacted)."""
    touched = original.touched(mine, theirs)
    return touched is None or bool(touched)


class Origin:
    """One store's side of it: the ``where`` its leases name, its origin
    claimed once a lease of ours is committed, and the refusal of a copy.

    Args:
        directory: The store's folder (the one holding ``cache.db``).
        witness: The store's witness, which keeps the origin.
    """

    def __init__(self, directory: Path, witness: Witness) -> None:
        self.directory = directory
        self._witness = witness
        self._where: dict[str, Any] | None = None
        self._claimed = False

    @property
    def where(self) -> dict[str, Any]:
        """What our leases name (read on first use: read-only opens need none)."""
        if self._where is None:
            self._where = where(self.directory)
        return self._where

    def claim(self) -> None:
        """Our lease is committed (and witnessed) here: the origin is this
        folder (tried again at the next lease commit if it could not be)."""
        if not self._claimed:
            real = os.path.realpath(self.directory)
            self._claimed = self._witness.claim_origin(real)
            if self._claimed:  # an older argus-lab's file, which could go stale
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(real, ORIGIN))

    def refusal(
        self,
        lease: dict[str, Any] | None,
        holder: str,
        known: Callable[[], int | None],
        label: str,
        **how: Any,
    ) -> str | None:
        """``went_on_elsewhere`` for this store's files."""
        return went_on_elsewhere(
            lease, holder, self.directory, self.where, known, label, **how
        )
