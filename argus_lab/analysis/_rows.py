"""Rows of every frame, as plain dicts, derived from one session's data.

Each ``*_rows`` function returns the rows its frame's Columns read; what several
frames share (attempts, per-task usage) is computed once per session and cached.
Timestamps are epoch seconds and durations seconds here; the Columns convert them.
"""

from __future__ import annotations

import json
from itertools import compress
from operator import itemgetter
from typing import Any

from argus_lab.analysis._columns import Table
from argus_lab.analysis._read import SessionData
from argus_lab.analysis._series import arrow, json_string_lists, json_strings
from argus_lab.analysis._values import canonical
from argus_lab.model import STATUSES, TaskRecord

__all__ = [
    "approval_rows",
    "attempt_rows",
    "event_rows",
    "llm_call_rows",
    "session_rows",
    "task_rows",
    "tool_call_rows",
]

Row = dict[str, Any]

_OUTCOME = {
    "task_succeeded": "succeeded",
    "retry_scheduled": "retried",
    "task_failed": "failed",
}
_CACHED = '"cached":true'
_RAN = frozenset({"task_started", "task_succeeded"})
_STR = json.encoder.encode_basestring  # what canonical() writes for a str
_USAGE = ("cost_usd", "input_tokens", "output_tokens", "n_llm_calls")


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def _span(start: float | None, end: float | None) -> float | None:
    return end - start if start is not None and end is not None else None


def attempt_rows(d: SessionData) -> list[Row]:
    """One row per attempt: a task_started event paired with how it ended."""
    cached: list[Row] | None = d.cache.get("attempts")
    if cached is not None:
        return cached
    tools = {t.id: t.tool for t in d.plan.tasks}
    # Failures' fields parsed at once; every other event is read from columns.
    failed = dict(
        zip(
            d.positions("retry_scheduled", "task_failed"),
            d.of_kind("retry_scheduled", "task_failed"),
            strict=True,
        )
    )
    out: list[Row] = []
    running: dict[str, Row] = {}
    kinds, tids, atts, seqs, tss = d.lists("kind", "task_id", "attempt", "seq", "ts")
    for i, (kind, tid) in enumerate(zip(kinds, tids, strict=True)):
        if tid is None:
            continue
        if kind == "task_started":
            prev = running.pop(tid, None)
            if prev is not None:  # started again with no outcome: a crash between
                prev["outcome"] = "interrupted"
            row: Row = {
                "session_id": d.id,
                "task_id": tid,
                "attempt": atts[i],
                "seq": seqs[i],
                "tool": tools.get(tid) or d.parsed(d.rows_at([i])[0]).get("tool"),
                "outcome": "running",
                "started": tss[i],
                "ended": None,
                "duration": None,
                "error_type": None,
                "error": None,
                "retry_delay": None,
            }
            running[tid] = row
            out.append(row)
        elif kind in _OUTCOME:
            att = running.get(tid)
            # A failure with no attempt (unknown tool, refused by a policy) or of
            # another attempt is not this attempt's outcome.
            if att is None or atts[i] not in (None, att["attempt"]):
                continue
            del running[tid]
            att["outcome"] = _OUTCOME[kind]
            att["ended"] = tss[i]
            att["duration"] = _span(att["started"], att["ended"])
            if kind != "task_succeeded":
                ev = failed[i]
                att["error"], att["error_type"] = ev.get("error"), ev.get("error_type")
                if kind == "retry_scheduled":
                    att["retry_delay"] = ev.get("delay")
        elif kind in ("resumed", "in_doubt"):
            att = running.pop(tid, None)
            if att is not None:
                att["outcome"] = "interrupted"
    d.cache["attempts"] = out
    return out


def _usage(d: SessionData) -> dict[str | None, Row]:
    """Model usage per task id (None: calls made outside any task)."""
    cached: dict[str | None, Row] | None = d.cache.get("usage")
    if cached is not None:
        return cached
    usage: dict[str | None, Row] = {}
    for ev in d.of_kind("llm_call"):
        p = ev
        u = usage.setdefault(ev.get("task_id"), dict.fromkeys(_USAGE, 0))
        u["cost_usd"] += _num(p.get("cost_usd"))
        u["input_tokens"] += int(_num(p.get("input_tokens")))
        u["output_tokens"] += int(_num(p.get("output_tokens")))
        u["n_llm_calls"] += 1
    d.cache["usage"] = usage
    return usage


