"""A LangGraph thread as a DataFrame: one row per node execution.

Read from what the saver stores: each task's pending writes (channel names, when
they were committed) against the checkpoint it ran from (step, when it was taken).
pandas is imported here, where it is used.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from argus_lab.langgraph._codec import decode
from argus_lab.langgraph._record import US
from argus_lab.langgraph._store import ThreadStore

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COLUMNS", "NULL_TASK", "SPECIAL", "node_rows", "task_writes", "tasks_frame"]

COLUMNS = [
    "thread_id",
    "checkpoint_ns",
    "step",
    "node",
    "status",
    "started",
    "ended",
    "duration",
    "writes",
    "task_id",
    "checkpoint_id",
]
NULL_TASK = "00000000-0000-0000-0000-000000000000"
"""The task id of a Command's resume map (not a node)."""
SPECIAL = {"__error__", "__interrupt__", "__resume__", "__scheduled__"}


def _node(path: str, task_id: str) -> str:
    # task_path_str of a pull task: "~__pregel_pull, <node>"; push tasks (Send)
    # carry no node name in their path, so their task id stands in.
    parts = path.lstrip("~").split(", ")
    if len(parts) >= 2 and parts[0] == "__pregel_pull":
        return parts[1]
    return task_id


def _epoch(ts: str | None) -> float | None:
    if not ts:
        return None
    return dt.datetime.fromisoformat(ts).timestamp()


def task_writes(
    st: ThreadStore, ns: str
) -> tuple[dict[str, Any], dict[tuple[str, str], list[dict[str, Any]]]]:
    """A namespace's checkpoints by id, and its pending writes grouped by
    (checkpoint id, task id): what one node execution wrote from one checkpoint."""
    ckpts = {k.split(US)[2]: v for k, v in st.scan(f"c{US}{ns}{US}")}
    tasks: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for key, w in st.scan(f"w{US}{ns}{US}"):
        tasks[(key.split(US)[2], w["task"])].append(w)
    return ckpts, tasks


def node_rows(st: ThreadStore) -> list[dict[str, Any]]:
    """One dict per node execution of a thread, in step order."""
    rows: list[dict[str, Any]] = []
    for ns in st.namespaces():
        ckpts, tasks = task_writes(st, ns)
        for (cid, task), writes in tasks.items():
            if task == NULL_TASK:  # a Command's resume map, not a node
                continue
            rec = ckpts.get(cid) or {}
            meta = decode(rec["meta"]) if rec else {}
            chans = [w["ch"] for w in writes]
            if "__error__" in chans:
                status = "failed"
            elif any(c not in SPECIAL for c in chans) or not chans:
                status = "succeeded"
            else:
                status = "awaiting approval" if "__interrupt__" in chans else "ran"
            started = _epoch(rec.get("ts"))
            ends = [w["t"] for w in writes if w.get("t") is not None]
            ended = max(ends) if ends else None
            rows.append(
                {
                    "thread_id": st.thread_id,
                    "checkpoint_ns": ns,
                    "step": (meta.get("step", -1) + 1) if meta else None,
                    "node": _node(writes[0].get("path", ""), task),
                    "status": status,
                    "started": started,
                    "ended": ended,
                    "duration": (
                        ended - started if ended is not None and started else None
                    ),
                    "writes": [c for c in chans if c not in SPECIAL],
                    "task_id": task,
                    "checkpoint_id": cid,
                }
            )
    rows.sort(key=lambda r: (r["checkpoint_ns"], r["step"] or 0, r["node"]))
    return rows


def tasks_frame(st: ThreadStore) -> pd.DataFrame:
    """``node_rows`` as a DataFrame (times as UTC timestamps)."""
    import pandas as pd

    df = pd.DataFrame(node_rows(st), columns=COLUMNS)
    for col in ("started", "ended"):
        df[col] = pd.to_datetime(df[col], unit="s", utc=True)
    return df
