"""ArgusSaver: a LangGraph checkpointer on an Argus Workspace.

Each LangGraph thread is stored in its own diskcache folder of the workspace
(``_store.py``), with Argus's invariants: each ``put`` and each ``put_writes`` is
one SQLite transaction, committed before the call returns (a task's writes and
the checkpoint that follows them share one, and so one fsync: ``_group.py``);
every record checksummed JSON with a ``schema_version``; no pickle
(``_codec.py``); one writer per thread (a runner lease plus a version
counter checked on every commit); and flat bytes per step (``_delta.py``).
Writing is in ``_put.py``, reading in ``_read.py``, the open threads in
``_threads.py``; ArgusSaver is LangGraph's interface over them.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
)

from argus_lab.errors import StorageError
from argus_lab.langgraph import _maintain
from argus_lab.langgraph._async import AsyncMethods
from argus_lab.langgraph._lost import refuse_copy, refuse_held
from argus_lab.langgraph._put import put_checkpoint, put_task_writes
from argus_lab.langgraph._read import iter_tuples, load_tuple
from argus_lab.langgraph._serde import ArgusSerde
from argus_lab.langgraph._store import ThreadStore
from argus_lab.langgraph._threads import OpenThreads
from argus_lab.store.envelope import Durability

if TYPE_CHECKING:
    import pandas as pd

    from argus_lab.langgraph._view import ThreadView
    from argus_lab.workspace import Workspace

__all__ = ["ArgusSaver"]

log = logging.getLogger("argus_lab.langgraph")

_RUNNING = "__pregel_runtime"
"""A key LangGraph's run loop puts in the config it reads the thread with
(its CONFIG_KEY_RUNTIME; ``get_state`` has none): the graph will run from here.
``test_langgraph_copy`` pins that a second process is refused before a node."""


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
        accept_lost_commits: Go on from the latest checkpoint that survived
            a damaged write-ahead log (after a LostCommitsError); the graph
            then runs the lost steps again.
        accept_copy: Resume a thread whose folder is a copy made while a run
            held it (``cp -r`` of a workspace, a backup restored), though the
            original went on after the copy: the graph then runs again the
            nodes the original ran since. Without it such a copy is refused.

    Raises:
        UnsafeValueError: (from ``put``/``put_writes``) a value only pickle could
            store; it names the channel and the type, and nothing is written.
        ConcurrentSessionError: another live process is writing the thread,
            or the thread is a copy whose original went on (``accept_copy``).
        CorruptCheckpointError: a record failed its checksum (names the thread
            and the checkpoint).
        LostCommitsError: a thread's store is older than its witness: commits
            were lost (a damaged write-ahead log); the message says what to do.
    """

    def __init__(
        self,
        ws: Workspace,
        *,
        durability: Durability | None = None,
        lease_ttl: float = 30.0,
        accept_lost_commits: bool = False,
        accept_copy: bool = False,
    ) -> None:
        super().__init__(serde=ArgusSerde())
        dur = durability if durability is not None else ws.durability
        if dur not in ("normal", "full"):
            raise ValueError(f"durability must be 'normal' or 'full', got {dur!r}")
        self.ws = ws
        self.durability: Durability = dur
        self.lease_ttl = lease_ttl
        self.holder = f"langgraph:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._threads = OpenThreads(
            Path(ws.path) / "sessions",
            durability=dur,
            holder=self.holder,
            lease_ttl=lease_ttl,
            accept_lost_commits=accept_lost_commits,
            accept_copy=accept_copy,
        )

    def __repr__(self) -> str:
        return f"ArgusSaver({self.ws!r}, durability={self.durability!r})"

    # -- threads -----------------------------------------------------------

    def _thread(self, thread_id: str, *, create: bool) -> ThreadStore | None:
        return self._threads.get(thread_id, create=create)

    def thread_ids(self) -> list[str]:
        """Every LangGraph thread stored in the workspace."""
        return self._threads.stored_ids()

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
        """Releases every thread this saver holds and closes their stores.

        A release that cannot be written (a full disk) is logged, not raised:
        every store is closed all the same, and the hold lapses by itself (at
        once for other processes on this host when this one ends, else after
        ``lease_ttl``).
        """
        for tid in self._threads.open_ids():
            try:
                self.release(tid)
            except StorageError as e:
                log.warning("could not release LangGraph thread %r: %s", tid, e)
            finally:
                self._threads.forget(tid)

    # -- writing -----------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Stores a checkpoint and the values of the channels that changed."""
        return put_checkpoint(self._threads, config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Stores a task's writes against a checkpoint, in one transaction."""
        put_task_writes(self._threads, config, writes, task_id, task_path)

    # -- reading -----------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint the config names, or the latest of its thread."""
        conf = config["configurable"]
        st = self._thread(conf["thread_id"], create=False)
        if st is None:
            return None
        if _RUNNING in conf:  # a graph starts from here (get_state has no such key)
            head = st.read_head()
            refuse_held(st, head)
            refuse_copy(st, head)
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
        self._threads.forget(thread_id)
        folder = self._threads.folder(thread_id)
        # The witness first: a delete killed midway must not leave one behind
        # cache.db, or the thread made again under this id would be told its
        # commits were lost (LostCommitsError).
        for name in ("witness", "journal"):
            (folder / name).unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Deletes the checkpoints (and their writes) that these runs made."""
        if not run_ids:
            return
        for tid in self.thread_ids():
            st = self._thread(tid, create=False)
            if st is not None and _maintain.delete_runs(st, set(run_ids)):
                self._threads.forget(tid)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copies every checkpoint, value and write of a thread to another (a fork)."""
        src = self._thread(source_thread_id, create=False)
        if src is None:
            return
        dst = self._thread(target_thread_id, create=True)
        assert dst is not None
        _maintain.copy_records(src, dst)
        self._threads.forget(target_thread_id)

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
            self._threads.forget(tid)

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
