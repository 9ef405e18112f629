"""Replanning with an LLM planner: a failed subtree is replaced by a validated patch."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

import argus_lab as al
from argus_lab.llm import ModelRequest
from argus_lab.llm.testing import FunctionModel, tool_call
from tests.conftest import BASIC_TOOLS


def replacement(req: ModelRequest) -> object:
    text = req.messages[0].text
    assert "Task 'b' failed for good: venue closed" in text
    return tool_call(
        "submit_plan",
        {
            "goal": "ignored",
            "tasks": [
                {"id": "b2", "tool": "add", "args": {"a": "${a.result.sum}", "b": 100}},
                {"id": "c2", "tool": "echo", "args": {"value": "${b2.result.sum}"}},
            ],
        },
    )


def test_failed_task_is_replaced_by_a_patch_and_the_run_succeeds(
    ws: al.Workspace,
) -> None:
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "add", "args": {"a": 1}},
            {
                "id": "b",
                "tool": "boom",
                "args": {"message": "venue closed"},
                "deps": ["a"],
                "on_failure": "replan",
            },
            {"id": "c", "tool": "echo", "args": {"value": "${b.result}"}},
            {"id": "side", "tool": "add", "args": {"a": 5}},
        ],
    }
    planner = al.LLMPlanner(FunctionModel(replacement))
    s = ws.new_session(plan=plan, tools=BASIC_TOOLS, name="rp", planner=planner)
    res = s.run()
    assert res.status == "succeeded", res
    assert [t.id for t in s.plan.tasks] == ["a", "b2", "c2", "side"]
    assert s.result("c2") == 102
    assert s.info.plan_version == 2
    patch = next(e for e in s.events() if e.kind == "plan_patched")
    assert patch.added == ["b2", "c2"]
    assert patch.removed == ["b", "c"]
    assert s.record("a").attempts == 1  # finished work is untouched
    calls = [e for e in s.events() if e.kind == "llm_call"]
    assert calls and calls[0].purpose == "plan"


def test_an_llm_planner_plans_the_goal_when_no_plan_is_given(ws: al.Workspace) -> None:
    def plan_it(req: ModelRequest) -> object:
        return tool_call(
            "submit_plan",
            {"goal": "x", "tasks": [{"id": "one", "tool": "add", "args": {"a": 2}}]},
        )

    s = ws.new_session(
        goal="add two",
        tools=BASIC_TOOLS,
        name="lp",
        planner=al.LLMPlanner(FunctionModel(plan_it)),
    )
    assert s.goal == "add two" and [t.id for t in s.plan.tasks] == ["one"]
    calls = [e for e in s.events() if e.kind == "llm_call"]
    assert len(calls) == 1 and calls[0].round == 1
    assert s.run().status == "succeeded"


def test_a_fork_records_no_planning_of_its_own(ws: al.Workspace) -> None:
    def plan_it(req: ModelRequest) -> object:
        return tool_call(
            "submit_plan",
            {"goal": "x", "tasks": [{"id": "one", "tool": "add", "args": {"a": 2}}]},
        )

    s = ws.new_session(
        goal="add two",
        tools=BASIC_TOOLS,
        name="p1",
        planner=al.LLMPlanner(FunctionModel(plan_it)),
    )
    s.run()
    f = s.fork(at="one")
    assert [e.kind for e in f.events()].count("llm_call") == 0


@pytest.mark.parametrize("where", ["args", "id"])
def test_a_patch_writing_a_literal_secret_is_refused_and_never_stored(
    ws: al.Workspace,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    where: str,
) -> None:
    # The model saw the secret (in a tool's output, say) and wrote it into the
    # patch: stored with the plan, it would outlive every redaction.
    secret = "rp-" + uuid.uuid4().hex
    monkeypatch.setenv("ARGUS_REPLAN_TOKEN", secret)

    def leaky(req: ModelRequest) -> object:
        task = (
            {"id": "b2", "tool": "echo", "args": {"value": f"key {secret}"}}
            if where == "args"
            else {"id": f"t-{secret}", "tool": "echo", "args": {"value": 1}}
        )
        return tool_call("submit_plan", {"goal": "ignored", "tasks": [task]})

    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "add", "args": {"a": 1}},
            {
                "id": "b",
                "tool": "boom",
                "args": {"message": "venue closed"},
                "deps": ["a"],
                "on_failure": "replan",
            },
        ],
    }
    planner = al.LLMPlanner(FunctionModel(leaky))
    s = ws.new_session(plan=plan, tools=BASIC_TOOLS, name="leak", planner=planner)
    with caplog.at_level(logging.WARNING, logger="argus_lab"):
        res = s.run()
    assert res.status == "failed"
    assert s.record("b").status == "failed" and "venue closed" in (
        s.record("b").error or ""
    )
    assert [t.id for t in s.plan.tasks] == ["a", "b"] and s.info.plan_version == 1
    assert "a plan patch was refused" in caplog.text and secret not in caplog.text
    s.close()
    again = ws.open("leak", tools=BASIC_TOOLS)
    assert [t.id for t in again.plan.tasks] == ["a", "b"]
    again.close()
    hits = [
        p
        for p in Path(ws.path).rglob("*")
        if p.is_file() and secret[:12].encode() in p.read_bytes()
    ]
    assert hits == []
