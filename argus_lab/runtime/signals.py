"""Run signals: a request to pause, a shutdown, and the wake-up of the run loop.

Any part may ask the run to stop starting tasks (a budget ran out, a task is in
doubt, a person pressed Pause) and wake the loop so it notices; the run loop
(engine.py) reads them. Set from the loop thread, except ``pause`` and
``stop`` which come from other threads (a person's, or the process's exit).
"""

from __future__ import annotations

import asyncio

from argus_lab.errors import ArgusError

__all__ = ["Signals"]


class Signals:
    """The pause request, the shutdown state and the wake-up event."""

    def __init__(self) -> None:
        self.pause_requested: str | None = None
        """Why the run should stop starting tasks (None: keep going)."""
        self.wake: asyncio.Event | None = None
        """Set to make the run loop look again (made on the loop thread)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """The session's loop, once it runs (for ``pause`` from other threads)."""
        self.stopping: str | None = None
        """Why the session is shutting down (None: it is not); for good."""
        self.abandoning = False
        """The shutdown's grace period is over: attempts still in flight are
        left as their committed intents (runtime/shutdown.py)."""
        self.stopped_by: str | None = None
        """What shut the session down (``stop``'s cause)."""
        self.left: list[str] = []
        """Tasks whose attempts a shutdown left in flight."""

    def request_pause(self, why: str) -> None:
        """Asks the run to stop starting tasks (from the loop thread)."""
        self.pause_requested = why

    def wake_up(self) -> None:
        """Makes the run loop look again (from the loop thread)."""
        if self.wake is not None:
            self.wake.set()

    def pause(self, why: str) -> None:
        """Asks a run to stop, from any thread."""
        self.pause_requested = why
        if self.loop is not None and self.wake is not None:
            self.loop.call_soon_threadsafe(self.wake.set)

    def stop(self, why: str, *, cause: str | None = None) -> None:
        """The session is shutting down: no task starts from now on (any thread).

        ``why``: the pause reason the run commits; ``cause``: what shut it down
        ("session closed"), for a later run or step refused on this object."""
        self.stopping = why
        self.stopped_by = cause or why
        self.pause(why)

    def go(self) -> None:
        """A run or step begins: an old pause request no longer counts.

        Raises:
            ArgusError: the session is shut down (closed, or its process exits).
        """
        if self.stopping is not None:
            raise ArgusError(
                f"this Session object is shut down ({self.stopped_by}): open the "
                "session again with ws.open(name, tools=[...]) to go on"
            )
        self.pause_requested = None

    def absorbed_shutdown(self) -> bool:
        """Inside ``except CancelledError``: whether the cancellation is the
        shutdown's own (``RunLoop.abandon``), then withdrawn from the current
        task so the attempt can finish what it must; False: re-raise it."""
        if not self.abandoning:
            return False
        me = asyncio.current_task()
        if me is not None:
            me.uncancel()
        return True

    def why_paused(self) -> str:
        """The pause request, naming the attempts a shutdown left in flight."""
        why = self.pause_requested or ""
        if self.left:
            more = f" and {len(self.left) - 10} more" if len(self.left) > 10 else ""
            why += (
                f"; left in flight: {', '.join(self.left[:10])}{more} (on the next "
                "run they rerun with the same idempotency key, or wait in doubt "
                "for a person if their tool is not idempotent)"
            )
        return why
