"""Events held as Arrow columns (``analysis/_event_cols.py``) make the same frames
as events parsed into one dict per row (the construction before columns).

``events_df`` is built from Arrow arrays parsed in C, ``tasks_df`` reads its event
columns as lists, and only the rows a frame needs parsed are built as dicts. Each
test compares with the dict-per-row path on the same stored data.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import argus_lab as al
from argus_lab import analysis as an
from argus_lab.analysis import _rows, _tasks
from argus_lab.analysis._frames import FRAME_NAMES, _build
from argus_lab.analysis._read import Read, SessionData, parse_events, read_sessions
from argus_lab.analysis._table import Table
from argus_lab.store.checkpoints import SessionStore
from argus_lab.store.envelope import encode
from tests.conftest import BASIC_TOOLS

FIXTURE_WS = Path(__file__).parent / "fixtures" / "trajectory" / "ws"
BACKENDS = ["numpy_nullable", "pyarrow"]


@pytest.fixture
def fixture_ws(tmp_path: Path) -> al.Workspace:
    shutil.copytree(FIXTURE_WS, tmp_path / "ws")  # opening may touch the files
    w = al.Workspace(tmp_path / "ws")
    yield w
    w.close()


def _as_rows(d: SessionData) -> SessionData:
    """The same session with its events parsed into dicts first (the old path)."""
    assert d._bodies is not None
    return SessionData(d.info, d.plan, d.records, parse_events(d._bodies))


def _reference_events(ws: al.Workspace) -> list[dict[str, Any]]:
    return [r for d in read_sessions(ws).sessions for r in _as_rows(d).events]


@pytest.mark.parametrize("backend", BACKENDS)
def test_events_frame_from_arrow_columns_equals_one_from_rows(
    fixture_ws: al.Workspace, backend: an.DtypeBackend
) -> None:
    want = an.EVENT_COLUMNS.frame(_reference_events(fixture_ws), backend)
    got = an.events_df(fixture_ws, dtype_backend=backend)
    assert len(got) > 30 and got["kind"].nunique() > 8
    pd.testing.assert_frame_equal(got, want)
    # And it really came from Arrow, without a dict per event.
    d = read_sessions(fixture_ws).sessions[0]
    table = d.event_table()
    assert isinstance(table.column("ts"), pa.Array) and d._events is None


@pytest.mark.parametrize("name", FRAME_NAMES)
def test_every_frame_from_columns_equals_one_from_rows(
    fixture_ws: al.Workspace, name: str
) -> None:
    """Attempts, calls, approvals and sessions pair events from the columns and
    parse only the rows they need; none builds a dict for every event."""
    cols = read_sessions(fixture_ws)
    rows = Read([_as_rows(d) for d in read_sessions(fixture_ws).sessions])
    got = _build(name, cols, None, "numpy_nullable")
    want = _build(name, rows, None, "numpy_nullable")
    assert len(want) > 0
    pd.testing.assert_frame_equal(got, want)
    assert all(d._events is None for d in cols.sessions)


def test_task_times_from_columns_equal_the_attempt_rows_sums(
    fixture_ws: al.Workspace,
) -> None:
    """busy: summed here from the event columns (no attempt rows), it equals the
    sum of ``attempt_rows`` durations, as it was computed before."""
    checked = 0
    for d in read_sessions(fixture_ws).sessions:
        gen_start, busy = _tasks._task_times(d)
        assert d._events is None  # read from the columns
        old = _as_rows(d)
        sums: dict[str, float] = {}
        for a in _rows.attempt_rows(old):
            if a["duration"] is not None:
                sums[a["task_id"]] = sums.get(a["task_id"], 0.0) + a["duration"]
        assert busy == sums
        assert _tasks._task_times(old) == (gen_start, busy)  # attempts cached
        assert _tasks._reused(old) == _tasks._reused(d)
        assert _rows._usage(old) == _rows._usage(d)
        checked += len(sums)
    assert checked >= 8


def _append(s: al.Session, bodies: list[str]) -> None:
    """Adds events with these JSON texts after the session's last one."""
    last = len(s.events())
    store = SessionStore(s.path, s.id)
    try:
        for i, body in enumerate(bodies, start=last + 1):
            store.cache.set(f"e:{i:012d}", encode(body))
    finally:
        store.close()


def _head(sid: str, seq: int, **fields: Any) -> dict[str, Any]:
    return {"kind": "note", "session_id": sid, "seq": seq, "ts": 1.5e9 + seq, **fields}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "odd",
    [
        # no duration: not split, parsed whole
        lambda sid, n: {**_head(sid, n), "text": 'ü ☃ \\n "q"'},
        # a number Arrow reads as another type: the rows are parsed as dicts
        lambda sid, n: {**_head(sid, n, attempt=2.0, duration=None), "x": 1},
        # fields of its own with nested values and an exponent
        lambda sid, n: {
            **_head(sid, n, task_id="t.1/x", attempt=None, duration=1e-07),
            "args": {"b": [1, {"c": None}], "a": "x"},
        },
    ],
)
def test_odd_event_bodies_give_the_same_frame_either_way(
    ws: al.Workspace, backend: an.DtypeBackend, odd: Any
) -> None:
    plan = {"tasks": [{"id": "a", "tool": "add", "args": {"a": 1}}]}
    s = ws.new_session(plan=plan, tools=BASIC_TOOLS, name="odd")
    assert s.run().status == "succeeded"
    s.close()
    n = len(s.events())
    body = json.dumps(odd(s.id, n + 1), ensure_ascii=False, separators=(",", ":"))
    _append(s, [body])
    want = an.EVENT_COLUMNS.frame(_reference_events(ws), backend)
    got = an.events_df(ws, dtype_backend=backend)
    assert len(got) == n + 1
    pd.testing.assert_frame_equal(got, want)
    assert an.tasks_df(ws)["busy"].notna().all()


def test_a_table_of_arrow_columns_reads_as_rows_and_concatenates() -> None:
    a = Table({"x": pa.array([1, None]), "y": pa.array(["p", "q"])}, 2)
    b = Table({"x": pa.array([3])}, 1)
    c = Table({"x": [4]}, 1)
    assert a.rows() == [{"x": 1, "y": "p"}, {"x": None, "y": "q"}]
    ab = Table.concat([a, b])
    assert isinstance(ab.column("x"), pa.Array) and ab.values("x") == [1, None, 3]
    assert ab.values("y") == ["p", "q", None]
    assert Table.concat([a, c]).column("x") == [1, None, 4]


@pytest.mark.parametrize("name", [*FRAME_NAMES, "frames"])
def test_the_cyclic_collector_is_paused_while_a_frame_is_read_and_built(
    fixture_ws: al.Workspace, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A full pass walks the whole heap (the caller's data too): at 100,000
    # events it was 0.2 s of events_df, whenever the threshold happened to fall.
    import gc

    from argus_lab.analysis import _frames

    on: list[bool] = []
    real_read, real_build = _frames.read_sessions, _frames._build

    def read(*a: Any, **k: Any) -> Any:
        on.append(gc.isenabled())
        return real_read(*a, **k)

    def build(*a: Any, **k: Any) -> Any:
        on.append(gc.isenabled())
        return real_build(*a, **k)

    monkeypatch.setattr(_frames, "read_sessions", read)
    monkeypatch.setattr(_frames, "_build", build)
    fn = an.frames if name == "frames" else getattr(an, f"{name}_df")
    fn(fixture_ws)
    assert on and not any(on)
    assert gc.isenabled()  # and on again afterwards
