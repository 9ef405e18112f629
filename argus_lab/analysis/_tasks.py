"""The rows of ``tasks_df``: one per task of the plan, built column by column.

A 10,000-task session has 20,000+ events and 10,000 records and tasks, so every
column here is read with as little Python per task or event as can be: C-level
maps over the models and the event columns, Arrow and numpy for the texts and
the usage. Each shortcut gives exactly what the plain way gives
(tests/test_frames_fast_paths.py) and falls back to it when it does not apply.
"""

from __future__ import annotations

from itertools import compress
from operator import itemgetter, not_
from typing import Any

from argus_lab.analysis._columns import Table
from argus_lab.analysis._read import SessionData
from argus_lab.analysis._rows import _OUTCOME, _STR, _USAGE, Row, _span, _usage
from argus_lab.analysis._series import arrow, json_string_lists, json_strings
from argus_lab.analysis._values import canonical
from argus_lab.model import TaskRecord

__all__ = ["task_rows"]

_CACHED = '"cached":true'
_RAN = frozenset({"task_started", "task_succeeded"})


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
    out = {t for t, i in last.items() if i in replayed} if replayed else set()
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


def _interrupted(status: list[str], live: bool) -> list[bool]:
    """The ``interrupted`` column: stored as running while no run goes on
    (``SessionData.live``): an intent a closed or dead run left, which the
    next run reruns or holds in doubt. The widget draws those tasks so."""
    if live:
        return [False] * len(status)
    return list(map("running".__eq__, status))


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
        for j in compress(range(len(recs)), map(not_, recs)):
            recs[j] = TaskRecord(task_id=ids[j])
    r = _fields(recs, _RECORD_FIELDS)
    n = len(ids)
    # The ids in Arrow once: the task_id column, and the titles of a plan
    # that has none; the session id repeated in C.
    pa = arrow()
    id_texts = pa.array(ids, pa.large_string())
    titles: Any = t["title"]
    if not any(titles):  # none has a title: each reads as its id
        titles = id_texts
    elif not all(titles):
        titles = [title or i for title, i in zip(titles, ids, strict=True)]
    started = list(map(gen_start.get, ids, r["started"]))
    ended = r["ended"]
    approvals = r["approval"]
    cols: dict[str, Any] = {
        "session_id": pa.repeat(pa.scalar(d.id, pa.large_string()), n),
        "task_id": id_texts,
        "title": titles,
        "tool": t["tool"],
        "parent": t["parent"],
        "deps": _deps(t["deps"]),
        "status": r["status"],
        "interrupted": _interrupted(r["status"], d.live),
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
