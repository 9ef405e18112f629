"""What changed: a fork against its parent, the plan across versions, and decisions.

Like the other post-mortem helpers these take a Session or the Frames of one
session and return typed DataFrames (empty when nothing happened).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from argus_lab.analysis._columns import Column, Columns, records
from argus_lab.analysis._frames import Frames
from argus_lab.analysis._postmortem import one_session
from argus_lab.analysis._values import epoch, secs
from argus_lab.events import (
    ApprovalGranted,
    ApprovalRejected,
    EventBase,
    HtnDecision,
    PlanPatched,
    TaskRetried,
    TaskSkipped,
)

if TYPE_CHECKING:
    import pandas as pd

    from argus_lab.runtime.session import Session

__all__ = ["COMPARE_COLUMNS", "compare", "decisions", "plan_diff"]

CHANGES = ("added", "removed", "status", "result", "cost", "duration")

COMPARE_COLUMNS = Columns(
    Column("task_id", "string"),
    Column("status_a", "string"),
    Column("status_b", "string"),
    Column("result_changed", "boolean"),
    Column("cost_a", "float64"),
    Column("cost_b", "float64"),
    Column("duration_a", "duration"),
    Column("duration_b", "duration"),
    Column("changes", "object", doc="Which of: " + ", ".join(CHANGES)),
)


def _rows(t: pd.DataFrame) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in records(t):
        out[str(r["task_id"])] = {k: None if _isna(v) else v for k, v in r.items()}
    return out


def _isna(v: Any) -> bool:
    import pandas as pd

    return not isinstance(v, list | dict) and bool(pd.isna(v))


def compare(
    a: Session | Frames,
    b: Session | Frames,
    *,
    rtol: float = 0.25,
    atol: float = 0.1,
    only_changed: bool = True,
) -> pd.DataFrame:
    """The tasks whose status, result, cost or duration differ between two sessions.

    Meant for a fork against its parent (``compare(parent, fork)``), but any two
    sessions sharing task ids compare. Tasks a fork kept from its parent
    (``reused``) are compared on status and result only: the fork did not run
    them, so it spent no time or money on them.

    Args:
        a: The baseline (the parent).
        b: The other session (the fork).
        rtol: Durations differ when they are further apart than ``rtol`` times the
            longer one ...
        atol: ... and than ``atol`` seconds (timing noise is not a change).
        only_changed: Return only the tasks that changed (default), or every task.

    Returns:
        task_id, status_a, status_b, result_changed, cost_a, cost_b, duration_a,
        duration_b and changes (a list naming what differs: added, removed,
        status, result, cost, duration). Tasks in a's plan order, then b's new ones.
    """
    ra, rb = _rows(one_session(a).tasks), _rows(one_session(b).tasks)
    rows: list[dict[str, Any]] = []
    for tid in [*ra, *(t for t in rb if t not in ra)]:
        x, y = ra.get(tid), rb.get(tid)
        changes: list[str] = []
        if x is None:
            changes.append("added")
        elif y is None:
            changes.append("removed")
        else:
            if x["status"] != y["status"]:
                changes.append("status")
            if (x["result"], x["result_ref"]) != (y["result"], y["result_ref"]):
                changes.append("result")
            if not (x["reused"] or y["reused"]):
                if abs((x["cost_usd"] or 0.0) - (y["cost_usd"] or 0.0)) > 1e-12:
                    changes.append("cost")
                da, db = secs(x["duration"]), secs(y["duration"])
                if (da is None) != (db is None) or (
                    da is not None
                    and db is not None
                    and abs(da - db) > max(atol, rtol * max(da, db))
                ):
                    changes.append("duration")
        if only_changed and not changes:
            continue
        x, y = x or {}, y or {}
        rows.append(
            {
                "task_id": tid,
                "status_a": x.get("status"),
                "status_b": y.get("status"),
                "result_changed": "result" in changes,
                "cost_a": x.get("cost_usd"),
                "cost_b": y.get("cost_usd"),
                "duration_a": secs(x.get("duration")),
                "duration_b": secs(y.get("duration")),
                "changes": changes,
            }
        )
    return COMPARE_COLUMNS.frame(rows)


def _events(f: Frames, *kinds: str) -> list[EventBase]:
    """The events of these kinds as their typed models, rebuilt from the frame."""
    from argus_lab.events import event_class

    e = f.events
    e = e[e["kind"].isin(kinds)]
    out: list[EventBase] = []
    for r in records(e):
        own = json.loads(r["details"]) if isinstance(r.get("details"), str) else {}
        common = {
            "session_id": str(r["session_id"]),
            "seq": int(r["seq"]),
            "ts": epoch(r["ts"]) or 0.0,
            "task_id": None if _isna(r["task_id"]) else str(r["task_id"]),
        }
        kind = str(r["kind"])
        out.append(event_class(kind).model_validate({**own, **common, "kind": kind}))
    return out


PLAN_DIFF_COLUMNS = Columns(
    Column("seq", "Int64"),
    Column("ts", "timestamp"),
    Column("version", "Int64"),
    Column("change", "category", categories=("added", "removed", "changed", "rewired")),
    Column("task_id", "string"),
    Column("reason", "string"),
)


def plan_diff(src: Session | Frames) -> pd.DataFrame:
    """How the plan changed across versions, from its ``plan_patched`` events.

    Returns:
        One row per task added, removed, changed or rewired (given new
        dependencies) by a patch, in order: seq, ts, version (the plan version
        the patch made), change, task_id, reason.
    """
    rows: list[dict[str, Any]] = []
    for ev in _events(one_session(src), "plan_patched"):
        assert isinstance(ev, PlanPatched)
        changes: dict[str, list[str]] = {
            "added": ev.added,
            "removed": ev.removed,
            "changed": list(ev.changed),
            "rewired": list(ev.rewired),
        }
        for change, ids in changes.items():
            for tid in ids:
                rows.append(
                    {
                        "seq": ev.seq,
                        "ts": ev.ts,
                        "version": ev.version,
                        "change": change,
                        "task_id": tid,
                        "reason": ev.reason,
                    }
                )
    return PLAN_DIFF_COLUMNS.frame(rows)


DECISION_KINDS = ("htn", "replan", "approval", "skip", "retry")
DECISION_COLUMNS = Columns(
    Column("seq", "Int64"),
    Column("ts", "timestamp"),
    Column("kind", "category", categories=DECISION_KINDS),
    Column("task_id", "string"),
    Column("subject", "string", doc="The compound task, plan version or task."),
    Column("decision", "string"),
    Column("by", "string"),
    Column("detail", "string"),
)


def _join(*parts: Any) -> str | None:
    text = "; ".join(str(p) for p in parts if p not in (None, "", [], {}))
    return text or None


def decisions(src: Session | Frames) -> pd.DataFrame:
    """Every decision taken during the run, by a planner or a person, in order.

    HTN method choices (``htn``), plan patches (``replan``), approvals granted
    or refused (``approval``), and tasks a person skipped or retried.

    Returns:
        seq, ts, kind, task_id, subject, decision, by, detail.
    """
    f = one_session(src)
    kinds = (
        "htn_decision",
        "plan_patched",
        "approval_granted",
        "approval_rejected",
        "task_skipped",
        "task_retried",
    )
    rows: list[dict[str, Any]] = []
    for ev in _events(f, *kinds):
        tid = ev.task_id
        row: dict[str, Any] = {"seq": ev.seq, "ts": ev.ts, "task_id": tid}
        if isinstance(ev, HtnDecision):
            row |= {
                "kind": "htn",
                "subject": ev.compound or tid,
                "decision": ev.decision,
                "detail": _join(
                    f"method {ev.method}" if ev.method else None, ev.reason
                ),
            }
        elif isinstance(ev, PlanPatched):
            row |= {
                "kind": "replan",
                "subject": f"plan v{ev.version if ev.version is not None else '?'}",
                "decision": "patched",
                "detail": _join(
                    f"+{len(ev.added)} -{len(ev.removed)} tasks",
                    f"{ev.compound} by {ev.method}" if ev.compound else None,
                    ev.reason,
                ),
            }
        elif isinstance(ev, ApprovalGranted):
            edited = ev.edited_args
            row |= {
                "kind": "approval",
                "subject": tid,
                "decision": "granted",
                "by": ev.by,
                "detail": _join(
                    f"edited args: {json.dumps(edited, sort_keys=True)}"
                    if edited is not None
                    else None
                ),
            }
        elif isinstance(ev, ApprovalRejected):
            row |= {
                "kind": "approval",
                "subject": tid,
                "decision": "rejected",
                "by": ev.by,
                "detail": _join(ev.reason),
            }
        elif isinstance(ev, TaskSkipped):
            row |= {
                "kind": "skip",
                "subject": tid,
                "decision": "skipped",
                "detail": ev.reason,
            }
        elif isinstance(ev, TaskRetried):
            row |= {
                "kind": "retry",
                "subject": tid,
                "decision": "retried",
                "detail": _join(f"was {ev.previous}" if ev.previous else None, ev.why),
            }
        rows.append(row)
    return DECISION_COLUMNS.frame(rows)
