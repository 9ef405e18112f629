"""Post-mortem questions answered as DataFrames.

Each helper takes a Session or the :class:`Frames` of one session (from
``frames(s)`` or ``load(folder)``, so a post-mortem works without the workspace),
and returns a DataFrame with a fixed, typed set of columns (empty when there is
nothing to report). Durations are float64 seconds (NaN when unknown), as in the
frames; a task's ``duration`` runs from the first attempt of the current
generation to the final status (retries and backoff included).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from argus_lab.analysis._columns import Column, Columns, DtypeSpec, records
from argus_lab.analysis._frames import Frames, frames
from argus_lab.analysis._values import epoch

if TYPE_CHECKING:
    from argus_lab.runtime.session import Session

__all__ = [
    "RETRY_COLUMNS",
    "cost_by",
    "cost_columns",
    "critical_path",
    "failure_chains",
    "one_session",
    "retries_summary",
    "slowest",
]

CostBy = Literal["task", "tool", "model", "subtree"]
NOT_RUN = ("blocked", "pending", "awaiting_approval")


def _cols(*spec: tuple[str, DtypeSpec]) -> Columns:
    return Columns(*(Column(name, dtype) for name, dtype in spec))


def one_session(src: Session | Frames) -> Frames:
    """The Frames of exactly one session (reading a Session if given one)."""
    f = src if isinstance(src, Frames) else frames(src)
    if len(f.sessions) != 1:
        names = ", ".join(str(n) for n in f.sessions["name"]) or "none"
        raise ValueError(
            f"these frames hold {len(f.sessions)} sessions ({names}); pick one with "
            "frames.session(name)"
        )
    return f


def _deps(tasks: pd.DataFrame) -> dict[str, list[str]]:
    return {
        str(t): json.loads(d) if isinstance(d, str) else []
        for t, d in zip(tasks["task_id"], tasks["deps"], strict=True)
    }


def _seconds(v: Any) -> float:
    return 0.0 if v is None or pd.isna(v) else float(v)


def _topo(deps: dict[str, list[str]]) -> list[str]:
    """Plan order made topological (a dependency always comes first)."""
    seen: set[str] = set()
    order: list[str] = []

    def visit(t: str) -> None:
        stack = [(t, iter(deps.get(t, [])))]
        seen.add(t)
        while stack:
            node, it = stack[-1]
            nxt = next((d for d in it if d in deps and d not in seen), None)
            if nxt is None:
                stack.pop()
                order.append(node)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(deps.get(nxt, []))))

    for t in deps:
        if t not in seen:
            visit(t)
    return order


def critical_path(src: Session | Frames) -> pd.DataFrame:
    """The chain of dependent tasks with the largest total actual duration.

    That chain bounds how fast the run could have gone with unlimited
    concurrency: shortening anything off it would not have ended the run sooner.
    Ties go to the task earlier in the plan. Tasks a fork reused from its parent
    count as taking no time (they did not run in this session).

    Returns:
        One row per task on the path, first to last: task_id, tool, status,
        reused, started, ended, duration and cum_duration (running total of
        the time spent in this session: reused tasks add nothing).
    """
    f = one_session(src)
    t = f.tasks.reset_index(drop=True)
    deps = _deps(t)
    rank = {tid: i for i, tid in enumerate(deps)}
    # A task a fork reused took no time in this session.
    weight = {
        str(k): 0.0 if pd.notna(r) and bool(r) else _seconds(v)
        for k, v, r in zip(t["task_id"], t["duration"], t["reused"], strict=True)
    }
    dist: dict[str, float] = {}
    pred: dict[str, str | None] = {}
    for tid in _topo(deps):
        best: str | None = None
        for d in deps[tid]:
            if d in dist and (
                best is None
                or dist[d] > dist[best]
                or (dist[d] == dist[best] and rank[d] < rank[best])
            ):
                best = d
        pred[tid] = best
        dist[tid] = weight[tid] + (dist[best] if best is not None else 0.0)
    path: list[str] = []
    if dist:
        node: str | None = min(dist, key=lambda k: (-dist[k], rank[k]))
        while node is not None:
            path.append(node)
            node = pred[node]
    path.reverse()
    keep = ["task_id", "tool", "status", "reused", "started", "ended", "duration"]
    out = t.set_index("task_id", drop=False).loc[path, keep].reset_index(drop=True)
    secs = pd.Series([weight[p] for p in path], dtype="float64")
    out["cum_duration"] = secs.cumsum()
    return out


def _children(deps: dict[str, list[str]]) -> dict[str, list[str]]:
    kids: dict[str, list[str]] = {t: [] for t in deps}
    for t, ds in deps.items():
        for d in ds:
            kids.setdefault(d, []).append(t)
    return kids


def _descendants(kids: dict[str, list[str]], root: str) -> set[str]:
    seen: set[str] = set()
    todo = list(kids.get(root, []))
    while todo:
        t = todo.pop()
        if t not in seen:
            seen.add(t)
            todo.extend(kids.get(t, []))
    return seen


FAILURE_COLUMNS = _cols(
    ("task_id", "string"),
    ("tool", "string"),
    ("status", "string"),
    ("error_type", "string"),
    ("error", "string"),
    ("attempts", "Int64"),
    ("ended", "timestamp"),
    ("n_blocked", "Int64"),
    ("blocked", "object"),
)


def failure_chains(src: Session | Frames) -> pd.DataFrame:
    """Each failed (or in-doubt) task and the downstream tasks it kept from running.

    Returns:
        One row per failure, earliest first: task_id, tool, status, error_type,
        error, attempts, ended, n_blocked and blocked (a list of task ids in
        plan order: descendants still blocked or pending). A task blocked by two
        failures is listed under both.
    """
    f = one_session(src)
    t = f.tasks.reset_index(drop=True)
    deps = _deps(t)
    kids = _children(deps)
    status = dict(zip(t["task_id"], t["status"].astype(str), strict=True))
    rows: list[dict[str, Any]] = []
    for r in t.itertuples(index=False):
        if str(r.status) not in ("failed", "in_doubt"):
            continue
        below = _descendants(kids, str(r.task_id))
        blocked = [x for x in deps if x in below and status[x] in NOT_RUN]
        rows.append(
            {
                "task_id": r.task_id,
                "tool": r.tool,
                "status": str(r.status),
                "error_type": r.error_type,
                "error": r.error,
                "attempts": r.attempts,
                "ended": epoch(r.ended),
                "n_blocked": len(blocked),
                "blocked": blocked,
            }
        )
    rows.sort(key=lambda x: (x["ended"] is None, x["ended"] or 0.0))
    return FAILURE_COLUMNS.frame(rows)


def _na(v: Any) -> Any:
    return None if pd.isna(v) else v


RETRY_COLUMNS = _cols(
    ("task_id", "string"),
    ("tool", "string"),
    ("status", "string"),
    ("attempts", "Int64"),
    ("retries", "Int64"),
    ("manual_retries", "Int64"),
    ("failed_attempts", "Int64"),
    ("retry_wait", "duration"),
    ("wasted", "duration"),
    ("errors", "object"),
)


def retries_summary(src: Session | Frames) -> pd.DataFrame:
    """Tasks that needed more than one attempt, and what the retries cost.

    Returns:
        One row per such task, most attempts first: task_id, tool, status,
        attempts, retries (transient, automatic), manual_retries (``s.retry``),
        failed_attempts, retry_wait (backoff slept), wasted (time of attempts that
        did not succeed) and errors (distinct "Type: message" texts, in order).
    """
    f = one_session(src)
    a, t = f.attempts, f.tasks
    manual = f.events[f.events["kind"] == "task_retried"]["task_id"].value_counts()
    rows: list[dict[str, Any]] = []
    for r in t.itertuples(index=False):
        mine = a[a["task_id"] == r.task_id]
        n_manual = int(manual.get(r.task_id, 0))
        if len(mine) < 2 and not n_manual:
            continue
        bad = mine[mine["outcome"].astype(str) != "succeeded"]
        errors: list[str] = []
        for et, e in zip(bad["error_type"], bad["error"], strict=True):
            text = f"{_na(et) or 'Error'}: {_na(e) or ''}".rstrip(": ")
            if text not in errors and (_na(et) or _na(e)):
                errors.append(text)
        rows.append(
            {
                "task_id": r.task_id,
                "tool": r.tool,
                "status": str(r.status),
                "attempts": len(mine),
                "retries": int((mine["outcome"] == "retried").sum()),
                "manual_retries": n_manual,
                "failed_attempts": len(bad),
                "retry_wait": _secs_sum(mine["retry_delay"]),
                "wasted": _secs_sum(bad["duration"]),
                "errors": errors,
            }
        )
    rows.sort(key=lambda x: -x["attempts"])
    return RETRY_COLUMNS.frame(rows)


def _secs_sum(s: pd.Series) -> float:
    return float(s.sum()) if len(s) else 0.0  # float seconds; NaN skipped


def _ancestors(tid: str, parent: dict[str, str | None]) -> Iterator[str]:
    seen: set[str] = set()
    p = parent.get(tid)
    while p and p not in seen:
        seen.add(p)
        yield p
        # A compound that is not itself a task: climb its hierarchical id.
        p = parent[p] if p in parent else (p.rsplit("/", 1)[0] if "/" in p else None)


def cost_by(src: Session | Frames, by: CostBy = "task") -> pd.DataFrame:
    """Model cost, tokens and time, grouped by task, tool, model or HTN subtree.

    Args:
        src: A Session or the Frames of one session.
        by: "task", "tool", "model", or "subtree" (every HTN compound above a
            task gets its whole subtree's usage, so subtree rows overlap; tasks
            with no parent are under "(top level)").

    Returns:
        One row per group, most expensive first: the group key (a column named
        task_id, tool, model or subtree), cost_usd, input_tokens, output_tokens,
        cache_read_tokens, cache_write_tokens, n_llm_calls, and busy (time the
        tasks' attempts ran; for "model": the calls' own latency). Calls made
        outside any task are under "(no task)".
    """
    if by not in ("task", "tool", "model", "subtree"):
        raise ValueError(f"by must be 'task', 'tool', 'model' or 'subtree', got {by!r}")
    f = one_session(src)
    t, c = f.tasks, f.llm_calls
    key = {"task": "task_id", "tool": "tool", "model": "model", "subtree": "subtree"}[
        by
    ]
    calls = pd.DataFrame(
        {
            "task_id": c["task_id"].astype("object").fillna("(no task)"),
            "model": c["model"].astype("object").fillna("(unknown)"),
            "cost_usd": c["cost_usd"].fillna(0.0),
            **{k: c[k].fillna(0) for k in _TOKENS},
            "n_llm_calls": 1,
            "busy": c["duration"],
        }
    )
    tools = dict(
        zip(t["task_id"], t["tool"].astype("object").fillna("(none)"), strict=True)
    )
    tasks = pd.DataFrame({"task_id": t["task_id"].astype("object"), "busy": t["busy"]})
    if by == "model":
        g = calls.drop(columns="task_id").groupby("model", sort=False).sum()
    else:
        calls = calls.drop(columns="busy")
        if by == "tool":
            calls["tool"] = calls["task_id"].map(tools).fillna("(no task)")
            tasks["tool"] = tasks["task_id"].map(tools)
        if by == "subtree":
            parent = dict(zip(t["task_id"], t["parent"].astype("object"), strict=True))
            groups = {
                tid: list(_ancestors(tid, {k: _na(v) for k, v in parent.items()}))
                or ["(top level)"]
                for tid in parent
            }
            calls = calls.assign(subtree=calls["task_id"].map(groups)).explode(
                "subtree"
            )
            calls["subtree"] = calls["subtree"].fillna("(no task)")
            tasks = tasks.assign(subtree=tasks["task_id"].map(groups)).explode(
                "subtree"
            )
        g = (
            calls.drop(columns=[k for k in ("task_id", "model") if k != key])
            .groupby(key, sort=False)
            .sum(numeric_only=True)
        )
        busy = tasks.groupby(key, sort=False)["busy"].sum()
        g = g.reindex(g.index.union(busy.index, sort=False)).fillna(0)
        g["busy"] = busy.reindex(g.index)
    g.index.name = key
    out = g.reset_index()
    rows = records(out)
    rows.sort(key=lambda r: (-float(r["cost_usd"]), -_seconds(r.get("busy"))))
    for r in rows:
        r["busy"] = _seconds(r.get("busy"))
    return cost_columns(key).frame(rows)


_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def cost_columns(key: str) -> Columns:
    return _cols(
        (key, "string"),
        ("cost_usd", "float64"),
        *((k, "Int64") for k in _TOKENS),
        ("n_llm_calls", "Int64"),
        ("busy", "duration"),
    )


def slowest(src: Session | Frames, n: int = 10) -> pd.DataFrame:
    """The n tasks that took longest (``duration``), slowest first.

    Tasks a fork reused from its parent are left out: they did not run here.

    Returns:
        task_id, tool, status, attempts, started, ended, duration, busy.
    """
    f = one_session(src)
    keep = [
        "task_id",
        "tool",
        "status",
        "attempts",
        "started",
        "ended",
        "duration",
        "busy",
    ]
    t = f.tasks
    t = t[t["duration"].notna() & ~t["reused"].fillna(False).astype(bool)][keep]
    t = t.sort_values("duration", ascending=False, kind="stable")
    return t.head(n).reset_index(drop=True)
