"""Hybrid HTN: the model decomposes a compound no method covers, validated like one."""

from __future__ import annotations

from typing import Any

import pytest

import argus_lab as al
from argus_lab.llm import ModelRequest
from argus_lab.llm.testing import FunctionModel, tool_call
from argus_lab.plan.domain import HTNContext
from argus_lab.plan.hybrid import LLMDecomposer


def domain(model_reply: Any) -> tuple[al.HTNDomain, LLMDecomposer]:
    llm = LLMDecomposer(FunctionModel(model_reply))
    dom = al.HTNDomain("research", decomposer=llm)
    dom.operator("search", params=["q"], description="web-free search of notes")
    dom.operator("summarize", params=["text"])

    @dom.method("study")
    def only_known_topics(ctx: HTNContext, topic: str) -> list[Any]:
        if topic != "htn":
            ctx.reject(f"no hand-written method for {topic!r}")
        return [("search", "htn")]

    return dom, llm


def test_the_model_decomposes_what_no_method_covers() -> None:
    def reply(req: ModelRequest) -> object:
        prompt = req.messages[0].text
        assert "study('agents')" in prompt and "search(q)" in prompt
        return tool_call(
            "submit_subtasks",
            {
                "subtasks": [
                    {"task": "search", "args": ["agents"], "id": "find"},
                    {"task": "summarize", "args": ["${find.result}"]},
                ]
            },
        )

    dom, llm = domain(reply)
    planner = al.HTNPlanner(dom)
    plan = planner.plan("study", "agents")
    assert [(t.tool, t.args) for t in plan.tasks] == [
        ("search", {"q": "agents"}),
        ("summarize", {"text": "${study/find.result}"}),
    ]
    decisions = [(d["method"], d["decision"]) for d in planner.decisions]
    assert ("only_known_topics", "rejected") in decisions
    assert ("llm_decomposer", "chosen") in decisions
    assert len(llm.calls) == 1 and llm.calls[0]["purpose"] == "decompose"


def test_an_invalid_answer_is_rejected_with_its_reason() -> None:
    dom, _ = domain(
        lambda req: tool_call(
            "submit_subtasks", {"subtasks": [{"task": "teleport", "args": []}]}
        )
    )
    planner = al.HTNPlanner(dom)
    with pytest.raises(al.PlanError, match="no method of study"):
        planner.plan("study", "agents")
    rejected = [d for d in planner.decisions if d["decision"] == "rejected"]
    assert rejected[-1]["method"] == "llm_decomposer"
    assert "teleport" in rejected[-1]["reason"]
