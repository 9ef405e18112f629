"""Quick sync tools on the event loop (``Tool.inline``, runtime/executor.py).

Which thread a call ran on is observable from inside the tool, so each test
records it and asserts where the calls went, through a real Session.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import argus_lab as al
from argus_lab.runtime import executor
from argus_lab.runtime.executor import INLINE_AFTER
from argus_lab.runtime.options import idempotency_key, input_hash
from tests.conftest import chain_plan

BUDGET = 0.05
"""The inline budget in these tests: far above a quick call, even on a busy
machine that preempts one, so which calls count as quick is not left to luck."""


@pytest.fixture(autouse=True)
def _roomy_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "INLINE_BUDGET_S", BUDGET)


def chain(n: int, tool: str = "where") -> dict[str, object]:
    return chain_plan(n, tool, goal="inline")


def recorder(**options: object) -> tuple[al.Tool, list[str]]:
    seen: list[str] = []

    def where(i: int) -> int:
        seen.append(threading.current_thread().name)
        return i

    return al.tool(name="where", **options)(where), seen  # type: ignore[call-overload]


def on_loop(name: str) -> bool:
    return name.startswith("argus-") and not name.startswith("argus-tool")


def test_a_quick_side_effect_free_tool_goes_inline_after_a_few_calls(
    ws: al.Workspace,
) -> None:
    tool, seen = recorder()
    s = ws.new_session(plan=chain(8), tools=[tool], name="auto")
    assert s.run().status == "succeeded"
    s.close()
    # The first calls run on tool threads and are timed; then the loop runs them.
    assert not any(on_loop(n) for n in seen[:INLINE_AFTER])
    assert all(on_loop(n) for n in seen[INLINE_AFTER:]), seen


@pytest.mark.parametrize(
    "options",
    [
        {"side_effect": "read"},
        {"timeout": 30.0},
        {"inline": False},
    ],
)
def test_tools_with_effects_a_timeout_or_inline_false_stay_on_threads(
    ws: al.Workspace, options: dict[str, object]
) -> None:
    tool, seen = recorder(**options)
    s = ws.new_session(plan=chain(8), tools=[tool], name="threads")
    assert s.run().status == "succeeded"
    s.close()
    assert len(seen) == 8 and not any(on_loop(n) for n in seen), seen


def test_inline_true_runs_every_call_on_the_loop(ws: al.Workspace) -> None:
    tool, seen = recorder(inline=True, side_effect="read")
    s = ws.new_session(plan=chain(3), tools=[tool], name="forced")
    assert s.run().status == "succeeded"
    s.close()
    assert len(seen) == 3 and all(on_loop(n) for n in seen), seen


def test_inline_true_refuses_a_timeout_or_an_async_function() -> None:
    def f() -> None:
        return None

    async def g() -> None:
        return None

    with pytest.raises(ValueError, match="inline=True is for quick sync"):
        al.tool(inline=True, timeout=1.0)(f)
    with pytest.raises(ValueError, match="inline=True is for quick sync"):
        al.tool(inline=True)(g)


def test_two_inline_calls_over_the_budget_send_the_tool_back_to_threads(
    ws: al.Workspace,
) -> None:
    seen: list[str] = []
    slow_from = INLINE_AFTER + 1  # the second call that runs inline

    def work(i: int) -> int:
        seen.append(threading.current_thread().name)
        if i in (slow_from, slow_from + 1):  # the workload is slow, not a wait
            end = time.perf_counter() + 3 * BUDGET
            while time.perf_counter() < end:
                pass
        return i

    tool = al.tool(name="work")(work)
    s = ws.new_session(plan=chain(10, "work"), tools=[tool], name="slow")
    assert s.run().status == "succeeded"
    s.close()
    # One slow call may be the machine preempting us: only two in a row count.
    assert on_loop(seen[slow_from]) and on_loop(seen[slow_from + 1])
    assert not any(on_loop(n) for n in seen[slow_from + 2 :]), seen


def test_a_call_that_fails_on_the_loop_is_run_again_on_a_thread(
    ws: al.Workspace,
) -> None:
    """Some code refuses to run inside an event loop (asyncio.run, sync wrappers
    of async clients): the auto-inlined call fails there, is repeated on a
    thread (harmless: side_effect="none") and succeeds; the tool stays there."""
    seen: list[str] = []

    def sync_wrapper(i: int) -> int:
        seen.append(threading.current_thread().name)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return i  # no loop in this thread: fine
        raise RuntimeError("cannot be called from a running event loop")

    tool = al.tool(name="wrapper")(sync_wrapper)
    s = ws.new_session(plan=chain(6, "wrapper"), tools=[tool], name="wrapper")
    assert s.run().status == "succeeded"
    assert [s.record(f"t{i}").result for i in range(6)] == list(range(6))
    s.close()
    # Call INLINE_AFTER + 1 ran on the loop, failed, and ran again on a thread.
    assert on_loop(seen[INLINE_AFTER]) and not on_loop(seen[INLINE_AFTER + 1])
    assert not any(on_loop(n) for n in seen[INLINE_AFTER + 1 :])
    assert len(seen) == 7


def test_an_inline_success_keeps_its_intent_in_the_record_on_disk(
    ws: al.Workspace,
) -> None:
    """An inline call's intent is never written on its own: its fields go
    into the success's record, which holds them exactly as a call on a thread
    leaves them (read back from disk, and as set fields of the model)."""
    tool, seen = recorder()
    s = ws.new_session(plan=chain(4), tools=[tool], name="intent")
    assert s.run().status == "succeeded"
    sid = s.id
    live = s.record("t3")  # the record made in memory, as committed
    s.close()
    assert {"status", "attempts", "started", "idempotency_key", "input_hash"} <= (
        live.model_fields_set
    )
    s = ws.open("intent", tools=[tool])
    assert on_loop(seen[-1])
    records = [s.record(f"t{i}") for i in range(4)]
    s.close()
    assert live == records[3]
    for i, rec in enumerate(records):  # t0 ran on a thread, t3 on the loop
        assert rec.status == "succeeded" and rec.attempts == 1 and rec.result == i
        assert rec.idempotency_key == idempotency_key(sid, rec.task_id, 0)
        assert rec.input_hash == input_hash("where", {"i": i})
        assert rec.started is not None and rec.ended is not None
        assert rec.started <= rec.ended and rec.next_attempt_at is None
        assert not rec.unsafe_intent and rec.tool_hash == tool.code_hash


def test_a_failure_on_the_loop_is_an_attempt_like_any_other(
    ws: al.Workspace,
) -> None:
    """A tool that fails while inline fails that attempt: it is counted, retried
    with backoff by the task's policy, and never repeated silently on a thread."""
    calls: list[str] = []

    def flaky(i: int) -> int:
        calls.append(threading.current_thread().name)
        if len(calls) == INLINE_AFTER + 1:  # the first call that runs inline
            raise al.TransientError("flaky once")
        return i

    tool = al.tool(name="flaky", retries=2)(flaky)
    s = ws.new_session(plan=chain(6, "flaky"), tools=[tool], name="flaky")
    assert s.run().status == "succeeded"
    failed_at = f"t{INLINE_AFTER}"
    assert s.record(failed_at).attempts == 2
    assert [e.task_id for e in s.events() if e.kind == "retry_scheduled"] == [failed_at]
    assert on_loop(calls[INLINE_AFTER])
    assert len(calls) == 7  # six tasks and one retry: nothing ran twice unseen
    s.close()


