"""The shortcuts ``tasks_df`` takes give what the plain way gives.

- ``head_table``: the five fields of every event msgspec decodes equal what
  ``event_table`` (Arrow) and the parsed rows hold; a body it cannot type
  sends the reader to the rows, with the same frames.
- ``json_strings``: the quoted texts equal ``canonical`` of each, and any text
  that needs an escape is left to ``canonical``.
- ``_fields``: the columns read from the models' ``__dict__`` equal the
  attributes.
- ``_reused`` and ``containing``: the same tasks whether the events are held
  as stored texts or as parsed rows.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import argus_lab as al
from argus_lab import analysis as an
from argus_lab.analysis import _tasks
from argus_lab.analysis._event_cols import HEAD_FIELDS, event_table, head_table
from argus_lab.analysis._read import SessionData, parse_events, read_sessions
from argus_lab.analysis._series import json_string_lists, json_strings
from argus_lab.analysis._values import canonical
from argus_lab.model import Task, TaskRecord

FIXTURE_WS = Path(__file__).parent / "fixtures" / "trajectory" / "ws"


@pytest.fixture
def sessions(tmp_path: Path) -> list[SessionData]:
    shutil.copytree(FIXTURE_WS, tmp_path / "ws")
    ws = al.Workspace(tmp_path / "ws")
    try:
        got = read_sessions(ws).sessions
    finally:
        ws.close()
    assert len(got) >= 2
    return got


def _bodies(d: SessionData) -> list[str]:
    assert d._bodies is not None  # read from the store: the stored texts
    return d._bodies


def test_head_table_holds_what_arrow_and_the_rows_hold(
    sessions: list[SessionData],
) -> None:
    for d in sessions:
        bodies = _bodies(d)
        heads = head_table(bodies)
        full = event_table(bodies, True)
        assert heads is not None and full is not None
        rows = parse_events(bodies)
        for k in HEAD_FIELDS:
            assert heads.values(k) == full.values(k), k
            assert heads.values(k) == [r.get(k) for r in rows], k
        kinds = heads.values("kind")
        assert "task_started" in kinds and any(
            t is None for t in heads.values("task_id")
        )


def test_head_table_gives_up_on_a_field_of_another_type() -> None:
    ok = (
        '{"kind":"note","session_id":"s","seq":1,"ts":1.5,"task_id":null,'
        '"attempt":null,"duration":null,"text":"x"}'
    )
    got = head_table([ok])
    assert got is not None and got.values("ts") == [1.5]
    assert head_table([ok, ok.replace('"attempt":null', '"attempt":"two"')]) is None
    assert head_table([ok, "[1, 2]"]) is None
    # Deeper than msgspec descends (RecursionError, not a MsgspecError).
    deep = ok[:-1] + ',"deep":' + "[" * 3000 + "]" * 3000 + "}"
    assert head_table([ok, deep]) is None
    # Fields it does not read may hold anything; missing ones read as None.
    odd = '{"kind":"note","seq":2,"ts":3,"details":{"attempt":"x"},"tags":[1]}'
    again = head_table([odd])
    assert again is not None
    assert [again.values(k)[0] for k in HEAD_FIELDS] == ["note", 2, 3.0, None, None]


def test_head_table_without_msgspec_leaves_it_to_arrow(
    sessions: list[SessionData], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "msgspec", None)  # import fails
    assert head_table(_bodies(sessions[0])) is None


@pytest.mark.parametrize("arrow_too", [False, True])
def test_tasks_df_is_the_same_when_the_heads_cannot_be_typed(
    sessions: list[SessionData], monkeypatch: pytest.MonkeyPatch, arrow_too: bool
) -> None:
    want = [_tasks.task_rows(d) for d in sessions]
    import argus_lab.analysis._read as read_mod

    monkeypatch.setattr(read_mod, "head_table", lambda bodies: None)
    if arrow_too:
        monkeypatch.setattr(read_mod, "event_table", lambda bodies, fast: None)
    fresh = [
        SessionData(d.info, d.plan, d.records, bodies=list(_bodies(d)))
        for d in sessions
    ]
    for d, w in zip(fresh, want, strict=True):
        got = _tasks.task_rows(d)
        # Arrow's table of the whole events, else the parsed rows.
        assert (d._events is not None) is arrow_too and "table" in d.cache
        for name in w._columns:
            assert got.values(name) == w.values(name), name


@pytest.mark.parametrize(
    "texts",
    [
        ["plain", "", "ü ö 漢字 🙂", None],
        ["x" * 300] * 3,
        [None, None],
        [],
    ],
)
def test_json_strings_quote_what_canonical_quotes(texts: list[str | None]) -> None:
    got = json_strings(texts)
    assert got is not None
    want = [None if t is None else canonical(t) for t in texts]
    assert got.to_pylist() == want
    for t, text in zip(texts, want, strict=True):
        assert t is None or json.loads(str(text)) == t


@pytest.mark.parametrize(
    "bad", ['a "quote"', "back\\slash", "new\nline", "\x00", "\x1f"]
)
def test_json_strings_leave_escapes_to_canonical(bad: str) -> None:
    assert json_strings(["fine", bad]) is None
    assert json_strings(["fine", 3]) is None  # type: ignore[list-item]


@pytest.mark.parametrize(
    "lists",
    [[[], ["a"], ["a", "b ü", ""], []], [[]], [], [["x" * 100] * 50]],
)
def test_json_string_lists_write_what_canonical_writes(
    lists: list[list[str]],
) -> None:
    got = json_string_lists(lists)
    assert got is not None
    assert got.to_pylist() == [canonical(v) for v in lists]
    assert _tasks._deps(lists) == got


@pytest.mark.parametrize("bad", [["a", 'q"'], ["\\"], ["\t"], [1], None])
def test_json_string_lists_leave_the_rest_to_canonical(bad: Any) -> None:
    assert json_string_lists([["fine"], bad]) is None
    if bad is not None and all(type(v) is str for v in bad):
        assert _tasks._deps([["fine"], bad]) == [canonical(["fine"]), canonical(bad)]


def test_the_result_column_equals_canonical_of_each() -> None:
    status = ["succeeded", "succeeded", "failed", "succeeded", "succeeded", "pending"]
    refs = [None, None, None, "art-1", None, None]
    for results in (
        ["a", "ü", "x", "big", None, None],  # a succeeded None is JSON null
        ["a", {"b": [1, "c"]}, None, None, 'q"', None],
        ["a", 'q"uote', None, None, "b", None],
    ):
        got = _tasks._results(status, refs, results)
        got = got if isinstance(got, list) else got.to_pylist()
        want = [
            canonical(v) if s == "succeeded" and r is None else None
            for s, r, v in zip(status, refs, results, strict=True)
        ]
        assert got == want


def test_fields_read_every_models_attributes() -> None:
    recs = [
        TaskRecord(task_id="a", status="succeeded", attempts=2, result={"x": 1}),
        TaskRecord(task_id="b"),
    ]
    got = _tasks._fields(recs, _tasks._RECORD_FIELDS)
    for name in _tasks._RECORD_FIELDS:
        assert got[name] == [getattr(r, name) for r in recs], name
    tasks = [Task(id="t1", tool="x", deps=["t0"]), Task(id="t0", tool="y", title="T")]
    assert _tasks._fields(tasks, _tasks._TASK_FIELDS)["deps"] == [["t0"], []]
    assert _tasks._fields([], ("id",)) == {"id": []}


def test_a_task_with_no_record_or_title_reads_as_a_new_one(
    sessions: list[SessionData],
) -> None:
    d = sessions[0]
    ids = [t.id for t in d.plan.tasks]
    some = {k: v for k, v in d.records.items() if k != ids[1]}
    got = _tasks.task_rows(SessionData(d.info, d.plan, some, bodies=_bodies(d)))
    assert got.values("status")[1] == "pending" and got.values("attempts")[1] == 0
    assert got.values("task_id") == ids
    untitled = d.plan.model_copy(
        update={"tasks": [t.model_copy(update={"title": None}) for t in d.plan.tasks]}
    )
    plain = _tasks.task_rows(
        SessionData(d.info, untitled, d.records, bodies=_bodies(d))
    )
    assert plain.values("title") == ids


def test_reused_is_the_same_from_texts_and_from_rows(
    sessions: list[SessionData],
) -> None:
    seen: set[str] = set()
    for d in sessions:
        as_rows = SessionData(d.info, d.plan, d.records, parse_events(_bodies(d)))
        got = _tasks._reused(d)
        assert got == _tasks._reused(as_rows)
        pos = d.containing('"cached":true', "task_succeeded")
        assert pos == as_rows.containing('"cached":true', "task_succeeded")
        seen |= got
    assert seen  # the fork keeps its parent's results


def _reused_one_event_at_a_time(d: SessionData) -> set[str]:
    """The state machine _reused replaces: the last event about a task decides."""
    state: dict[str, bool] = {}
    for ev in d.events:
        kind, tid = ev["kind"], ev.get("task_id")
        if kind == "forked":
            kept = json.loads(ev["details"]).get("kept") or []
            state.update(dict.fromkeys(map(str, kept), True))
        elif tid is not None and kind in ("task_started", "task_succeeded"):
            state[tid] = kind == "task_succeeded" and (
                json.loads(ev["details"]).get("cached") is True
            )
    return {t for t, reused in state.items() if reused}


def test_reused_follows_the_last_event_about_each_task(
    sessions: list[SessionData],
) -> None:
    def ev(kind: str, tid: str | None = None, **own: Any) -> dict[str, Any]:
        text = json.dumps(own, separators=(",", ":"))
        return {"kind": kind, "task_id": tid, "attempt": None, "details": text}

    events = [
        ev("forked", kept=["a", "b", "c"]),
        ev("task_started", "b"),  # run again here: not reused
        ev("task_succeeded", "b", cached=False),
        ev("task_succeeded", "d", cached=True),  # replayed: reused
        ev("task_succeeded", "e", cached=True, note='"cached":true'),
        ev("task_started", "e"),  # then run: not reused
        ev("task_succeeded", "f", note='"cached":true'),  # the text, not the field
        ev("task_started", "c"),
        ev("forked", kept=["c"]),  # kept again after its attempt: reused
    ]
    d0 = sessions[0]
    made = SessionData(d0.info, d0.plan, d0.records, events)
    assert _tasks._reused(made) == {"a", "c", "d"} == _reused_one_event_at_a_time(made)
    for d in sessions:
        assert _tasks._reused(d) == _reused_one_event_at_a_time(d)


def test_tasks_df_of_a_workspace_equals_the_frames_one(tmp_path: Path) -> None:
    # frames() builds the events' table first; tasks_df reads only the heads.
    shutil.copytree(FIXTURE_WS, tmp_path / "ws")
    ws = al.Workspace(tmp_path / "ws")
    try:
        alone: Any = an.tasks_df(ws)
        together = an.frames(ws).tasks
    finally:
        ws.close()
    pd.testing.assert_frame_equal(alone, together)
