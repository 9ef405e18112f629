"""Lost commits, copies and storage errors of LangGraph threads, said as they are.

``storage_error`` tells a full disk from a damaged file from another failure
(a full disk or a failure with space left never advises deleting anything).

A thread's latest checkpoints live in SQLite's WAL until a checkpoint copies
them into ``cache.db``. A truncated, bit-flipped or deleted ``-wal`` rolls the
thread back to an older checkpoint without an error, and LangGraph then runs
again every node whose writes were lost: their side effects repeat, in silence.
Each commit also writes the head's version to the ``witness`` file beside
``cache.db`` (``store/witness.py``, as sessions do), and opening a thread whose
head is older than its witness raises ``LostCommitsError``.

A thread's folder copied while a run held it (``cp -r`` of a workspace, a
backup restored) carries that run's lease; if the run went on after the copy,
resuming the copy would run those nodes again: ``refuse_copy`` refuses it
(``store/copies.py``, as for sessions) unless ``accept_copy``.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING

from argus_lab.errors import (
    ArgusError,
    ConcurrentSessionError,
    CorruptCheckpointError,
    LostCommitsError,
)
from argus_lab.store.head import Head, refusal
from argus_lab.store.loss import lost_versions
from argus_lab.store.space import full_error, is_damaged, is_disk_full

if TYPE_CHECKING:
    from argus_lab.langgraph._store import ThreadStore

__all__ = [
    "check_lost_checkpoints",
    "copy_refusal",
    "refuse_copy",
    "refuse_held",
    "storage_error",
]

log = logging.getLogger("argus_lab.langgraph")


def check_lost_checkpoints(st: ThreadStore, *, accept: bool) -> None:
    """Raises LostCommitsError when the thread's head is older than its witness.

    ``accept``: go on from the latest checkpoint that survived (the witness is
    reset to the head; LangGraph then runs the lost steps again).
    """
    witnessed = st.witness.read()
    if witnessed is None:
        return  # a thread older than witnesses
    head = st.read_head()
    have = head.version if head is not None else 0
    if have >= witnessed:
        if st.settled and have == witnessed:
            st.witness.compact()  # one line a commit: keep it short
        return
    what = lost_versions(
        f"LangGraph thread {st.thread_id!r} (session {st.session_id})",
        "write(s)",
        "store",
        have,
        witnessed,
        st.directory,
    )
    if not accept:
        raise LostCommitsError(
            f"{what}. Invoking the graph now would run again the nodes whose "
            "checkpoints were lost, repeating their side effects; check what "
            "those nodes did first. Every checkpoint that survived is kept. To "
            "go on from the latest of them: "
            "ArgusSaver(ws, accept_lost_commits=True)",
            head_version=have,
            witness_version=witnessed,
            session_id=st.session_id,
        )
    log.warning("%s; going on from the latest surviving checkpoint as asked", what)
    st.witness.compact(limit=0)  # its lines name versions that are gone
    st.witness.record(have, [], backwards=True)  # LangGraph writes them again
    if copy_refusal(st, head) is not None:
        # A copy that lost commits (a backup whose WAL was damaged): going on
        # from what survived is what accept_copy accepts too. The head is
        # taken now, naming these files, so a later saver sees no copy.
        accept, st.accept_copy = st.accept_copy, True
        try:
            with st.transaction():
                pass
        finally:
            st.accept_copy = accept


def refuse_held(st: ThreadStore, head: Head | None) -> None:
    """ConcurrentSessionError while a live process other than this saver holds
    the thread's lease (a graph of its runs it). Checked at each commit, and
    when a graph is about to run from this saver (``ArgusSaver.get_tuple``):
    LangGraph writes checkpoints in the background by default, so a refusal
    met only at the first commit came after the graph had run every node."""
    why = refusal(
        head.lease if head is not None else None,
        st.holder,
        repr(st.thread_id),
        subject="LangGraph thread",
        doing="is being written",
        advice="nothing was written. Wait for that run to end, or copy the "
        "thread (saver.copy_thread) and continue the copy.",
    )
    if why is not None:
        raise ConcurrentSessionError(why, session_id=st.session_id)


def refuse_copy(st: ThreadStore, head: Head | None) -> None:
    """ConcurrentSessionError when the thread's files are a copy made while a
    run held it and that run went on after the copy. Checked when a graph is
    about to run the thread (``ArgusSaver.get_tuple``, before a node runs) and
    at each commit; reading the copy is not refused."""
    why = None if st.accept_copy else copy_refusal(st, head)
    if why is not None:
        raise ConcurrentSessionError(why, session_id=st.session_id)


def copy_refusal(st: ThreadStore, head: Head | None) -> str | None:
    """Why the thread's files may not be run as they are (``refuse_copy``)."""
    if head is None:
        return None
    return st.origin.refusal(
        head.lease,
        st.holder,
        st.witness.read,
        f"LangGraph thread {st.thread_id!r} (session {st.session_id})",
        repeats="the nodes it ran",
        accept="open it with ArgusSaver(ws, accept_copy=True)",
    )


def storage_error(st: ThreadStore, e: sqlite3.DatabaseError) -> ArgusError:
    """A full disk, a damaged file, or another failure to read or write.

    A full disk is no damage: advising to delete the thread there (as every
    SQLite error once did) would destroy what was committed; and a file SQLite
    cannot read has no checkpoint left to resume from.
    """
    who = f"LangGraph thread {st.thread_id!r} (session {st.session_id})"
    db = st.directory / "cache.db"
    if is_disk_full(e, st.directory):
        err = full_error(db, e, what="committing to")
        err.message = f"{who}: {err.message}"
        err.session_id = st.session_id
        return err
    if is_damaged(e):
        return CorruptCheckpointError(
            f"{who}: its database {db} is damaged ({e}): no checkpoint of it "
            "can be read or resumed from. Other threads are unaffected. "
            "Restore its folder from a backup, or delete the thread "
            f"(saver.delete_thread({st.thread_id!r})) to start it over; "
            f"`sqlite3 {db} .recover` may save the records still readable.",
            key="cache.db",
            session_id=st.session_id,
        )
    return CorruptCheckpointError(
        f"{who}: could not read or write cache.db in {st.directory} ({e}). "
        "Nothing is known to be damaged: check the disk, its free space and "
        "the folder's permissions, then invoke the graph again.",
        key="cache.db",
        session_id=st.session_id,
    )
