"""Run signals: a request to pause, and the wake-up of the run loop.

Any part may ask the run to stop starting tasks (a budget ran out, a task is in
doubt, a person pressed Pause) and wake the loop so it notices; the run loop
(engine.py) reads them. Set from the loop thread, except ``pause`` which a
person calls from theirs.
"""

from __future__ import annotations

import asyncio

__all__ = ["Signals"]


class Signals:
    """The pause request and the wake-up event shared by the parts."""

    def __init__(self) -> None:
        self.pause_requested: str | None = None
        """Why the run should stop starting tasks (None: keep going)."""
        self.wake: asyncio.Event | None = None
        """Set to make the run loop look again (made on the loop thread)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """The session's loop, once it runs (for ``pause`` from other threads)."""

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
