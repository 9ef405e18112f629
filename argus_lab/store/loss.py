"""What a commit the witness saw but SQLite lost means, in words and in records:
the message every store uses, and a session's check (``witness.py`` keeps the
witness; this reads what it says)."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING

from argus_lab.errors import LostCommitsError
from argus_lab.store.folders import mark_of

if TYPE_CHECKING:
    from argus_lab.model import TaskRecord
    from argus_lab.store.checkpoints import Loaded, SessionStore

__all__ = ["check_witness", "lost_versions", "restored_versions"]


def lost_versions(
    subject: str, unit: str, where: str, have: int, witnessed: int, directory: Path
) -> str:
    """What a loss is, in the words every store uses: ``subject`` lost its
    commits past ``have`` up to ``witnessed`` (``unit``: "version(s)", ...;
    ``where``: what holds the versions, "checkpoint", "log")."""
    gone = f"{have + 1}-{witnessed}" if witnessed > have + 1 else str(witnessed)
    return (
        f"{subject}: {witnessed - have} committed {unit} were lost: its {where} "
        f"holds version {have} but version {witnessed} had been committed "
        f"(versions {gone} are gone: the SQLite write-ahead log "
        f"{directory / 'cache.db-wal'} was cut short or damaged, or a power "
        'cut under durability="normal" dropped it)'
    )


def restored_versions(subject: str, have: int, marked: int, folder: Path) -> str:
    """What a folder older than its mark means (``witness.py``): a copy of it
    from before version ``marked`` was put in its place."""
    gone = f"{have + 1}-{marked}" if marked > have + 1 else str(marked)
    mark = mark_of(folder)
    return (
        f"{subject}: its folder {folder} is older than its last commit: it "
        f"holds version {have} but version {marked} had been committed "
        f"(the workspace's mark {mark} says so; versions {gone} are missing). "
        "Was an older backup of the folder restored over it? The commits "
        "since that backup may have run tools whose effects stay (a payment "
        "made), though the folder shows them as not run"
    )


def check_witness(
    store: SessionStore,
    loaded: Loaded | None,
    witnessed: int,
    *,
    accept: bool,
    restored: bool = False,
) -> None:
    """Raises LostCommitsError for a head older than ``witnessed``, or accepts it.

    ``restored``: ``witnessed`` is the mark's (the witness in the folder says
    no more than the head): the folder was put back as an older copy of it.

    Accepting marks each task the lost commits touched that has no surviving
    result as interrupted ("running"): the runtime's recovery then reruns it
    with the same idempotency key if its tool is idempotent or has no side
    effect, and holds it in doubt otherwise. Every surviving record is kept.
    The head jumps past the witness, so versions never repeat.
    """
    from argus_lab.events import make_event
    from argus_lab.model import TaskRecord

    head_v = loaded.head.version if loaded is not None else 0
    # A folder put back from a backup has the backup's journal: it cannot name
    # what was done after the backup (every unfinished task may have run).
    touched = None if restored else store.witness.touched(head_v, witnessed)
    name = loaded.meta.name if loaded is not None else store.session_id
    label = f"{name!r} ({store.session_id})"
    if restored:
        what = restored_versions(f"session {label}", head_v, witnessed, store.directory)
    else:
        what = lost_versions(
            f"session {label}",
            "version(s)",
            "checkpoint",
            head_v,
            witnessed,
            store.directory,
        )
    if loaded is None:
        raise LostCommitsError(
            f"{what}. Nothing of the session survived, not even its plan: it "
            "cannot be continued; create it again from its plan.",
            head_version=head_v,
            witness_version=witnessed,
            tasks=None,
            session_id=store.session_id,
        )
    order = [t.id for t in loaded.plan.tasks]
    done = {
        t
        for t, r in loaded.records.items()
        if r.status in ("succeeded", "skipped") and (touched is None or t in touched)
    }
    lost = [t for t in order if (touched is None or t in touched) and t not in done]
    if not accept:
        names = ", ".join(lost[:20]) + (
            f", ... ({len(lost)} in all)" if len(lost) > 20 else ""
        )
        if touched is not None:
            which = f"Tasks whose intent or result may be lost: {names or 'none'}."
        elif restored:
            which = (
                "The folder's journal cannot name what ran after it was "
                "copied, so every task it shows unfinished may have run: "
                f"{names or 'none'}."
            )
        else:
            which = (
                "The journal does not name every lost commit's tasks, so every "
                f"unfinished task may be affected: {names or 'none'}."
            )
        root = store.directory.parent.parent
        tools = sorted({t.tool for t in loaded.plan.tasks if t.tool})
        raise LostCommitsError(
            f"{what}. {which} Every result that survived is kept. To go on, "
            "treating each of those tasks as in doubt unless its tool is "
            "idempotent (then it reruns with the same idempotency key):\n"
            f"  Python: al.Workspace({str(root)!r}).open({name!r}, "
            f"tools=[...], accept_lost_commits=True)  # tools: {', '.join(tools)}\n"
            f"  argus:  argus -w {shlex.quote(str(root))} resume {name} "
            "--accept-lost-commits --tools MODULE_OR_FILE",
            head_version=head_v,
            witness_version=witnessed,
            tasks=None if touched is None else lost,
            session_id=store.session_id,
        )
    changed = []
    for tid in lost:
        rec = loaded.records.get(tid) or TaskRecord(task_id=tid)
        if rec.status != "running":  # its lost intent: attempt n+1 may have run
            changed.append(_lost_intent(store.session_id, rec))
    ev = make_event(
        "resumed",
        session_id=store.session_id,
        ts=time.time(),
        recovered="lost_commits",
        head_version=head_v,
        witness_version=witnessed,
        tasks=lost if touched is not None else None,
    )
    head = loaded.head
    # Events the lost commits wrote had numbers a reader may have seen (a
    # live view, a server's stream): new ones are numbered past them.
    seen = store.witness.lost_seq(head_v, witnessed)
    if seen is not None and seen > head.last_seq:
        head.last_seq = seen
    with store._transaction():
        head.version = witnessed + 1
        store._write(head, changed, [ev])
    store.witness.record(
        head.version, [r.task_id for r in changed], last_seq=head.last_seq
    )
    loaded.records.update({r.task_id: r for r in changed})


def _lost_intent(session_id: str, rec: TaskRecord) -> TaskRecord:
    """``rec`` as the intent a lost commit may have held: running its next
    attempt under the idempotency key that attempt used, the key a rerun or
    ``s.retry`` uses too, so whoever checks the effect by key finds it. A
    failed, blocked or skipped task runs again only after ``s.retry``, and a
    succeeded one after a rerun, each a new generation (a fresh key); any
    other keeps its generation."""
    # Only a new generation moves a task on from these (s.retry of a failure
    # or a skip, a rerun of a stale success); an in-doubt one keeps its own.
    moved = ("failed", "blocked", "skipped", "succeeded")
    # A fork's task carried from its parent keys its generation by the
    # parent's id (TaskRecord.key_of); a new generation by its own.
    lost = rec.model_copy(
        update={
            "status": "running",
            "attempts": rec.attempts + 1,
            "next_attempt_at": None,
            **rec.next_generation(rec.status in moved),
        }
    )
    lost.idempotency_key = lost.key_in(session_id)
    return lost
