"""How the frames are built and what they hold when values are missing.

- Durations: every duration column of every frame and post-mortem helper is
  float64 seconds (NaN when unknown); the report prints them as human text.
- One missing-value marker per dtype: NaN in float64, NaT in timestamps, pd.NA in
  the nullable string/Int64/boolean columns; never two kinds in one column.
- Columnar construction: ``tasks_df`` (built from lists per column) equals a
  reference built row by row from the same data, on the committed fixture.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import argus_lab as al
from argus_lab import analysis as an
from argus_lab.analysis import _rows, _tasks
from argus_lab.analysis._columns import Table
from argus_lab.analysis._read import read_sessions
from argus_lab.analysis._report import DURATIONS, fmt_duration
from argus_lab.analysis._values import canonical
from argus_lab.model import TaskRecord

FIXTURE_WS = Path(__file__).parent / "fixtures" / "trajectory" / "ws"
PARENT, FORK = "penguin-review", "penguin-review-fixed"


@pytest.fixture
def fixture_ws(tmp_path: Path) -> al.Workspace:
    shutil.copytree(FIXTURE_WS, tmp_path / "ws")  # opening may touch the files
    w = al.Workspace(tmp_path / "ws")
    yield w
    w.close()


@pytest.fixture
def fr(fixture_ws: al.Workspace) -> an.Frames:
    return an.frames(fixture_ws)


def _post_mortem(fr: an.Frames) -> dict[str, pd.DataFrame]:
    names = [str(n) for n in fr.sessions["name"]]
    assert set(names) >= {PARENT, FORK}, names
    parent, fork = fr.session(PARENT), fr.session(FORK)
    return {
        "critical_path": an.critical_path(parent),
        "failure_chains": an.failure_chains(parent),
        "retries_summary": an.retries_summary(parent),
        "cost_by_task": an.cost_by(parent, "task"),
        "cost_by_model": an.cost_by(parent, "model"),
        "slowest": an.slowest(parent),
        "compare": an.compare(parent, fork, only_changed=False),
    }


def _markers(s: pd.Series) -> set[str]:
    """The kinds of missing value a column holds."""
    got: set[str] = set()
    for v in s.astype(object) if s.dtype != object else s:
        if v is None:
            got.add("None")
        elif v is pd.NA:
            got.add("NA")
        elif v is pd.NaT:
            got.add("NaT")
        elif isinstance(v, float) and math.isnan(v):
            got.add("NaN")
    return got


ALLOWED = {
    "float64": {"NaN"},
    "datetime64[ns, UTC]": {"NaT"},
    "string": {"NA"},
    "Int64": {"NA"},
    "boolean": {"NA"},
    "category": {"NaN"},  # pandas shows a categorical's missing code as NaN
    "object": set(),  # lists only (blocked, errors, changes): never missing
}


def test_every_column_has_one_missing_marker_of_its_dtype(fr: an.Frames) -> None:
    frames = {**dict(fr.items()), **_post_mortem(fr)}
    seen: dict[str, set[str]] = {}
    for name, df in frames.items():
        for col in df.columns:
            dtype = "category" if df[col].dtype == "category" else str(df[col].dtype)
            assert dtype in ALLOWED, (name, col, dtype)
            got = _markers(df[col])
            assert got <= ALLOWED[dtype], (name, col, dtype, got)
            seen.setdefault(dtype, set()).update(got)
    # The fixture has missing values of each kind, so the check above bit.
    assert seen["float64"] == {"NaN"} and seen["datetime64[ns, UTC]"] == {"NaT"}
    assert seen["string"] == seen["Int64"] == {"NA"}


def test_every_duration_is_float_seconds(fr: an.Frames) -> None:
    frames = {**dict(fr.items()), **_post_mortem(fr)}
    n = 0
    for name, df in frames.items():
        assert not any("timedelta" in str(t) for t in df.dtypes), name
        for col in df.columns:
            if col in DURATIONS:
                assert str(df[col].dtype) == "float64", (name, col)
                n += 1
    assert n >= 14  # every frame's and helper's duration columns were seen
    doc = an.schema()
    durs = doc[doc["column"].isin(["duration", "busy", "retry_delay", "wait"])]
    assert (durs["dtype"] == "float64").all()
    assert durs["doc"].str.contains("Seconds").all()
    a = fr.attempts.dropna(subset=["ended"])
    assert (a["duration"] == (a["ended"] - a["started"]).dt.total_seconds()).all()
    arrow = an.frames(
        [], dtype_backend="pyarrow"
    )  # the pyarrow backend: double, not duration
    assert str(arrow.tasks["duration"].dtype) == "double[pyarrow]"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "—"),
        (float("nan"), "—"),
        (0.0, "0 ms"),
        (0.0042, "4 ms"),
        (0.0004, "0.40 ms"),
        (0.444283962, "0.44 s"),
        (3.21, "3.21 s"),
        (12.34, "12.3 s"),
        (123.4, "2 min 3 s"),
        (3725.0, "1 h 2 min"),
    ],
)
def test_durations_read_as_human_text(seconds: float | None, text: str) -> None:
    assert fmt_duration(seconds) == text


def test_the_report_prints_durations_as_text(fr: an.Frames) -> None:
    md = an.report(fr.session(PARENT)).to_markdown(image_dir="img")
    html = an.report(fr.session(PARENT)).to_html()
    for text in (md, html):
        assert "days" not in text and "0 days" not in text and "<NA>" not in text
    slow = md.split("## Slowest tasks", 1)[1].split("##", 1)[0]
    rows = [r for r in slow.splitlines() if r.startswith("| ") and "task_id" not in r]
    assert rows
    unit = re.compile(r"^(—|[\d.]+ (ms|s)|\d+ min \d+ s|\d+ h \d+ min)$")
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        duration, busy = cells[-2], cells[-1]
        assert unit.match(duration) and unit.match(busy), r
    assert re.search(r"Wall time: [\d.]+ (ms|s|min)", md)


def _reference_task_rows(d: Any) -> list[dict[str, Any]]:
    """tasks_df's rows built one dict per task (the construction before columns)."""
    gen_start, busy = _tasks._task_times(d)
    usage = _rows._usage(d)
    kept = _tasks._reused(d)
    out = []
    for t in d.plan.tasks:
        rec = d.records.get(t.id) or TaskRecord(task_id=t.id)
        started = gen_start.get(t.id, rec.started)
        ok = rec.status == "succeeded" and rec.result_ref is None
        row = {
            "session_id": d.id,
            "task_id": t.id,
            "title": t.title or t.id,
            "tool": t.tool,
            "parent": t.parent,
            "deps": list(t.deps),
            "status": rec.status,
            "interrupted": rec.status == "running" and not d.live,
            "attempts": rec.attempts,
            "generation": rec.generation,
            "started": started,
            "ended": rec.ended,
            "duration": (
                rec.ended - started
                if started is not None and rec.ended is not None
                else None
            ),
            "busy": busy.get(t.id),
            "error_type": rec.error_type,
            "error": rec.error,
            "reason": rec.reason,
            "approval": (rec.approval or {}).get("state"),
            "reused": t.id in kept,
            "result": canonical(rec.result) if ok else None,
            "result_ref": rec.result_ref,
            "input_hash": rec.input_hash,
            "tool_hash": rec.tool_hash,
            "idempotency_key": rec.idempotency_key,
        }
        row.update(usage.get(t.id) or dict.fromkeys(_rows._USAGE, 0))
        out.append(row)
    return out


