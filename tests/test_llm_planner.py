"""LLMPlanner through the real anthropic SDK over httpx2.MockTransport, and offline
with FunctionModel / ReplayModel. No test reaches the network."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import argus_lab as al
from argus_lab.llm import AnthropicModel, ModelError, ModelRequest, RetryPolicy
from argus_lab.llm.testing import FunctionModel, RecordingModel, ReplayModel, tool_call
from argus_lab.plan.llm import (
    LLMPlanner,
    accepts_forced_tool_choice,
    plan_tool_schema,
)
from tests.conftest import BASIC_TOOLS
from tests.fixtures.llm.fake_api import (
    FAKE_KEY,
    FakeAPI,
    block_network,
    error,
    message,
    text,
    tool_use,
)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    block_network(monkeypatch, tmp_path)


GOAL = "Add two numbers, then echo the sum"

CYCLIC = {
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}, "deps": ["b"]},
        {"id": "b", "tool": "echo", "args": {"value": "${a.result.sum}"}},
    ]
}
VALID = {
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "b", "tool": "echo", "args": {"value": "${a.result.sum}"}},
    ]
}


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def submit(plan: dict[str, Any], id: str = "toolu_01", **kw: Any) -> dict[str, Any]:
    return message(tool_use("submit_plan", plan, id=id), **kw)


# ----------------------------------------------------------------- the schema


def test_the_plan_schema_is_inlined_and_describes_real_plans() -> None:
    tool = plan_tool_schema()
    schema = tool["input_schema"]
    dumped = str(schema)
    assert "$ref" not in dumped and "$defs" not in dumped
    assert schema["required"] == ["tasks"]
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(VALID, schema)
    jsonschema.validate(
        al.Plan.from_yaml("tasks: [{id: x, tool: add}]").to_dict(), schema
    )
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"tasks": [{"id": "has space", "tool": "add"}]}, schema)


def test_forced_tool_choice_is_known_per_model() -> None:
    for m in (
        "claude-opus-5-5",
        "claude-sonnet-5-5",
        "claude-fable-5-1",
        "claude-mythos-5-1",
    ):
        assert not accepts_forced_tool_choice(m)
    for m in ("claude-opus-5", "claude-sonnet-5", "claude-haiku-5-5", "claude-fable-5"):
        assert accepts_forced_tool_choice(m)


# ------------------------------------------------- the acceptance path, real SDK


def test_cycle_then_valid_plan_is_accepted_after_two_rounds() -> None:
    api = FakeAPI(
        submit(CYCLIC, input_tokens=2000, output_tokens=400, cache_write=1500),
        submit(
            VALID, id="toolu_02", input_tokens=600, output_tokens=380, cache_read=1500
        ),
    )
    events: list[tuple[str, dict[str, Any]]] = []
    planner = LLMPlanner(
        AnthropicModel(client=api.client()),
        on_event=lambda kind, payload: events.append((kind, payload)),
    )
    plan = planner.plan(GOAL, tools=BASIC_TOOLS, constraints=["be quick"])

    assert [t.id for t in plan.tasks] == ["a", "b"]
    assert plan.task("b").deps == ["a"]  # the reference implies the dependency
    assert plan.goal == GOAL and plan.constraints == ["be quick"]
    assert api.calls == 2 and len(planner.rounds) == 2

    first, second = planner.rounds
    assert first["problems"] and "cycle" in first["problems"][0]
    assert second["problems"] == []
    assert (first["input_tokens"], first["output_tokens"]) == (2000, 400)
    assert (first["cache_write_tokens"], second["cache_read_tokens"]) == (1500, 1500)
    assert first["cost_usd"] == pytest.approx((2000 * 4 + 400 * 20 + 1500 * 5) / 1e6)
    assert second["cost_usd"] == pytest.approx((600 * 4 + 380 * 20 + 1500 * 0.2) / 1e6)
    assert planner.cost_usd == pytest.approx(first["cost_usd"] + second["cost_usd"])
    assert [k for k, _ in events] == ["llm_call", "llm_call"]
    assert events[0][1]["purpose"] == "plan" and events[1][1]["round"] == 2

    body1, body2 = api.bodies
    # The stable prefix is cached: the plan tool and the system prompt.
    assert body1["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body1["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert '"name": "add"' in body1["system"][0]["text"]  # tool schemas in the prompt
    assert "be quick" in body1["messages"][0]["content"]
    # claude-opus-5-5 rejects a forced tool choice, so it is asked for in words.
    assert "tool_choice" not in body1
    # Round 2 echoes the reply and reports the cycle as an error tool result.
    assert body2["messages"][1]["role"] == "assistant"
    result = body2["messages"][2]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is True
    assert result["tool_use_id"] == "toolu_01" and "cycle: " in result["content"]
    # The prompt prefix did not change between rounds, so the cache can hit.
    assert body1["system"] == body2["system"] and body1["tools"] == body2["tools"]


def test_models_that_accept_it_get_a_forced_tool_call() -> None:
    api = FakeAPI(submit(VALID, model="claude-haiku-5-5"))
    planner = LLMPlanner(AnthropicModel("claude-haiku-5-5", client=api.client()))
    planner.plan(GOAL, tools=BASIC_TOOLS)
    assert api.bodies[0]["tool_choice"] == {"type": "tool", "name": "submit_plan"}


def test_a_400_about_tool_choice_switches_to_asking() -> None:
    api = FakeAPI(
        error(
            400, 'tool_choice: type "tool" and "any" are not supported for this model.'
        ),
        submit(VALID, model="claude-opus-7"),
    )
    planner = LLMPlanner(AnthropicModel("claude-opus-7", client=api.client()))
    plan = planner.plan(GOAL, tools=BASIC_TOOLS)
    assert len(plan.tasks) == 2
    assert "tool_choice" in api.bodies[0] and "tool_choice" not in api.bodies[1]
    assert planner.rounds[0]["error_type"] == "ModelError"
    assert planner.rounds[1]["tool_choice"] == "auto"


def test_429_with_retry_after_is_retried_and_recorded() -> None:
    api = FakeAPI(error(429, "rate limited", {"retry-after": "4"}), submit(VALID))
    sleeps = Sleeps()
    planner = LLMPlanner(
        AnthropicModel(client=api.client()), retry=RetryPolicy(sleep=sleeps)
    )
    plan = planner.plan(GOAL, tools=BASIC_TOOLS)
    assert len(plan.tasks) == 2 and api.calls == 2
    assert sleeps.delays == [4.0]  # honoured exactly
    (round1,) = planner.rounds
    assert round1["retries"] == [
        {
            "retry": 1,
            "error": round1["retries"][0]["error"],
            "retry_after": 4.0,
            "delay": 4.0,
        }
    ]
    assert "429" in round1["retries"][0]["error"]


def test_400_is_not_retried() -> None:
    api = FakeAPI(error(400, "messages: bad shape"), submit(VALID))
    sleeps = Sleeps()
    events: list[dict[str, Any]] = []
    planner = LLMPlanner(
        AnthropicModel(client=api.client()),
        retry=RetryPolicy(sleep=sleeps),
        on_event=lambda k, p: events.append(p),
    )
    with pytest.raises(ModelError, match="bad shape"):
        planner.plan(GOAL, tools=BASIC_TOOLS)
    assert api.calls == 1 and sleeps.delays == []
    assert events[0]["error_type"] == "ModelError"


def test_missing_key_gives_a_clear_error_naming_offline_alternatives() -> None:
    planner = LLMPlanner(AnthropicModel())
    with pytest.raises(ModelError) as e:
        planner.plan(GOAL, tools=BASIC_TOOLS)
    for needed in (
        "ANTHROPIC_API_KEY",
        "YAML",
        "HTNPlanner",
        "FunctionModel",
        "ReplayModel",
    ):
        assert needed in e.value.message
    assert FAKE_KEY not in e.value.message


# --------------------------------------------------------------- repair paths


def test_gives_up_after_max_rounds_listing_the_last_problems() -> None:
    bad = {"tasks": [{"id": "a", "tool": "fly", "args": {}}]}
    api = FakeAPI(*(submit(bad, id=f"toolu_{i}") for i in range(2)))
    planner = LLMPlanner(AnthropicModel(client=api.client()), max_rounds=2)
    with pytest.raises(al.PlanError) as e:
        planner.plan(GOAL, tools=BASIC_TOOLS)
    assert "2 rounds" in e.value.message and "'fly'" in e.value.message
    assert "known tools: add, boom, echo" in e.value.message
    assert e.value.problems and len(planner.rounds) == 2


def test_a_text_reply_is_asked_to_call_the_tool() -> None:
    api = FakeAPI(
        message(text("Here is my plan: first add, then echo.")), submit(VALID)
    )
    planner = LLMPlanner(AnthropicModel(client=api.client()))
    planner.plan(GOAL, tools=BASIC_TOOLS)
    nudge = api.bodies[1]["messages"][2]["content"]
    assert nudge[0]["type"] == "text" and "did not call submit_plan" in nudge[0]["text"]
    assert planner.rounds[0]["problems"] == ["the reply did not call submit_plan"]


def test_thinking_blocks_are_echoed_back_verbatim() -> None:
    thinking = {"type": "thinking", "thinking": "", "signature": "EqQBCkYIBxgCKkB=="}
    api = FakeAPI(
        message(thinking, tool_use("submit_plan", CYCLIC)),
        submit(VALID, id="toolu_02"),
    )
    LLMPlanner(AnthropicModel(client=api.client())).plan(GOAL, tools=BASIC_TOOLS)
    assert api.bodies[1]["messages"][1]["content"][0] == thinking


def test_every_tool_call_of_a_reply_gets_a_result() -> None:
    reply = [
        tool_call("submit_plan", CYCLIC, id="t1"),
        tool_call("add", {"a": 1}, id="t2"),
    ]
    seen: list[ModelRequest] = []

    def fn(req: ModelRequest) -> Any:
        seen.append(req)
        return reply if len(seen) == 1 else tool_call("submit_plan", VALID, id="t3")

    LLMPlanner(FunctionModel(fn)).plan(GOAL, tools=BASIC_TOOLS)
    results = seen[1].messages[-1].content
    assert isinstance(results, list)
    assert [r.tool_use_id for r in results] == ["t1", "t2"]  # type: ignore[union-attr]
    assert "unknown tool 'add'" in results[1].content  # type: ignore[union-attr]


def test_refusal_stops_at_once() -> None:
    api = FakeAPI(message(text("I can't help with that."), stop_reason="refusal"))
    events: list[dict[str, Any]] = []
    planner = LLMPlanner(
        AnthropicModel(client=api.client()), on_event=lambda k, p: events.append(p)
    )
    with pytest.raises(al.PlanError, match="refused"):
        planner.plan(GOAL, tools=BASIC_TOOLS)
    assert api.calls == 1
    assert (
        events[0]["stop_reason"] == "refusal" and "refused" in events[0]["problems"][0]
    )


def test_tasks_sent_as_json_text_are_read() -> None:
    m = FunctionModel(
        lambda r: tool_call("submit_plan", {"tasks": json.dumps(VALID["tasks"])})
    )
    assert len(LLMPlanner(m).plan(GOAL, tools=BASIC_TOOLS).tasks) == 2


def test_without_tools_only_the_structure_is_checked() -> None:
    m = FunctionModel(
        lambda r: tool_call("submit_plan", {"tasks": [{"id": "x", "tool": "anything"}]})
    )
    plan = LLMPlanner(m).plan("Do x")
    assert plan.tasks[0].tool == "anything"
    assert "No tools were given" in m.requests[0].system
    assert m.requests[0].tool_choice == {"type": "tool", "name": "submit_plan"}


# ------------------------------------------------------------------ sync/async


def test_plan_works_inside_a_running_loop_and_aplan_awaits() -> None:
    m = FunctionModel(lambda r: tool_call("submit_plan", VALID))
    planner = LLMPlanner(m)

    async def notebook_cell() -> tuple[int, int]:
        sync_plan = planner.plan(GOAL, tools=BASIC_TOOLS)  # loop running, as in Jupyter
        async_plan = await planner.aplan(GOAL, tools=BASIC_TOOLS)
        return len(sync_plan.tasks), len(async_plan.tasks)

    assert asyncio.run(notebook_cell()) == (2, 2)


# ------------------------------------------------------------------- replay


def test_a_recorded_planning_run_replays_with_zero_requests(tmp_path: Path) -> None:
    cache = tmp_path / "planner-cache.jsonl"
    api = FakeAPI(submit(CYCLIC), submit(VALID, id="toolu_02"))
    live = LLMPlanner(RecordingModel(AnthropicModel(client=api.client()), cache))
    recorded = live.plan(GOAL, tools=BASIC_TOOLS)
    assert api.calls == 2

    replay = LLMPlanner(ReplayModel(cache))
    replayed = replay.plan(GOAL, tools=BASIC_TOOLS)
    assert api.calls == 2  # zero HTTP requests on replay
    assert replayed == recorded
    assert [r["cached"] for r in replay.rounds] == [True, True]
    assert replay.cost_usd == 0.0 and live.cost_usd > 0
    assert [r["request_hash"] for r in replay.rounds] == [
        r["request_hash"] for r in live.rounds
    ]


def test_replay_miss_when_the_tools_changed(tmp_path: Path) -> None:
    cache = tmp_path / "c"
    api = FakeAPI(submit(VALID))
    LLMPlanner(RecordingModel(AnthropicModel(client=api.client()), cache)).plan(
        GOAL, tools=BASIC_TOOLS
    )
    with pytest.raises(al.llm.ReplayMiss) as e:
        LLMPlanner(ReplayModel(cache)).plan(GOAL, tools=BASIC_TOOLS[:2])
    assert "differs in: system" in e.value.message
