"""Rows of every frame, as plain dicts, derived from one session's data.

Each ``*_rows`` function returns the rows its frame's Columns read; what several
frames share (attempts, per-task usage) is computed once per session and cached.
Timestamps are epoch seconds and durations seconds here; the Columns convert them.
"""

from __future__ import annotations

import json
from typing import Any

from argus_lab.analysis._columns import Table
from argus_lab.analysis._read import SessionData
from argus_lab.model import STATUSES

__all__ = [
    "approval_rows",
    "attempt_rows",
    "event_rows",
    "llm_call_rows",
    "session_rows",
    "tool_call_rows",
]

Row = dict[str, Any]

_OUTCOME = {
    "task_succeeded": "succeeded",
    "retry_scheduled": "retried",
    "task_failed": "failed",
}
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
    if not d.live:
        # Nothing runs the session: an attempt still open is an intent its
        # closed or dead run left (tasks_df's ``interrupted``), not running.
        for att in running.values():
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
