"""Automatic memory: finished results and lessons from failures, written to the
workspace's LanceDB memory by a background thread, so a step never waits on it.

Each memory carries the session, the task and the seq of the event that
finished the task (its provenance). Writes are upserts by a stable id, so a
resumed or retried task never duplicates a memory.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argus_lab.events import EventBase
    from argus_lab.runtime.state import SessionState
    from argus_lab.store.memory import Memory
    from argus_lab.store.stored_plan import StoredPlan

__all__ = ["MemoryFeed", "Rememberer"]

log = logging.getLogger("argus_lab")

_MARK = "remembering"
"""``remembering.<pid>.<n>.<host>`` in a session's folder: that process may
still owe memories of the session (MemoryFeed.recover)."""
_marks = itertools.count()


_writing: set[Rememberer] = set()
"""Rememberers whose thread runs, held strongly until closed (see _close_all)."""
_writing_lock = threading.Lock()
_hooked = False


def _close_all() -> None:
    """At interpreter exit: writes what every session queued, then stops.

    A session dropped without ``close()`` is gone from the shutdown's list
    (it holds sessions weakly), but its writer thread may still be embedding:
    a daemon thread that comes back from native code while the interpreter
    finalizes is unwound by force, which a C++ library's catch-all turns into
    an abort (exit 134, "exception not rethrown"), and its memories are lost.
    """
    with _writing_lock:
        left = list(_writing)
    for r in left:
        try:
            r.close()
        except Exception:  # the process is going: close the rest
            log.exception("could not write the queued memories at exit")


def _hook() -> None:
    global _hooked
    with _writing_lock:
        if _hooked:
            return
        _hooked = True
    try:  # before daemon threads are left to the interpreter's finalization
        threading._register_atexit(_close_all)  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # not CPython, or exiting already
        import atexit

        atexit.register(_close_all)


class Rememberer:
    """A queue of memory writes and the thread that drains it."""

    def __init__(self, memory: Callable[[], Memory]) -> None:
        self._memory = memory
        self._queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.marker: Path | None = None
        """Says this process may owe memories (MemoryFeed.recover); removed
        once all it queued is written."""

    def put(self, kind: str, **fields: Any) -> None:
        """Queues a ``result`` or ``lesson`` memory (fields as remember_*)."""
        if self._thread is None:
            _hook()
            with _writing_lock:
                _writing.add(self)
            self._thread = threading.Thread(
                target=self._drain, name="argus-memory", daemon=True
            )
            self._thread.start()
        self._queue.put((kind, fields))

    def _drain(self) -> None:
        from argus_lab.store.memory import remember_lesson, remember_result

        while (item := self._queue.get()) is not None:
            kind, fields = item
            try:
                if kind == "owed":
                    _write_owed(self._memory(), **fields)
                    continue
                write = remember_result if kind == "result" else remember_lesson
                write(self._memory(), **fields)
            except Exception:  # a memory is never worth failing a task over
                log.exception(
                    "could not write a %s memory for %s", kind, fields.get("task_id")
                )
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def flush(self) -> None:
        """Waits until every queued memory is written."""
        if self._thread is not None:
            self._queue.join()

    def close(self) -> None:
        """Writes what is queued, then stops the thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self.marker is not None:
            self.marker.unlink(missing_ok=True)
            self.marker = None
        with _writing_lock:
            _writing.discard(self)


def _write_owed(
    memory: Memory,
    *,
    session_id: str,
    owed: list[tuple[str, str]],
    fields: Callable[[str, str], dict[str, Any] | None],
    read_events: Callable[[], list[EventBase]],
    stale: list[Path],
) -> None:
    """Writes the memories in ``owed`` ((kind, task id)) that ``memory`` does
    not hold yet, each with the seq of the event that finished its task (see
    MemoryFeed.recover); ``fields`` says what each holds (None: nothing)."""
    from argus_lab.store._memory_query import _sql
    from argus_lab.store.memory import remember_lesson, remember_result
    from argus_lab.store.memory_provenance import memory_id

    have = memory._ids(f"session_id = {_sql(session_id)}")
    missing = [
        (kind, tid)
        for kind, tid in owed
        if memory_id(kind, session_id=session_id, task_id=tid) not in have
    ]
    if not missing:
        _forget(stale)
        return
    ended = {"task_succeeded": "result", "task_failed": "lesson"}
    seqs = {(ended[e.kind], e.task_id): e.seq for e in read_events() if e.kind in ended}
    n = 0
    for kind, tid in missing:
        seq = seqs.get((kind, tid))
        what = fields(kind, tid)
        if seq is None or what is None:  # no event to lead back to (a fork's)
            continue
        write = remember_result if kind == "result" else remember_lesson
        write(memory, session_id=session_id, seq=seq, **what)
        n += 1
    log.info(
        "session %s: wrote %d memories a crash had kept from being written",
        session_id,
        n,
    )
    _forget(stale)


