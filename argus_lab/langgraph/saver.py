"""ArgusSaver: a LangGraph checkpointer on an Argus Workspace.

Each LangGraph thread is stored in its own diskcache folder of the workspace
(``_store.py``), with Argus's invariants: each ``put`` and each ``put_writes`` is
one SQLite transaction, committed before the call returns (a task's writes and
the checkpoint that follows them share one, and so one fsync: ``_group.py``);
every record checksummed JSON with a ``schema_version``; no pickle
(``_codec.py``); one writer per thread (a runner lease plus a version
counter checked on every commit); and flat bytes per step (``_delta.py``).
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

from argus_lab.langgraph import _maintain
from argus_lab.langgraph._async import AsyncMethods
from argus_lab.langgraph._codec import encode
from argus_lab.langgraph._delta import (
    BlobMemo,
    CkptMemo,
    blob_record,
    checkpoint_record,
    next_memo,
)
from argus_lab.langgraph._read import (
    blob_key,
    ckpt_key,
    iter_tuples,
    load_tuple,
)
from argus_lab.langgraph._serde import ArgusSerde
from argus_lab.langgraph._store import (
    US,
    ThreadStore,
    thread_session_id,
)
from argus_lab.store.checkpoints import Durability

if TYPE_CHECKING:
    import pandas as pd

    from argus_lab.langgraph._view import ThreadView
    from argus_lab.workspace import Workspace

__all__ = ["ArgusSaver"]


def _status_of(writes: Sequence[tuple[str, Any]]) -> tuple[str, str] | None:
    """The session status a task's writes call for: an ``interrupt()`` is a
    question awaiting a person's answer, an error a failure."""
    for ch, value in writes:
        if ch == INTERRUPT:
            first = value[0] if isinstance(value, list | tuple) and value else value
            shown = getattr(first, "value", first)
            return "paused", f"awaiting approval: {str(shown)[:200]}"
        if ch == ERROR:
            return "failed", f"{type(value).__name__}: {str(value)[:200]}"
    return None


def _triggers_more(values: dict[str, Any]) -> bool:
    """Whether a checkpoint holds a trigger for another node (a StateGraph's
    edges set ``branch:to:<node>`` channels, ``Send`` sets ``__pregel_tasks``;
    a node consumes its trigger). If not, the run has ended: best effort, for
    the status that ``ws.sessions()`` and ``argus ls`` show."""
    return any(
        ch.startswith("branch:to:") or ch in ("__start__", "__pregel_tasks")
        for ch in values
    )


