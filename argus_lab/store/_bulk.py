"""Making many objects at once: the collector paused, one validation call.

CPython's cyclic collector runs again and again while hundreds of thousands of
objects are being made (reopening a big session, none of them garbage): pausing
it while they are built saves those passes. Many task records are validated by
pydantic-core in one call over a JSON array (``records_adapter``) rather than
one call each.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

from pydantic import TypeAdapter

from argus_lab.model import TaskRecord

__all__ = ["paused_gc", "records_adapter"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pauses the cyclic garbage collector (if on) while many objects are made."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@cache
def records_adapter() -> TypeAdapter[list[TaskRecord]]:
    """Validates a JSON array of task records in one pydantic-core call."""
    return TypeAdapter(list[TaskRecord])
