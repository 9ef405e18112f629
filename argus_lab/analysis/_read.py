"""Reading sessions for analysis: records as they are, events as columns of raw JSON.

Events are the bulk of a trajectory (100,000+ in a long run), so they are never
validated one pydantic object at a time. Their stored text is what
``EventBase.model_dump_json`` wrote: compact JSON whose last field is ``payload``.
Each body is split there; the small heads are parsed in ONE ``json.loads`` call (of
a JSON array joined from them) and the payload stays JSON text, parsed later only
for the kinds a frame needs (LLM calls, approvals, ...). A body that does not have
that shape (an old record re-dumped by a migration) is parsed whole instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from argus_lab.events import EventBase

if TYPE_CHECKING:
    from argus_lab.model import Plan, SessionInfo, TaskRecord
    from argus_lab.runtime.session import Session
    from argus_lab.workspace import Workspace

__all__ = ["SessionData", "Source", "parse_events", "read_sessions"]

Source: TypeAlias = "Session | Workspace | Iterable[Session]"
"""What the frame functions read: one session, a whole workspace, or a list."""

_MARK = ',"payload":'
_THREADS = 4
"""Sessions of a workspace read at once (store opens and closes are I/O bound)."""


def _payload_is_last() -> bool:
    classes: list[type[EventBase]] = [EventBase]
    while classes:
        cls = classes.pop()
        if list(cls.model_fields)[-1] != "payload":
            return False
        classes.extend(cls.__subclasses__())
    return True


# Checked once: if a field is ever added after ``payload``, the split would be
# wrong, so every body is then parsed whole (slower, still correct).
_FAST = _payload_is_last()


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def parse_events(bodies: list[str]) -> list[dict[str, Any]]:
    """Parses event JSON bodies into row dicts whose ``payload`` is JSON text.

    Args:
        bodies: Event JSON texts, as ``SessionStore.iter_event_json`` yields them.

    Returns:
        One dict per event with the EventBase fields; ``payload`` is the payload's
        JSON text (``"{}"`` when empty).
    """
    heads: list[str] = []
    payloads: list[str | None] = []
    slow: list[int] = []
    n = len(_MARK)
    for i, body in enumerate(bodies):
        j = body.find(_MARK) if _FAST else -1
        if j < 0 or body[-1] != "}":
            heads.append("{")
            payloads.append(None)
            slow.append(i)
        else:
            heads.append(body[:j])
            payloads.append(body[j + n : -1])
    if not bodies:
        return []
    rows: list[dict[str, Any]] = json.loads("[" + "},".join(heads) + "}]")
    for row, text in zip(rows, payloads, strict=True):
        row["payload"] = text
    for i in slow:
        full = json.loads(bodies[i])
        full["payload"] = _compact(full.get("payload") or {})
        rows[i] = full
    return rows


@dataclass
class SessionData:
    """One session's info, plan, records and parsed events, read once."""

    info: SessionInfo
    plan: Plan
    records: dict[str, TaskRecord]
    events: list[dict[str, Any]]
    cache: dict[str, Any] = field(default_factory=dict)
    """Rows derived from the events (attempts, usage), computed once."""

    @property
    def id(self) -> str:
        return self.info.id

    def payload(self, row: dict[str, Any]) -> dict[str, Any]:
        """The parsed payload of an event row (parsed once, then cached)."""
        got = row.get("_payload")
        if got is None:
            text = row.get("payload")
            got = json.loads(text) if text else {}
            if not isinstance(got, dict):
                got = {"value": got}
            row["_payload"] = got
        return got

    def of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        """Event rows of these kinds, in seq order, their payloads parsed.

        The payloads not parsed yet are parsed together in one ``json.loads``
        of a joined array (several times faster than one call each).
        """
        wanted = set(kinds)
        rows = [r for r in self.events if r.get("kind") in wanted]
        todo = [r for r in rows if "_payload" not in r]
        if todo:
            texts = [r.get("payload") or "{}" for r in todo]
            parsed = json.loads("[" + ",".join(texts) + "]")
            for r, p in zip(todo, parsed, strict=True):
                r["_payload"] = p if isinstance(p, dict) else {"value": p}
        return rows


def _from_session(s: Session) -> SessionData:
    bodies = list(s.event_json())
    return SessionData(
        info=s.info, plan=s.plan, records=s.records, events=parse_events(bodies)
    )


def _read_folder(ws: Workspace, folder: Path, *, plan: bool) -> SessionData | None:
    """One session read straight from its store (None if its metadata is damaged)."""
    from argus_lab.errors import CorruptCheckpointError
    from argus_lab.model import Plan
    from argus_lab.store.checkpoints import SessionStore

    try:
        store = SessionStore(folder, folder.name, durability=ws.durability)
    except CorruptCheckpointError:
        return None
    try:
        try:
            info = store.read_meta()
        except CorruptCheckpointError:
            return None
        # Past the metadata, damage raises (naming session and key), as ws.open does.
        if plan:
            loaded = store.load()
            info, p, records = loaded.meta, loaded.plan, loaded.records
        else:
            p, records = Plan(), {}
        bodies = list(store.iter_event_json())
    finally:
        store.close()
    return SessionData(info=info, plan=p, records=records, events=parse_events(bodies))


def _read_workspace(ws: Workspace, *, plan: bool) -> list[SessionData]:
    """Reads every readable session of a workspace, oldest first.

    Lighter than ``ws.sessions()`` then ``ws.open()`` for each: one store open per
    session, no Session built, and with ``plan=False`` no plan or task record
    parsed. Opening and closing a store (diskcache rewrites its settings, SQLite
    checkpoints the WAL on close) is most of the cost for small sessions and is
    I/O, so sessions are read by a few threads at once. Sessions whose metadata
    is damaged are skipped, as ``ws.sessions()`` does.
    """
    from concurrent.futures import ThreadPoolExecutor

    folders = [
        f for f in sorted((ws.path / "sessions").iterdir()) if (f / "cache.db").exists()
    ]
    if not folders:
        return []
    with ThreadPoolExecutor(max_workers=min(_THREADS, len(folders))) as pool:
        got = list(pool.map(lambda f: _read_folder(ws, f, plan=plan), folders))
    out = [d for d in got if d is not None]
    out.sort(key=lambda d: (d.info.created, d.info.id))
    return out


def read_sessions(src: Any, *, plan: bool = True) -> list[SessionData]:
    """Reads a Session, a Workspace (every session in it) or an iterable of Sessions.

    Sessions of a Workspace are read from their stores and closed again, oldest
    first; a Session handed in is read as it is now and left open.

    Args:
        src: What to read.
        plan: Whether the frames to build need the plans and task records (only
            events-only frames pass False; it saves parsing them for a workspace).
    """
    from argus_lab.runtime.session import Session
    from argus_lab.workspace import Workspace

    if isinstance(src, Session):
        return [_from_session(src)]
    if isinstance(src, Workspace):
        return _read_workspace(src, plan=plan)
    if isinstance(src, str | bytes) or not isinstance(src, Iterable):
        raise TypeError(
            "expected a Session, a Workspace or a list of Sessions, got "
            f"{type(src).__name__}"
        )
    items = list(src)
    bad = [type(x).__name__ for x in items if not isinstance(x, Session)]
    if bad:
        raise TypeError(
            f"expected Sessions in the list, got {', '.join(sorted(set(bad)))}"
        )
    return [_from_session(s) for s in items]
