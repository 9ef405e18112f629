"""Reading sessions for analysis: records as they are, events as columns of raw JSON.

Events are the bulk of a trajectory (100,000+ in a long run), so they are never
validated one pydantic object at a time. Their stored text is what
``EventBase.model_dump_json`` wrote: compact JSON with the EventBase fields first,
``duration`` last of them, then the kind's own typed fields. Each body is split
after ``duration``; the kind's fields stay JSON text (``details``), parsed later
only for the kinds a frame needs (LLM calls, approvals, ...), straight into the
row: a parsed row reads like the event model (``row["error"]``). A body that does
not have that shape is parsed whole instead.

A session's events are kept as the stored texts until a frame asks: as columns
(``SessionData.event_table``: the heads parsed by Arrow, no dict per event; what
``events_df`` reads), as the five head fields alone (``head_table``: decoded by
msgspec, the rest of each text skipped; what ``tasks_df`` and the frames pairing
attempts read through ``lists`` and ``positions``), or as rows
(``SessionData.events``: the heads parsed in ONE ``json.loads`` of a joined array,
when the columns cannot be read). Only the rows a frame parses are built as dicts
otherwise (``rows_at``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import compress, repeat
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, TypeAlias

from argus_lab.analysis._event_cols import (
    EVENT_FIELDS,
    FAST,
    HEAD_FIELDS,
    event_table,
    head_table,
    parse_events,
)
from argus_lab.analysis._series import arrow
from argus_lab.analysis._table import Table

if TYPE_CHECKING:
    from argus_lab.model import SessionInfo, TaskRecord
    from argus_lab.plan import Plan
    from argus_lab.runtime.session import Session
    from argus_lab.workspace import Workspace

__all__ = ["Read", "SessionData", "Source", "parse_events", "read_sessions"]

log = logging.getLogger("argus_lab")

Source: TypeAlias = "Session | Workspace | Iterable[Session]"
"""What the frame functions read: one session, a whole workspace, or a list."""

_THREADS = 4
"""Sessions of a workspace read at once (store opens and closes are I/O bound)."""
_PARSED = "_parsed"
"""Row key set once a row's details are merged into it."""