def _task_times(d: SessionData) -> tuple[dict[str, float], dict[str, float]]:
    """(start of each task's current generation, busy seconds per task).

    Busy time is the sum of the durations of the attempts ``attempt_rows`` pairs
    (same pairing, same order of addition); when those rows were not built yet,
    one pass pairs them here with no row per attempt (tasks_df needs only sums).
    """
    gen_start: dict[str, float] = {}
    busy: dict[str, float] = {}
    cached: list[Row] | None = d.cache.get("attempts")
    running: dict[str, tuple[Any, Any]] = {}
    kinds, tids, atts, tss = d.lists("kind", "task_id", "attempt", "ts")
    for kind, tid, attempt, ts in zip(kinds, tids, atts, tss, strict=True):
        if tid is None:
            continue
        if kind == "task_started":
            if tid not in gen_start:
                gen_start[tid] = ts
            running[tid] = (attempt, ts)
        elif kind in _OUTCOME:
            att = running.pop(tid, None)
            if att is None:
                continue
            if attempt is not None and attempt != att[0]:
                running[tid] = att  # another attempt's outcome: not this one's
                continue
            start = att[1]  # _span, inline: this runs once per attempt
            if start is not None and ts is not None and cached is None:
                busy[tid] = busy.get(tid, 0.0) + (ts - start)
        elif kind == "task_retried":
            gen_start.pop(tid, None)
        elif kind == "resumed" or kind == "in_doubt":
            running.pop(tid, None)
    if cached is not None:
        for a in cached:
            if a["duration"] is not None:
                busy[a["task_id"]] = busy.get(a["task_id"], 0.0) + a["duration"]
    return gen_start, busy


def _reused(d: SessionData) -> set[str]:
    """Tasks whose current result this session did not compute.

    A fork keeps finished results from its parent (the ``forked`` event lists
    them), and serves reruns whose inputs and tool code did not change from the
    parent's recorded results (a ``task_succeeded`` with ``cached`` and no attempt
    before it). Either way, no time or money was spent on them here.
    """
    kinds, tids = d.lists("kind", "task_id")
    # An attempt means this session ran the task; a replayed success means not.
    # The last of them decides: dict() keeps the last position given per key,
    # found by C-level maps (no bytecode per event).
    ran = list(map(_RAN.__contains__, kinds))
    last = dict(zip(compress(tids, ran), compress(range(len(tids)), ran), strict=True))
    last.pop(None, None)
    # Details are compact JSON (no spaces), so a success whose text lacks
    # '"cached":true' was not replayed: only the others are parsed.
    hits = d.containing(_CACHED, "task_succeeded")
    replayed = {
        i
        for i, ev in zip(hits, d.rows_at(hits), strict=True)
        if d.parsed(ev).get("cached") is True
    }
    out = {t for t, i in last.items() if i in replayed}
    # ... unless a fork kept its parent's result after that.
    forks = d.positions("forked")
    for i, ev in zip(forks, d.rows_at(forks), strict=True):
        for t in map(str, d.parsed(ev).get("kept") or []):
            if last.get(t, -1) < i:
                out.add(t)
    return out


def _results(status: list[str], refs: list[Any], results: list[Any]) -> Any:
    """The ``result`` column: the JSON text of each succeeded task's result
    kept inline (JSON null is a real result; None means none). Texts, the usual
    results, are quoted in one Arrow call (``json_strings``) when none needs
    an escape; anything else goes through ``canonical``."""
    kept = [
        s == "succeeded" and ref is None for s, ref in zip(status, refs, strict=True)
    ]
    if set(map(type, compress(results, kept))) <= {str}:
        texts = json_strings(
            [v if k else None for v, k in zip(results, kept, strict=True)]
        )
        if texts is not None:
            return texts
    return [canonical(v) if k else None for v, k in zip(results, kept, strict=True)]


