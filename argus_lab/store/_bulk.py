"""Loading many records at once: one validation call, the collector paused.

Reopening a 50,000-task session parsed each record with its own
``model_validate_json`` call, and CPython's cyclic collector ran again and again
over the hundreds of thousands of objects being made (none of them garbage).
Here the records' JSON is checked (checksum, version) one by one as before, but
validated by pydantic-core in one call over a JSON array, with the collector
paused until they are all built; a record that fails is parsed again on its own
so the error names its key.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from pydantic import TypeAdapter, ValidationError

from argus_lab.model import TaskRecord

__all__ = ["load_records", "paused_gc"]


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
def _records_adapter() -> TypeAdapter[list[TaskRecord]]:
    return TypeAdapter(list[TaskRecord])


def load_records(
    rows: Iterable[tuple[str, Any]],
    decode: Callable[[str, Any], tuple[bool, str]],
    parse_one: Callable[[str, Any], TaskRecord],
) -> dict[str, TaskRecord]:
    """Task records by id from ``(key, stored value)`` rows.

    Args:
        rows: The stored rows.
        decode: (key, value) -> (current schema version?, JSON body); raises
            for a damaged envelope or checksum.
        parse_one: (key, value) -> the record, parsed alone (migrations, and the
            error naming the key when a record is invalid).
    """
    kept: list[tuple[str, Any]] = []
    bodies: list[str] = []
    records: dict[str, TaskRecord] = {}
    for key, raw in rows:
        current, body = decode(key, raw)
        if current:
            kept.append((key, raw))
            bodies.append(body)
        else:
            rec = parse_one(key, raw)
            records[rec.task_id] = rec
    if not bodies:
        return records
    try:
        batch = _records_adapter().validate_json("[" + ",".join(bodies) + "]")
    except ValidationError:
        batch = [parse_one(key, raw) for key, raw in kept]
    for rec in batch:
        records[rec.task_id] = rec
    return records
