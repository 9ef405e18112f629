"""Removing sessions, and retention with garbage collection (``rm``, ``gc``).

A session lives in three places: its checkpoint folder (``sessions/<id>``), its
working files (``files/<id>``) and its name in the index. Large results and
produced files (figures, parquet) are content-addressed artifacts
(``artifacts/xx/<sha256>``) that sessions share, so removing a session never
deletes artifacts directly; ``gc`` deletes the ones nothing references any more.

An artifact is *referenced* when its id (``sha256:<hex>``) appears in any stored
value of any remaining session: task records (including those of tasks a plan
patch retired), replay-cache entries, events, the plan; and, transitively, inside
a referenced artifact that holds JSON (a large result may itself point to
artifacts). A session that cannot be read is scanned as raw bytes, so damage
never makes its artifacts look orphaned.

Nothing committed is lost to a race with a session at work (``run_gc``):

- a session open anywhere (a Session object, in this process or another; one
  paused for an approval holds no lease) is never dropped: the removal takes
  its folder's lock (``store/folders.py``) and is refused, named, while held;
- the references are read again after the sessions are removed, right before
  the artifacts are, so a session made or changed since the plan (while gc
  asked y/N) keeps what it references;
- an artifact is first moved aside, then its age read on the moved file:
  every put sets the file's mtime to now, even one that finds the file there
  already (``ArtifactStore.put_bytes``), so a result stored but not yet
  committed is either seen young (put back) or found gone by the put (written
  anew). A file younger than ``GRACE_S`` is never deleted.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.store.artifacts import put_back_tombs, tomb_of
from argus_lab.store.folders import MARKS, dir_bytes, is_open

if TYPE_CHECKING:
    from argus_lab.model import SessionInfo
    from argus_lab.workspace import Workspace

__all__ = [
    "GcPlan",
    "artifact_refs",
    "lease_holder",
    "plan_gc",
    "run_gc",
]

REF = re.compile(r"sha256:[0-9a-f]{64}")
REF_BYTES = re.compile(rb"sha256:[0-9a-f]{64}")
GRACE_S = 3600.0
"""Orphaned artifacts younger than this are kept: a session may have stored one
(written it, or found it there and touched it) a moment before committing the
record that references it. Whether or not a lease is live: a run writes its
lease with its first commit, after its first results may be stored."""


def lease_holder(ws: Workspace, sid: str) -> dict[str, Any] | None:
    """The live runner lease of a session (None when nobody is running it, or
    when its store cannot be read: a damaged session cannot be run either, so
    ``argus rm`` removes it as its damage message advises)."""
    from argus_lab.errors import StorageError
    from argus_lab.store.head import lease_is_live

    try:
        with ws.store(sid) as store:
            head = store.read_head()
    except StorageError:
        return None
    lease = head.lease if head is not None else None
    return lease if lease_is_live(lease, time.time()) else None


def session_bytes(ws: Workspace, sid: str) -> int:
    """Bytes of a session's checkpoint folder and working files."""
    return dir_bytes(ws.path_of(sid)) + dir_bytes(ws.path / "files" / sid)


def _texts_of_session(ws: Workspace, sid: str) -> list[str]:
    """Every stored value of a session as text (records, replays, events, plan)."""
    with ws.store(sid) as store:
        loaded = store.load()
        texts = [r.model_dump_json() for r in loaded.records.values()]
        texts += list(store.replays().values())
        texts += list(store.iter_event_json())
        texts.append(loaded.plan.model_dump_json())
        return texts


def artifact_refs(ws: Workspace, sid: str) -> set[str]:
    """Artifact ids a session's stored values mention (not yet transitively)."""
    from argus_lab.errors import ArgusError

    try:
        return {m for text in _texts_of_session(ws, sid) for m in REF.findall(text)}
    except (ArgusError, ValueError, OSError):
        # Unreadable: keep whatever its raw bytes mention, never less.
        found: set[str] = set()
        for p in ws.path_of(sid).rglob("*"):
            if p.is_file():
                found |= {m.decode() for m in REF_BYTES.findall(p.read_bytes())}
        return found