def test_a_call_moved_off_the_loop_shows_running_and_commits_its_intent_first(
    ws: al.Workspace,
) -> None:
    """A deferred intent is only sound while the loop is blocked by the call.
    Once a refused inline call goes to a thread, the loop runs on: the task
    must read "running" (a skip is refused, as for any attempt in flight) and
    its intent must be committed (record and task_started together) before
    the call, never left for another task's commit to carry alone."""
    entered = threading.Event()
    release = threading.Event()
    seen: list[str] = []

    def sync_wrapper(i: int) -> int:
        seen.append(threading.current_thread().name)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            if i == INLINE_AFTER:  # the call that was refused on the loop
                entered.set()
                assert release.wait(10)
            return i
        raise RuntimeError("cannot be called from a running event loop")

    tool = al.tool(name="wrapper")(sync_wrapper)
    s = ws.new_session(plan=chain(5, "wrapper"), tools=[tool], name="moved")
    fut = s.start()
    try:
        assert entered.wait(10)
        moved = f"t{INLINE_AFTER}"
        assert s.record(moved).status == "running"
        with pytest.raises(al.ArgusError, match="cannot be skipped"):
            s.skip(moved)
        other = ws.open("moved")  # what is stored now
        assert other.record(moved).status == "running"
        assert other.record(moved).attempts == 1
        starts = [
            e for e in other.events() if e.kind == "task_started" and e.task_id == moved
        ]
        assert len(starts) == 1
        other.close()
    finally:
        release.set()
    assert fut.result(10).status == "succeeded"
    assert s.record(f"t{INLINE_AFTER}").status == "succeeded"
    assert s.record(f"t{INLINE_AFTER}").attempts == 1
    starts = [e for e in s.events() if e.kind == "task_started"]
    assert sorted(e.task_id for e in starts) == [f"t{i}" for i in range(5)]
    s.close()


def test_inline_steps_run_in_the_run_loops_own_task(ws: al.Workspace) -> None:
    """A step that ends without awaiting needs no asyncio Task of its own: every
    inline call of a chain runs in one and the same task (the run's)."""
    tasks: list[int] = []

    def here(i: int) -> int:
        tasks.append(id(asyncio.current_task()))
        return i

    tool = al.tool(name="here", inline=True)(here)
    s = ws.new_session(plan=chain(20, "here"), tools=[tool], name="one-task")
    assert s.run().status == "succeeded"
    s.close()
    assert len(tasks) == 20 and len(set(tasks)) == 1


def test_a_long_inline_chain_still_lets_the_loop_serve_its_callbacks(
    ws: al.Workspace,
) -> None:
    """Inline steps follow one another without awaiting, but the run loop lets
    the event loop run now and then (engine.BREATHE_S): a callback scheduled
    early in the chain runs long before the chain ends."""
    n = 400
    done: list[int] = []
    served: list[int] = []

    def step(i: int) -> int:
        if i == 5:
            asyncio.get_running_loop().call_soon(lambda: served.append(len(done)))
        done.append(i)
        return i

    tool = al.tool(name="step", inline=True)(step)
    s = ws.new_session(plan=chain(n, "step"), tools=[tool], name="breathe")
    assert s.run().status == "succeeded"
    s.close()
    assert len(done) == n
    # BREATHE_S (2 ms) is tens of steps at most; far from the chain's end.
    assert served and 6 <= served[0] < n - 100, served
