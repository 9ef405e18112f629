"""ProgressFollower: ``read_progress`` again, at the cost of what changed.

Each read must equal a full ``read_progress`` of the same moment; the whole
session is loaded only on the first read and when the witness's journal does
not name what the commits since touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import argus_lab as al
from argus_lab.store.checkpoints import SessionStore
from argus_lab.store.index import read_progress
from argus_lab.store.progress import ProgressFollower
from tests.conftest import BASIC_TOOLS


@pytest.fixture
def followed(ws: al.Workspace) -> Iterator[tuple[al.Session, ProgressFollower]]:
    tasks = [
        {"id": f"t{i}", "tool": "echo", "args": {"value": i}}
        | ({"deps": [f"t{i - 1}"]} if i else {})
        for i in range(4)
    ]
    plan = {"goal": "chain", "tasks": tasks}
    s = ws.new_session(plan=plan, tools=BASIC_TOOLS, name="chain")
    store = SessionStore(ws.path / "sessions" / s.id, s.id)
    follower = ProgressFollower(store)
    yield s, follower
    follower.close()
    s.close()


def _fresh(ws: al.Workspace, sid: str) -> dict[str, Any]:
    store = SessionStore(ws.path / "sessions" / sid, sid)
    try:
        return read_progress(store)
    finally:
        store.close()


def test_each_read_equals_a_full_one_and_loads_once(
    ws: al.Workspace, followed: tuple[al.Session, ProgressFollower]
) -> None:
    s, f = followed
    assert f.read() == _fresh(ws, s.id) and f.full_reads == 1
    rows: list[str] = []
    real = f.store._read.rows
    f.store._read.rows = lambda lo, hi: rows.append(lo) or real(lo, hi)  # type: ignore[method-assign]
    assert f.read() == _fresh(ws, s.id)
    assert rows == []  # nothing committed: no record read
    while s.step():
        assert f.read() == _fresh(ws, s.id)
    assert f.full_reads == 1
    assert set(rows) == {f"t:{t}" for t in f.read()["tasks"]}
    assert f.read()["counts"] == {"succeeded": 4}


def test_a_journal_that_does_not_cover_the_commits_means_a_full_read(
    ws: al.Workspace, followed: tuple[al.Session, ProgressFollower]
) -> None:
    s, f = followed
    f.read()
    s.step()
    f.store.witness.compact(limit=0)  # as after a loss, or a settled reopen
    s.step()
    assert f.read() == _fresh(ws, s.id)
    assert f.full_reads == 2
    s.step()  # journaled again from here on
    assert f.read() == _fresh(ws, s.id) and f.full_reads == 2