def _usage_columns(ids: list[str], usage: dict[str | None, Row]) -> dict[str, Any]:
    """The usage columns of tasks ``ids`` (0 for a task with no model call):
    numpy arrays filled at the few tasks with usage, handed over as Arrow
    arrays (no Python value per task, none for the frame to convert)."""
    import numpy as np

    pa = arrow()
    n = len(ids)
    cost = np.zeros(n, np.float64)
    counts = {k: np.zeros(n, np.int64) for k in _USAGE[1:]}
    for j in compress(range(n), map(usage.__contains__, ids)):
        u = usage[ids[j]]
        cost[j] = u["cost_usd"]
        for k, col in counts.items():
            col[j] = u[k]
    return {"cost_usd": pa.array(cost)} | {k: pa.array(c) for k, c in counts.items()}


def _deps(deps: list[list[str]]) -> Any:
    """The ``deps`` column: canonical()'s text of each list of ids, made in
    C (``json_string_lists``), else written here: no call per task."""
    got = json_string_lists(deps)
    if got is not None:
        return got
    return ["[" + ", ".join(map(_STR, ids)) + "]" for ids in deps]


_TASK_FIELDS = ("id", "title", "tool", "parent", "deps")
_RECORD_FIELDS = (
    "status",
    "attempts",
    "generation",
    "started",
    "ended",
    "error_type",
    "error",
    "reason",
    "approval",
    "result",
    "result_ref",
    "input_hash",
    "tool_hash",
    "idempotency_key",
)


def _fields(models: list[Any], names: tuple[str, ...]) -> dict[str, list[Any]]:
    """These fields of every pydantic model, one list per field, read in one
    pass from the models' ``__dict__`` (where pydantic keeps field values) by
    C-level maps: no bytecode per model, and each model visited once rather
    than once per field (10,000 records, 14 fields: ~3.5 ms against ~8)."""
    if not models:
        return {k: [] for k in names}
    rows = map(itemgetter(*names), map(vars, models))
    return dict(zip(names, map(list, zip(*rows, strict=True)), strict=True))


def task_rows(d: SessionData) -> Table:
    """One row per task of the plan, in plan order, as columns (a Table).

    Built column by column from the plan and the records: one list per column,
    no dict per task, read with C-level maps where they can be (``_fields``):
    no bytecode per task for most columns (10,000 tasks: a few ms).
    """
    gen_start, busy = _task_times(d)
    usage = _usage(d)
    kept = _reused(d)
    tasks = d.plan.tasks
    t = _fields(tasks, _TASK_FIELDS)
    ids: list[str] = t["id"]
    recs: list[TaskRecord | None] = list(map(d.records.get, ids))
    # all(), not ``None in``: that would call pydantic's __eq__ on every record.
    if not all(recs):  # a task with no record yet reads as a new one
        recs = [r or TaskRecord(task_id=i) for i, r in zip(ids, recs, strict=True)]
    r = _fields(recs, _RECORD_FIELDS)
    n = len(ids)
    titles = t["title"]
    if not all(titles):
        titles = [title or i for title, i in zip(titles, ids, strict=True)]
    started = list(map(gen_start.get, ids, r["started"]))
    ended = r["ended"]
    approvals = r["approval"]
    cols: dict[str, Any] = {
        "session_id": [d.id] * n,
        "task_id": ids,
        "title": titles,
        "tool": t["tool"],
        "parent": t["parent"],
        "deps": _deps(t["deps"]),
        "status": r["status"],
        "attempts": r["attempts"],
        "generation": r["generation"],
        "started": started,
        "ended": ended,
        "duration": list(map(_span, started, ended)),
        "busy": list(map(busy.get, ids)),
        "error_type": r["error_type"],
        "error": r["error"],
        "reason": r["reason"],
        "approval": (
            [(a or {}).get("state") for a in approvals]
            if any(approvals)
            else [None] * n
        ),
        "reused": list(map(kept.__contains__, ids)),
        "result": _results(r["status"], r["result_ref"], r["result"]),
        "result_ref": r["result_ref"],
        "input_hash": r["input_hash"],
        "tool_hash": r["tool_hash"],
        "idempotency_key": r["idempotency_key"],
    }
    cols.update(_usage_columns(ids, usage))
    return Table(cols, n)


