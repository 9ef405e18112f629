"""Automatic memory with provenance, and memories in the next LLM task's prompt."""

from __future__ import annotations

import pytest

import argus_lab as al
from argus_lab.llm import ModelRequest
from argus_lab.llm.testing import FunctionModel
from tests.conftest import BASIC_TOOLS


@al.tool
def survey(city: str) -> dict[str, object]:
    """Surveys venues in a city."""
    return {"city": city, "best_venue": "Fabrica Lisboa", "capacity": 300}


@pytest.mark.slow
def test_results_and_lessons_are_remembered_with_provenance(ws: al.Workspace) -> None:
    plan = {
        "goal": "find a venue",
        "tasks": [
            {"id": "survey", "tool": "survey", "args": {"city": "Lisbon"}},
            {"id": "broken", "tool": "boom", "args": {"message": "catering API down"}},
        ],
    }
    s = ws.new_session(
        plan=plan, tools=[survey, *BASIC_TOOLS], name="mem", remember=True
    )
    s.run()
    sid = s.id
    s.close()  # writes what is queued
    hits = ws.memory.search("Fabrica Lisboa venue", k=3, mode="fts")
    top = hits[0]
    assert top.kind == "result" and top.task_id == "survey" and top.session_id == sid
    with ws.open(sid) as again:  # the memory leads back to the event that wrote it
        ev = next(e for e in again.events() if e.seq == top.seq)
        assert ev.kind == "task_succeeded" and ev.task_id == "survey"
    lesson = ws.memory.search("catering", k=3, mode="fts", kind="lesson")[0]
    assert lesson.task_id == "broken" and "catering API down" in lesson.text
    with ws.open(sid) as again:
        ev = next(e for e in again.events() if e.seq == lesson.seq)
        assert ev.kind == "task_failed" and ev.task_id == "broken"


def test_plain_tool_pipelines_do_not_write_memories_by_default(
    ws: al.Workspace,
) -> None:
    s = ws.new_session(
        plan={
            "goal": "g",
            "tasks": [{"id": "a", "tool": "survey", "args": {"city": "x"}}],
        },
        tools=[survey],
        name="fast",
    )
    s.run()
    s.close()
    assert not (ws.path / "memory").exists()


def test_the_next_llm_task_sees_what_was_remembered(ws: al.Workspace) -> None:
    first = ws.new_session(
        plan={
            "goal": "g",
            "tasks": [{"id": "survey", "tool": "survey", "args": {"city": "Lisbon"}}],
        },
        tools=[survey],
        name="one",
        remember=True,
    )
    first.run()
    first.close()
    prompts: list[str] = []

    def answer(req: ModelRequest) -> str:
        prompts.append(req.messages[0].text)
        return "Book Fabrica Lisboa."

    plan = {
        "goal": "book a venue",
        "tasks": [
            {
                "id": "book",
                "kind": "llm",
                "title": "Book the best venue in Lisbon",
                "description": "Pick the best venue found so far.",
            }
        ],
    }
    s = ws.new_session(plan=plan, name="two", models=FunctionModel(answer))
    assert s.run().status == "succeeded"
    assert "Fabrica Lisboa" in prompts[0]
    ctx = next(e for e in s.events() if e.kind == "context_built")
    sections = {item["section"] for item in ctx.items}
    assert any("memor" in str(x) for x in sections)


def test_memory_tools_are_builtin() -> None:
    names = [t.name for t in al.builtin_tools("memory_add", "memory_search")]
    assert names == ["memory_add", "memory_search"]
