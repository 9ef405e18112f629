"""Automatic memory: finished results and lessons from failures, written to the
workspace's LanceDB memory by a background thread, so a step never waits on it.

Each memory carries the session, the task and the seq of the event that
finished the task (its provenance). Writes are upserts by a stable id, so a
resumed or retried task never duplicates a memory.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argus_lab.store.memory import Memory

__all__ = ["Rememberer"]

log = logging.getLogger("argus_lab")


class Rememberer:
    """A queue of memory writes and the thread that drains it."""

    def __init__(self, memory: Callable[[], Memory]) -> None:
        self._memory = memory
        self._queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def put(self, kind: str, **fields: Any) -> None:
        """Queues a ``result`` or ``lesson`` memory (fields as remember_*)."""
        if self._thread is None:
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
