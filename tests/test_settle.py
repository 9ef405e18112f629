"""The settler (argus_lab/runtime/settle.py) over a real state and store, without a
Session: what each decision of the failure policy writes, in one commit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from argus_lab.runtime.outcome import Failed, ShutDown, Succeeded
from argus_lab.runtime.policy import FailurePolicy
from argus_lab.runtime.remember import MemoryFeed, Rememberer
from argus_lab.runtime.settle import Settler
from argus_lab.runtime.signals import Signals
from argus_lab.runtime.state import SessionState
from argus_lab.runtime.supervisor import Supervisor
from argus_lab.store.checkpoints import SessionStore
from tests.test_runtime_state import make_state

if TYPE_CHECKING:
    from argus_lab.store.memory import Memory

ERROR = Failed("error", "it broke", "ValueError")


Parts = tuple[SessionState, Settler, Signals]


def no_memory() -> Memory:
    raise AssertionError("these sessions write no memories")


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[Callable[..., Parts]]:
    """Makes a state over a real store, and a settler wired to it."""
    stores: list[SessionStore] = []

    def make(**options: Any) -> Parts:
        state, store = make_state(tmp_path, **options)
        stores.append(store)
        signals = Signals()
        settler = Settler(
            state,
            FailurePolicy(state.options.backoff),
            Supervisor(state, None),
            signals,
            MemoryFeed(state, Rememberer(no_memory), remember=False),
            state.options,
        )
        return state, settler, signals

    yield make
    for store in stores:
        store.close()


def kinds(state: SessionState) -> list[str]:
    return [e.kind for e in state.read_events()]


def test_giving_up_fails_the_task_and_blocks_what_waits_on_it(
    parts: Callable[..., Parts],
) -> None:
    state, s, _ = parts()
    before = state.version
    s.settle("a", state.records["a"], ERROR)
    assert state.version == before + 1  # one commit
    assert state.records["a"].status == "failed"
    assert state.records["a"].error_type == "ValueError"
    assert state.records["b"].status == "blocked"
    assert kinds(state) == ["task_failed", "task_blocked"]
    assert state.sched.status["a"] == "failed"


def test_on_failure_skip_skips_instead(parts: Callable[..., Parts]) -> None:
    state, s, _ = parts()
    state.tasks["a"] = state.tasks["a"].model_copy(update={"on_failure": "skip"})
    s.settle("a", state.records["a"], ERROR)
    assert state.records["a"].status == "skipped"
    assert state.records["b"].status == "pending"
    assert kinds(state) == ["task_failed", "task_skipped"]


def test_failures_in_a_row_pause_the_run_as_an_anomaly(
    parts: Callable[..., Parts],
) -> None:
    state, s, signals = parts(max_consecutive_failures=2)
    s.settle("b", state.records["b"], ERROR)
    assert signals.pause_requested is None
    s.settle("a", state.records["a"], ERROR)
    assert signals.pause_requested is not None
    assert "2 tasks failed in a row" in signals.pause_requested
    assert kinds(state)[-1] == "anomaly"


def test_a_large_result_goes_to_an_artifact(parts: Callable[..., Parts]) -> None:
    state, s, _ = parts(inline_result_bytes=10)
    big = {"text": "x" * 100}
    s.settle("a", state.records["a"], Succeeded(big, '{"text": "' + "x" * 100 + '"}'))
    rec = state.records["a"]
    assert rec.status == "succeeded" and rec.result is None
    assert rec.result_ref is not None
    assert state.stored_result(rec) == big


@pytest.mark.parametrize("attempt", [1, 2])
def test_a_transient_failure_waits_out_its_delay_then_is_ready(
    parts: Callable[..., Parts], attempt: int
) -> None:
    state, s, signals = parts(backoff=(0.01, 0.02))
    rec = state.records["a"].model_copy(update={"attempts": attempt})

    async def go() -> None:
        signals.wake = asyncio.Event()
        assert state.sched.pop() == "a"  # taken by the run loop, as in a run
        state.sched.set("a", "running")
        s.settle("a", rec, Failed("transient", "503", "TransientError"), retries=2)
        assert state.records["a"].status == "pending"
        assert "a" in state.timers and state.sched.peek_all() == []
        await asyncio.wait_for(signals.wake.wait(), 5)  # the timer fired
        assert state.sched.peek_all() == ["a"] and "a" not in state.timers

    asyncio.run(go())
    assert kinds(state) == ["retry_scheduled"]


def test_a_store_of_its_own_sees_the_same(parts: Callable[..., Parts]) -> None:
    state, s, _ = parts()
    s.settle("a", state.records["a"], ERROR)
    other = SessionStore(state.path, "s1")
    try:
        assert other.load().records["b"].status == "blocked"
    finally:
        other.close()


def test_a_shutdown_leaves_a_begun_attempt_as_its_intent(
    parts: Callable[..., Parts],
) -> None:
    state, s, signals = parts()
    running = state.records["a"].model_copy(
        update={"status": "running", "attempts": 1, "idempotency_key": "k"}
    )
    state.commit([running])
    before = state.version
    s.settle("a", running, ShutDown("SIGTERM", started=True))
    assert state.version == before  # nothing written: the intent stands
    assert state.records["a"].status == "running"
    assert signals.left == ["a"]
    assert signals.pause_requested == "interrupted by a shutdown: SIGTERM"
    assert "left in flight: a" in signals.why_paused()
    assert "task_failed" not in kinds(state)


def test_a_shutdown_before_the_call_makes_the_task_pending_again(
    parts: Callable[..., Parts],
) -> None:
    state, s, signals = parts()
    running = state.records["a"].model_copy(update={"status": "running"})
    state.commit([running])
    s.settle("a", running, ShutDown("pool refused", started=False))
    assert state.records["a"].status == "pending"
    assert state.records["b"].status == "pending"  # nothing blocked
    assert kinds(state) == ["resumed"]
    assert signals.left == []
    assert signals.pause_requested is not None