@pytest.mark.parametrize("backend", ["numpy_nullable", "pyarrow"])
def test_columnar_tasks_frame_equals_one_built_row_by_row(
    fixture_ws: al.Workspace, backend: an.DtypeBackend
) -> None:
    data = read_sessions(fixture_ws)
    rows = [r for d in data.sessions for r in _reference_task_rows(d)]
    assert len(rows) >= 10 and any(r["reused"] for r in rows)
    want = an.TASK_COLUMNS.frame(rows, backend)
    got = an.tasks_df(fixture_ws, dtype_backend=backend)
    pd.testing.assert_frame_equal(got, want)
    # A spec of your own reads the columnar rows too, by path and by function.
    spec = an.TASK_COLUMNS.select("task_id") + an.Columns(
        an.Column("upper", "string", value=lambda r: r["task_id"].upper()),
        an.Column("n", "Int64", path="attempts"),
    )
    mine = an.tasks_df(fixture_ws, columns=spec)
    assert list(mine["upper"]) == [str(t).upper() for t in want["task_id"]]
    assert list(mine["n"]) == list(want["attempts"])


def test_table_checks_lengths_and_concatenates() -> None:
    a = Table({"x": [1, 2], "y": ["a", "b"]}, 2)
    b = Table({"x": [3]}, 1)
    both = Table.concat([a, b])
    assert len(both) == 3 and both.column("y") == ["a", "b", None]
    assert both.rows()[2] == {"x": 3, "y": None}
    assert Table({}, 2).rows() == [{}, {}]
    with pytest.raises(ValueError, match=r"columns \['x'\] do not have 3 values"):
        Table({"x": [1]}, 3)


@pytest.mark.parametrize(
    "value",
    ["plain", 'ü "q" \\ \n', [], ["a", "b ü"], ["x", 1], {"b": 1, "a": [1, "ü"]}, None],
)
def test_canonical_fast_paths_write_what_json_dumps_writes(value: Any) -> None:
    import json

    want = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    assert canonical(value) == want


def test_an_export_with_timedelta_durations_loads_as_seconds(
    fr: an.Frames, tmp_path: Path
) -> None:
    # Folders exported before durations were float seconds hold timedelta64.
    import dataclasses

    old = fr.tasks.assign(duration=pd.to_timedelta(fr.tasks["duration"], unit="s"))
    an.export(dataclasses.replace(fr, tasks=old), tmp_path / "old")
    back = an.load(tmp_path / "old").tasks
    assert str(back["duration"].dtype) == "float64"
    pd.testing.assert_series_equal(back["duration"], fr.tasks["duration"])
