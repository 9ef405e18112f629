"""Following the progress of a session another process runs, read by read.

A widget following another kernel's run looks every second. Loading the whole
session each time (``read_progress``: the plan and every task record) costs
as much for a 10,000-task session that committed nothing as for one that
committed everything. :class:`ProgressFollower` keeps its store open and reads
the head first: nothing committed since the last read, nothing more is read.
Otherwise it reads the meta and the records of the tasks the commits since
touched, as the witness's journal names them (``store/witness.py``); the whole
session only when the journal does not cover those commits (not written yet,
compacted, a loss), the plan changed, or they touched many tasks.
"""

from __future__ import annotations

from typing import Any

from argus_lab.store.checkpoints import SessionStore
from argus_lab.store.index import stored_progress, with_runner

__all__ = ["ProgressFollower"]

_MAX_TOUCHED = 256
"""Above this many tasks touched since the last read, one full read is cheaper
than a query per task."""


class ProgressFollower:
    """``read_progress`` of one session, read again at a cost of what changed.

    Args:
        store: The session's store, kept open (``close()`` closes it).
    """

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self.full_reads = 0
        """How many reads loaded the whole session (the first one does)."""
        self._version = -1
        self._plan_version = -1
        self._now: dict[str, Any] | None = None

    def read(self) -> dict[str, Any]:
        """What ``read_progress`` would return now (do not modify it).

        Raises:
            ArgusError: the session cannot be read (as ``read_progress``).
        """
        head = self.store.read_head()
        if self._now is None or head is None or head.version != self._version:
            self._catch_up(head.version if head is not None else None)
        assert self._now is not None
        # The lease may expire, or its holder die, with no commit: always asked.
        return with_runner(self._now, head)

    def _catch_up(self, version: int | None) -> None:
        store = self.store
        now = self._now
        touched = None
        if now is not None and version is not None:
            touched = store.witness.touched(self._version, version)
        meta = store.read_meta() if touched is not None else None
        if (
            now is None
            or touched is None
            or meta is None
            or len(touched) > _MAX_TOUCHED
            or meta.plan_version != self._plan_version
            or not touched <= now["tasks"].keys()
        ):
            loaded = store.load()
            self.full_reads += 1
            self._now = stored_progress(loaded)
            self._version = loaded.head.version
            self._plan_version = loaded.meta.plan_version
            return
        assert version is not None
        tasks = dict(now["tasks"])
        counts = dict(now["counts"])
        for tid, st in self._statuses(touched).items():
            old = tasks[tid]
            if old != st:
                counts[old] -= 1
                if not counts[old]:
                    del counts[old]
                counts[st] = counts.get(st, 0) + 1
                tasks[tid] = st
        # The records were read after the head: at least as new as ``version``,
        # so the next read's journal lines start from it.
        self._now = {
            "status": meta.status,
            "counts": counts,
            "tasks": tasks,
            "reason": meta.reason,
        }
        self._version = version

    def _statuses(self, task_ids: set[str]) -> dict[str, str]:
        """The stored status of each of ``task_ids`` ("pending": no record)."""
        read = self.store._read
        out = dict.fromkeys(task_ids, "pending")
        for tid in task_ids:
            key = "t:" + tid
            recs = read.task_records(key, key + "\x00")  # this key alone
            out[tid] = recs.status.get(tid, "pending")
        return out

    def close(self) -> None:
        """Closes the store."""
        self.store.close()
