"""The session's private event loop, on its own thread (DESIGN.md section 5).

Every change to a session happens on this thread, so the parts need no locks;
public methods submit coroutines to it and wait (``call``) or return at once
(``submit``). It works the same in a script, the CLI and a Jupyter kernel whose
own loop is already running, and it keeps the kernel free for Pause clicks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from argus_lab.runtime.options import T

__all__ = ["LoopThread"]


class LoopThread:
    """A daemon thread running one event loop, started on first use.

    Args:
        name: The thread's name (shows in debuggers and ``py-spy``).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pending: set[concurrent.futures.Future[Any]] = set()

    @property
    def started(self) -> bool:
        """Whether the loop runs."""
        return self._loop is not None

    def is_current(self) -> bool:
        """Whether the caller runs on the loop's thread."""
        return threading.current_thread() is self._thread

    def _ensure(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            started = threading.Event()

            def main() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(started.set)
                loop.run_forever()

            self._thread = threading.Thread(target=main, name=self._name, daemon=True)
            self._thread.start()
            started.wait()
            self._loop = loop
        return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Runs ``coro`` on the loop; returns its future at once."""
        if self.is_current():
            coro.close()
            raise RuntimeError(
                "a Session method was called from the session's own thread (from a "
                "subscriber or a tool); call it from another thread"
            )
        fut = asyncio.run_coroutine_threadsafe(coro, self._ensure())
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)
        return fut

    def drain(self, timeout: float | None) -> bool:
        """Waits up to ``timeout`` seconds for every submitted call to end;
        True if none is left running."""
        left = list(self._pending)
        return not left or not concurrent.futures.wait(left, timeout).not_done

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Runs ``fn()`` on the loop thread soon (from any thread)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(fn)

    def call(self, coro: Coroutine[Any, Any, T], on_interrupt: Callable[[], None]) -> T:
        """Runs ``coro`` on the loop and waits for its result.

        On Ctrl-C (the kernel's interrupt) it calls ``on_interrupt`` (a pause),
        waits for the call to end cleanly, and re-raises KeyboardInterrupt.
        """
        fut = self.submit(coro)
        try:
            return fut.result()
        except KeyboardInterrupt:
            # Stop cleanly rather than abandon work half-committed; running
            # attempts finish and commit first.
            on_interrupt()
            fut.result()
            raise

    def stop(self, last: Callable[[], None]) -> None:
        """Runs ``last()`` on the loop thread, then stops the loop and the thread."""
        if self._loop is None:
            return

        async def run_last() -> None:
            last()

        asyncio.run_coroutine_threadsafe(run_last(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join()
        self._loop.close()
        self._loop = None