class ArgusSaver(AsyncMethods, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that stores threads in an Argus Workspace.

    ``graph.compile(checkpointer=ArgusSaver(ws))``; both the sync and the async
    LangGraph APIs work.

    Args:
        ws: The workspace; threads go to ``<ws>/sessions/lg-<thread>-<hash>/``.
        durability: "normal" (a commit survives a killed process) or "full"
            (each commit fsynced: survives power loss too). Default: the
            workspace's.
        lease_ttl: Seconds a process keeps a thread after its last write; another
            process writing the thread meanwhile gets ConcurrentSessionError.
            A holder that died on this host loses it at once.

    Raises:
        UnsafeValueError: (from ``put``/``put_writes``) a value only pickle could
            store; it names the channel and the type, and nothing is written.
        ConcurrentSessionError: another live process is writing the thread.
        CorruptCheckpointError: a record failed its checksum (names the thread
            and the checkpoint).
    """

    def __init__(
        self,
        ws: Workspace,
        *,
        durability: Durability | None = None,
        lease_ttl: float = 30.0,
    ) -> None:
        super().__init__(serde=ArgusSerde())
        dur = durability if durability is not None else ws.durability
        if dur not in ("normal", "full"):
            raise ValueError(f"durability must be 'normal' or 'full', got {dur!r}")
        self.ws = ws
        self.durability: Durability = dur
        self.lease_ttl = lease_ttl
        self.holder = f"langgraph:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._root = Path(ws.path) / "sessions"
        self._stores: dict[str, ThreadStore] = {}
        self._lock = threading.Lock()
        self._ckpt_memo: dict[tuple[str, str], CkptMemo] = {}
        self._blob_memo: dict[tuple[str, str, str], BlobMemo] = {}

    def __repr__(self) -> str:
        return f"ArgusSaver({self.ws!r}, durability={self.durability!r})"

    # -- threads -----------------------------------------------------------

    def _dir(self, thread_id: str) -> Path:
        return self._root / thread_session_id(thread_id)

    def _thread(self, thread_id: str, *, create: bool) -> ThreadStore | None:
        with self._lock:
            st = self._stores.get(thread_id)
            if st is not None:
                return st
            d = self._dir(thread_id)
            if not create and not (d / "cache.db").exists():
                return None
            st = ThreadStore(
                d,
                thread_id,
                durability=self.durability,
                holder=self.holder,
                lease_ttl=self.lease_ttl,
            )
            self._stores[thread_id] = st
            return st

    def _forget(self, thread_id: str) -> None:
        """Drops the open store and the delta bases of a thread changed in bulk."""
        with self._lock:
            st = self._stores.pop(thread_id, None)
            if st is not None:
                st.close()
            for k in [k for k in self._ckpt_memo if k[0] == thread_id]:
                del self._ckpt_memo[k]
            for b in [b for b in self._blob_memo if b[0] == thread_id]:
                del self._blob_memo[b]

    def thread_ids(self) -> list[str]:
        """Every LangGraph thread stored in the workspace."""
        out: list[str] = []
        if not self._root.exists():
            return out
        for d in sorted(self._root.glob("lg-*")):
            if not (d / "cache.db").exists():
                continue
            st = ThreadStore(d, "?", durability=self.durability, holder="", lease_ttl=0)
            try:
                data = st.get("lg:thread")
            finally:
                st.close()
            if data and thread_session_id(data["thread_id"]) == d.name:
                out.append(data["thread_id"])
        return out

    def tasks_df(self, thread_id: str) -> pd.DataFrame:
        """One row per node execution of a thread: node, step, status
        ("succeeded", "failed", "awaiting approval"), started, ended, duration
        and the channels it wrote.

        Raises:
            KeyError: no such thread in this workspace.
        """
        from argus_lab.langgraph._frames import tasks_frame

        st = self._thread(thread_id, create=False)
        if st is None:
            raise KeyError(f"no LangGraph thread {thread_id!r} in {self.ws.path}")
        return tasks_frame(st)

    def thread(self, thread_id: str, *, graph: Any = None) -> ThreadView:
        """A thread read like an Argus session: ``status``, ``tasks_df()``,
        ``events_df()``, ``pending_approvals()``; with the compiled ``graph``
        also ``graph`` (its topology with node statuses), ``resume(value)``
        and ``fork(new_thread_id, at=checkpoint_id)``."""
        from argus_lab.langgraph._view import ThreadView

        return ThreadView(self, thread_id, graph)

    def release(self, thread_id: str) -> None:
        """Gives up this process's hold on a thread, so another may write it now."""
        st = self._thread(thread_id, create=False)
        if st is not None:
            st.release()

    def close(self) -> None:
        """Releases every thread this saver holds and closes their stores."""
        for tid in list(self._stores):
            self.release(tid)
            self._forget(tid)

    # -- writing -----------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Stores a checkpoint and the values of the channels that changed."""
        conf = config["configurable"]
        tid, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        parent = conf.get("checkpoint_id")
        values = checkpoint["channel_values"]
        # Everything is encoded before the transaction: a value that cannot be
        # stored refuses the whole checkpoint, and nothing is written.
        blobs: list[tuple[str, str, Any, Any, bool]] = []
        for ch, ver in new_versions.items():
            mkey = (tid, ns, ch)
            if ch not in values:
                blobs.append((ch, blob_key(ns, ch, ver), {"empty": 1}, None, False))
                continue
            rec, memo, delta = blob_record(
                ch, str(ver), values[ch], self._blob_memo.get(mkey)
            )
            blobs.append((ch, blob_key(ns, ch, ver), rec, memo, delta))
        meta = get_checkpoint_metadata(config, metadata)
        crec, cmemo, cdelta = checkpoint_record(
            dict(checkpoint), meta, parent, self._ckpt_memo.get((tid, ns))
        )
        st = self._thread(tid, create=True)
        assert st is not None
        sizes: list[int] = []

        def work() -> None:
            sizes[:] = [st.set(key, rec) for _, key, rec, _, _ in blobs]
            sizes.append(st.set(ckpt_key(ns, checkpoint["id"]), crec))
            status = "running" if _triggers_more(values) else "succeeded"
            # Puts and writes may arrive out of order (durability="async"): a
            # pause belongs to its checkpoint, and only a newer one ends it.
            if st.status != status and not ns and checkpoint["id"] > st.status_at:
                st.set_status(status, None, checkpoint["id"])

        st.group.run(work, linger=False)
        csize = sizes.pop()
        self._ckpt_memo[(tid, ns)] = next_memo(
            self._ckpt_memo.get((tid, ns)), cmemo, cdelta, csize
        )
        for (ch, _, _, memo, delta), size in zip(blobs, sizes, strict=True):
            mkey = (tid, ns, ch)
            if memo is None:
                self._blob_memo.pop(mkey, None)
            else:
                self._blob_memo[mkey] = next_memo(
                    self._blob_memo.get(mkey), memo, delta, size
                )
        return {
            "configurable": {
                "thread_id": tid,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Stores a task's writes against a checkpoint, in one transaction."""
        conf = config["configurable"]
        tid, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        cid = conf["checkpoint_id"]
        rows = []
        now = round(time.time(), 6)  # when the task finished: its row's end time
        for i, (ch, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(ch, i)
            data = {
                "task": task_id,
                "ch": ch,
                "idx": idx,
                "path": task_path,
                "t": now,
                "v": encode(value, ch),
            }
            rows.append((f"w{US}{ns}{US}{cid}{US}{task_id}{US}{idx}", idx, data))
        st = self._thread(tid, create=True)
        assert st is not None
        status = _status_of(writes)

        def work() -> None:
            # A regular write is kept as first stored (a retried task must not
            # change what was recorded); special writes (errors, interrupts,
            # resumes) replace the earlier one.
            have = st.keys(f"w{US}{ns}{US}{cid}{US}{task_id}{US}")
            for key, idx, data in rows:
                if idx < 0 or key not in have:
                    st.set(key, data, keep=idx >= 0)
            if status is not None:
                st.set_status(*status, at=cid)

        # Lingers for the checkpoint that usually follows, to share its fsync;
        # no checkpoint follows an interrupt or an error, so those do not wait.
        st.group.run(work, linger=status is None)

    # -- reading -----------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint the config names, or the latest of its thread."""
        conf = config["configurable"]
        st = self._thread(conf["thread_id"], create=False)
        if st is None:
            return None
        return load_tuple(st, conf.get("checkpoint_ns", ""), get_checkpoint_id(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first, by thread / namespace / id, metadata filter,
        ``before`` a checkpoint, up to ``limit``."""
        conf = config["configurable"] if config else {}
        tids = [conf["thread_id"]] if conf.get("thread_id") else self.thread_ids()
        want_ns = conf.get("checkpoint_ns")
        cid = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        left = limit
        for tid in tids:
            st = self._thread(tid, create=False)
            if st is None:
                continue
            nss = [want_ns] if want_ns is not None else st.namespaces()
            for ns in nss:
                for tup in iter_tuples(
                    st, ns, cid=cid, before=before_id, filter=filter
                ):
                    if left is not None:
                        if left <= 0:
                            return
                        left -= 1
                    yield tup

    # -- whole threads -------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Deletes a thread: its checkpoints, values and writes."""
        st = self._thread(thread_id, create=False)
        if st is None:
            return
        with st.transaction():  # refuses while another process holds it
            pass
        self._forget(thread_id)
        shutil.rmtree(self._dir(thread_id), ignore_errors=True)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Deletes the checkpoints (and their writes) that these runs made."""
        if not run_ids:
            return
        for tid in self.thread_ids():
            st = self._thread(tid, create=False)
            if st is not None and _maintain.delete_runs(st, set(run_ids)):
                self._forget(tid)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copies every checkpoint, value and write of a thread to another (a fork)."""
        src = self._thread(source_thread_id, create=False)
        if src is None:
            return
        dst = self._thread(target_thread_id, create=True)
        assert dst is not None
        _maintain.copy_records(src, dst)
        self._forget(target_thread_id)

    def prune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
    ) -> None:
        """Keeps only each namespace's latest checkpoint ("keep_latest"), or
        deletes every checkpoint ("delete")."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(
                f"prune strategy must be 'keep_latest' or 'delete', got {strategy!r}"
            )
        for tid in thread_ids:
            st = self._thread(tid, create=False)
            if st is None:
                continue
            _maintain.prune(st, keep_latest=strategy == "keep_latest")
            self._forget(tid)

    def with_allowlist(self, extra_allowlist: Any) -> ArgusSaver:
        """Returns self: the JSON codec revives only models, dataclasses and
        enums, never msgpack constructors, so LangGraph's allowlist has no job."""
        return self

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``<counter>.<random>``: sortable, and distinct across forked branches
        (a value is stored once per version, so two branches must never share
        one)."""
        if current is None:
            n = 0
        elif isinstance(current, int | float):
            n = int(current)
        else:
            n = int(str(current).split(".")[0])
        return f"{n + 1:012d}.{random.getrandbits(32):08x}"
