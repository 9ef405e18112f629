"""Writing to a LangGraph thread: a checkpoint with its changed values, a task's writes.

Everything is encoded before the transaction (a value that cannot be stored
refuses the whole checkpoint, and nothing is written); values and checkpoints are
stored as deltas against the thread's last ones (``_delta.py``); a task's writes
linger for the checkpoint that usually follows, to share its fsync (``_group.py``).
The session status that ``ws.sessions()`` shows is kept up to date as they land.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

from argus_lab.langgraph._codec import encode
from argus_lab.langgraph._delta import blob_record, checkpoint_record, next_memo
from argus_lab.langgraph._read import blob_key, ckpt_key
from argus_lab.langgraph._record import US, lg_encode
from argus_lab.langgraph._secrets import Snapshot, encoded, secret_env
from argus_lab.langgraph._threads import OpenThreads

__all__ = ["put_checkpoint", "put_task_writes"]


def _status_of(
    writes: Sequence[tuple[str, Any]], snap: Snapshot
) -> tuple[str, str] | None:
    """The session status a task's writes call for: an ``interrupt()`` is a
    question awaiting a person's answer, an error a failure."""
    for ch, value in writes:
        if ch == INTERRUPT:
            first = value[0] if isinstance(value, list | tuple) and value else value
            shown = getattr(first, "value", first)
            return "paused", f"awaiting approval: {snap.shown(str(shown))[:200]}"
        if ch == ERROR:
            return "failed", f"{type(value).__name__}: {snap.shown(str(value))[:200]}"
    return None


def _write(row: dict[str, Any], value: Any) -> dict[str, Any]:
    """A write's record: ``row`` with its encoded value."""
    return {**row, "v": value}


def _first(built: tuple[Any, ...]) -> Any:
    """The record of what ``blob_record`` / ``checkpoint_record`` return."""
    return built[0]


def _triggers_more(values: dict[str, Any]) -> bool:
    """Whether a checkpoint holds a trigger for another node (a StateGraph's
    edges set ``branch:to:<node>`` channels, ``Send`` sets ``__pregel_tasks``;
    a node consumes its trigger). If not, the run has ended: best effort, for
    the status that ``ws.sessions()`` and ``argus ls`` show."""
    return any(
        ch.startswith("branch:to:") or ch in ("__start__", "__pregel_tasks")
        for ch in values
    )


def put_checkpoint(
    threads: OpenThreads,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> RunnableConfig:
    """Stores a checkpoint and the values of the channels that changed (the
    values of secret env vars as references: ``_secrets.py``)."""
    conf = config["configurable"]
    tid, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
    parent = conf.get("checkpoint_id")
    values = checkpoint["channel_values"]
    # Everything is encoded before the transaction: a value that cannot be
    # stored refuses the whole checkpoint, and nothing is written.
    snap = secret_env()
    blobs: list[tuple[str, str, str, Any, bool]] = []
    for ch, ver in new_versions.items():
        mkey = (tid, ns, ch)
        if ch not in values:
            blobs.append(
                (ch, blob_key(ns, ch, ver), lg_encode({"empty": 1}), None, False)
            )
            continue
        memo0 = threads.blob_memo.get(mkey)
        (_, memo, delta), text = encoded(
            snap,
            partial(blob_record, ch, str(ver), values[ch], memo0),
            _first,
        )
        blobs.append((ch, blob_key(ns, ch, ver), text, memo, delta))
    meta = get_checkpoint_metadata(config, metadata)
    (_, cmemo, cdelta), ctext = encoded(
        snap,
        partial(
            checkpoint_record,
            dict(checkpoint),
            meta,
            parent,
            threads.ckpt_memo.get((tid, ns)),
        ),
        _first,
    )
    st = threads.get(tid, create=True)
    assert st is not None
    sizes: list[int] = []

    def work() -> None:
        sizes[:] = [st.set_text(key, text) for _, key, text, _, _ in blobs]
        sizes.append(st.set_text(ckpt_key(ns, checkpoint["id"]), ctext))
        status = "running" if _triggers_more(values) else "succeeded"
        # Puts and writes may arrive out of order (durability="async"): a
        # pause belongs to its checkpoint, and only a newer one ends it.
        if st.status != status and not ns and checkpoint["id"] > st.status_at:
            st.set_status(status, None, checkpoint["id"])

    st.group.run(work, linger=False)
    csize = sizes.pop()
    threads.ckpt_memo[(tid, ns)] = next_memo(
        threads.ckpt_memo.get((tid, ns)), cmemo, cdelta, csize
    )
    for (ch, _, _, memo, delta), size in zip(blobs, sizes, strict=True):
        mkey = (tid, ns, ch)
        if memo is None:
            threads.blob_memo.pop(mkey, None)
        else:
            threads.blob_memo[mkey] = next_memo(
                threads.blob_memo.get(mkey), memo, delta, size
            )
    return {
        "configurable": {
            "thread_id": tid,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
        }
    }


def put_task_writes(
    threads: OpenThreads,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str = "",
) -> None:
    """Stores a task's writes against a checkpoint, in one transaction (the
    values of secret env vars as references: ``_secrets.py``)."""
    conf = config["configurable"]
    tid, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
    cid = conf["checkpoint_id"]
    rows = []
    now = round(time.time(), 6)  # when the task finished: its row's end time
    snap = secret_env()
    for i, (ch, value) in enumerate(writes):
        idx = WRITES_IDX_MAP.get(ch, i)
        row = {"task": task_id, "ch": ch, "idx": idx, "path": task_path, "t": now}
        _, text = encoded(snap, partial(encode, value, ch), partial(_write, row))
        rows.append((f"w{US}{ns}{US}{cid}{US}{task_id}{US}{idx}", idx, text))
    st = threads.get(tid, create=True)
    assert st is not None
    status = _status_of(writes, snap)

    def work() -> None:
        # A regular write is kept as first stored (a retried task must not
        # change what was recorded: INSERT OR IGNORE, no read first); special
        # writes (errors, interrupts, resumes) replace the earlier one.
        for key, idx, text in rows:
            st.set_text(key, text, keep=idx >= 0)
        if status is not None:
            st.set_status(*status, at=cid)

    # Lingers for the checkpoint that usually follows, to share its fsync;
    # no checkpoint follows an interrupt or an error, so those do not wait.
    st.group.run(work, linger=status is None)
