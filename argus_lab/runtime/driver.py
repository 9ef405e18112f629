"""How the Session's calls reach its loop thread: step, run, start, wait.

The facade (session.py) checks arguments; the :class:`RunDriver` carries each
call over to the session's own loop thread (loop.py) inside the runner's lease
(``RunLoop.guarded``, engine.py), either waiting for it (``call``; ``blocking``
for the calls that run tasks, counted so the widget can say a cell is busy) or
in the background (``start``; the Closer, shutdown.py, is held while it runs,
so the process's exit closes it too). Ctrl-C while waiting becomes a pause, so
running attempts finish and commit before KeyboardInterrupt is raised. Each
run or step first tells the Signals it goes (which refuses after a shutdown),
and runs with the heap it found frozen (heap.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from argus_lab.errors import SessionStateError
from argus_lab.runtime.heap import frozen_heap
from argus_lab.runtime.options import RunResult, T
from argus_lab.runtime.shutdown import hold

if TYPE_CHECKING:
    from argus_lab.model import TaskRecord
    from argus_lab.runtime.actions import Actions
    from argus_lab.runtime.engine import RunLoop
    from argus_lab.runtime.loop import LoopThread
    from argus_lab.runtime.shutdown import Closer
    from argus_lab.runtime.signals import Signals

__all__ = ["RunDriver"]


class RunDriver:
    """Runs the Session's calls on its loop thread and keeps its background run.

    Args:
        loop: The session's private loop thread.
        runner: The run loop (lease, run and step).
        signals: The pause request (reset before each run, set on Ctrl-C).
        actions: A person's actions (``rerun_stale`` marks the stale tasks).
        closer: Closes the session; held while a background run goes on.
    """

    def __init__(
        self,
        loop: LoopThread,
        runner: RunLoop,
        signals: Signals,
        actions: Actions,
        closer: Closer,
    ) -> None:
        self._loop = loop
        self._runner = runner
        self._signals = signals
        self._actions = actions
        self._closer = closer
        self._bg: concurrent.futures.Future[RunResult] | None = None
        self._blocking_lock = threading.Lock()
        self._blocking_calls = 0  # blocking run()/step()/rerun_stale() waiting now

    def is_current(self) -> bool:
        """Whether the caller runs on the session's loop thread (a subscriber)."""
        return self._loop.is_current()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs ``coro`` on the loop thread, holding the lease, and waits."""
        return self._loop.call(
            self._runner.guarded(coro),
            lambda: self._signals.pause("interrupted by the user"),
        )

    def blocking(self, coro: Coroutine[Any, Any, T]) -> T:
        """``call`` for the calls that run tasks while their caller waits."""
        with self._blocking_lock:
            self._blocking_calls += 1
        try:
            return self.call(coro)
        finally:
            with self._blocking_lock:
                self._blocking_calls -= 1

    @property
    def blocking_run(self) -> bool:
        """Whether a blocking ``run()``, ``step()`` or ``rerun_stale()`` waits."""
        return self._blocking_calls > 0

    def _not_in_background(self, call: str) -> None:
        """Refuses a blocking run or step while ``start()``'s run goes on.

        Run beside it, it found the tasks that run busy, committed the session
        as paused ("nothing can run now") while they ran, and took back a
        pause asked for meanwhile (``go``), so the background run went on.

        Raises:
            SessionStateError: a background run goes on (it says what to do).
        """
        bg = self._bg
        if bg is not None and not bg.done():
            raise SessionStateError(
                f"{call} while a background run of this session goes on "
                "(s.start(), the widget's Run or %%argus --run): s.wait() waits "
                "for its result, s.pause() stops it"
            )

    def step(self) -> list[TaskRecord]:
        """Runs the next ready task(s) once and waits for their records."""
        self._not_in_background("s.step()")
        self._signals.go()  # here, so a pause() right after counts
        return self.blocking(frozen_heap(self._runner.step))

    def run(self) -> RunResult:
        """Runs until the plan is done, pauses, or nothing can run, and waits."""
        self._not_in_background("s.run()")
        self._signals.go()
        return self.blocking(frozen_heap(self._runner.run))

    def rerun_stale(self) -> RunResult:
        """Makes the stale tasks pending again, then runs, and waits."""
        self._not_in_background("s.rerun_stale()")
        self._signals.go()
        return self.blocking(frozen_heap(self._rerun_stale))

    async def _rerun_stale(self) -> RunResult:
        await self._actions.mark_stale()
        return await self._runner.run()

    def start(self) -> concurrent.futures.Future[RunResult]:
        """Starts a run in the background (or returns the one going on)."""
        if self._bg is not None and not self._bg.done():
            return self._bg
        self._signals.go()
        self._bg = self._loop.submit(
            self._runner.guarded(frozen_heap(self._runner.run))
        )
        hold(self._closer, self._bg)  # a run going on is closed at exit too
        return self._bg

    async def arun(self) -> RunResult:
        """Awaits a background run from async code."""
        return await asyncio.wrap_future(self.start())

    def wait(self, timeout: float | None = None) -> RunResult | None:
        """Waits for the background run; None if none was started."""
        return None if self._bg is None else self._bg.result(timeout)
