"""Failure policies (skip, ask, fallback) and anomaly triggers."""

from __future__ import annotations

import threading

import argus_lab as al
from tests.conftest import BASIC_TOOLS, FAST


@al.tool
def cheap(query: str) -> dict[str, str]:
    """A degraded but working tool."""
    return {"answer": f"cheap:{query}"}


@al.tool
def fancy(query: str) -> dict[str, str]:
    """The preferred tool, broken today."""
    raise RuntimeError("fancy service is down")


def test_fallback_degrades_to_another_tool_and_patches_the_plan(
    ws: al.Workspace,
) -> None:
    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": "q",
                "tool": "fancy",
                "args": {"query": "x"},
                "on_failure": "fallback",
                "fallback": "cheap",
            },
            {"id": "use", "tool": "echo", "args": {"value": "${q.result.answer}"}},
        ],
    }
    s = ws.new_session(plan=plan, tools=[fancy, cheap, *BASIC_TOOLS], name="fb")
    assert s.run().status == "succeeded"
    assert s.result("use") == "cheap:x"
    assert s.plan.task("q").tool == "cheap" and s.info.plan_version == 2
    patch = next(e for e in s.events() if e.kind == "plan_patched")
    assert patch.changed == {"q": {"tool": ["fancy", "cheap"]}}
    assert "fancy service is down" in patch.reason
    assert s.record("q").generation == 1 and s.record("q").attempts == 2


def test_fallback_to_an_unknown_tool_is_a_plan_error(ws: al.Workspace) -> None:
    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": "q",
                "tool": "fancy",
                "args": {"query": "x"},
                "on_failure": "fallback",
                "fallback": "nope",
            }
        ],
    }
    try:
        ws.new_session(plan=plan, tools=[fancy], name="x")
    except al.PlanError as e:
        assert "falls back to tool 'nope'" in e.message
    else:
        raise AssertionError("expected a PlanError")


def test_skip_policy_lets_dependents_go_on(ws: al.Workspace) -> None:
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "opt", "tool": "boom", "on_failure": "skip"},
            {"id": "next", "tool": "add", "args": {"a": 1}, "deps": ["opt"]},
        ],
    }
    s = ws.new_session(plan=plan, tools=BASIC_TOOLS, name="sk")
    assert s.run().status == "succeeded"
    assert s.record("opt").status == "skipped" and "boom" in (
        s.record("opt").error or ""
    )
    assert s.record("next").status == "succeeded"


def test_ask_policy_pauses_for_a_person(ws: al.Workspace) -> None:
    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": "risky",
                "tool": "boom",
                "args": {"message": "disk full"},
                "on_failure": "ask",
            },
            {"id": "after", "tool": "add", "args": {"a": 1}, "deps": ["risky"]},
        ],
    }
    s = ws.new_session(plan=plan, tools=BASIC_TOOLS, name="ask")
    res = s.run()
    assert res.status == "paused"
    assert "'risky' failed and asks a person: disk full" in (res.reason or "")
    s.skip("risky")
    assert s.run().status == "succeeded"


def test_consecutive_failures_are_an_anomaly(ws: al.Workspace) -> None:
    plan = {
        "goal": "g",
        "tasks": [{"id": f"b{i}", "tool": "boom"} for i in range(4)]
        + [{"id": "ok", "tool": "add", "args": {"a": 1}, "deps": ["b3"]}],
    }
    s = ws.new_session(
        plan=plan,
        tools=BASIC_TOOLS,
        name="an",
        concurrency=1,
        max_consecutive_failures=3,
    )
    res = s.run()
    assert res.status == "paused" and "3 tasks failed in a row" in (res.reason or "")
    anomaly = next(e for e in s.events() if e.kind == "anomaly")
    assert anomaly.what == "consecutive_failures"
    statuses = sorted(s.record(f"b{i}").status for i in range(4))
    assert statuses == ["failed", "failed", "failed", "pending"]  # nothing new started
    assert s.run().status == "failed"  # going on is the person's call


def test_an_attempt_far_over_its_expected_time_is_an_anomaly(ws: al.Workspace) -> None:
    release = threading.Event()

    @al.tool
    async def slowpoke() -> str:
        import asyncio

        while not release.is_set():
            await asyncio.sleep(0.01)
        return "done"

    plan = {
        "goal": "g",
        "tasks": [
            {"id": "slow", "tool": "slowpoke", "expected_seconds": 0.01},
            {"id": "next", "tool": "add", "args": {"a": 1}, "deps": ["slow"]},
        ],
    }
    s = ws.new_session(
        plan=plan,
        tools=[slowpoke, *BASIC_TOOLS],
        name="slow",
        anomaly_factor=2.0,
        **FAST,
    )
    seen = threading.Event()
    s.subscribe(lambda e: (seen.set(), release.set()) if e.kind == "anomaly" else None)
    res = s.run()
    assert seen.is_set()
    assert res.status == "paused" and "anomaly: task 'slow' has run over" in (
        res.reason or ""
    )
    assert s.record("slow").status == "succeeded"  # it finished; nothing new started
    assert s.record("next").status == "pending"
    assert s.run().status == "succeeded"


def test_rejection_is_not_backtracked_or_degraded(ws: al.Workspace) -> None:
    @al.tool(side_effect="write")
    def send() -> None:
        """A write."""

    plan = {"goal": "g", "tasks": [{"id": "w", "tool": "send", "on_failure": "skip"}]}
    s = ws.new_session(plan=plan, tools=[send], name="rej")
    s.run()
    s.reject("w", "no")
    assert s.record("w").status == "failed"  # on_failure=skip does not override a no
