"""A run freezes the heap it starts with and thaws it when it ends
(argus_lab/runtime/heap.py), leaving alone a collector someone else froze
or switched off."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

import argus_lab as al
from argus_lab.runtime.heap import frozen_heap


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector as the test found it, afterwards too."""
    was = gc.isenabled()
    assert gc.get_freeze_count() == 0
    try:
        yield
    finally:
        gc.unfreeze()
        if was:
            gc.enable()
        else:
            gc.disable()


def run_seeing_frozen(tmp_path: Path) -> list[int]:
    seen: list[int] = []

    @al.tool
    def look(i: int) -> int:
        seen.append(gc.get_freeze_count())
        return i

    ws = al.Workspace(tmp_path / "ws")
    plan = {
        "goal": "g",
        "tasks": [{"id": f"t{i}", "tool": "look", "args": {"i": i}} for i in range(3)],
    }
    s = ws.new_session(plan=plan, tools=[look], name="heap")
    try:
        assert s.run().status == "succeeded"
    finally:
        s.close()
        ws.close()
    return seen


def test_a_run_freezes_the_heap_it_found_and_thaws_it_after(
    tmp_path: Path, collector: None
) -> None:
    seen = run_seeing_frozen(tmp_path)
    assert seen and all(n > 0 for n in seen)
    assert gc.get_freeze_count() == 0  # all thawed: collectable again


def test_a_heap_someone_else_froze_is_left_as_it_is(
    tmp_path: Path, collector: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    gc.freeze()
    assert gc.get_freeze_count() > 0
    # The freeze count itself can fall during the run (a frozen object freed
    # by reference counting leaves the permanent generation), so what is
    # checked is that the run neither froze nor thawed anything.
    calls: list[str] = []
    real_freeze, real_unfreeze = gc.freeze, gc.unfreeze

    def freeze() -> None:
        calls.append("freeze")
        real_freeze()

    def unfreeze() -> None:
        calls.append("unfreeze")
        real_unfreeze()

    monkeypatch.setattr(gc, "freeze", freeze)
    monkeypatch.setattr(gc, "unfreeze", unfreeze)
    seen = run_seeing_frozen(tmp_path)
    assert seen and all(n > 0 for n in seen)
    assert calls == []
    monkeypatch.undo()
    assert gc.get_freeze_count() > 0  # never thawed what we did not freeze


def test_a_collector_switched_off_is_not_touched(
    tmp_path: Path, collector: None
) -> None:
    gc.disable()
    seen = run_seeing_frozen(tmp_path)
    assert seen == [0, 0, 0]
    assert not gc.isenabled()


def test_overlapping_runs_thaw_when_the_last_one_ends(collector: None) -> None:
    first_done = asyncio.Event()
    counts: list[int] = []

    async def first() -> None:
        await first_done.wait()

    async def second() -> None:
        counts.append(gc.get_freeze_count())
        first_done.set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the first has ended by now
        counts.append(gc.get_freeze_count())

    async def main() -> None:
        a = asyncio.create_task(frozen_heap(first))
        await asyncio.sleep(0)
        await frozen_heap(second)
        await a

    asyncio.run(main())
    assert counts[0] > 0 and counts[1] > 0  # still frozen while the second runs
    assert gc.get_freeze_count() == 0
