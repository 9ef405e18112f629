"""Session behaviour: running, failures, retries, skip, fork, step, start, events."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import argus_lab as al
from tests.conftest import BASIC_TOOLS, FAST, add, boom, echo

DIAMOND = {
    "goal": "diamond",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1}},
        {"id": "b", "tool": "add", "args": {"a": "${a.result.sum}", "b": 10}},
        {"id": "c", "tool": "add", "args": {"a": "${a.result.sum}", "b": 100}},
        {
            "id": "d",
            "tool": "echo",
            "args": {"value": ["${b.result.sum}", "${c.result}"]},
        },
    ],
}


def kinds(s: al.Session) -> list[str]:
    return [e.kind for e in s.events()]


def test_run_passes_results_through_references(ws: al.Workspace) -> None:
    s = ws.new_session(plan=DIAMOND, tools=BASIC_TOOLS, name="d")
    res = s.run()
    assert res and res.status == "succeeded" and res.counts == {"succeeded": 4}
    assert s.result("d") == [12, {"sum": 102}]
    assert s.status == "succeeded"
    k = kinds(s)
    assert k[:3] == ["session_created", "plan_created", "resumed"]
    assert k[-1] == "session_succeeded"
    assert k.count("task_started") == 4 and k.count("task_succeeded") == 4
    seqs = [e.seq for e in s.events()]
    assert seqs == list(range(1, len(seqs) + 1))
    rec = s.record("b")
    assert rec.idempotency_key and rec.input_hash and rec.started <= rec.ended


def test_failure_blocks_descendants_while_independent_branches_go_on(
    ws: al.Workspace,
) -> None:
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "bad", "tool": "boom", "args": {"message": "venue burned down"}},
            {"id": "after_bad", "tool": "echo", "args": {"value": "${bad.result}"}},
            {"id": "later", "tool": "echo", "deps": ["after_bad"]},
            {"id": "ok", "tool": "add", "args": {"a": 1}},
            {"id": "after_ok", "tool": "echo", "args": {"value": "${ok.result}"}},
        ],
    }
    s = ws.new_session(plan=plan, tools=BASIC_TOOLS, name="f")
    res = s.run()
    assert res.status == "failed"
    assert "bad: venue burned down" in (res.reason or "")
    assert res.failed == {"bad": "venue burned down"}
    # The stored reason carries its counts (listings show only the reason);
    # the printed line shows them once.
    assert res.reason == "1 task(s) failed, 2 blocked — bad: venue burned down"
    assert str(res) == (
        "failed: 2 succeeded, 1 failed, 2 blocked — bad: venue burned down"
    )
    st = {t: r.status for t, r in s.records.items()}
    assert st == {
        "bad": "failed",
        "after_bad": "blocked",
        "later": "blocked",
        "ok": "succeeded",
        "after_ok": "succeeded",
    }
    assert s.record("bad").error_type == "ValueError"
    assert "ValueError: venue burned down" in (s.record("bad").traceback or "")
    assert s.record("bad").attempts == 1  # permanent errors are not retried
    # Retrying the failed task unblocks what it blocked.
    s.retry("bad")
    assert {s.record(t).status for t in ("bad", "after_bad", "later")} == {"pending"}
    assert s.record("bad").generation == 1
    assert s.run().status == "failed"  # boom still booms
    s.skip("bad", reason="done by hand")
    assert s.record("after_bad").status == "pending"
    res = s.run()
    # after_bad references the skipped task's result: it fails with a clear error.
    assert res.status == "failed"
    err = s.record("after_bad").error or ""
    assert "'bad' is skipped, so it has no result" in err
    # The way on names the task to retry: retrying after_bad alone fails again.
    assert "s.retry('bad')" in err and "skip the tasks that use it" in err
    s.skip("after_bad")
    assert s.run().status == "succeeded"


def test_transient_errors_retry_with_backoff_then_give_up(ws: al.Workspace) -> None:
    calls: list[int] = []

    @al.tool(retries=2)
    def flaky(*, ctx: al.ToolContext) -> str:
        calls.append(ctx.attempt)
        raise al.TransientError("rate limited", retry_after=0.001)

    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "f", "tool": "flaky"}]},
        tools=[flaky],
        name="t",
        **FAST,
    )
    res = s.run()
    assert calls == [1, 2, 3]
    assert res.status == "failed"
    assert "gave up after 3 attempt(s)" in res.failed["f"]
    retries = [e for e in s.events() if e.kind == "retry_scheduled"]
    assert [e.attempt for e in retries] == [1, 2]
    assert all(e.delay >= 0.001 for e in retries)
    keys = {getattr(e, "tool", None) for e in s.events() if e.kind == "task_started"}
    assert keys == {"flaky"}


def test_task_retries_override_the_tool_default(ws: al.Workspace) -> None:
    @al.tool(retries=5)
    def once(*, ctx: al.ToolContext) -> int:
        if ctx.attempt == 1:
            raise ConnectionError("reset by peer")  # counts as transient
        return ctx.attempt

    plan = {
        "goal": "g",
        "tasks": [
            {"id": "x", "tool": "once", "retries": 0},
            {"id": "y", "tool": "once", "retries": 1},
        ],
    }
    s = ws.new_session(plan=plan, tools=[once], name="o", **FAST)
    s.run()
    assert s.record("x").status == "failed" and s.record("y").status == "succeeded"
    assert s.result("y") == 2


def test_timeouts_are_transient_and_named(ws: al.Workspace) -> None:
    gate = asyncio.Event()

    @al.tool(timeout=0.05)
    async def hang() -> None:
        await gate.wait()  # never set: always times out

    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "h", "tool": "hang", "retries": 1}]},
        tools=[hang],
        name="h",
        **FAST,
    )
    res = s.run()
    assert res.failed["h"].startswith("tool 'hang' timed out after 0.05s")
    assert s.record("h").attempts == 2


def test_success_schema_failure_names_what_did_not_match(ws: al.Workspace) -> None:
    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": "a",
                "tool": "add",
                "args": {"a": 1},
                "success": {"type": "object", "required": ["sum", "proof"]},
            },
            {
                "id": "b",
                "tool": "add",
                "args": {"a": 1},
                "success": {
                    "type": "object",
                    "properties": {"sum": {"type": "integer", "minimum": 5}},
                },
            },
            {
                "id": "ok",
                "tool": "add",
                "args": {"a": 9},
                "success": {"properties": {"sum": {"minimum": 5}}},
            },
        ],
    }
    s = ws.new_session(plan=plan, tools=BASIC_TOOLS, name="s")
    s.run()
    assert "'proof' is a required property" in (s.record("a").error or "")
    assert "result['sum']: 2 is less than the minimum of 5" in (
        s.record("b").error or ""
    )
    assert s.record("ok").status == "succeeded"


def test_large_results_go_to_artifacts_and_still_reach_dependents(
    ws: al.Workspace,
) -> None:
    @al.tool
    def big() -> dict[str, Any]:
        return {"rows": ["x" * 100] * 2000}

    plan = {
        "goal": "g",
        "tasks": [
            {"id": "big", "tool": "big"},
            {"id": "n", "tool": "echo", "args": {"value": "${big.result.rows.1999}"}},
        ],
    }
    s = ws.new_session(plan=plan, tools=[big, echo], name="big")
    assert s.run().status == "succeeded"
    rec = s.record("big")
    assert (
        rec.result is None and rec.result_ref and rec.result_ref.startswith("sha256:")
    )
    assert ws.artifacts.path(rec.result_ref).exists()
    assert s.result("n") == "x" * 100
    s.close()
    with ws.open("big") as again:
        assert len(again.result("big")["rows"]) == 2000


def test_results_must_be_json(ws: al.Workspace) -> None:
    @al.tool
    def nan() -> float:
        return float("nan")

    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "n", "tool": "nan"}]},
        tools=[nan],
        name="nan",
    )
    s.run()
    assert "not JSON" in (s.record("n").error or "")


def test_a_run_without_its_tools_is_refused_and_commits_nothing(
    ws: al.Workspace,
) -> None:
    s = ws.new_session(plan=DIAMOND, tools=BASIC_TOOLS, name="m")
    s.close()
    with ws.open("m", tools=[echo]) as o:
        for call in (o.run, o.step):
            with pytest.raises(al.SessionStateError) as e:
                call()
            msg = str(e.value)
            assert "needs tools it was not given: 'add' (tasks 'a', 'b', 'c')" in msg
            assert "ws.open('m', tools=[...])" in msg and "nothing ran" in msg
            assert "s.update_tools(...)" in msg
        assert o.status == "created" and o.counts()["pending"] == 4
        assert [ev.kind for ev in o.events()] == ["session_created", "plan_created"]
    with ws.open("m", tools=BASIC_TOOLS) as o:
        assert o.run().status == "succeeded"  # no retry needed


def test_step_runs_the_ready_tasks_once(ws: al.Workspace) -> None:
    s = ws.new_session(plan=DIAMOND, tools=BASIC_TOOLS, name="st", concurrency=4)
    assert s.ready() == ["a"]
    assert [r.task_id for r in s.step()] == ["a"]
    assert s.status == "paused" and "stepping" in (s.reason or "")
    assert sorted(r.task_id for r in s.step()) == ["b", "c"]
    assert [r.task_id for r in s.step()] == ["d"]
    assert s.status == "succeeded"
    assert s.step() == []


def test_start_returns_at_once_and_pause_stops_new_tasks(ws: al.Workspace) -> None:
    release = threading.Event()
    started = threading.Event()

    @al.tool
    def slow(i: int) -> int:
        started.set()
        assert release.wait(30)
        return i

    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": f"t{i}",
                "tool": "slow",
                "args": {"i": i},
                **({"deps": [f"t{i - 1}"]} if i else {}),
            }
            for i in range(5)
        ],
    }
    s = ws.new_session(plan=plan, tools=[slow], name="bg")
    fut = s.start()
    assert started.wait(30)
    assert not fut.done() and s.status == "running"
    s.pause()
    release.set()
    res = fut.result(30)
    assert res.status == "paused" and res.reason == "paused by the user"
    assert s.record("t0").status == "succeeded" and s.record("t1").status == "pending"
    assert s.run().status == "succeeded"


def test_arun_from_async_code(ws: al.Workspace) -> None:
    s = ws.new_session(plan=DIAMOND, tools=BASIC_TOOLS, name="async")

    async def main() -> al.RunResult:
        return await s.arun()

    assert asyncio.run(main()).status == "succeeded"


def test_subscribe_sees_every_committed_event_in_order(ws: al.Workspace) -> None:
    s = ws.new_session(plan=DIAMOND, tools=BASIC_TOOLS, name="sub")
    seen: list[al.Event] = []
    unsubscribe = s.subscribe(seen.append)
    s.step()
    assert [e.kind for e in seen] == ["task_started", "task_succeeded", "paused"]
    unsubscribe()
    s.run()
    stored = s.events()
    assert [e.seq for e in seen] == [e.seq for e in stored][2:5]
    assert stored[-1].kind == "session_succeeded" and len(seen) == 3


def test_concurrency_limit_and_critical_path_first(ws: al.Workspace) -> None:
    running = 0
    peak = 0
    order: list[str] = []
    lock = threading.Lock()

    @al.tool
    async def work(name: str) -> str:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            order.append(name)
        await asyncio.sleep(0)
        with lock:
            running -= 1
        return name

    # A long chain c0..c5 and a wide fan w0..w9, all ready at the start.
    tasks = [
        {"id": f"w{i}", "tool": "work", "args": {"name": f"w{i}"}} for i in range(10)
    ]
    tasks += [
        {
            "id": f"c{i}",
            "tool": "work",
            "args": {"name": f"c{i}"},
            **({"deps": [f"c{i - 1}"]} if i else {}),
        }
        for i in range(6)
    ]
    s = ws.new_session(
        plan={"goal": "g", "tasks": tasks}, tools=[work], name="cp", concurrency=2
    )
    assert s.ready()[0] == "c0"  # longest remaining path first
    assert s.run().status == "succeeded"
    assert peak <= 2
    assert order[0] == "c0"


def test_fork_keeps_results_before_at_and_reruns_the_rest(ws: al.Workspace) -> None:
    s = ws.new_session(plan=DIAMOND, tools=BASIC_TOOLS, name="p")
    s.run()
    f = s.fork(at="b")
    assert f.name.startswith("p-fork-") and f.info.parent == s.id
    st = {t: r.status for t, r in f.records.items()}
    assert st == {"a": "succeeded", "c": "succeeded", "b": "pending", "d": "pending"}
    forked = next(e for e in f.events() if e.kind == "forked")
    assert forked.parent == s.id and sorted(forked.kept) == [
        "a",
        "c",
    ]
    assert f.run().status == "succeeded" and f.result("d") == s.result("d")
    assert f.record("a").attempts == 1  # a was not run again
    assert f.record("b").idempotency_key != s.record("b").idempotency_key
    none = s.fork(reuse="none", name="fresh")
    assert all(r.status == "pending" for r in none.records.values())
    with pytest.raises(al.ArgusError, match="already exists"):
        s.fork(name="fresh")


def test_dataframes_have_proper_dtypes(ws: al.Workspace) -> None:
    s = ws.new_session(plan=DIAMOND, tools=BASIC_TOOLS, name="df")
    s.run()
    t = s.tasks_df()
    assert list(t["task_id"]) == ["a", "b", "c", "d"]
    assert str(t["status"].dtype) == "category"
    assert str(t["attempts"].dtype) == "Int64"
    assert str(t["started"].dtype) == "datetime64[ns, UTC]"
    assert str(t["duration"].dtype) == "float64"  # seconds
    assert (t["duration"] >= 0).all()
    e = s.events_df()
    assert list(e["seq"]) == list(range(1, len(e) + 1))
    assert (
        str(e["kind"].dtype) == "category"
        and str(e["ts"].dtype) == "datetime64[ns, UTC]"
    )
    both = al.analysis.tasks_df(ws)
    assert len(both) == 4 and set(both["session_id"]) == {s.id}


def test_graph_carries_live_status(ws: al.Workspace) -> None:
    s = ws.new_session(plan=DIAMOND, tools=[add, echo, boom], name="g")
    s.step()
    g = s.graph
    assert g.nodes["a"]["status"] == "succeeded" and g.nodes["d"]["status"] == "pending"
    assert set(g.predecessors("d")) == {"b", "c"}


def test_bad_input_gets_clear_errors(ws: al.Workspace) -> None:
    s = ws.new_session(plan=DIAMOND, tools=BASIC_TOOLS, name="bad")
    with pytest.raises(KeyError, match="no task 'zz'"):
        s.retry("zz")
    with pytest.raises(al.ArgusError, match="only failed"):
        s.retry("a")
    with pytest.raises(al.PlanError, match="needs a plan"):
        ws.new_session(goal="nothing")
    with pytest.raises(al.PlanError, match="unknown argument"):
        ws.new_session(
            plan={"goal": "g", "tasks": [{"id": "x", "tool": "add", "args": {"z": 1}}]},
            tools=BASIC_TOOLS,
        )
    with pytest.raises(al.ArgusError, match="already exists"):
        ws.new_session(plan=DIAMOND, tools=BASIC_TOOLS, name="bad")
    with pytest.raises(ValueError, match="session name"):
        ws.new_session(plan=DIAMOND, tools=BASIC_TOOLS, name="has space")
    with pytest.raises(TypeError, match="session options are"):
        ws.new_session(plan=DIAMOND, tools=BASIC_TOOLS, concurency=2)
    with pytest.raises(KeyError, match="recent: bad"):
        ws.open("nope")
    assert [i.name for i in ws.sessions()] == ["bad"]  # nothing half-created


def test_a_timed_out_non_idempotent_write_is_in_doubt_not_retried(
    ws: al.Workspace,
) -> None:
    calls: list[int] = []

    @al.tool(side_effect="write", timeout=0.05, retries=3)
    async def pay() -> None:
        calls.append(1)
        await asyncio.Event().wait()  # hangs: the payment may or may not go through

    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "p", "tool": "pay"}]},
        tools=[pay],
        name="pay",
        approvals=[],
    )
    res = s.run()
    assert res.status == "paused" and "may or may not have taken effect" in (
        res.reason or ""
    )
    assert s.record("p").status == "in_doubt" and calls == [1]  # never re-sent