def _closure(ws: Workspace, refs: set[str]) -> set[str]:
    """``refs`` plus every artifact named inside a referenced JSON artifact."""
    seen: set[str] = set()
    todo = list(refs)
    while todo:
        ref = todo.pop()
        if ref in seen:
            continue
        seen.add(ref)
        path = ws.artifacts.path(ref)
        try:
            with path.open("rb") as f:
                head = f.read(1)
                if head not in (b"{", b"[", b'"'):
                    continue
                data = head + f.read()
        except OSError:
            continue
        todo += [m.decode() for m in REF_BYTES.findall(data)]
    return seen


def _artifact_files(ws: Workspace) -> dict[str, Path]:
    root = ws.artifacts.root
    if not root.is_dir():
        return {}
    return {
        "sha256:" + p.name: p
        for p in root.glob("??/*")
        if p.is_file() and len(p.name) == 64
    }


@dataclass
class GcPlan:
    """What ``gc`` removes (or, with --dry-run, would remove) and why."""

    sessions: list[tuple[SessionInfo, int, str]] = field(default_factory=list)
    """(info, bytes of its folders, why) for each session to drop."""
    artifacts: list[tuple[str, Path, int]] = field(default_factory=list)
    """(artifact id, file, bytes) for each artifact no kept session references."""
    leftovers: list[tuple[Path, int]] = field(default_factory=list)
    """Folders no session owns: files of removed sessions, interrupted removals,
    temp files of interrupted artifact writes."""
    young: int = 0
    """Orphaned artifacts kept because they are recent (``GRACE_S``)."""
    kept: int = 0
    """Sessions kept."""
    opened: list[tuple[SessionInfo, list[int]]] = field(default_factory=list)
    """Sessions kept because a Session has them open (info, pids holding it):
    each would have been dropped."""
    skipped: list[tuple[SessionInfo, str]] = field(default_factory=list)
    """Sessions ``run_gc`` did not remove after all (run or opened since the
    plan): (info, why)."""
    rescued: int = 0
    """Planned artifacts ``run_gc`` kept: referenced or stored since the plan."""

    @property
    def bytes(self) -> int:
        """Total bytes freed."""
        return (
            sum(b for _, b, _ in self.sessions)
            + sum(b for _, _, b in self.artifacts)
            + sum(b for _, b in self.leftovers)
        )


def plan_gc(
    ws: Workspace,
    *,
    older_than: float | None = None,
    max_size: int | None = None,
    keep: int = 0,
    now: float | None = None,
) -> GcPlan:
    """Decide what to remove: old sessions, sessions over a size, orphans.

    Args:
        ws: The workspace.
        older_than: Drop sessions not updated for this many seconds.
        max_size: Then drop the oldest sessions until the sessions' folders and
            the artifacts they reference take at most this many bytes.
        keep: Never drop the ``keep`` most recently updated sessions.
        now: The time to measure ages from (default: now).

    Sessions being run (a live lease) or open in a Session object anywhere
    (the lock of their folder) are never dropped.
    """
    now = time.time() if now is None else now
    infos = sorted(ws.sessions(), key=lambda i: i.updated)  # oldest first
    # Every session folder counts, readable or not: a damaged session's files
    # and artifacts are never taken for orphans.
    owned = set(ws.session_ids()) | {i.id for i in infos}
    live = {i.id for i in infos if lease_holder(ws, i.id) is not None}
    protected = live | {i.id for i in infos[len(infos) - keep :] if keep > 0}
    refs = {sid: _closure(ws, artifact_refs(ws, sid)) for sid in sorted(owned)}
    files = _artifact_files(ws)
    sizes = {ref: p.stat().st_size for ref, p in files.items()}
    users: Counter[str] = Counter(r for rs in refs.values() for r in rs)
    plan = GcPlan()
    dropped: set[str] = set()

    def drop(info: SessionInfo, why: str) -> int:
        pids = is_open(ws.path_of(info.id))
        if pids is not None:  # open somewhere: kept, and said so
            if all(i.id != info.id for i, _ in plan.opened):
                plan.opened.append((info, pids))
            return 0
        own = session_bytes(ws, info.id)
        plan.sessions.append((info, own, why))
        dropped.add(info.id)
        freed = own
        for r in refs[info.id]:
            users[r] -= 1
            if users[r] == 0:
                freed += sizes.get(r, 0)
        return freed

    if older_than is not None:
        for info in infos:
            if info.id not in protected and now - info.updated > older_than:
                drop(info, f"not updated for {_age(now - info.updated)}")
    if max_size is not None:
        total = sum(session_bytes(ws, i.id) for i in infos if i.id not in dropped)
        total += sum(sizes[r] for r in sizes if users[r] > 0)
        for info in infos:
            if total <= max_size:
                break
            if info.id in protected or info.id in dropped:
                continue
            total -= drop(info, f"over --max-size (workspace at {total} bytes)")
    for ref, path in sorted(files.items()):
        if users[ref] > 0:
            continue
        if now - path.stat().st_mtime < GRACE_S:
            plan.young += 1
            continue
        plan.artifacts.append((ref, path, sizes[ref]))
    for folder in (ws.path / "files", ws.path / ".trash"):
        if folder.is_dir():
            plan.leftovers += [
                (p, dir_bytes(p))
                for p in sorted(folder.iterdir())
                if folder.name == ".trash" or p.name not in owned
            ]
    marks = ws.path / MARKS
    if marks.is_dir():
        # A mark whose session folder is gone (a deletion cut short, a folder
        # removed by hand): it would take a backup of that session restored
        # later for a rollback. Not one made a moment ago (its folder is
        # written first, but a listing may have raced it).
        plan.leftovers += [
            (p, p.stat().st_size)
            for p in sorted(marks.iterdir())
            if p.name not in owned
            and not (ws.path / "sessions" / p.name).exists()
            and now - p.stat().st_mtime > GRACE_S
        ]
    if ws.artifacts.root.is_dir():
        plan.leftovers += [
            (p, p.stat().st_size)
            for p in sorted(ws.artifacts.root.glob("??/.tmp-*"))
            if now - p.stat().st_mtime > GRACE_S
        ]
    plan.kept = len(infos) - len(plan.sessions)
    return plan


