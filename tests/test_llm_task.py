"""LLM tasks in a session: tool-use loop, events and cost, budgets, free replays."""

from __future__ import annotations

from pathlib import Path

import pytest

import argus_lab as al
import argus_lab.analysis as an
from argus_lab.llm import AnthropicModel, ModelRequest, Price, Usage
from argus_lab.llm.testing import FunctionModel, tool_call
from argus_lab.store.checkpoints import SessionStore
from argus_lab.tools.approval import DEFAULT_POLICIES, require_approval
from tests.fixtures.llm.fake_api import FakeAPI, block_network, message, text, tool_use

LOOKUPS: list[str] = []


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    block_network(monkeypatch, tmp_path)
    LOOKUPS.clear()


@al.tool
def lookup(word: str) -> dict[str, str]:
    """Looks a word up in a tiny dictionary."""
    LOOKUPS.append(word)
    return {"word": word, "meaning": {"argus": "hundred-eyed giant"}.get(word, "?")}


@al.tool
def seed() -> dict[str, str]:
    """Provides the topic."""
    return {"topic": "argus"}


PLAN = {
    "goal": "explain a name",
    "tasks": [
        {"id": "topic", "tool": "seed"},
        {
            "id": "explain",
            "kind": "llm",
            "description": "Explain the topic's name.",
            "args": {"topic": "${topic.result.topic}"},
            "llm_tools": ["lookup"],
        },
    ],
}
PRICES = {"scripted": Price(input=3.0, output=15.0, cache_write=3.75, cache_read=0.3)}
USAGE = Usage(input_tokens=1000, output_tokens=200)  # 0.003 + 0.003 = $0.006 a call


def script(req: ModelRequest) -> object:
    """Two tool calls, then a final answer."""
    turns = sum(1 for m in req.messages if m.role == "assistant")
    if turns == 0:
        return tool_call("lookup", {"word": "argus"})
    if turns == 1:
        return tool_call("lookup", {"word": "panoptes"})
    return "Argus: a hundred-eyed giant who never slept."


def model() -> FunctionModel:
    return FunctionModel(script, name="scripted", usage=USAGE, prices=PRICES)


def test_llm_task_with_two_tool_calls_then_a_final_answer(ws: al.Workspace) -> None:
    s = ws.new_session(plan=PLAN, tools=[seed, lookup], name="llm", models=model())
    res = s.run()
    assert res.status == "succeeded", (res, s.record("explain").traceback)
    assert s.result("explain") == "Argus: a hundred-eyed giant who never slept."
    assert LOOKUPS == ["argus", "panoptes"]
    kinds = [e.kind for e in s.events() if e.task_id == "explain"]
    assert kinds.count("llm_call") == 3 and kinds.count("tool_call") == 2
    assert "context_built" in kinds
    calls = [e for e in s.events() if e.kind == "tool_call"]
    assert [c.args for c in calls] == [
        {"word": "argus"},
        {"word": "panoptes"},
    ]
    rec = s.record("explain")
    assert rec.cost_usd == pytest.approx(3 * 0.006) and rec.tokens == 3 * 1200
    df = s.events_df()
    llm = df[df["kind"] == "llm_call"]
    assert len(llm) == 3 and set(llm["task_id"]) == {"explain"}
    t = s.tasks_df().set_index("task_id")
    assert t.loc["explain", "status"] == "succeeded"


def test_output_schema_is_asked_for_and_checked(ws: al.Workspace) -> None:
    def answer(req: ModelRequest) -> object:
        assert req.tool_choice == {"type": "tool", "name": "final_answer"}
        return tool_call("final_answer", {"name": "Argus", "eyes": 100})

    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": "x",
                "kind": "llm",
                "description": "Count.",
                "output_schema": {
                    "type": "object",
                    "required": ["eyes"],
                    "properties": {"eyes": {"type": "integer"}},
                },
            }
        ],
    }
    s = ws.new_session(plan=plan, name="schema", models=FunctionModel(answer))
    assert s.run().status == "succeeded"
    assert s.result("x") == {"name": "Argus", "eyes": 100}


def test_cost_budget_pauses_exactly_before_the_call_that_would_cross_it(
    ws: al.Workspace,
) -> None:
    # Each call costs $0.006; 0.02 allows three calls, not a fourth.
    plan = {
        "goal": "g",
        "tasks": [
            {"id": f"q{i}", "kind": "llm", "description": f"Say {i}."} for i in range(5)
        ],
    }
    m = FunctionModel(lambda r: "ok", name="scripted", usage=USAGE, prices=PRICES)
    s = ws.new_session(
        plan=plan,
        name="budget",
        models=m,
        concurrency=1,
        budget=al.model.Budget(max_cost_usd=0.02),
    )
    res = s.run()
    assert res.status == "paused"
    assert "session max_cost_usd=0.02" in (res.reason or "")
    done = [t for t, r in s.records.items() if r.status == "succeeded"]
    assert len(done) == 3 and len(m.requests) == 3
    hit = next(e for e in s.events() if e.kind == "budget_exceeded")
    assert hit.used == pytest.approx(0.018)
    assert hit.needed == pytest.approx(0.006)
    s.set_budget(max_cost_usd=1.0)
    assert s.run().status == "succeeded" and len(m.requests) == 5