class SessionData:
    """One session's info, plan, records and events, read once.

    Args:
        info: The session's SessionInfo.
        plan: Its plan.
        records: Its task records, by task id.
        events: Its event rows (dicts, see ``parse_events``), if parsed already.
        bodies: Else its events' JSON texts: parsed into rows when ``events`` is
            first used, or into columns by ``event_table`` (no dict per event).
        live: Whether a run of it went on as it was read (``run_live`` in
            ``runtime/session.py``); False: its tasks stored as running are
            intents nothing runs (interrupted).
    """

    def __init__(
        self,
        info: SessionInfo,
        plan: Plan,
        records: dict[str, TaskRecord],
        events: list[dict[str, Any]] | None = None,
        *,
        bodies: list[str] | None = None,
        live: bool = True,
    ) -> None:
        self.info = info
        self.live = live
        self.plan = plan
        self.records = records
        self._events = events
        self._bodies = bodies if events is None else None
        self.cache: dict[str, Any] = {}
        """Rows derived from the events (attempts, usage), computed once."""

    @property
    def events(self) -> list[dict[str, Any]]:
        """The event rows, in seq order (parsed on first use)."""
        if self._events is None:
            rows = parse_events(self._bodies or [])
            # Rows built from the columns before keep their identity (and what
            # ``parsed`` merged into them).
            built: dict[int, dict[str, Any]] = self.cache.get("rows", {})
            for i, row in built.items():
                rows[i] = row
            self._events = rows
        return self._events

    @property
    def n_events(self) -> int:
        """How many events the session has."""
        if self._events is not None:
            return len(self._events)
        return len(self._bodies or [])

    def event_table(self) -> Table:
        """The events as columns (``EVENT_FIELDS``): Arrow arrays parsed from the
        stored texts when they were not parsed into rows already, else lists."""
        got: Table | None = self.cache.get("table")
        if got is not None:
            return got
        if self._events is None and self._bodies is not None:
            got = event_table(self._bodies, FAST)
        if got is None:
            rows = self.events
            got = Table(
                {k: list(map(dict.get, rows, repeat(k))) for k in EVENT_FIELDS},
                len(rows),
            )
        self.cache["table"] = got
        return got

    def _heads(self) -> Table | None:
        """The EventBase fields as columns, or None once the events are rows
        (or Arrow could not read them): the whole ``event_table`` when it was
        built, else the heads alone (``head_table``: no ``details`` column)."""
        if self._events is not None:
            return None
        got: Table | None = self.cache.get("table")
        if got is None and self._bodies is not None:
            got = self.cache.get("heads")
            if got is None and "heads" not in self.cache:
                got = self.cache["heads"] = head_table(self._bodies)
        return got if got is not None else self.event_table()

    @property
    def id(self) -> str:
        return self.info.id

    def parsed(self, row: dict[str, Any]) -> dict[str, Any]:
        """An event row with its kind's fields merged in (parsed once)."""
        if _PARSED not in row:
            self._merge([row])
        return row

    def of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        """Event rows of these kinds, in seq order, their fields merged in.

        The rows not parsed yet are parsed together in one ``json.loads`` of a
        joined array (several times faster than one call each).
        """
        rows = self.unparsed_of_kind(*kinds)
        self._merge([r for r in rows if _PARSED not in r])
        return rows

    def unparsed_of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        """Event rows of these kinds, in seq order, their fields not parsed."""
        return self.rows_at(self.positions(*kinds))

    def positions(self, *kinds: str) -> list[int]:
        """Positions (in seq order) of the events of these kinds."""
        table = self._heads()
        col = None if table is None else table.column("kind")
        if self._events is None and col is not None and not isinstance(col, list):
            pa, pc = arrow(), arrow("pyarrow.compute")  # found in C
            hit = pc.is_in(col, value_set=pa.array(sorted(set(kinds)), pa.string()))
            found: list[int] = pc.indices_nonzero(hit).to_pylist()
            return found
        # Found by C-level maps over the kinds (no bytecode per event), and
        # not looked for at all when no event is of these kinds.
        wanted = frozenset(kinds) | ({None} if "" in kinds else set())
        listed = self.lists("kind")[0]
        present: set[str | None] | None = self.cache.get("kind set")
        if present is None:
            present = self.cache["kind set"] = set(listed)
        if present.isdisjoint(wanted):
            return []
        return list(compress(range(len(listed)), map(wanted.__contains__, listed)))

    def containing(self, text: str, *kinds: str) -> list[int]:
        """Positions of the events of these kinds whose own fields' JSON text
        contains ``text`` (a quick filter before parsing the few that do).

        Searched in the stored texts when they are kept: the EventBase fields
        before the kind's own are ids, numbers and names whose quotes JSON
        escapes, so a ``text`` holding a ``"`` (a key) is found in those texts
        exactly when it is in the kind's own fields.
        """
        at = self.positions(*kinds)
        if self._bodies is not None and '"' in text:
            bodies = self._bodies
            return [i for i in at if text in bodies[i]]
        rows = self.rows_at(at)
        return [
            i for i, r in zip(at, rows, strict=True) if text in (r.get("details") or "")
        ]

    def lists(self, *names: str) -> list[list[Any]]:
        """Event columns as lists, in seq order (``EVENT_FIELDS`` names): read
        from the rows once they are parsed, else from the columns (no dicts)."""
        # The columns, unless the rows exist (or Arrow could not read them);
        # the heads alone when they hold every name asked for.
        heads = all(k in HEAD_FIELDS for k in names)
        table = self._heads() if heads else self.event_table()
        if self._events is not None or table is None:
            rows = self.events
            return [list(map(dict.get, rows, repeat(k))) for k in names]
        out: list[list[Any]] = []
        for k in names:
            got = self.cache.get("list:" + k)
            if got is None:
                got = self.cache["list:" + k] = table.values(k)
            out.append(got)
        return out

    def rows_at(self, at: list[int]) -> list[dict[str, Any]]:
        """The event rows at these positions; when the events are held as
        columns, only these rows are built (once: a row keeps what ``parsed``
        merged into it), from the columns of ``event_table`` when it was built,
        else parsed from their stored texts (``parse_events``)."""
        table = self._heads()
        if self._events is not None or table is None:
            ev = self.events
            return [ev[i] for i in at]
        built: dict[int, dict[str, Any]] = self.cache.setdefault("rows", {})
        new = [i for i in at if i not in built]
        if new and "table" not in self.cache and self._bodies is not None:
            bodies = self._bodies
            built.update(zip(new, parse_events([bodies[i] for i in new]), strict=True))
        elif new:
            table = self.event_table()
            take = arrow().array(new, arrow().int64())
            cols = [table.column(k).take(take).to_pylist() for k in EVENT_FIELDS]
            for i, vals in zip(new, zip(*cols, strict=True), strict=True):
                built[i] = dict(zip(EVENT_FIELDS, vals, strict=True))
        return [built[i] for i in at]

    @staticmethod
    def _merge(rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        texts = [r.get("details") or "{}" for r in rows]
        parsed = json.loads("[" + ",".join(texts) + "]")
        for r, p in zip(rows, parsed, strict=True):
            # A kind's own fields never share a name with an EventBase field
            # (events/_base.py), so this cannot overwrite one.
            r.update(p)
            r[_PARSED] = True


@dataclass
class Read:
    """What ``read_sessions`` read, and what it skipped (``strict=False`` only)."""

    sessions: list[SessionData]
    skipped: dict[str, str] | None = None
    """Session id -> why it was skipped; None when reading strictly."""


def _from_session(s: Session) -> SessionData:
    from argus_lab.runtime.session import intents_left

    bodies = list(s.event_json())
    records = s.records
    live = not intents_left(s, records)
    return SessionData(s.info, s.plan, records, bodies=bodies, live=live)


def _langgraph(ws: Workspace, sid: str) -> SessionData | None:
    """A LangGraph thread (``argus_lab.langgraph``) as a session: one task per
    node execution, events from its checkpoints. None if ``sid`` is no thread."""
    from argus_lab.errors import MissingDependency

    try:
        from argus_lab.langgraph._analysis import thread_parts
    except MissingDependency:  # no LangGraph here: read it as the plain session
        return None
    parts = thread_parts(ws, sid)
    return None if parts is None else SessionData(*parts)


def _read_one(ws: Workspace, sid: str, *, plan: bool) -> SessionData:
    """One session read through the workspace's store (no Session built)."""
    from argus_lab.plan import Plan

    if sid.startswith("lg-") and (got := _langgraph(ws, sid)) is not None:
        return got
    from argus_lab.runtime.session import any_running
    from argus_lab.store.index import live_runner

    live = True
    with ws.store(sid) as store:
        if plan:
            loaded = store.load()
            # items(): every record validated in one call (records.py)
            info, p, records = loaded.meta, loaded.plan, dict(loaded.records.items())
            if any_running(records):  # run_live, from the head just read
                live = live_runner(loaded.head) is not None
        else:
            info, p, records = store.read_meta(), Plan(), {}
        bodies = list(store.iter_event_json())
    return SessionData(info, p, records, bodies=bodies, live=live)


def _read_workspace(ws: Workspace, *, plan: bool, strict: bool) -> Read:
    """Reads every session of a workspace, oldest first.

    Lighter than ``ws.sessions()`` then ``ws.open()`` for each: one store open per
    session, no Session built, and with ``plan=False`` no plan or task record
    parsed. Opening and closing a store (diskcache rewrites its settings, SQLite
    checkpoints the WAL on close) is most of the cost for small sessions and is
    I/O, so sessions are read by a few threads at once. A damaged session
    raises (strict) or is skipped, with why, in ``Read.skipped``.
    """
    from concurrent.futures import ThreadPoolExecutor

    from argus_lab.errors import StorageError

    def one(sid: str) -> SessionData | str:
        try:
            return _read_one(ws, sid, plan=plan)
        except StorageError as e:
            if strict:
                # One session must not hide how to read the others.
                e.message += (
                    "; to read the workspace's other sessions, pass strict=False "
                    "(the skipped ones are logged)"
                )
                e.args = (e.message, *e.args[1:])
                raise
            return e.message

    ids = ws.session_ids()
    if not ids:
        return Read([], None if strict else {})
    with ThreadPoolExecutor(max_workers=min(_THREADS, len(ids))) as pool:
        got = list(pool.map(one, ids))
    out = [d for d in got if isinstance(d, SessionData)]
    out.sort(key=lambda d: (d.info.created, d.info.id))
    if strict:
        return Read(out)
    skipped = {
        sid: why for sid, why in zip(ids, got, strict=True) if isinstance(why, str)
    }
    if skipped:
        log.warning(
            "analysis skipped %d damaged session(s): %s",
            len(skipped),
            "; ".join(f"{k}: {v}" for k, v in skipped.items()),
        )
    return Read(out, skipped)


def read_sessions(src: Any, *, plan: bool = True, strict: bool = True) -> Read:
    """Reads a Session, a Workspace (every session in it) or an iterable of Sessions.

    Sessions of a Workspace are read from their stores and closed again, oldest
    first; a Session handed in is read as it is now and left open.

    Args:
        src: What to read.
        plan: Whether the frames to build need the plans and task records (only
            events-only frames pass False; it saves parsing them for a workspace).
        strict: For a Workspace: raise on a damaged session (True), or skip it
            and say which and why in ``Read.skipped`` (False).
    """
    from argus_lab.runtime.session import Session
    from argus_lab.workspace import Workspace

    if isinstance(src, Session):
        return Read([_from_session(src)])
    if isinstance(src, Workspace):
        return _read_workspace(src, plan=plan, strict=strict)
    if isinstance(src, str | bytes | PurePath) or not isinstance(src, Iterable):
        hint = (
            f" {str(src)!r}: pass al.Workspace({str(src)!r}) for a workspace "
            "folder, or ws.open(name) for one session"
            if isinstance(src, str | PurePath)
            else ""
        )
        raise TypeError(
            "expected a Session, a Workspace or a list of Sessions, got "
            f"{type(src).__name__}{hint}"
        )
    items = list(src)
    bad = [type(x).__name__ for x in items if not isinstance(x, Session)]
    if bad:
        raise TypeError(
            f"expected Sessions in the list, got {', '.join(sorted(set(bad)))}"
        )
    return Read([_from_session(s) for s in items])
