"""argus_lab.analysis: the schema of every frame, what the frames hold, how they read.

Post-mortem helpers are in test_analysis_postmortem.py; the committed trajectory
fixture, export/load, plots and the report in test_analysis_fixture.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import argus_lab as al
from argus_lab import analysis as an
from argus_lab.analysis._read import parse_events
from tests.conftest import BASIC_TOOLS, FAST

FIXTURES = Path(__file__).parent / "fixtures"

S, J, INT, F, B, TS, TD, C = (
    "string",
    "string",  # json: JSON text
    "Int64",
    "float64",
    "boolean",
    "datetime64[ns, UTC]",
    "float64",  # durations: seconds
    "category",
)
SCHEMA: dict[str, list[tuple[str, str]]] = {
    "sessions": [
        ("session_id", S), ("name", S), ("goal", S), ("status", C), ("reason", S),
        ("parent_id", S), ("forked_at", S), ("created", TS), ("updated", TS),
        ("started", TS), ("ended", TS), ("duration", TD), ("n_tasks", INT),
        ("n_pending", INT), ("n_running", INT), ("n_awaiting_approval", INT),
        ("n_succeeded", INT), ("n_failed", INT), ("n_skipped", INT), ("n_blocked", INT),
        ("n_in_doubt", INT), ("n_attempts", INT), ("n_retries", INT), ("n_events", INT),
        ("cost_usd", F), ("input_tokens", INT), ("output_tokens", INT),
        ("n_llm_calls", INT),
    ],
    "tasks": [
        ("session_id", S), ("task_id", S), ("title", S), ("tool", S), ("parent", S),
        ("deps", J), ("status", C), ("interrupted", B), ("attempts", INT),
        ("generation", INT),
        ("started", TS), ("ended", TS), ("duration", TD), ("busy", TD),
        ("error_type", S), ("error", S), ("reason", S), ("approval", C),
        ("reused", B), ("result", J), ("result_ref", S), ("input_hash", S),
        ("tool_hash", S), ("idempotency_key", S), ("cost_usd", F),
        ("input_tokens", INT), ("output_tokens", INT), ("n_llm_calls", INT),
    ],
    "events": [
        ("session_id", S), ("seq", INT), ("ts", TS), ("task_id", S), ("attempt", INT),
        ("kind", C), ("duration", TD), ("details", J),
    ],
    "attempts": [
        ("session_id", S), ("task_id", S), ("attempt", INT), ("seq", INT), ("tool", S),
        ("outcome", C), ("started", TS), ("ended", TS), ("duration", TD),
        ("error_type", S), ("error", S), ("retry_delay", TD),
    ],
    "llm_calls": [
        ("session_id", S), ("seq", INT), ("ts", TS), ("task_id", S), ("attempt", INT),
        ("duration", TD), ("model", S), ("purpose", S), ("input_tokens", INT),
        ("output_tokens", INT), ("cache_read_tokens", INT), ("cache_write_tokens", INT),
        ("cost_usd", F), ("cached", B), ("stop_reason", S), ("request_hash", S),
    ],
    "tool_calls": [
        ("session_id", S), ("seq", INT), ("ts", TS), ("task_id", S), ("attempt", INT),
        ("source", C), ("tool", S), ("ok", B), ("duration", TD), ("error_type", S),
        ("error", S), ("args", J),
    ],
    "approvals": [
        ("session_id", S), ("task_id", S), ("seq", INT), ("tool", S),
        ("decision", C), ("by", S), ("requested", TS), ("decided", TS),
        ("wait", TD), ("policy", S), ("reason", S), ("decision_reason", S),
        ("args", J), ("edited_args", J),
    ],
}  # fmt: skip
ARROW = {
    S: "string[pyarrow]",
    INT: "int64[pyarrow]",
    F: "double[pyarrow]",
    B: "bool[pyarrow]",
    TS: "timestamp[ns, tz=UTC][pyarrow]",
    C: "category",
}
CATEGORIES = {
    ("sessions", "status"): ["created", "running", "paused", "succeeded", "failed"],
    ("tasks", "status"): list(al.model.STATUSES),
    ("tasks", "approval"): ["asked", "approved", "rejected"],
    ("events", "kind"): list(al.events.EVENT_KINDS),
    ("attempts", "outcome"): [
        "running",
        "succeeded",
        "retried",
        "failed",
        "interrupted",
    ],
    ("tool_calls", "source"): ["task", "llm"],
    ("approvals", "decision"): ["pending", "granted", "rejected"],
}

CHAIN = {
    "goal": "chain",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1}},
        {"id": "b", "tool": "add", "args": {"a": "${a.result.sum}"}},
        {"id": "c", "tool": "boom", "args": {"message": "no good"}, "deps": ["a"]},
        {"id": "d", "tool": "echo", "args": {"value": "${c.result}"}},
    ],
}


def dtypes(df: pd.DataFrame) -> list[tuple[str, str]]:
    return [(str(c), str(t)) for c, t in df.dtypes.items()]


@pytest.fixture
def two(ws: al.Workspace) -> list[al.Session]:
    s = ws.new_session(plan=CHAIN, tools=BASIC_TOOLS, name="one", **FAST)
    s.run()
    t = ws.new_session(plan=CHAIN, tools=BASIC_TOOLS, name="two", **FAST)
    yield [s, t]
    s.close()
    t.close()


@pytest.mark.parametrize("backend", ["numpy_nullable", "pyarrow"])
def test_every_frame_has_the_pinned_columns_and_dtypes(
    two: list[al.Session], backend: an.DtypeBackend
) -> None:
    fr = an.frames(two, dtype_backend=backend)
    for name, want in SCHEMA.items():
        if backend == "pyarrow":
            want = [(c, ARROW[t]) for c, t in want]
        assert dtypes(fr[name]) == want, name
        assert tuple(SCHEMA) == an.FRAME_NAMES
    for (name, col), cats in CATEGORIES.items():
        assert list(fr[name][col].cat.categories) == cats, (name, col)


def test_empty_sources_give_typed_empty_frames(ws: al.Workspace) -> None:
    fr = an.frames(ws)
    for name, want in SCHEMA.items():
        assert len(fr[name]) == 0 and dtypes(fr[name]) == want, name
    assert len(an.frames([])["tasks"]) == 0


def test_schema_documents_every_column() -> None:
    doc = an.schema()
    assert list(doc.columns) == ["frame", "column", "dtype", "doc"]
    got = {(r.frame, r.column): r.dtype for r in doc.itertuples()}
    assert got == {(f, c): t for f, cols in SCHEMA.items() for c, t in cols}
    assert doc["doc"].str.len().min() > 5  # every column says what it holds
    assert list(an.schema("events")["column"]) == [c for c, _ in SCHEMA["events"]]
    with pytest.raises(KeyError, match="no frame 'nope'"):
        an.schema("nope")


def test_tasks_frame_holds_what_the_records_say(two: list[al.Session]) -> None:
    s = two[0]
    t = s.tasks_df().set_index("task_id")
    assert list(t.index) == ["a", "b", "c", "d"]
    assert list(t["status"]) == ["succeeded", "succeeded", "failed", "blocked"]
    assert json.loads(t.loc["b", "result"]) == {"sum": 3}
    assert pd.isna(t.loc["c", "result"]) and t.loc["c", "error_type"] == "ValueError"
    assert t.loc["c", "error"] == "no good"
    assert json.loads(t.loc["d", "deps"]) == ["c"]
    assert pd.isna(t.loc["d", "started"]) and pd.isna(t.loc["d", "duration"])
    assert (t.loc[["a", "b", "c"], "duration"] >= 0).all()
    ok = t.loc["a"]
    assert (ok["ended"] - ok["started"]).total_seconds() == ok["duration"]
    assert t.loc["a", "idempotency_key"] == s.record("a").idempotency_key
    assert (t["cost_usd"] == 0.0).all() and (t["n_llm_calls"] == 0).all()
    assert not t["reused"].any()


def test_events_frame_matches_the_event_models(two: list[al.Session]) -> None:
    s = two[0]
    e = s.events_df()
    models = s.events()
    assert list(e["seq"]) == [m.seq for m in models]
    assert list(e["kind"]) == [m.kind for m in models]
    assert [json.loads(p) for p in e["details"]] == [m.details() for m in models]
    assert list(e["ts"]) == [pd.Timestamp(m.ts, unit="s", tz="UTC") for m in models]
    failed = e[e["kind"] == "task_failed"].iloc[0]
    assert failed["task_id"] == "c" and failed["attempt"] == 1
    assert json.loads(failed["details"])["blocked"] == 1


def test_sources_workspace_list_and_session_agree(
    ws: al.Workspace, two: list[al.Session]
) -> None:
    by_ws = an.events_df(ws)
    by_list = an.events_df(two)
    pd.testing.assert_frame_equal(by_ws, by_list)
    assert list(an.sessions_df(ws)["name"]) == ["one", "two"]  # oldest first
    per = pd.concat([an.tasks_df(s) for s in two], ignore_index=True)
    pd.testing.assert_frame_equal(per, an.tasks_df(ws))  # categoricals survive concat
    with pytest.raises(TypeError, match="Session, a Workspace"):
        an.tasks_df("one")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got int"):
        an.tasks_df([two[0], 3])  # type: ignore[list-item]


def test_sessions_frame_counts_and_links(two: list[al.Session]) -> None:
    s = two[0]
    sd = an.sessions_df(two).set_index("name")
    assert sd.loc["one", "session_id"] == s.id and sd.loc["one", "status"] == "failed"
    assert (sd.loc["one", "n_succeeded"], sd.loc["one", "n_failed"]) == (2, 1)
    assert (sd.loc["one", "n_blocked"], sd.loc["one", "n_attempts"]) == (1, 3)
    assert sd.loc["one", "n_events"] == len(s.events())
    assert sd.loc["two", "status"] == "created" and sd.loc["two", "n_pending"] == 4
    assert pd.isna(sd.loc["two", "started"]) and sd.loc["two", "n_attempts"] == 0
    span = sd.loc["one", "ended"] - sd.loc["one", "started"]
    assert sd.loc["one", "duration"] == span.total_seconds() > 0


def test_columns_compose_select_and_refuse_duplicates() -> None:
    a = an.Columns(an.Column("x", "Int64"), an.Column("y", "string", path="p.q"))
    b = an.Columns(an.Column("z", "float64", value=lambda r: (r["x"] or 0) * 2))
    spec = a + b
    assert spec.names == ["x", "y", "z"] and len(spec) == 3 and "y" in spec
    df = spec.frame([{"x": 1, "p": {"q": "deep"}}, {"x": None, "p": None}])
    assert dtypes(df) == [("x", "Int64"), ("y", "string"), ("z", "float64")]
    assert df["y"].iloc[0] == "deep" and pd.isna(df["y"].iloc[1])
    assert df["z"].iloc[0] == 2.0
    assert spec.select("z", "x").names == ["z", "x"]
    assert spec.without("y").names == ["x", "z"]
    with pytest.raises(ValueError, match="duplicate column names"):
        _ = a + a
    with pytest.raises(KeyError, match="no column 'w'"):
        spec.without("w")
    with pytest.raises(ValueError, match="dtype must be one of"):
        an.Column("bad", "int")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dtype_backend"):
        spec.frame([], "polars")  # type: ignore[arg-type]


def test_unknown_event_kinds_extend_the_categories() -> None:
    df = an.EVENT_COLUMNS.frame([{"kind": "future_kind", "seq": 1, "ts": 0.0}])
    cats = list(df["kind"].cat.categories)
    assert cats[-1] == "future_kind" and cats[:-1] == list(al.events.EVENT_KINDS)
    assert df["kind"].iloc[0] == "future_kind"


def test_event_parsing_fast_path_equals_parsing_whole_bodies() -> None:
    from argus_lab.events import COMMON_FIELDS, make_event

    evs = [
        make_event("task_started", session_id="s", ts=1.5, task_id="t", attempt=1),
        make_event(
            "llm_call",
            session_id="s",
            ts=2.0,
            duration=1e-05,
            model=',"duration":1,',
            purpose="ü",
            retries=[{"a": None, "b": "},{"}],
        ),
        make_event("paused", session_id="s", ts=3.0, reason="x", duration=None),
        make_event("session_succeeded", session_id="s", ts=4.0, duration=2.5),
    ]
    bodies = [e.model_dump_json() for e in evs]
    # A body of another shape (other spacing, other order) is parsed whole.
    bodies.append(json.dumps({"k": 1, "kind": "resumed", "seq": 9}))
    rows = parse_events(bodies)
    want = [json.loads(b) for b in bodies]
    for r, w in zip(rows, want, strict=True):
        own = {k: w.pop(k) for k in list(w) if k not in COMMON_FIELDS}
        assert json.loads(r.pop("details")) == own
        assert {k: v for k, v in r.items() if k in w} == w
    assert rows[1]["duration"] == 1e-05 and rows[3]["duration"] == 2.5
    assert parse_events([]) == []


def test_old_format_sessions_read_through_migrations(ws: al.Workspace) -> None:
    src = next((FIXTURES / "v0_session").iterdir())
    shutil.copytree(src, ws.path / "sessions" / src.name)
    e = an.events_df(ws)
    assert list(e["kind"]) == ["session_created", "task_succeeded"]
    assert [json.loads(d) for d in e["details"]] == [
        {"name": "", "goal": "", "parent": None},
        {"cached": False, "bytes": None},
    ]
    t = an.tasks_df(ws)
    assert list(t["status"]) == ["succeeded", "pending"]


@pytest.mark.slow
def test_import_argus_lab_stays_light_and_analysis_defers_matplotlib() -> None:
    code = (
        "import sys, argus_lab\n"
        "assert 'pandas' not in sys.modules and 'matplotlib' not in sys.modules\n"
        "import argus_lab.analysis\n"
        "assert 'matplotlib' not in sys.modules\n"
        "print(argus_lab.analysis.tasks_df.__module__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "argus_lab.analysis._frames"


def test_analysis_all_is_sorted_and_importable() -> None:
    # isort style, as ruff's RUF022 keeps it: CONSTANTS, Classes, functions.
    def style(n: str) -> tuple[int, str]:
        return (0 if n.isupper() else 1 if n[0].isupper() else 2, n)

    assert an.__all__ == sorted(an.__all__, key=style)
    for name in an.__all__:
        assert getattr(an, name) is not None


def test_a_damaged_session_raises_unless_strict_false_which_says_why(
    ws: al.Workspace, two: list[al.Session], caplog: pytest.LogCaptureFixture
) -> None:
    from argus_lab.store.checkpoints import open_cache

    bad = two[1]
    bad.close()
    cache = open_cache(ws.path / "sessions" / bad.id)
    cache.set("meta", "1|00000000|{}")  # checksum mismatch
    cache.close()
    assert [i.name for i in ws.sessions()] == ["one"]
    with pytest.raises(al.CorruptCheckpointError, match=bad.id):
        an.sessions_df(ws)
    with caplog.at_level("WARNING", logger="argus_lab"):
        sd = an.sessions_df(ws, strict=False)
        fr = an.frames(ws, strict=False)
    assert list(sd["name"]) == ["one"]
    assert list(sd.attrs["skipped"]) == [bad.id]
    assert "checksum mismatch" in sd.attrs["skipped"][bad.id]
    assert set(fr.events["session_id"]) == {two[0].id}
    assert fr.tasks.attrs["skipped"] == sd.attrs["skipped"]
    assert f"skipped 1 damaged session(s): {bad.id}" in caplog.text
    assert "skipped" not in an.sessions_df(two[0]).attrs  # nothing to report
