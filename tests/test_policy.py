"""The failure policy (argus_lab/runtime/policy.py) on its own: outcome in,
decision out, no session, no store, no clock."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import argus_lab as al
from argus_lab.runtime.budget import BudgetHit
from argus_lab.runtime.outcome import (
    Failed,
    InDoubt,
    Interrupted,
    OverBudget,
    Rejected,
    Succeeded,
    TimedOut,
)
from argus_lab.runtime.policy import (
    Accept,
    AskInDoubt,
    FailurePolicy,
    GiveUp,
    Rerun,
    RetryLater,
    StopForBudget,
)

POLICY = FailurePolicy(backoff=(1.0, 30.0))
ERROR = Failed("error", "it broke", "ValueError")
TRANSIENT = Failed("transient", "503", "TransientError")


def task(**kw: Any) -> al.Task:
    return al.Task(id=kw.pop("id", "t"), tool=kw.pop("tool", "work"), **kw)


def decide(out: Any, t: al.Task | None = None, **kw: Any) -> Any:
    kw.setdefault("attempt", 1)
    kw.setdefault("retries", 0)
    kw.setdefault("jitter", 0.5)
    return POLICY.decide(t or task(), out, **kw)


@al.tool
def read(x: int = 0) -> int:
    return x


@al.tool(side_effect="write")
def send(x: int = 0) -> int:
    return x


@al.tool(side_effect="write", idempotent=True)
def put(x: int = 0) -> int:
    return x


def test_a_success_is_kept() -> None:
    assert decide(Succeeded(1, "1")) == Accept()


@pytest.mark.parametrize("out", [TRANSIENT, TimedOut("tool 'work' timed out")])
def test_transient_failures_retry_while_attempts_are_left(out: Any) -> None:
    assert isinstance(decide(out, attempt=1, retries=2), RetryLater)
    assert isinstance(decide(out, attempt=2, retries=2), RetryLater)
    last = decide(out, attempt=3, retries=2)
    assert isinstance(last, GiveUp)
    assert last.outcome.error == f"{out.error} (gave up after 3 attempt(s))"
    assert (last.then, last.ask, last.counted, last.remedies) == (
        "fail",
        False,
        True,
        (),
    )


def test_a_permanent_failure_is_never_retried() -> None:
    d = decide(ERROR, attempt=1, retries=5)
    assert isinstance(d, GiveUp)
    assert d.outcome == ERROR  # its message untouched


def test_retry_delays_double_up_to_the_cap_with_jitter() -> None:
    delays = [
        POLICY.retry_delay(n, None, jitter=1.0) for n in range(1, 8)
    ]  # no jitter left: 1, 2, 4, ... capped at 30
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert POLICY.retry_delay(1, None, jitter=0.0) == 0.5  # jitter halves at most


def test_a_servers_retry_after_is_honoured() -> None:
    out = Failed("transient", "429", "TransientError", retry_after=45.0)
    d = decide(out, retries=1)
    assert d == RetryLater(45.0)  # longer than the cap: still honoured


@given(
    attempt=st.integers(1, 40),
    jitter=st.floats(0.0, 1.0, exclude_max=True),
    retry_after=st.none() | st.floats(0.0, 1000.0),
)
def test_every_delay_is_within_backoff_bounds(
    attempt: int, jitter: float, retry_after: float | None
) -> None:
    delay = POLICY.retry_delay(attempt, retry_after, jitter)
    step = min(30.0, 2.0 ** (attempt - 1))
    assert delay >= step / 2
    assert delay <= max(step, retry_after or 0.0)
    assert delay >= (retry_after or 0.0)


def test_in_doubt_asks_a_person_naming_the_task() -> None:
    d = decide(InDoubt("the cluster lost a write"))
    assert isinstance(d, AskInDoubt)
    assert "task 't' is in doubt: the cluster lost a write" in d.reason
    assert "s.retry('t')" in d.reason and "s.skip('t')" in d.reason


def test_a_budget_hit_inside_the_attempt_stops_for_budget() -> None:
    hit = BudgetHit("session", "max_cost_usd", 1.0, 0.9, 0.2)
    assert decide(OverBudget(hit, hit.message())) == StopForBudget(hit)


@pytest.mark.parametrize("on_failure", ["fail", "skip", "ask", "fallback", "replan"])
def test_a_rejection_stands_whatever_the_task_says(on_failure: str) -> None:
    t = task(on_failure=on_failure, fallback="other", parent="trip")
    d = decide(Rejected("rejected by ann: no", by="ann"), t, can_repair=True)
    assert d == GiveUp(
        Rejected("rejected by ann: no", by="ann"),
        (),
        "fail",
        ask=False,
        counted=False,
    )


@pytest.mark.parametrize(
    ("kw", "remedies", "then", "ask"),
    [
        ({}, (), "fail", False),
        ({"on_failure": "skip"}, (), "skip", False),
        ({"on_failure": "ask"}, (), "fail", True),
        ({"on_failure": "fallback", "fallback": "other"}, ("fallback",), "fail", False),
        ({"on_failure": "fallback", "fallback": "work"}, (), "fail", False),
        ({"on_failure": "fallback"}, (), "fail", False),
        ({"on_failure": "replan", "can_replan": True}, ("replan",), "fail", False),
        ({"on_failure": "replan"}, (), "fail", False),
        ({"parent": "trip", "can_repair": True}, ("repair",), "fail", False),
        ({"parent": "trip"}, (), "fail", False),
        ({"can_repair": True}, (), "fail", False),  # not in a compound
        (
            {
                "parent": "trip",
                "can_repair": True,
                "on_failure": "fallback",
                "fallback": "other",
            },
            ("repair", "fallback"),
            "fail",
            False,
        ),
    ],
)
def test_giving_up_tries_the_remedies_the_task_and_planner_allow(
    kw: dict[str, Any], remedies: tuple[str, ...], then: str, ask: bool
) -> None:
    caps = {k: kw.pop(k) for k in ("can_repair", "can_replan") if k in kw}
    d = decide(ERROR, task(**kw), **caps)
    out = ERROR
    if kw.get("on_failure") == "replan" and not caps:  # the error says why not
        out = dataclasses.replace(
            ERROR,
            error="it broke (on_failure is 'replan', but the session has no "
            "planner that replans: pass planner=al.LLMPlanner(model) to "
            "ws.new_session or ws.open)",
        )
    assert d == GiveUp(out, remedies, then, ask=ask, counted=True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tool", "decision"),
    [(read, Rerun), (put, Rerun), (send, AskInDoubt), (None, AskInDoubt)],
)
def test_an_interrupted_attempt_reruns_only_when_that_is_safe(
    tool: al.Tool | None, decision: type
) -> None:
    t = task(tool="send" if tool is None else tool.name)
    d = POLICY.after_interrupt(t, Interrupted(2), tool, {})
    assert isinstance(d, decision)
    if isinstance(d, AskInDoubt):
        assert "interrupted during attempt 2" in d.reason
        assert "s.retry('t')" in d.reason


def test_an_llm_task_that_may_have_been_writing_is_in_doubt() -> None:
    t = al.Task(id="t", kind="llm", llm_tools=["read", "send"])
    tools = {"read": read, "send": send}
    assert isinstance(
        POLICY.after_interrupt(t, Interrupted(1), read, tools), AskInDoubt
    )
    safe = t.model_copy(update={"llm_tools": ["read", "put"]})
    tools["put"] = put
    assert POLICY.after_interrupt(safe, Interrupted(1), read, tools) == Rerun()


def test_an_interrupted_attempt_is_rerun_only_so_many_times_in_a_row() -> None:
    """A tool that kills its own process would otherwise run at every resume."""
    from argus_lab.runtime.policy import INTERRUPTED_RERUNS

    t = task(tool="read")
    n = INTERRUPTED_RERUNS
    assert POLICY.after_interrupt(t, Interrupted(9), read, {}, in_a_row=n) == Rerun()
    d = POLICY.after_interrupt(t, Interrupted(9), read, {}, in_a_row=n + 1)
    assert isinstance(d, AskInDoubt)
    assert f"interrupted during attempt 9 of tool 'read', the {n + 1}th" in d.reason
    assert "s.retry('t')" in d.reason


def test_tasks_interrupted_together_get_more_reruns() -> None:
    from argus_lab.runtime.policy import INTERRUPTED_RERUNS_TOGETHER

    t, n = task(tool="read"), INTERRUPTED_RERUNS_TOGETHER
    together = {"in_a_row": n, "alone": False}
    assert POLICY.after_interrupt(t, Interrupted(9), read, {}, **together) == Rerun()
    d = POLICY.after_interrupt(t, Interrupted(9), read, {}, in_a_row=n + 1, alone=False)
    assert isinstance(d, AskInDoubt)
    assert "each time with other tasks running beside it" in d.reason
