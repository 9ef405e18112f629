"""Budgets: a run pauses before a step that would cross a limit; raising it resumes."""

from __future__ import annotations

import pytest

import argus_lab as al
from argus_lab.model import Budget
from tests.conftest import FAST, add

CHAIN = {
    "goal": "chain",
    "tasks": [
        {
            "id": f"t{i}",
            "tool": "add",
            "args": {"a": i},
            **({"deps": [f"t{i - 1}"]} if i else {}),
        }
        for i in range(5)
    ],
}


def test_session_step_budget_pauses_then_resumes(ws: al.Workspace) -> None:
    s = ws.new_session(plan=CHAIN, tools=[add], name="b", budget=Budget(max_steps=2))
    res = s.run()
    assert res.status == "paused"
    assert "budget exceeded: session max_steps=2" in (res.reason or "")
    assert "s.set_budget('session', max_steps=...)" in (res.reason or "")
    assert [s.record(f"t{i}").status for i in range(5)] == [
        "succeeded",
        "succeeded",
        "pending",
        "pending",
        "pending",
    ]
    hit = next(e for e in s.events() if e.kind == "budget_exceeded")
    assert hit.task_id == "t2" and hit.used == 2
    s.close()
    with ws.open("b", tools=[add]) as again:  # the budget and usage were committed
        assert again.run().status == "paused"
        again.set_budget(max_steps=5)
        assert again.run().status == "succeeded"
        assert again.info.budgets["session"].max_steps == 5


def test_task_and_subtree_budgets(ws: al.Workspace) -> None:
    @al.tool(retries=5)
    def flaky(*, ctx: al.ToolContext) -> int:
        if ctx.attempt < 4:
            raise al.TransientError("again")
        return ctx.attempt

    plan = {
        "goal": "g",
        "tasks": [
            {"id": "grp/a", "tool": "flaky", "parent": "grp"},
            {"id": "other", "tool": "add", "args": {"a": 1}},
        ],
    }
    s = ws.new_session(plan=plan, tools=[flaky, add], name="t", **FAST)
    s.set_budget("task:grp/a", max_steps=2)
    res = s.run()
    assert res.status == "paused" and "task:grp/a max_steps=2" in (res.reason or "")
    assert s.record("other").status == "succeeded"
    s.set_budget("task:grp/a", max_steps=None)
    s.set_budget("subtree:grp", max_steps=3)
    res = s.run()
    assert "subtree:grp max_steps=3" in (res.reason or "")
    s.set_budget("subtree:grp", max_steps=10)
    assert s.run().status == "succeeded" and s.result("grp/a") == 4


def test_bad_budget_input(ws: al.Workspace) -> None:
    s = ws.new_session(plan=CHAIN, tools=[add], name="bad")
    with pytest.raises(ValueError, match="budget scope"):
        s.set_budget("everything", max_steps=1)
    with pytest.raises(KeyError, match="no task 'zz'"):
        s.set_budget("task:zz", max_steps=1)
    with pytest.raises(TypeError, match="unknown budget limit 'max_money'"):
        s.set_budget(max_money=1)


@pytest.mark.parametrize("limit", [1, 5, 9, 13])
def test_a_step_budget_holds_for_a_fan_out_of_inline_calls_and_grouped_intents(
    ws: al.Workspace, limit: int
) -> None:
    """Tasks starting together (intents in one commit) and quick calls on the
    loop (intents deferred) are counted one step each: the run makes exactly
    ``limit`` calls, the stored usage says so, and raising the limit does the
    rest, each task once."""
    calls: list[str] = []

    @al.tool(inline=True)
    def look(i: int) -> int:
        calls.append(f"l{i}")
        return i

    @al.tool(side_effect="write", idempotent=True)
    def put(i: int) -> int:
        calls.append(f"p{i}")
        return i

    tasks = [
        {"id": f"{k[0]}{i}", "tool": k, "args": {"i": i}}
        for i in range(8)
        for k in ("look", "put")
    ]
    s = ws.new_session(
        plan={"goal": "fan", "tasks": tasks},
        tools=[look, put],
        name=f"f{limit}",
        approvals=(),
        concurrency=6,
        budget=Budget(max_steps=limit),
    )
    res = s.run()
    assert res.status == "paused" and f"max_steps={limit}" in (res.reason or "")
    assert len(calls) == limit, calls
    assert s.usage["steps"] == limit
    s.close()
    s = ws.open(f"f{limit}", tools=[look, put], approvals=())
    assert s.usage["steps"] == limit
    assert sum(r.attempts for r in s.records.values()) == limit
    s.set_budget("session", max_steps=100)
    assert s.run().status == "succeeded"
    assert sorted(calls) == sorted(t["id"] for t in tasks)
    assert s.usage["steps"] == len(tasks)
    s.close()
