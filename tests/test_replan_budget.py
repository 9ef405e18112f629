"""A replan is a paid model call: the budget counts it and stops it, and a
planner's ``max_replans`` bounds a session's replanning (a model that keeps
proposing tasks that fail would otherwise pay without end)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.llm import Price, Usage
from argus_lab.llm.testing import FunctionModel, tool_call

PRICES = {"scripted": Price(input=3.0, output=15.0, cache_write=3.75, cache_read=0.3)}
USAGE = Usage(input_tokens=1000, output_tokens=200)  # $0.006 a call


@al.tool
def book(venue: str) -> dict[str, str]:
    """Books a venue; only "v-ok" is open."""
    if venue != "v-ok":
        raise al.ToolError(f"{venue} closed")
    return {"booked": venue}


def _replanner(calls: list[int], ok_at: int | None = None) -> FunctionModel:
    def answer(req: Any) -> Any:
        calls.append(1)
        n = len(calls)
        venue = "v-ok" if ok_at is not None and n >= ok_at else f"v{n}"
        task = {"id": f"try{n}", "tool": "book", "args": {"venue": venue}}
        return tool_call(
            "submit_plan",
            {"goal": "x", "tasks": [{**task, "on_failure": "replan"}]},
        )

    return FunctionModel(answer, name="scripted", usage=USAGE, prices=PRICES)


PLAN = {
    "goal": "book a venue",
    "tasks": [
        {"id": "b", "tool": "book", "args": {"venue": "hall"}, "on_failure": "replan"}
    ],
}


def test_replans_are_counted_and_stopped_by_the_cost_budget(tmp_path: Path) -> None:
    calls: list[int] = []
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=PLAN,
        tools=[book],
        name="b",
        budget=al.Budget(max_cost_usd=0.02),
        planner=al.LLMPlanner(_replanner(calls, ok_at=5)),
    )
    res = s.run()
    # $0.006 a replan: three fit in $0.02, a fourth would cross it.
    assert len(calls) == 3, res
    assert res.status == "paused" and "budget exceeded" in (res.reason or "")
    assert "s.retry('try3')" in (res.reason or "")
    assert s.usage["cost_usd"] == pytest.approx(0.018)
    assert s.usage["tokens"] == 3 * 1200
    rec = s.record("try3")
    assert rec.status == "failed" and "its replan would cross the budget" in (
        rec.error or ""
    )
    kinds = [e.kind for e in s.events()]
    assert kinds.count("llm_call") == 3 and "budget_exceeded" in kinds
    # Counted durably: a reopen sees the same usage.
    s.close()
    s = ws.open("b", tools=[book], planner=al.LLMPlanner(_replanner(calls, ok_at=5)))
    assert s.usage["cost_usd"] == pytest.approx(0.018)
    # Raised, the person retries: the task fails again, its replan goes ahead.
    s.set_budget(max_cost_usd=1.0)
    s.retry("try3")
    res = s.run()
    assert res.status == "succeeded", res
    assert len(calls) == 5  # try4 failed, try5 booked
    assert s.usage["cost_usd"] == pytest.approx(0.030)
    s.close()


def test_max_replans_bounds_a_session_that_keeps_failing(tmp_path: Path) -> None:
    calls: list[int] = []
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=PLAN,
        tools=[book],
        name="b",
        planner=al.LLMPlanner(_replanner(calls), max_replans=2),
    )
    res = s.run()
    assert len(calls) == 2 and res.status == "failed", res
    rec = s.record("try2")
    assert rec.status == "failed"
    assert "not replanned: this session was replanned 2 times" in (rec.error or "")
    s.close()


def test_max_replans_must_be_a_count_or_none() -> None:
    model = _replanner([])
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="max_replans must be an int >= 0"):
            al.LLMPlanner(model, max_replans=bad)  # type: ignore[arg-type]
    assert al.LLMPlanner(model, max_replans=None).max_replans is None


def test_a_replan_whose_model_raises_leaves_the_failure_committed(
    tmp_path: Path,
) -> None:
    """A 529 from the planner's model escaped s.run(): the task's definite
    failure (card declined) was never committed, and a reopen put a payment
    that certainly did not happen in doubt."""
    from argus_lab.errors import ModelError

    @al.tool(side_effect="write")
    def charge(card: str) -> dict[str, str]:
        """Declines every card."""
        raise al.ToolError(f"card {card} declined")

    def overloaded(req: Any) -> Any:
        raise ModelError("anthropic: 529 overloaded")

    plan = {
        "goal": "pay",
        "tasks": [
            {
                "id": "pay",
                "tool": "charge",
                "args": {"card": "visa"},
                "on_failure": "replan",
            }
        ],
    }
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=plan,
        tools=[charge],
        name="b",
        planner=al.LLMPlanner(FunctionModel(overloaded)),
        approvals=[],
    )
    res = s.run()
    assert res.status == "failed" and s.record("pay").status == "failed", res
    assert "declined" in (s.record("pay").error or "")
    s.close()
    s = ws.open("b", tools=[charge])
    assert s.record("pay").status == "failed"  # not in doubt
    s.close()


def test_a_decomposers_model_calls_at_run_time_are_counted(tmp_path: Path) -> None:
    """An HTN LLMDecomposer asked while the session runs (a lazy compound)
    was paid for and counted nowhere: no usage, no llm_call event, no budget
    stop. Counted now, and the budget stops what comes after."""
    from argus_lab.plan.domain import HTNContext, Subtask
    from argus_lab.plan.hybrid import LLMDecomposer

    asked: list[int] = []

    def reply(req: Any) -> Any:
        asked.append(1)
        sub = {"task": "book", "args": ["garden"], "id": "bk"}
        return tool_call("submit_subtasks", {"subtasks": [sub]})

    dec = LLMDecomposer(
        FunctionModel(reply, name="scripted", usage=USAGE, prices=PRICES)
    )
    dom = al.HTNDomain("shop", decomposer=dec)
    dom.operator("find", params=["q"])
    dom.operator("book", params=["v"])

    @dom.method("top")
    def top(ctx: HTNContext) -> list[Any]:
        return [
            Subtask("find", "x", id="f"),
            Subtask("lodging", "${f.result}", id="lod"),
        ]

    @dom.method("lodging")
    def never(ctx: HTNContext, hotels: Any) -> list[Any]:
        ctx.reject("no hand-written method")

    @al.tool
    def find(q: str) -> list[str]:
        """Finds."""
        return [q]

    @al.tool(name="book")
    def book_v(v: str) -> str:
        """Books."""
        return v

    planner = al.HTNPlanner(dom)
    plan = planner.plan("top")
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=plan,
        tools=[find, book_v],
        name="h",
        planner=planner,
        budget=al.Budget(max_cost_usd=0.001),
    )
    res = s.run()
    assert len(asked) == 1
    assert s.usage["cost_usd"] == pytest.approx(0.006)
    assert s.usage["tokens"] == 1200
    calls = [e for e in s.events() if e.kind == "llm_call"]
    assert [c.purpose for c in calls] == ["decompose"]
    assert res.status == "paused" and "budget exceeded" in (res.reason or "")
    s.close()


def test_a_planner_reply_recorded_and_never_counted_is_counted_once() -> None:
    """A reply recorded before a crash cut the commit that counts it was
    replayed as "cached", free: a budget undercounted every such call. It is
    handed back to be counted, once: a counted mark makes it free after."""
    import asyncio

    from argus_lab.llm.base import Message, ModelRequest
    from argus_lab.llm.recording import COUNTED, recorded, recording

    store: dict[str, dict[str, Any]] = {}

    class Store:
        def get_replay(self, key: str) -> dict[str, Any] | None:
            return store.get(key)

        def put_replay(self, key: str, data: dict[str, Any]) -> None:
            store[key] = data

    model = _replanner([])
    req = ModelRequest(messages=[Message.user("plan it")], purpose="plan")
    seen = []
    for mark in (False, True, False):
        with recording(Store()) as paid:
            resp = asyncio.run(recorded(model).complete(req))
        seen.append((resp.cached, len(paid)))
        if mark:
            for key, _ in paid:
                store[COUNTED + key] = {}
    assert seen == [(False, 1), (False, 1), (True, 0)]
