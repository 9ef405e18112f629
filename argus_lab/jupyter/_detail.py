"""What the widget's detail panel shows for one task or HTN group.

Everything here is read from the session's committed state on selection only
(a click), never on the live-update path: the resolved arguments the task ran
with (and an approver's edit, with who made it), the result preview, the error
and traceback, every attempt with its duration, tokens and cost, the context
breakdown of an LLM task, and the memories the task wrote.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from argus_lab.events import TaskFailed
from argus_lab.layout import GROUP_PREFIX

if TYPE_CHECKING:
    from argus_lab.events import EventBase
    from argus_lab.runtime.session import Session

__all__ = [
    "PREVIEW_CHARS",
    "attempts_of",
    "node_detail",
    "preview",
    "resolved_args",
    "run_live",
    "status_marks",
]

PREVIEW_CHARS = 2000
"""Longest result or argument preview sent to the front end."""


def preview(value: Any) -> str | None:
    """Readable text for a value: strings as they are, the rest as JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            text = repr(value)
    if len(text) > PREVIEW_CHARS:
        text = text[:PREVIEW_CHARS] + f"\n… ({len(text) - PREVIEW_CHARS} more chars)"
    return text


def resolved_args(args: Any, result_of: Callable[[str], Any]) -> Any:
    """The task's arguments with ``${task.result...}`` references replaced by the
    committed results they read, as the task ran with them.

    ``${env.NAME}`` references stay as written: an environment value may be a
    secret, and secrets never reach the front end. A reference that cannot be
    resolved (its task has not succeeded) stays as written too.
    """
    from argus_lab.errors import UnresolvedReferenceError
    from argus_lab.plan.graph import iter_references, resolve_args

    if isinstance(args, str):
        if "${" not in args:
            return args
        # Read as the runtime reads it ("${ env.NAME }" is a reference too),
        # never by spelling: a text test missed the spaced forms.
        if any(r is not None and r.is_env for _, r in iter_references(args)):
            return args
        try:
            return resolve_args(args, result_of)
        except (UnresolvedReferenceError, KeyError, LookupError, TypeError):
            return args
    if isinstance(args, dict):
        return {k: resolved_args(v, result_of) for k, v in args.items()}
    if isinstance(args, list):
        return [resolved_args(v, result_of) for v in args]
    return args


def attempts_of(events: Iterable[EventBase], task_id: str) -> list[dict[str, Any]]:
    """One row per attempt of the current run of a task: number, outcome,
    start time and duration in seconds, and the error of a failed attempt."""
    rows: dict[int, dict[str, Any]] = {}
    for e in events:
        if e.task_id != task_id or e.attempt is None:
            continue
        if e.kind == "task_retried":  # a new generation starts the count again
            rows.clear()
            continue
        row = rows.setdefault(
            e.attempt,
            {"n": e.attempt, "outcome": "running", "started": None, "duration": None},
        )
        if e.kind == "task_started":
            row["started"] = e.ts
        elif e.kind in ("task_succeeded", "task_failed"):
            row["outcome"] = "succeeded" if e.kind == "task_succeeded" else "failed"
            if e.duration is not None:
                row["duration"] = round(e.duration, 4)
            elif row["started"] is not None:
                row["duration"] = round(e.ts - row["started"], 4)
            if isinstance(e, TaskFailed):
                row["error"] = str(e.error or "")
        elif e.kind == "retry_scheduled":
            row["outcome"] = "failed, retry scheduled"
    return [rows[n] for n in sorted(rows)]


def _memories_of(s: Session, task_id: str, status: str) -> list[dict[str, Any]]:
    """The result or lesson memory the task wrote (ids derive from provenance).

    Read only when the workspace has a memory store, so a click never creates
    one; a memory that cannot be read leaves the panel without it."""
    if status not in ("succeeded", "failed"):
        return []
    if not (s.workspace.path / "memory").exists():
        return []
    from argus_lab.store.memory_provenance import memory_id

    out = []
    try:
        mem = s.workspace.memory
        for kind in ("result", "lesson"):
            rec = mem.get(memory_id(kind, session_id=s.id, task_id=task_id))
            if rec is not None:
                out.append({"id": rec.id, "kind": rec.kind, "text": rec.text[:300]})
    except Exception:  # the panel must not break over the memory store
        return out
    return out


