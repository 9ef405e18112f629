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
"""

from __future__ import annotations

import re
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.store.folders import MARKS, dir_bytes

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
"""While a session runs, orphaned artifacts younger than this are kept: the
running session may have written one a moment before committing the record that
references it."""


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
    """Orphaned artifacts kept because a session runs and they are recent."""
    kept: int = 0
    """Sessions kept."""

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

    Sessions being run (a live lease) are never dropped.
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
        if live and now - path.stat().st_mtime < GRACE_S:
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

    A session whose lease became live since the plan was made is skipped.
    """
    freed = 0
    for info, _, _ in plan.sessions:
        if lease_holder(ws, info.id) is None:
            freed += ws.delete(info.id)
    for _, path, size in plan.artifacts:
        try:
            path.unlink()
            freed += size
        except FileNotFoundError:
            continue
    for path, size in plan.leftovers:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        freed += size
    return freed
