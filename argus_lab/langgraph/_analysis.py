"""A LangGraph thread in Argus's own shapes, for ``al.analysis`` and the views.

``al.analysis`` reads a workspace's sessions as (SessionInfo, Plan, task records,
event rows); a thread has none of those stored, so they are derived here from its
checkpoints and writes: one plan task per node execution (id ``s<step>.<node>``,
title the node, tool the node, depending on the previous step's tasks), its
record (status, start, end, ``result`` = its step, node and the channels it
wrote), and the events a native session would have: ``checkpoint_saved`` per
checkpoint, ``task_started`` and ``task_succeeded`` / ``task_failed`` per node
execution, ``approval_requested`` (and ``paused``) for an ``interrupt()``,
``approval_granted`` when a ``Command(resume=...)`` answered it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.langgraph._codec import decode
from argus_lab.langgraph._frames import NULL_TASK, SPECIAL, _epoch, task_writes
from argus_lab.langgraph._record import US
from argus_lab.langgraph._store import ThreadStore

if TYPE_CHECKING:
    from argus_lab.model import SessionInfo, TaskRecord
    from argus_lab.plan import Plan
    from argus_lab.workspace import Workspace

__all__ = ["ThreadParts", "node_executions", "open_thread", "thread_parts"]

ThreadParts = tuple[
    "SessionInfo", "Plan", dict[str, "TaskRecord"], list[dict[str, Any]]
]
"""(info, plan, task records, event rows), as ``analysis._read.SessionData`` takes."""


def _has_table(db: Path) -> bool:
    """Whether a session database holds LangGraph records, asked read-only, so
    that a native session (whatever its name) is never written by a reader."""
    import sqlite3

    try:
        con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error:
        return False
    try:
        row = con.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'LangGraph'"
        ).fetchone()
    except sqlite3.Error:
        return False
    finally:
        con.close()
    return row is not None


def open_thread(directory: Path) -> ThreadStore | None:
    """A reader's store of the thread in ``directory``, or None if it holds none."""
    db = directory / "cache.db"
    if not db.exists() or not _has_table(db):
        return None
    st = ThreadStore(directory, "?", durability="normal", holder="", lease_ttl=0)
    data = st.get("lg:thread")
    if not data:
        st.close()
        return None
    st.thread_id = data["thread_id"]
    return st


def _node(path: str, task_id: str) -> str:
    # A pull task's path is "~__pregel_pull, <node>"; a push task (Send) has no
    # node name in its path, so its task id stands in.
    parts = path.lstrip("~").split(", ")
    if len(parts) >= 2 and parts[0] == "__pregel_pull":
        return parts[1]
    return task_id


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list | tuple) and value else value


def _interrupt_value(value: Any) -> Any:
    first = _first(value)
    if isinstance(first, dict):
        return first.get("value", first)
    return getattr(first, "value", first)


def _error_type(error: Any) -> str:
    path = getattr(error, "type_name", None)  # a StoredError: the original class
    return str(path).rpartition(":")[2] if path else type(error).__name__


def node_executions(st: ThreadStore) -> list[dict[str, Any]]:
    """One dict per node execution of a thread, in (namespace, step) order.

    Keys: thread_id, checkpoint_ns, checkpoint_id, task_id, node, step, status
    ("succeeded", "failed", "awaiting_approval"), started, ended, duration,
    writes (channel names), error, error_type, interrupt (the value asked
    about), interrupt_id, asked, resumed (epoch seconds) and, per checkpoint of
    the thread, no row: those are in ``checkpoints(st)``.
    """
    rows: list[dict[str, Any]] = []
    for ns in st.namespaces():
        ckpts, tasks = task_writes(st, ns)
        for (cid, task), writes in tasks.items():
            if task == NULL_TASK:  # a Command's resume map, not a node
                continue
            rec = ckpts.get(cid) or {}
            meta = decode(rec["meta"]) if rec else {}
            by_ch = {w["ch"]: w for w in writes}
            chans = [w["ch"] for w in writes if w["ch"] not in SPECIAL]
            err = by_ch.get("__error__")
            intr = by_ch.get("__interrupt__")
            error = decode(err["v"]) if err else None
            asked = decode(intr["v"]) if intr else None
            if err:
                status = "failed"
            elif chans or not intr:
                status = "succeeded"
            else:
                status = "awaiting_approval"
            resume = tasks.get((cid, NULL_TASK))
            started = _epoch(rec.get("ts"))
            ends = [w["t"] for w in writes if w.get("t") is not None]
            ended = max(ends) if ends and status != "awaiting_approval" else None
            rows.append(
                {
                    "thread_id": st.thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": cid,
                    "task_id": task,
                    "node": _node(writes[0].get("path", ""), task),
                    "step": (meta.get("step", -1) + 1) if meta else None,
                    "status": status,
                    "started": started,
                    "ended": ended,
                    "duration": ended - started if ended and started else None,
                    "writes": chans,
                    "error": None if err is None else str(error)[:2000],
                    "error_type": None if err is None else _error_type(error),
                    "interrupt": None if intr is None else _interrupt_value(asked),
                    "interrupt_id": (
                        None if intr is None else getattr(_first(asked), "id", None)
                    ),
                    "asked": intr.get("t") if intr else None,
                    "resumed": (resume[0].get("t") if resume and intr else None),
                }
            )
    rows.sort(key=lambda r: (r["checkpoint_ns"], r["step"] or 0, r["node"]))
    return rows