def _group_detail(s: Session, key: str, node: str) -> dict[str, Any]:
    members = [t.id for t in s.plan.tasks if t.parent == key]
    recs = s.records
    counts: dict[str, int] = {}
    for t in members:
        counts[recs[t].status] = counts.get(recs[t].status, 0) + 1
    return {"id": node, "kind": "group", "title": key, "members": members,
            "counts": counts}  # fmt: skip


def status_marks(
    s: Session, elsewhere: dict[str, Any] | None = None
) -> dict[str, list[str]]:
    """Tasks drawn apart from their status: rejected ones (failed by a person's
    or a policy's refusal), in a fork results kept from the parent, and
    interrupted ones (``interrupted``).

    ``elsewhere``: the store's progress when another process runs (or ran) the
    session (``run_elsewhere``); its statuses are the ones drawn.
    """
    created = s.info.created if s.info.parent else None
    rejected, cached, in_flight = [], [], []
    for t, r in s.records.items():
        if r.status == "failed" and r.error_type == "Rejected":
            rejected.append(t)
        elif r.status == "succeeded" and created and (r.started or created) < created:
            cached.append(t)  # finished in the parent, before the fork
        elif r.status == "running":
            in_flight.append(t)
    if elsewhere is not None:
        in_flight = [t for t, st in elsewhere["tasks"].items() if st == "running"]
    return {
        "rejected": rejected,
        "cached": cached,
        "interrupted": [] if run_live(s, elsewhere) else in_flight,
    }


def run_live(s: Session, elsewhere: dict[str, Any] | None = None) -> bool:
    """Whether a run of ``s`` goes on: this object's, or a live process's.

    Else a task stored as running is an intent a run left when it was closed,
    paused past its grace, or its process died: nothing runs it, and the next
    run reruns it (no side effect, or idempotent) or holds it in doubt.
    """
    if s.running:
        return True
    return elsewhere is not None and elsewhere["status"] == "running"


def node_detail(
    s: Session, node: str, *, stale: Iterable[str], breakpoints: Iterable[str]
) -> dict[str, Any]:
    """The detail panel's data for a task or an HTN group (``#group:KEY``)."""
    if not node:
        return {}
    if node.startswith(GROUP_PREFIX):
        return _group_detail(s, node[len(GROUP_PREFIX) :], node)
    if node not in s.records:
        return {}
    task = s.plan.task(node)
    rec = s.record(node)
    try:
        result = preview(s.result(node)) if rec.status == "succeeded" else None
    except Exception as e:  # a missing artifact must not break the panel
        result = f"(result unavailable: {e})"
    duration = (
        rec.ended - rec.started
        if rec.ended is not None and rec.started is not None
        else None
    )
    events = s.events()

    def result_of(tid: str) -> Any:
        if s.record(tid).status != "succeeded":
            raise KeyError(tid)
        return s.result(tid)

    approval = dict(rec.approval or {})
    edited = approval.get("edited_args")
    ran_with = edited if edited is not None else resolved_args(task.args, result_of)
    # The LLM task's prompt breakdown; a dict (or None), read on selection only.
    context = s.context_breakdown(node) if task.kind == "llm" else None
    return {
        "id": node,
        "kind": "task",
        "task_kind": task.kind,
        "title": task.title or task.id,
        "description": task.description,
        "tool": task.tool,
        "args": task.args,
        "resolved_args": ran_with,
        "edited_args": edited,
        "approved_by": approval.get("by") if approval.get("state") else None,
        "deps": list(task.deps),
        "group": task.parent,
        "status": rec.status,
        "attempts": rec.attempts,
        "attempt_log": attempts_of(events, node),
        "started": rec.started,
        "ended": rec.ended,
        "duration": duration,
        "result": result,
        "error": rec.error,
        "error_type": rec.error_type,
        "traceback": rec.traceback,
        "reason": rec.reason,
        "approval": approval or None,
        "idempotency_key": rec.idempotency_key,
        "cost": rec.cost_usd,
        "tokens": rec.tokens,
        "context": context if isinstance(context, dict) else None,
        "memories": _memories_of(s, node, rec.status),
        "stale": node in set(stale),
        "breakpoint": node in set(breakpoints),
    }
