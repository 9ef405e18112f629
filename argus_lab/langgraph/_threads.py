"""The threads an ArgusSaver has open, and the delta bases of their last writes.

A thread's store is opened on first use and kept open; the delta bases
(``_delta.py``: the last checkpoint and channel values each thread's next write
is stored against) live beside it, because a thread changed in bulk (pruned,
copied into, deleted) must drop both at once.
"""

from __future__ import annotations

import threading
from pathlib import Path

from argus_lab.langgraph._delta import BlobMemo, CkptMemo
from argus_lab.langgraph._lost import check_lost_checkpoints
from argus_lab.langgraph._record import thread_session_id
from argus_lab.langgraph._store import ThreadStore
from argus_lab.store.envelope import Durability

__all__ = ["OpenThreads"]


class OpenThreads:
    """The open thread stores of one saver, by thread id.

    Args:
        root: The workspace's sessions folder (a thread is ``lg-<thread>-<hash>``).
        durability: The stores' durability.
        holder: The lease holder name of this saver's writes.
        lease_ttl: Seconds a thread stays held after its last write.
        accept_lost_commits: Go on from the checkpoints that survived lost commits.
        accept_copy: Run a thread whose files were copied while a run held it,
            though that run went on after the copy (``store/copies.py``).
    """

    def __init__(
        self,
        root: Path,
        *,
        durability: Durability,
        holder: str,
        lease_ttl: float,
        accept_lost_commits: bool = False,
        accept_copy: bool = False,
    ) -> None:
        self.root = root
        self.accept_lost_commits = accept_lost_commits
        self.accept_copy = accept_copy
        self.durability: Durability = durability
        self.holder = holder
        self.lease_ttl = lease_ttl
        self._stores: dict[str, ThreadStore] = {}
        self._lock = threading.Lock()
        self.ckpt_memo: dict[tuple[str, str], CkptMemo] = {}
        """(thread, namespace) -> the base of the next checkpoint's delta."""
        self.blob_memo: dict[tuple[str, str, str], BlobMemo] = {}
        """(thread, namespace, channel) -> the base of the next value's delta."""

    def folder(self, thread_id: str) -> Path:
        """The session folder of a thread."""
        return self.root / thread_session_id(thread_id)

    def get(self, thread_id: str, *, create: bool) -> ThreadStore | None:
        """The thread's store; None if it has none and ``create`` is False."""
        with self._lock:
            st = self._stores.get(thread_id)
            if st is not None:
                return st
            d = self.folder(thread_id)
            if not create and not (d / "cache.db").exists():
                return None
            st = ThreadStore(
                d,
                thread_id,
                durability=self.durability,
                holder=self.holder,
                lease_ttl=self.lease_ttl,
                accept_copy=self.accept_copy,
            )
            try:
                check_lost_checkpoints(st, accept=self.accept_lost_commits)
            except BaseException:
                st.close()
                raise
            self._stores[thread_id] = st
            return st

    def forget(self, thread_id: str) -> None:
        """Drops the open store and the delta bases of a thread changed in bulk."""
        with self._lock:
            st = self._stores.pop(thread_id, None)
            if st is not None:
                st.close()
            for k in [k for k in self.ckpt_memo if k[0] == thread_id]:
                del self.ckpt_memo[k]
            for b in [b for b in self.blob_memo if b[0] == thread_id]:
                del self.blob_memo[b]

    def stored_ids(self) -> list[str]:
        """Every LangGraph thread stored under ``root``, open or not."""
        out: list[str] = []
        if not self.root.exists():
            return out
        for d in sorted(self.root.glob("lg-*")):
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

    def open_ids(self) -> list[str]:
        """The threads with an open store."""
        return list(self._stores)
