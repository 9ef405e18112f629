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
from argus_lab.llm.testing import FunctionModel, tool_call
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


# -- an LLM task's answer against its output_schema -------------------------------

SCHEMA = {
    "type": "object",
    "required": ["eyes"],
    "properties": {"eyes": {"type": "integer"}},
}


def _llm_plan(**extra: Any) -> dict[str, Any]:
    task = {"id": "x", "kind": "llm", "description": "How many eyes?"}
    return {"tasks": [{**task, "output_schema": SCHEMA, **extra}]}


def test_an_answer_off_its_schema_goes_back_to_the_model(ws: al.Workspace) -> None:
    # Before: {"eyes": "a hundred"} was stored as the result of a task whose
    # output_schema says integer.
    seen: list[ModelRequest] = []

    def answer(req: ModelRequest) -> Any:
        seen.append(req)
        eyes = "a hundred" if len(seen) == 1 else 100
        return tool_call("final_answer", {"eyes": eyes}, id=f"t{len(seen)}")

    s = ws.new_session(
        plan=_llm_plan(), name="s", models=FunctionModel(answer), remember=False
    )
    assert s.run().status == "succeeded"
    assert s.result("x") == {"eyes": 100}
    (told,) = seen[1].messages[-1].content  # type: ignore[misc]
    assert told.is_error and told.tool_use_id == "t1"
    assert told.content == (
        "result does not match output_schema: result['eyes']: 'a hundred' is not "
        "of type 'integer'; call final_answer again with an answer that matches"
    )
    s.close()


def test_json_text_off_its_schema_goes_back_too(ws: al.Workspace) -> None:
    replies = iter(['{"eyes": "many"}', '{"eyes": 100}'])
    m = FunctionModel(lambda req: next(replies))
    s = ws.new_session(plan=_llm_plan(), name="s", models=m, remember=False)
    assert s.run().status == "succeeded"
    assert s.result("x") == {"eyes": 100}
    s.close()


def test_an_answer_that_never_matches_fails_naming_the_last_problem(
    ws: al.Workspace,
) -> None:
    m = FunctionModel(lambda req: tool_call("final_answer", {"eyes": None}))
    s = ws.new_session(plan=_llm_plan(max_turns=2), name="s", models=m, remember=False)
    assert s.run().status == "failed"
    assert s.record("x").error == (
        "LLM task 'x' gave no final answer in 2 model calls (the last one: result "
        "does not match output_schema: result['eyes']: None is not of type "
        "'integer'; call final_answer again with an answer that matches); raise "
        "max_turns or simplify the task"
    )
    s.close()


@pytest.mark.parametrize("field", ["output_schema", "success"])
def test_a_schema_that_is_not_json_schema_is_refused_with_the_plan(field: str) -> None:
    task: dict[str, Any] = {"id": "x", "kind": "llm", "description": "d"}
    task[field] = {"type": "objekt"}
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_dict({"tasks": [task]})
    assert info.value.problems == [
        f"task 'x': {field}['type'] is not valid JSON Schema: 'objekt' is not "
        "valid under any of the given schemas"
    ]


# -- the shapes a new user hands the planners -----------------------------------


@al.tool
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


ONE_TASK = {"tasks": [{"id": "a", "tool": "add", "args": {"a": 1, "b": 2}}]}


def _planner() -> LLMPlanner:
    return LLMPlanner(FunctionModel(lambda req: tool_call("submit_plan", ONE_TASK)))


@pytest.mark.parametrize("tools", [add, {"add": add}], ids=["one tool", "a dict"])
def test_one_tool_or_a_dict_of_tools_is_taken(tools: Any, ws: al.Workspace) -> None:
    # Before: "'Tool' object is not iterable" / "@tool needs a function, got str".
    assert [t.tool for t in _planner().plan("g", tools=tools).tasks] == ["add"]
    s = ws.new_session(plan=ONE_TASK, tools=tools, name="s")
    assert s.run().status == "succeeded" and s.result("a") == 3
    s.close()


@pytest.mark.parametrize("tools", ["add", ["add"]])
def test_a_tool_name_is_not_a_tool(tools: Any, ws: al.Workspace) -> None:
    with pytest.raises(TypeError) as info:
        ws.new_session(plan=ONE_TASK, tools=tools)
    assert str(info.value) == (
        "tools holds the name 'add'; pass the tool itself (the function decorated "
        "with @al.tool), e.g. tools=[my_tool]"
    )


def test_one_constraint_as_text_is_one_constraint_not_its_letters() -> None:
    plan = _planner().plan("g", tools=[add], constraints="be quick")
    assert plan.constraints == ["be quick"]


@pytest.mark.parametrize(
    ("model", "what"),
    [(None, "NoneType"), ("claude-opus-5-5", "a model name"), (add, "Tool")],
)
def test_the_llm_planner_needs_a_model_object(model: Any, what: str) -> None:
    with pytest.raises(TypeError) as info:
        LLMPlanner(model)
    assert str(info.value) == (
        f"LLMPlanner needs a model object, got {what}: "
        "LLMPlanner(al.AnthropicModel('claude-...')), or "
        "al.llm.testing.FunctionModel(...) offline"
    )


@pytest.mark.parametrize("domain", [None, {"operators": []}, "travel"])
def test_the_htn_planner_needs_a_domain(domain: Any) -> None:
    with pytest.raises(TypeError, match=r"^HTNPlanner needs an al.HTNDomain, got "):
        al.HTNPlanner(domain)


@pytest.mark.parametrize("name", ["", "  ", None])
def test_an_anthropic_model_needs_a_name(name: Any) -> None:
    with pytest.raises(
        ValueError, match=r"^model must be a model name such as 'claude"
    ):
        AnthropicModel(name)


def test_an_llm_task_naming_a_model_the_session_lacks_is_refused_at_creation(
    ws: al.Workspace,
) -> None:
    # Before: the session was made and the task failed when it came to run.
    plan = {
        "tasks": [
            {"id": "plan_it", "kind": "llm", "description": "d", "model": "strong"},
            {"id": "cheap_it", "kind": "llm", "description": "d", "model": "cheep"},
        ]
    }
    m = FunctionModel(lambda req: "ok")
    with pytest.raises(al.PlanError) as info:
        ws.new_session(plan=plan, models={"strong": m, "cheap": m}, name="tiers")
    assert info.value.problems == [
        "LLM task 'cheap_it' asks for model 'cheep'; the session has 'cheap', "
        "'strong' (models={name: model} names them)"
    ]
    assert [i.name for i in ws.sessions()] == []  # nothing was written
    # models may come with ws.open
    s = ws.new_session(plan=plan, name="later", remember=False)
    s.close()