def checkpoints(st: ThreadStore) -> list[dict[str, Any]]:
    """One dict per checkpoint: checkpoint_ns, checkpoint_id, ts, step, source."""
    out = []
    for key, rec in st.scan(f"c{US}"):
        _, ns, cid = key.split(US)
        meta = decode(rec["meta"])
        out.append(
            {
                "checkpoint_ns": ns,
                "checkpoint_id": cid,
                "ts": _epoch(rec.get("ts")),
                "step": meta.get("step"),
                "source": meta.get("source"),
            }
        )
    return out


def _task_id(ns: str, step: int | None, node: str, taken: set[str]) -> str:
    base = f"s{step if step is not None else 0}.{node}"
    if ns:
        base = f"{ns}/{base}"
    base = re.sub(r"[^A-Za-z0-9_./:-]", "_", base).lstrip(".-/:")[:190] or "node"
    tid, k = base, 1
    while tid in taken:
        k += 1
        tid = f"{base}.{k}"
    taken.add(tid)
    return tid


def _event(kind: str, ts: float | None, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "ts": ts, **fields}


def parts_of(st: ThreadStore, info: SessionInfo) -> ThreadParts:
    """(info, plan, records, event rows) of an open thread store."""
    import json

    from argus_lab.model import Task, TaskRecord
    from argus_lab.plan import Plan

    execs = node_executions(st)
    taken: set[str] = set()
    tasks: list[Task] = []
    records: dict[str, TaskRecord] = {}
    events: list[dict[str, Any]] = []
    prev: dict[str, list[str]] = {}  # namespace -> the previous step's task ids
    cur: dict[str, tuple[Any, list[str]]] = {}
    for r in execs:
        ns = r["checkpoint_ns"]
        step_ids = cur.get(ns)
        if step_ids is None or step_ids[0] != r["step"]:
            if step_ids is not None:
                prev[ns] = step_ids[1]
            step_ids = cur[ns] = (r["step"], [])
        tid = _task_id(ns, r["step"], r["node"], taken)
        step_ids[1].append(tid)
        r["argus_task_id"] = tid
        tasks.append(
            Task(id=tid, title=r["node"], tool=r["node"], deps=list(prev.get(ns, [])))
        )
        status = r["status"]
        records[tid] = TaskRecord(
            task_id=tid,
            status=status,
            attempts=1,
            started=r["started"],
            ended=r["ended"],
            error=r["error"],
            error_type=r["error_type"],
            reason=(
                f"awaiting approval: {str(r['interrupt'])[:200]}"
                if status == "awaiting_approval"
                else None
            ),
            result=(
                {"step": r["step"], "node": r["node"], "writes": r["writes"]}
                if status == "succeeded"
                else None
            ),
            approval=(
                None
                if r["asked"] is None
                else {"state": "approved" if r["resumed"] else "asked"}
            ),
        )
        base = {"task_id": tid, "attempt": 1}
        events.append(_event("task_started", r["started"], **base, tool=r["node"]))
        if r["asked"] is not None:
            args = r["interrupt"]
            events.append(
                _event(
                    "approval_requested",
                    r["asked"],
                    **base,
                    tool=r["node"],
                    args=args,
                    reason="interrupt()",
                )
            )
            if r["resumed"] is not None:
                events.append(_event("approval_granted", r["resumed"], **base))
            else:
                events.append(
                    _event("paused", r["asked"], reason=f"interrupt in {r['node']}")
                )
        if status == "succeeded":
            events.append(_event("task_succeeded", r["ended"], **base))
        elif status == "failed":
            events.append(
                _event(
                    "task_failed",
                    r["ended"],
                    **base,
                    error=r["error"],
                    error_type=r["error_type"],
                )
            )
    for c in checkpoints(st):
        events.append(
            _event(
                "checkpoint_saved",
                c["ts"],
                checkpoint_id=c["checkpoint_id"],
                checkpoint_ns=c["checkpoint_ns"],
                step=c["step"],
                source=c["source"],
            )
        )
    # Checkpoints before the tasks that run from them, at equal times.
    order = {"checkpoint_saved": 0}
    events.sort(key=lambda e: (e["ts"] or 0.0, order.get(e["kind"], 1)))
    common = ("kind", "ts", "task_id", "attempt")
    rows: list[dict[str, Any]] = []
    for seq, e in enumerate(events, 1):
        own = {k: v for k, v in e.items() if k not in common}
        rows.append(
            {
                "kind": e["kind"],
                "session_id": info.id,
                "seq": seq,
                "ts": e["ts"],
                "task_id": e.get("task_id"),
                "attempt": e.get("attempt"),
                "duration": None,
                "details": json.dumps(own, separators=(",", ":"), default=str),
            }
        )
    plan = Plan(goal=info.goal, tasks=tasks)
    return info, plan, records, rows


def thread_parts(ws: Workspace, session_id: str) -> ThreadParts | None:
    """The analysis parts of the LangGraph thread stored as ``session_id``, or
    None when that session is not a LangGraph thread."""
    st = open_thread(Path(ws.path) / "sessions" / session_id)
    if st is None:
        return None
    try:
        with ws.store(session_id) as store:
            info = store.read_meta()
        return parts_of(st, info)
    finally:
        st.close()