def _forget(markers: list[Path]) -> None:
    for m in markers:
        with contextlib.suppress(OSError):
            m.unlink()


class MemoryFeed:
    """Decides what a session remembers, and queues it with its provenance.

    Args:
        state: The session state (plan, records, the seq of the last commit).
        rememberer: The queue the memories go to.
        remember: ``SessionOptions.remember`` (None: only when the plan has
            LLM tasks or uses memory tools).
    """

    def __init__(
        self, state: SessionState, rememberer: Rememberer, remember: bool | None
    ) -> None:
        self._state = state
        self._rememberer = rememberer
        self._remember = remember
        self._auto_for: StoredPlan | None = None
        self._auto = False

    def wanted(self) -> bool:
        """Whether this session writes memories (decided once per plan)."""
        if self._remember is not None:
            return self._remember
        plan = self._state.plan_source  # read without validating the plan
        if self._auto_for is not plan:  # once per plan, not per step
            self._auto_for = plan
            self._auto = "llm" in plan.distinct("kind") or any(
                (tool or "").startswith("memory_") for tool in plan.distinct("tool")
            )
        return self._auto

    def prepare(self) -> None:
        """Imports the memory stack in the thread that makes the session."""
        if self.wanted():
            # The memory writer thread importing numpy while user code does
            # too can see a half-initialised module: import it here first.
            import lancedb  # noqa: F401

            import argus_lab.store.memory  # noqa: F401

    def recover(self) -> None:
        """Called when the session is opened: leaves a marker that this
        process may owe memories (removed once it wrote them all), and if
        the marker of a process that died is there, queues the memories of
        the tasks that are done; the writer thread writes those missing.

        A memory is written by a thread after its step commits: a process
        killed in between kept the step and lost the memory, so the next
        session's LLM task did not see what an uninterrupted run showed it.
        """
        if not self.wanted():
            return
        st = self._state
        from argus_lab.store.head import HOST, _pid_alive

        stale = []
        for m in st.path.glob(f"{_MARK}.*"):
            _, pid, _, host = [*m.name.split(".", 3), "", "", ""][:4]
            if host == HOST and pid.isdigit() and not _pid_alive(int(pid)):
                stale.append(m)
        mine = st.path / f"{_MARK}.{os.getpid()}.{next(_marks)}.{HOST}"
        with contextlib.suppress(OSError):  # a read-only folder: nothing to mark
            mine.touch()
            self._rememberer.marker = mine
        if not stale:
            return
        done = {"succeeded": "result", "failed": "lesson"}
        owed = [(done[s], t) for t, s in st.records.status.items() if s in done]
        if not owed:
            _forget(stale)
            return
        # Read in the writer thread, for the missing ones only.
        self._rememberer.put(
            "owed",
            session_id=st.info.id,
            owed=owed,
            fields=self._owed_fields,
            read_events=st.read_events,
            stale=stale,
        )

    def _owed_fields(self, kind: str, task_id: str) -> dict[str, Any] | None:
        """What the memory ``kind`` of ``task_id`` holds, or None if it has
        none (a task the plan no longer has, a rejection: no lesson)."""
        st = self._state
        if task_id not in st.tasks:
            return None
        if kind == "result":
            return self._result_fields(task_id)
        rec = st.records[task_id]
        if rec.status != "failed" or (rec.approval or {}).get("state") == "rejected":
            return None
        return self._lesson_fields(task_id, rec.attempts)

    def _result_fields(self, task_id: str) -> dict[str, Any]:
        st = self._state
        done = st.records[task_id]
        task = st.tasks.get(task_id)
        return {
            "task_id": task_id,
            "result": done.result
            if done.result_ref is None
            else f"(a large result, stored as {done.result_ref})",
            "title": (task.title if task is not None else None) or task_id,
        }

    def _lesson_fields(self, task_id: str, attempts: int) -> dict[str, Any]:
        st = self._state
        task = st.tasks[task_id]
        return {
            "task_id": task_id,
            "error": st.records[task_id].error or "",
            "attempts": attempts,
            "tool": task.tool,
            "title": task.title or None,
        }

    def result(self, task_id: str, seq: int | None = None) -> None:
        """Remembers a task's result, just committed by the event ``seq``
        (default: the last event committed)."""
        if not self.wanted():
            return
        st = self._state
        self._rememberer.put(
            "result",
            session_id=st.info.id,
            seq=st.last_seq if seq is None else seq,
            **self._result_fields(task_id),
        )

    def lesson(self, task_id: str, attempts: int, seq: int) -> None:
        """Remembers why a task failed for good, for the next session that tries."""
        if not self.wanted():
            return
        st = self._state
        self._rememberer.put(
            "lesson",
            session_id=st.info.id,
            seq=seq,
            **self._lesson_fields(task_id, attempts),
        )
