"""Post-mortem helpers on real sessions with known answers.

Durations are made exact with a fake clock: the session's ``_now`` reads it and
the ``work`` tool advances it by its ``secs`` argument, so with ``concurrency=1``
every task takes exactly what its arguments say. Kinds that nothing emits yet
(``llm_call``, ``plan_patched``, ``htn_decision``) are committed through the
session's own commit path by ``emit``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pandas as pd
import pytest

import argus_lab as al
from argus_lab import analysis as an
from argus_lab.events import make_event
from tests.conftest import BASIC_TOOLS, FAST


class Clock:
    """A session clock that only moves when a tool says so."""

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def make_work(clock: Clock) -> al.Tool:
    """A tool taking exactly ``secs`` on the fake clock."""

    @al.tool(name="work")
    def work(secs: float, out: str = "") -> str:
        clock.now += secs
        return out

    return work


def make_work_v2(clock: Clock, slow: dict[str, float]) -> al.Tool:
    """A new version of ``work`` (other code: a fork reruns it, no replay)."""

    @al.tool(name="work")
    def work(secs: float, out: str = "") -> str:
        clock.now += secs * slow.get(out, 1.0)
        return out.upper()

    return work


def emit(
    s: al.Session,
    kind: str,
    task_id: str | None,
    *,
    attempt: int | None = None,
    duration: float | None = None,
    **fields: Any,
) -> None:
    """Commits one event through the session, as the runtime would."""
    ev = make_event(
        kind,
        session_id=s.id,
        ts=(s.options.clock or time.time)(),
        task_id=task_id,
        attempt=attempt,
        duration=duration,
        **fields,
    )
    s.emit(ev)


def w(tid: str, secs: float, deps: list[str] | None = None, out: str = "") -> dict:
    return {"id": tid, "tool": "work", "args": {"secs": secs, "out": out},
            "deps": deps or []}  # fmt: skip


def run_clocked(ws: al.Workspace, name: str, tasks: list[dict], **kw: Any) -> Any:
    clock = Clock()
    tools = [make_work(clock), *BASIC_TOOLS]
    s = ws.new_session(plan={"tasks": tasks}, tools=tools, name=name, concurrency=1,
                       clock=clock, **FAST, **kw)  # fmt: skip
    s.run()
    return s, clock


@pytest.mark.parametrize(
    ("c_secs", "path", "total"),
    [(5.0, ["a", "c", "d", "f"], 8.5), (1.0, ["a", "b", "d", "f"], 6.5)],
)
def test_critical_path_follows_actual_durations(
    ws: al.Workspace, c_secs: float, path: list[str], total: float
) -> None:
    tasks = [
        w("a", 2), w("b", 3, ["a"]), w("c", c_secs, ["a"]), w("d", 1, ["b", "c"]),
        w("e", 4), w("f", 0.5, ["d"]),
    ]  # fmt: skip
    s, _ = run_clocked(ws, "cp", tasks)
    with s:
        cp = an.critical_path(s)
        durations = s.tasks_df().set_index("task_id")["duration"]
    assert list(cp["task_id"]) == path
    assert cp["cum_duration"].iloc[-1] == pytest.approx(total)
    assert durations["c"] == pytest.approx(c_secs)
    assert list(cp.columns) == [
        "task_id", "tool", "status", "reused", "started", "ended", "duration",
        "cum_duration",
    ]  # fmt: skip


def test_critical_path_of_a_single_task_and_of_nothing_run(ws: al.Workspace) -> None:
    s, _ = run_clocked(ws, "one", [w("x", 3)])
    with s:
        assert list(an.critical_path(s)["task_id"]) == ["x"]
    plan = {"tasks": [{"id": "p", "tool": "add", "args": {"a": 1}}]}
    with ws.new_session(plan=plan, tools=BASIC_TOOLS, name="idle") as idle:
        cp = an.critical_path(idle)
    assert list(cp["task_id"]) == ["p"] and pd.isna(cp["duration"].iloc[0])


def test_failure_chains_name_exactly_what_each_failure_blocked(
    ws: al.Workspace,
) -> None:
    boom = {"tool": "boom", "args": {"message": "broken"}}
    tasks = [
        w("a", 1), {"id": "b", **boom, "deps": ["a"]}, w("c", 1, ["b"]),
        w("d", 1, ["c"]), w("e", 1, ["a"]), {"id": "g", **boom},
        w("h", 1, ["b", "g"]), w("i", 1, ["e"]),
    ]  # fmt: skip
    s, _ = run_clocked(ws, "fail", tasks)
    with s:
        fc = an.failure_chains(s).set_index("task_id")
    assert sorted(fc.index) == ["b", "g"]
    assert fc.loc["b", "blocked"] == ["c", "d", "h"]
    assert fc.loc["g", "blocked"] == ["h"]
    assert list(fc["n_blocked"]) == [len(x) for x in fc["blocked"]]
    assert set(fc["error"]) == {"broken"} and set(fc["error_type"]) == {"ValueError"}
    assert fc["ended"].is_monotonic_increasing


def test_failure_chains_empty_when_nothing_failed(ws: al.Workspace) -> None:
    s, _ = run_clocked(ws, "ok", [w("a", 1), w("b", 1, ["a"])])
    with s:
        fc = an.failure_chains(s)
    assert fc.empty and "blocked" in fc.columns


def test_retries_summary_counts_transient_and_manual_retries(ws: al.Workspace) -> None:
    state = {"n": 0, "fixed": False}

    @al.tool(retries=3)
    def flaky() -> str:
        state["n"] += 1
        if state["n"] <= 2:
            raise al.TransientError(f"busy {state['n']}")
        return "ok"

    @al.tool(name="strict")
    def strict() -> str:
        if not state["fixed"]:
            raise ValueError("bad input")
        return "fine"

    plan = {"tasks": [{"id": "f", "tool": "flaky"}, {"id": "s", "tool": "strict"},
                      {"id": "plain", "tool": "add", "args": {"a": 1}}]}  # fmt: skip
    with ws.new_session(plan=plan, tools=[flaky, strict, *BASIC_TOOLS], name="r",
                        **FAST) as s:  # fmt: skip
        s.run()
        state["fixed"] = True
        s.retry("s")
        s.run()
        rs = an.retries_summary(s).set_index("task_id")
    assert list(rs.index) == ["f", "s"]  # most attempts first; "plain" ran once
    assert (rs.loc["f", "attempts"], rs.loc["f", "retries"]) == (3, 2)
    assert rs.loc["f", "failed_attempts"] == 2 and rs.loc["f", "manual_retries"] == 0
    assert rs.loc["f", "errors"] == ["TransientError: busy 1", "TransientError: busy 2"]
    assert rs.loc["f", "retry_wait"] > 0
    assert (rs.loc["s", "attempts"], rs.loc["s", "manual_retries"]) == (2, 1)
    assert rs.loc["s", "retries"] == 0 and rs.loc["s", "errors"] == [
        "ValueError: bad input"
    ]
    assert rs.loc["s", "status"] == "succeeded"


def test_cost_by_task_tool_model_and_subtree(ws: al.Workspace) -> None:
    tasks = [
        {**w("f1", 1), "parent": "travel/flights"},
        {**w("f2", 2), "parent": "travel/flights"},
        {**w("h1", 4), "parent": "travel/hotel"},
        {"id": "x", "tool": "add", "args": {"a": 1}},
    ]
    s, _ = run_clocked(ws, "cost", tasks)
    with s:
        for tid, model, cost in [("f1", "small", 1.0), ("f2", "big", 2.0),
                                 ("h1", "big", 4.0), ("x", "small", 8.0),
                                 (None, "big", 16.0)]:  # fmt: skip
            emit(s, "llm_call", tid, model=model, cost_usd=cost, input_tokens=int(cost),
                 output_tokens=1)  # fmt: skip
        by = {k: an.cost_by(s, k) for k in ("task", "tool", "model", "subtree")}
        with pytest.raises(ValueError, match="by must be"):
            an.cost_by(s, "day")  # type: ignore[arg-type]

    def costs(df: pd.DataFrame, key: str) -> dict[str, float]:
        return dict(zip(df[key], df["cost_usd"], strict=True))

    assert costs(by["task"], "task_id") == {
        "(no task)": 16.0, "x": 8.0, "h1": 4.0, "f2": 2.0, "f1": 1.0
    }  # fmt: skip
    assert by["task"]["task_id"].iloc[0] == "(no task)"  # most expensive first
    assert costs(by["tool"], "tool") == {"(no task)": 16.0, "add": 8.0, "work": 7.0}
    assert costs(by["model"], "model") == {"big": 22.0, "small": 9.0}
    assert costs(by["subtree"], "subtree") == {
        "(no task)": 16.0, "(top level)": 8.0, "travel": 7.0, "travel/hotel": 4.0,
        "travel/flights": 3.0,
    }  # fmt: skip
    sub = by["subtree"].set_index("subtree")
    assert sub.loc["travel", "busy"] == pytest.approx(7)
    assert sub.loc["travel/flights", "n_llm_calls"] == 2
    assert by["model"].set_index("model").loc["big", "input_tokens"] == 22
    assert str(by["task"]["input_tokens"].dtype) == "Int64"


def test_slowest_orders_by_duration(ws: al.Workspace) -> None:
    s, _ = run_clocked(ws, "slow", [w("a", 2), w("b", 7), w("c", 0.5), w("d", 3)])
    with s:
        top = an.slowest(s, 2)
    assert list(top["task_id"]) == ["b", "d"]
    assert list(top["duration"]) == pytest.approx([7.0, 3.0])


def test_compare_finds_exactly_the_tasks_a_fork_changed(ws: al.Workspace) -> None:
    tasks = [
        w("a", 1, out="a"), w("b", 2, ["a"], out="b"), w("c", 1, ["b"]),
        w("d", 3, out="d"),
        {"id": "e", "tool": "echo", "args": {"value": "${b.result}"}},
    ]  # fmt: skip
    parent, clock = run_clocked(ws, "parent", tasks)
    fork = parent.fork(at="b", name="fork")
    # v2 of the tool: upper-cases its output, and "b" now takes three times longer.
    fork.update_tools(make_work_v2(clock, slow={"b": 3.0}))
    assert fork.run().status == "succeeded"
    emit(fork, "llm_call", "e", model="m", cost_usd=0.25)
    with parent, fork:
        diff = an.compare(parent, fork).set_index("task_id")
        full = an.compare(parent, fork, only_changed=False)
        same = an.compare(parent, parent)
        reused = an.tasks_df(fork).set_index("task_id")["reused"]
    assert list(diff.index) == ["b", "e"]  # c re-ran with the same result and time
    assert diff.loc["b", "changes"] == ["result", "duration"]
    assert (diff.loc["b", "duration_a"], diff.loc["b", "duration_b"]) == (
        pytest.approx(2.0), pytest.approx(6.0)
    )  # fmt: skip
    assert diff.loc["e", "changes"] == ["result", "cost"]
    assert (diff.loc["e", "cost_a"], diff.loc["e", "cost_b"]) == (0.0, 0.25)
    assert diff["result_changed"].all()
    assert list(full["task_id"]) == ["a", "b", "c", "d", "e"]
    assert same.empty
    assert reused.to_dict() == {"a": True, "b": False, "c": False, "d": True,
                                "e": False}  # fmt: skip


def test_compare_flags_added_removed_and_status(ws: al.Workspace) -> None:
    one = ws.new_session(plan={"tasks": [w("a", 1), w("b", 1)]},
                         tools=[make_work(Clock())], name="one")  # fmt: skip
    two = ws.new_session(plan={"tasks": [w("a", 1), w("z", 1)]},
                         tools=[make_work(Clock())], name="two")  # fmt: skip
    with one, two:
        two.run()
        diff = an.compare(one, two).set_index("task_id")
    assert diff["changes"].to_dict() == {
        "a": ["status", "result", "duration"], "b": ["removed"], "z": ["added"]
    }  # fmt: skip


def test_plan_diff_lists_each_patch(ws: al.Workspace) -> None:
    s, _ = run_clocked(ws, "patched", [w("a", 1), w("c", 1)])
    with s:
        emit(s, "plan_patched", None, version=2, added=["x", "y"],
             removed=["c"], reason="c failed")  # fmt: skip
        emit(s, "plan_patched", None, version=3, changed={"x": {"tool": ["a", "b"]}},
             rewired={"y": ["x"]})  # fmt: skip
        pdiff = an.plan_diff(s)
    rows = [(r.version, r.change, r.task_id) for r in pdiff.itertuples()]
    assert rows == [(2, "added", "x"), (2, "added", "y"), (2, "removed", "c"),
                    (3, "changed", "x"), (3, "rewired", "y")]  # fmt: skip
    assert list(pdiff["reason"].fillna("-")) == ["c failed"] * 3 + ["-"] * 2
    assert pdiff["seq"].is_monotonic_increasing


def test_decisions_collect_htn_replans_approvals_skips_and_retries(
    ws: al.Workspace,
) -> None:
    @al.tool(side_effect="write")
    def post(text: str) -> str:
        return text

    plan = {
        "tasks": [
            {"id": "p", "tool": "post", "args": {"text": "hi"}},
            {"id": "b", "tool": "boom"},
            {"id": "k", "tool": "boom"},
        ]
    }
    with ws.new_session(plan=plan, tools=[post, *BASIC_TOOLS], name="dec", **FAST) as s:
        emit(s, "htn_decision", None, compound="trip", method="by_train",
             decision="rejected", reason="no station")  # fmt: skip
        emit(
            s, "htn_decision", None, compound="trip", method="by_car", decision="chosen"
        )
        s.run()
        s.approve("p", {"text": "hello"}, by="ann")
        s.skip("k", "not needed")
        s.retry("b")
        emit(s, "plan_patched", None, version=2, added=["z"], removed=["b"],
             reason="b keeps failing")  # fmt: skip
        dec = an.decisions(s)
    got = [(r.kind, r.subject, r.decision) for r in dec.itertuples()]
    assert got == [
        ("htn", "trip", "rejected"), ("htn", "trip", "chosen"),
        ("approval", "p", "granted"), ("skip", "k", "skipped"),
        ("retry", "b", "retried"), ("replan", "plan v2", "patched"),
    ]  # fmt: skip
    detail = dict(
        zip(dec["subject"] + "/" + dec["decision"], dec["detail"], strict=True)
    )
    assert detail["trip/rejected"] == "method by_train; no station"
    assert detail["p/granted"] == 'edited args: {"text": "hello"}'
    assert detail["plan v2/patched"] == "+1 -1 tasks; b keeps failing"
    assert dec.set_index("subject").loc["p", "by"] == "ann"


def test_helpers_take_frames_too_and_refuse_several_sessions(ws: al.Workspace) -> None:
    s, _ = run_clocked(ws, "x", [w("a", 2), w("b", 1, ["a"])])
    t, _ = run_clocked(ws, "y", [w("a", 1)])
    with s, t:
        fr = an.frames(ws)
        with pytest.raises(ValueError, match=r"hold 2 sessions .*frames\.session"):
            an.critical_path(fr)
        pd.testing.assert_frame_equal(
            an.critical_path(fr.session("x")), an.critical_path(s)
        )
        pd.testing.assert_frame_equal(an.slowest(fr.session(t.id)), an.slowest(t))
        with pytest.raises(KeyError, match="no session 'z'"):
            fr.session("z")
    assert json.loads(fr.session("x").tasks["deps"].iloc[1]) == ["a"]


def test_a_fork_that_replays_its_parent_changes_nothing(ws: al.Workspace) -> None:
    tasks = [w("a", 1, out="a"), w("b", 2, ["a"], out="b"), w("c", 1, ["b"])]
    parent, _ = run_clocked(ws, "p", tasks)
    fork = parent.fork(at="b", name="replay")
    assert fork.run().status == "succeeded"  # same code, same inputs: replayed
    with parent, fork:
        assert an.compare(parent, fork).empty
        t = an.tasks_df(fork).set_index("task_id")
        a = an.attempts_df(fork)
        cp = an.critical_path(fork)
    assert t["reused"].all() and a.empty
    assert cp["cum_duration"].iloc[-1] == 0.0
