"""Polling with a deadline, the tests' one way to wait for another process."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

DEADLINE = 60.0
"""Seconds any single wait may take before the test gives up (a loaded CI box)."""


def wait_until(
    cond: Callable[[], bool],
    what: str,
    *,
    gone: Callable[[], str | None] | None = None,
    every: float = 0.002,
) -> None:
    """Polls ``cond`` until it holds; fails after DEADLINE, or as soon as ``gone``
    (the other side's liveness check) says why it can no longer hold."""
    end = time.monotonic() + DEADLINE
    while not cond():
        if gone is not None and (why := gone()) is not None:
            if cond():
                return
            pytest.fail(f"{why} while waiting for {what}")
        if time.monotonic() > end:
            pytest.fail(f"timed out after {DEADLINE}s waiting for {what}")
        time.sleep(every)
