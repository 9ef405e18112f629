"""A retry delay is committed with the task (``next_attempt_at``) and waited
out by whichever run comes next: the same session after a pause, or a reopen
after a crash or a kernel restart. It used to live only in the run's timer, so
the next run called the tool at once, under a server's retry-after."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from pathlib import Path

import argus_lab as al
from argus_lab.events import EventBase

RETRY_AFTER = 0.4
PLAN = {
    "goal": "g",
    "tasks": [
        {"id": "f", "tool": "flaky"},
        {"id": "after", "tool": "later", "args": {"x": "${f.result}"}},
    ],
}


def _tools(calls: list[float]) -> list[al.Tool]:
    @al.tool(retries=1)
    def flaky(*, ctx: al.ToolContext) -> str:
        calls.append(time.time())
        if ctx.attempt == 1:
            raise al.TransientError("rate limited", retry_after=RETRY_AFTER)
        return "ok"

    @al.tool
    def later(x: str) -> str:
        return x + "!"

    return [flaky, later]


def _paused_while_waiting(s: al.Session) -> None:
    """Runs ``s`` until its retry is scheduled, then pauses it."""
    scheduled = threading.Event()

    def seen(e: EventBase) -> None:
        if e.kind == "retry_scheduled":
            scheduled.set()

    s.subscribe(seen)
    run = s.start()
    assert scheduled.wait(30)
    s.pause("stopped while the retry waits")
    assert run.result(30).status == "paused"


def test_a_reopened_session_waits_out_a_retry_delay(tmp_path: Path) -> None:
    calls: list[float] = []
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(plan=PLAN, tools=_tools(calls), name="d", backoff=(0.01, 0.01))
    _paused_while_waiting(s)
    s.close()
    s2 = ws.open("d", tools=_tools(calls))  # as after a crash or a restart
    due = s2.record("f").next_attempt_at
    assert due is not None and due >= calls[0] + RETRY_AFTER
    assert s2.run().status == "succeeded"
    assert len(calls) == 2
    assert calls[1] >= due  # before: called at once, ~RETRY_AFTER too early
    assert s2.result("after") == "ok!"
    s2.close()
    ws.close()


def test_the_same_session_run_again_waits_out_a_retry_delay(tmp_path: Path) -> None:
    calls: list[float] = []
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(plan=PLAN, tools=_tools(calls), name="d", backoff=(0.01, 0.01))
    _paused_while_waiting(s)
    due = s.record("f").next_attempt_at
    assert due is not None
    stepped = s.step()  # a step waits it out too
    assert [(r.task_id, r.status) for r in stepped] == [("f", "succeeded")]
    assert len(calls) == 2 and calls[1] >= due
    assert s.run().status == "succeeded"
    s.close()
    ws.close()


def test_a_clock_set_back_between_runs_stretches_no_retry_delay(
    tmp_path: Path,
) -> None:
    # next_attempt_at is wall-clock time: set the clock back an hour between
    # runs (NTP step, a VM restored, a dead RTC battery) and it lies an hour
    # further ahead than the delay that set it. The next run waits at most
    # the delay itself, never the jump (it used to hang for the hour).
    calls: list[float] = []
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(plan=PLAN, tools=_tools(calls), name="d", backoff=(0.01, 0.01))
    _paused_while_waiting(s)
    s.close()
    s2 = ws.open("d", tools=_tools(calls), clock=lambda: time.time() - 3600)
    due = s2.record("f").next_attempt_at
    assert due is not None and due - (time.time() - 3600) > 3000  # an hour ahead
    t0 = time.monotonic()
    run = s2.start()
    try:
        res = run.result(30)  # a guard against the hang, not a synchronization
    except concurrent.futures.TimeoutError:
        s2.pause("the test gave up")
        raise AssertionError("the run waits out the clock's jump") from None
    finally:
        run.result(30)
        s2.close()
        ws.close()
    assert res.status == "succeeded" and len(calls) == 2
    assert time.monotonic() - t0 < RETRY_AFTER + 20