def test_a_cached_fork_makes_no_http_request_and_gives_the_same_results(
    ws: al.Workspace,
) -> None:
    api = FakeAPI(
        message(tool_use("lookup", {"word": "argus"}, id="toolu_1")),
        message(text("A hundred-eyed giant.")),
    )
    claude = AnthropicModel(client=api.async_client(max_retries=0))
    s = ws.new_session(plan=PLAN, tools=[seed, lookup], name="real", models=claude)
    assert s.run().status == "succeeded"
    assert api.calls == 2
    assert s.record("explain").cost_usd > 0  # priced from the table
    f = s.fork(at="explain")
    assert f.run().status == "succeeded"
    assert api.calls == 2  # zero new requests: every reply came from the cache
    assert f.result("explain") == s.result("explain") == "A hundred-eyed giant."
    done = next(
        e for e in f.events() if e.kind == "task_succeeded" and e.task_id == "explain"
    )
    assert done.cached is True
    assert f.record("explain").cost_usd == 0.0


def test_a_retried_llm_task_replays_the_calls_it_already_paid_for(
    ws: al.Workspace,
) -> None:
    from tests.fixtures.llm.fake_api import error

    api = FakeAPI(
        message(tool_use("lookup", {"word": "argus"}, id="toolu_1")),
        error(529, "overloaded"),
        message(text("A hundred-eyed giant.")),
    )
    claude = AnthropicModel(client=api.async_client(max_retries=0))
    s = ws.new_session(
        plan=PLAN,
        tools=[seed, lookup],
        name="retry",
        models=claude,
        backoff=(0.001, 0.01),
    )
    res = s.run()
    assert res.status == "succeeded", (res, s.record("explain").traceback)
    assert api.calls == 3  # the first call was not paid twice
    calls = [e for e in s.events() if e.kind == "llm_call"]
    assert [(e.attempt, e.cached) for e in calls] == [
        (1, False),
        (2, True),
        (2, False),
    ]
    assert s.record("explain").attempts == 2


def test_an_llm_task_without_a_model_fails_clearly(ws: al.Workspace) -> None:
    s = ws.new_session(plan=PLAN, tools=[seed, lookup], name="nomodel")
    s.run()
    assert "needs a model" in (s.record("explain").error or "")


def test_context_breakdown_of_an_llm_task(ws: al.Workspace) -> None:
    s = ws.new_session(plan=PLAN, tools=[seed, lookup], name="ctx", models=model())
    s.run()
    ctx = s.context_breakdown("explain")
    assert ctx is not None and ctx["budget"] == 8000
    assert any(item["status"] == "included" for item in ctx["items"])
    assert s.context_breakdown("topic") is None


def test_an_llm_task_interrupted_by_a_crash_reruns(ws: al.Workspace) -> None:
    s = ws.new_session(plan=PLAN, tools=[seed, lookup], name="crashed")
    s.close()
    dead = SessionStore(s.path, s.id)  # a process that died mid-attempt
    head = dead.read_head()
    assert head is not None
    running = al.TaskRecord(task_id="explain", status="running", attempts=1)
    dead.commit(head.version, "a-dead-process", records=[running], lease=None)
    dead.close()
    with ws.open("crashed", tools=[seed, lookup], models=model()) as again:
        assert again.record("explain").status == "running"
        assert again.run().status == "succeeded"  # rerun, not left in doubt
        assert again.record("explain").attempts == 2


def test_a_model_calling_a_tool_that_needs_approval_is_told_so_typed(
    ws: al.Workspace,
) -> None:
    sent: list[str] = []

    @al.tool(side_effect="write")
    def send(to: str) -> str:
        """Sends a message (needs a person's approval)."""
        sent.append(to)
        return "sent"

    def ask_then_answer(req: ModelRequest) -> object:
        if not any(m.role == "assistant" for m in req.messages):
            return tool_call("send", {"to": "all"})
        return "I could not send it without approval."

    plan = {"tasks": [{"id": "t", "kind": "llm", "description": "Send it.",
                       "llm_tools": ["send"]}]}  # fmt: skip
    model = FunctionModel(ask_then_answer, name="scripted")
    with ws.new_session(plan=plan, tools=[send], name="ask", models=model) as s:
        assert s.run().status == "succeeded"
        calls = an.tool_calls_df(s)
    assert sent == []  # never ran
    row = calls[calls["source"] == "llm"].iloc[0]
    assert (row["tool"], row["ok"], row["error_type"]) == (
        "send",
        False,
        "ApprovalRequired",
    )
    assert "needs a person's approval (ask (tools=*, side_effect=write)" in row["error"]
    with pytest.raises(al.ApprovalRequired, match="'send' needs"):
        require_approval(DEFAULT_POLICIES, send, {"to": "all"})