def session_rows(d: SessionData) -> list[Row]:
    """The one row of a session."""
    info = d.info
    counts = dict.fromkeys(STATUSES, 0)
    for r in d.records.values():
        counts[r.status] += 1
    attempts = attempt_rows(d)
    starts = [a["started"] for a in attempts if a["started"] is not None]
    ends = [r.ended for r in d.records.values() if r.ended is not None]
    started = min(starts) if starts else None
    ended = max(ends) if ends else None
    total: Row = dict.fromkeys(_USAGE, 0)
    for u in _usage(d).values():
        for k in _USAGE:
            total[k] += u[k]
    row: Row = {
        **info.model_dump(),
        "session_id": info.id,
        "started": started,
        "ended": ended,
        "duration": _span(started, ended),
        "n_tasks": len(d.plan.tasks),
        **{f"n_{s}": n for s, n in counts.items()},
        "n_attempts": len(attempts),
        "n_retries": sum(1 for a in attempts if a["outcome"] == "retried"),
        "n_events": d.n_events,
        **total,
    }
    return [row]


def event_rows(d: SessionData) -> Table:
    """Every event, as columns (the kind's own fields as JSON text, ``details``)."""
    return d.event_table()


def llm_call_rows(d: SessionData) -> list[Row]:
    """One row per llm_call event, its fields merged in."""
    return d.of_kind("llm_call")


def tool_call_rows(d: SessionData) -> list[Row]:
    """Task attempts (source "task") and tool_call events (source "llm"), by seq."""
    rows: list[Row] = [
        {
            "session_id": a["session_id"],
            "seq": a["seq"],
            "ts": a["started"],
            "task_id": a["task_id"],
            "attempt": a["attempt"],
            "source": "task",
            "tool": a["tool"],
            "ok": {"succeeded": True, "retried": False, "failed": False}.get(
                a["outcome"]
            ),
            "duration": a["duration"],
            "error_type": a["error_type"],
            "error": a["error"],
            "args": None,
        }
        for a in attempt_rows(d)
    ]
    for ev in d.of_kind("tool_call"):
        p = ev
        ok = p.get("ok")
        rows.append(
            {
                **ev,
                "source": "llm",
                "tool": p.get("tool"),
                "ok": ok if isinstance(ok, bool) else None,
                "error_type": p.get("error_type"),
                "error": p.get("error"),
                "args": p.get("args"),
            }
        )
    rows.sort(key=lambda r: r["seq"] or 0)
    return rows


def approval_rows(d: SessionData) -> list[Row]:
    """One row per approval request, or per policy refusal (no request)."""
    tools = {t.id: t.tool for t in d.plan.tasks}
    out: list[Row] = []
    asked: dict[str, Row] = {}
    kinds = ("approval_requested", "approval_granted", "approval_rejected")
    for ev in d.of_kind(*kinds):
        tid, p, ts = ev.get("task_id"), ev, ev.get("ts")
        key = tid or ""
        if ev["kind"] == "approval_requested" or key not in asked:
            row: Row = {
                "session_id": d.id,
                "task_id": tid,
                "seq": ev.get("seq"),
                "tool": p.get("tool") or tools.get(tid or ""),
                "decision": "pending",
                "by": None,
                "requested": None,
                "decided": None,
                "wait": None,
                "policy": p.get("policy"),
                "reason": None,
                "decision_reason": None,
                "args": p.get("args"),
                "edited_args": None,
            }
            out.append(row)
            if ev["kind"] == "approval_requested":
                row["requested"], row["reason"] = ts, p.get("reason")
                asked[key] = row
                continue
        else:
            row = asked.pop(key)
        granted = ev["kind"] == "approval_granted"
        row["decision"] = "granted" if granted else "rejected"
        row["by"], row["decided"] = p.get("by"), ts
        row["wait"] = _span(row["requested"], ts)
        if granted:
            row["edited_args"] = p.get("edited_args")
        else:
            row["decision_reason"] = p.get("reason")
    return out
