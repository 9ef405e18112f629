"""What a new user's API endpoint may answer that is not a Messages API reply,
through the real anthropic SDK over httpx2.MockTransport: a clear TransientError
(retried), never an AttributeError or a JSONDecodeError from inside the SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

import argus_lab as al
from argus_lab.llm import AnthropicModel, Message, ModelRequest, RetryPolicy
from argus_lab.plan.llm import LLMPlanner
from tests.conftest import BASIC_TOOLS
from tests.fixtures.llm.fake_api import FakeAPI, block_network, message, tool_use

VALID = {"tasks": [{"id": "a", "tool": "add", "args": {"a": 1, "b": 2}}]}
GOOD = message(tool_use("submit_plan", VALID))


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    block_network(monkeypatch, tmp_path)


def _json(body: bytes) -> httpx2.Response:
    return httpx2.Response(
        200, content=body, headers={"content-type": "application/json"}
    )


BAD_REPLIES: dict[str, tuple[httpx2.Response, str]] = {
    "an HTML page": (
        httpx2.Response(
            200,
            content=b"<html>proxy login</html>",
            headers={"content-type": "text/html"},
        ),
        "answered with text '<html>proxy login</html>', not a message",
    ),
    "a body that is not JSON": (
        _json(b"not json"),
        "reply is not valid JSON (Expecting value at character 0)",
    ),
    "a body cut off mid-way": (
        _json(json.dumps(GOOD).encode()[:70]),
        "reply is not valid JSON (Unterminated string",
    ),
    "JSON of another shape": (_json(b"{}"), "answered with JSON without content"),
    "a message without usage": (
        _json(json.dumps({**GOOD, "usage": None}).encode()),
        "answered with JSON without usage",
    ),
}


@pytest.mark.parametrize("name", list(BAD_REPLIES))
def test_a_reply_that_is_not_a_message_is_a_clear_transient_error(name: str) -> None:
    reply, expected = BAD_REPLIES[name]
    api = FakeAPI(reply)
    model = AnthropicModel(client=api.client())
    with pytest.raises(al.TransientError) as info:
        model.complete_sync(ModelRequest(messages=[Message.user("hi")]))
    assert expected in info.value.message
    assert "proxy or ANTHROPIC_BASE_URL" in info.value.message
    assert api.calls == 1


def test_the_planner_retries_past_a_cut_off_reply() -> None:
    reply, _ = BAD_REPLIES["a body cut off mid-way"]
    api = FakeAPI(reply, GOOD)
    delays: list[float] = []

    async def sleep(seconds: float) -> Any:
        delays.append(seconds)

    planner = LLMPlanner(
        AnthropicModel(client=api.client()), retry=RetryPolicy(sleep=sleep)
    )
    plan = planner.plan("add", tools=BASIC_TOOLS)
    assert [t.id for t in plan.tasks] == ["a"] and api.calls == 2
    assert len(delays) == 1
    assert "not valid JSON" in planner.rounds[0]["retries"][0]["error"]


def test_an_empty_plan_is_sent_back_for_repair() -> None:
    api = FakeAPI(message(tool_use("submit_plan", {"tasks": []})), GOOD)
    planner = LLMPlanner(AnthropicModel(client=api.client()))
    plan = planner.plan("add two numbers", tools=BASIC_TOOLS)
    assert [t.id for t in plan.tasks] == ["a"] and api.calls == 2
    assert planner.rounds[0]["problems"] == [
        "the plan has no tasks: submit the tasks that reach the goal"
    ]
    reported = api.bodies[1]["messages"][2]["content"][0]
    assert reported["is_error"] is True and "no tasks" in reported["content"]


@pytest.mark.parametrize("goal", ["", "  \n", None])
def test_no_goal_is_refused_before_a_paid_call(goal: Any) -> None:
    api = FakeAPI(GOOD)
    with pytest.raises(al.PlanError, match="needs a goal in words"):
        LLMPlanner(AnthropicModel(client=api.client())).plan(goal, tools=BASIC_TOOLS)
    assert api.calls == 0
