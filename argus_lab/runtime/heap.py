"""The heap that exists when a run starts is left out of the cyclic collector's
passes until the run ends (``gc.freeze``), so a run does not pay to rescan it.

Every step leaves a few long-lived objects behind (its task record, a result),
and CPython runs a full collection whenever those reach a quarter of the
objects that survived the last one. A full pass walks the whole heap: the
plan, every record, pydantic, pandas, the notebook's own data. In a fan-out of
1,000 async tasks that was one pass of 40-75 ms, a third of the run's CPU, and
it found nothing to free (none of it is garbage). Frozen, those objects are
skipped by every pass; what the run itself makes is collected as before.

What this costs: cyclic garbage among objects that existed when the run
started (a rare case: most objects die by reference counting) waits until the
run ends to be collected. Runs that overlap (several sessions) freeze once and
thaw when the last one ends. The collector is left alone where someone else
froze objects first (a pre-forking server) or switched it off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from argus_lab.runtime.options import T

__all__ = ["frozen_heap"]

_lock = threading.Lock()
_runs = 0
_froze = False


def _enter() -> None:
    global _runs, _froze
    with _lock:
        if _runs == 0:
            _froze = gc.isenabled() and gc.get_freeze_count() == 0
            if _froze:
                gc.freeze()
        _runs += 1


def _leave() -> None:
    global _runs, _froze
    with _lock:
        _runs -= 1
        if _runs == 0 and _froze:
            _froze = False
            gc.unfreeze()


async def frozen_heap(run: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Awaits ``run()`` with the heap it starts with frozen.

    Takes the coroutine function, not a coroutine: a call refused before it
    starts (``RunLoop.guarded``) then leaves no coroutine never awaited.
    """
    _enter()
    try:
        return await run()
    finally:
        _leave()
