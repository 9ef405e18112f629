"""Breakpoints: a run pauses before a task; the next run goes on from it."""

from __future__ import annotations

import argus_lab as al
from tests.conftest import add

CHAIN = {
    "goal": "g",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1}},
        {"id": "b", "tool": "add", "args": {"a": "${a.result.sum}"}},
        {"id": "c", "tool": "add", "args": {"a": "${b.result.sum}"}},
    ],
}


def test_breakpoint_pauses_before_the_task_and_continue_passes_it(
    ws: al.Workspace,
) -> None:
    s = ws.new_session(plan=CHAIN, tools=[add], name="bp")
    s.set_breakpoint("b")
    assert s.breakpoints == ["b"] and not s.running
    res = s.run()
    assert res.status == "paused" and res.reason == (
        "breakpoint before task 'b'; run() or step() goes on from it"
    )
    assert s.record("a").status == "succeeded" and s.record("b").status == "pending"
    assert [r.task_id for r in s.step()] == ["b"]  # continue: b runs now
    assert s.run().status == "succeeded"
    s.close()
    with ws.open("bp") as again:  # committed with the session
        assert again.breakpoints == ["b"]
        again.set_breakpoint("b", on=False)
        assert again.breakpoints == []


def test_running_is_true_during_a_background_run(ws: al.Workspace) -> None:
    import threading

    seen: list[bool] = []
    gate = threading.Event()

    @al.tool
    def wait() -> int:
        assert gate.wait(30)
        return 1

    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "w", "tool": "wait"}]},
        tools=[wait],
        name="r",
    )
    started = threading.Event()
    s.subscribe(lambda e: started.set() if e.kind == "task_started" else None)
    fut = s.start()
    assert started.wait(30)
    seen.append(s.running)
    gate.set()
    fut.result(30)
    assert seen == [True] and not s.running