def _age(seconds: float) -> str:
    """An age as a person reads it: "45 s", "14.5 min", "3.2 h", "1.5 days"."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def run_gc(ws: Workspace, plan: GcPlan) -> int:
    """Carry out a GcPlan; return the bytes freed.

    Everything is checked again as it is removed, since the plan may be old
    (``gc`` asked y/N meanwhile): a session run or opened since is skipped
    (``plan.skipped``); the references are read again once the sessions are
    gone, and an artifact referenced, or stored, since is kept
    (``plan.rescued``); a leftover whose session appeared since is kept.
    """
    from argus_lab.errors import ConcurrentSessionError, SessionNotFoundError
    from argus_lab.store.head import lease_message

    put_back_tombs(ws.artifacts.root)  # what a gc killed mid-way left aside
    freed = 0
    for info, _, _ in plan.sessions:
        lease = lease_holder(ws, info.id)
        if lease is not None:
            why = lease_message(repr(info.name), lease, advice="gc kept it")
            plan.skipped.append((info, why))
            continue
        try:
            freed += ws.delete(info.id)
        except ConcurrentSessionError as e:  # opened since the plan
            plan.skipped.append((info, e.message))
        except SessionNotFoundError:
            continue  # removed since by someone else
    # After the removals: a session can no longer be forked from one removed
    # (it is opened to be forked, and an open one is not removed).
    referenced: set[str] = set()
    for sid in ws.session_ids():
        with contextlib.suppress(SessionNotFoundError):  # removed meanwhile
            referenced |= artifact_refs(ws, sid)
    referenced = _closure(ws, referenced)
    for ref, path, _ in plan.artifacts:
        gone = None if ref in referenced else _remove_orphan(path)
        if gone is None:
            plan.rescued += 1
        else:
            freed += gone
    sessions = ws.path / "sessions"
    for path, size in plan.leftovers:
        if path.parent.name in ("files", MARKS) and (sessions / path.name).exists():
            continue  # its session was made since the plan
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        freed += size
    return freed


def _remove_orphan(path: Path) -> int | None:
    """Deletes an orphaned artifact unless a put touched it lately; returns
    the bytes freed (0: already gone), or None when it was kept.

    Moved aside first, then its age read on the moved file: a put that
    touched the file did so before the move (the age says young: put back),
    or finds it gone and writes it anew (``ArtifactStore.put_bytes``).
    """
    tomb = tomb_of(path)
    try:
        os.rename(path, tomb)
    except FileNotFoundError:
        return 0
    try:
        st = os.stat(tomb)
        if time.time() - st.st_mtime < GRACE_S:
            os.replace(tomb, path)  # the same bytes if a put wrote it anew
            return None
        tomb.unlink()
    except FileNotFoundError:
        return None  # a reader put it back (ArtifactStore.get_bytes)
    return st.st_size
