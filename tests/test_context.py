"""The LLM context builder: priority, budget, breakdown, token estimators."""

from __future__ import annotations

import json
import logging
from typing import Any

import anthropic
import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus_lab.events import make_event
from argus_lab.model import Task
from argus_lab.runtime.context import (
    TRUNCATED,
    AnthropicTokenCounter,
    build_context,
    estimate_tokens,
    token_estimator,
)
from argus_lab.store.memory import MemoryHit

TASK = Task(
    id="write_report",
    title="Write the report",
    description="Summarise the venue options for the organisers.",
    expected_output="A markdown table of venues with price and capacity.",
)


def hit(i: int, text: str, **kw: Any) -> MemoryHit:
    fields: dict[str, Any] = {"session_id": "s0", "task_id": f"t{i}", "seq": i}
    fields |= {"id": f"m{i}", "kind": "note", "text": text, "score": 1.0 / i}
    return MemoryHit(mode="fts", **(fields | kw))


DEPS = {
    "lisbon": {"venue": "LX Factory", "seats": 220, "eur_per_day": 4100},
    "berlin": {"venue": "Kuehlhaus", "seats": 300, "eur_per_day": 3900},
}
MEMS = [
    hit(1, "Last year the Berlin venue needed a deposit of 30 percent. " * 3),
    hit(2, "Organisers prefer tables sorted by price, cheapest first. " * 3),
    hit(3, "Catering is extra at the Kuehlhaus. " * 3),
]
GOAL = "Plan a three-day tech salon in Europe for 150 people. " * 4
CONSTRAINTS = ["budget under 20k EUR", "dates in October", "wheelchair access"]


def build(budget: int, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "task": TASK,
        "goal": GOAL,
        "constraints": CONSTRAINTS,
        "dep_results": DEPS,
        "memories": MEMS,
        "budget_tokens": budget,
    }
    return build_context(**(args | kw))


def statuses(ctx: Any) -> dict[str, str]:
    return {b["id"]: b["status"] for b in ctx.breakdown}


def test_everything_fits_in_a_big_budget_task_last() -> None:
    ctx = build(10_000)
    assert set(statuses(ctx).values()) == {"included"}
    p = ctx.prompt
    order = [p.index(s) for s in ("## Goal", "## Constraints", "## Relevant memories")]
    order += [p.index("## Results of the tasks"), p.index("## Your task")]
    assert order == sorted(order)
    assert "Expected output: A markdown table" in p and "LX Factory" in p
    assert "[note, from s0/t2 event 2]" in p
    assert ctx.used == estimate_tokens(p) <= 10_000
    assert sum(b["tokens"] for b in ctx.breakdown) >= ctx.used


def test_dependencies_outrank_memories_which_outrank_general_context() -> None:
    full = build(10_000)
    need = {b["id"]: b["tokens"] for b in full.breakdown}
    # Room for the task, both dependencies and part of the first memory.
    budget = need["write_report"] + need["lisbon"] + need["berlin"] + 25
    ctx = build(budget)
    st = statuses(ctx)
    assert st["write_report"] == st["lisbon"] == st["berlin"] == "included"
    assert st["m1"] == "truncated"
    assert st["m2"] == st["m3"] == st["goal"] == "dropped"
    assert all(st[f"constraint-{i}"] == "dropped" for i in (1, 2, 3))
    assert TRUNCATED in ctx.prompt and "## Goal" not in ctx.prompt
    assert ctx.used <= budget
    dropped = {b["id"]: b["why"] for b in ctx.dropped}
    assert set(dropped) == {"m2", "m3", "goal", "constraint-1"} | {
        "constraint-2",
        "constraint-3",
    }
    assert all("higher-priority" in why for why in dropped.values())


def test_memories_outrank_goal_and_constraints() -> None:
    full = build(10_000)
    need = sum(b["tokens"] for b in full.breakdown if b["section"] != "goal")
    need -= sum(b["tokens"] for b in full.breakdown if b["section"] == "constraint")
    ctx = build(need + 3)  # everything but the general context, and 3 spare
    st = statuses(ctx)
    assert [st[f"m{i}"] for i in (1, 2, 3)] == ["included"] * 3
    assert st["goal"] == "dropped"  # 3 tokens is too little to be useful
    assert "too few" in next(b["why"] for b in ctx.breakdown if b["id"] == "goal")


def test_a_task_larger_than_the_budget_is_cut_and_the_rest_dropped() -> None:
    ctx = build(12)
    st = statuses(ctx)
    assert st["write_report"] == "truncated"
    assert {v for k, v in st.items() if k != "write_report"} == {"dropped"}
    assert ctx.used <= 12 and ctx.prompt.endswith(TRUNCATED.strip())


def test_a_memory_repeating_a_dependency_result_is_dropped_as_duplicate() -> None:
    dup = hit(
        9, "lisbon: LX Factory 4100", kind="result", session_id="me", task_id="lisbon"
    )
    ctx = build(10_000, memories=[dup, *MEMS], session_id="me")
    row = next(b for b in ctx.breakdown if b["id"] == "m9")
    assert row["status"] == "dropped" and "duplicate" in row["why"]
    assert "lisbon: LX Factory 4100" not in ctx.prompt
    assert statuses(ctx)["m1"] == "included"


def test_task_given_as_text_or_dict() -> None:
    a = build_context(
        task="Say hello",
        goal=None,
        dep_results={},
        memories=[],
        budget_tokens=100,
    )
    assert a.prompt == "## Your task\nSay hello"
    b = build_context(
        task={"id": "t", "description": "Do it", "expected_output": "Done"},
        goal="g",
        dep_results={"x": "plain text result"},
        memories=[],
        budget_tokens=100,
    )
    assert (
        "### x\nplain text result" in b.prompt and "Expected output: Done" in b.prompt
    )
    with pytest.raises(ValueError, match="budget_tokens"):
        build(0)


def test_breakdown_is_the_context_built_event() -> None:
    ctx = build(60)
    payload = ctx.event_payload()
    ev = make_event("context_built", session_id="s", ts=0.0, **payload)
    back = json.loads(ev.model_dump_json())  # the typed fields, as stored
    assert back["budget"] == 60 and back["used"] == ctx.used
    assert back["estimator"] == "estimate_tokens"
    assert [i["id"] for i in back["items"]][:3] == ["write_report", "lisbon", "berlin"]
    for item in back["items"]:
        assert set(item) == {"section", "id", "tokens", "full_tokens", "status", "why"}
        assert item["status"] in ("included", "truncated", "dropped") and item["why"]
    assert ctx.sections["task"] > 0


def test_the_default_estimator_counts_utf8_bytes_over_three() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abc") == 1
    assert estimate_tokens("abcd") == 2
    assert estimate_tokens("é") == 1  # 2 bytes
    assert estimate_tokens("日本語") == 3  # 9 bytes


def lumpy(text: str) -> int:
    """An estimator that is not additive: whole texts cost more than their parts."""
    return len(text.split()) + text.count("\n") * 2 + (len(text) > 200) * 10


@settings(max_examples=150, deadline=None)
@given(
    budget=st.integers(1, 400),
    n_deps=st.integers(0, 4),
    n_mems=st.integers(0, 6),
    sizes=st.lists(st.integers(0, 60), min_size=12, max_size=12),
    use_lumpy=st.booleans(),
)
def test_never_over_budget(
    budget: int, n_deps: int, n_mems: int, sizes: list[int], use_lumpy: bool
) -> None:
    word = "memory é 日本 "
    deps = {f"d{i}": word * sizes[i] for i in range(n_deps)}
    mems = [hit(i + 1, word * sizes[4 + i]) for i in range(n_mems)]
    est = lumpy if use_lumpy else None
    ctx = build_context(
        task={"id": "t", "description": word * sizes[10]},
        goal=word * sizes[11],
        constraints=["c1", "c2"],
        dep_results=deps,
        memories=mems,
        budget_tokens=budget,
        estimator=est,
    )
    count = est or estimate_tokens
    assert count(ctx.prompt) <= budget
    assert ctx.used == count(ctx.prompt)
    # Strict priority: nothing is in the prompt after something more important
    # was dropped or cut.
    seen_cut = False
    for b in ctx.breakdown:
        if seen_cut:
            assert b["status"] == "dropped", ctx.breakdown
        seen_cut = seen_cut or b["status"] != "included"


# -- Anthropic's count_tokens, through the real SDK over a mock transport -------


def counting_client(
    status: int = 200,
) -> tuple[anthropic.Anthropic, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        seen.append(body)
        assert request.url.path == "/v1/messages/count_tokens"
        if status != 200:
            return httpx2.Response(
                status,
                json={"type": "error", "error": {"type": "api_error", "message": "x"}},
            )
        text = body["messages"][0]["content"]
        # 5 tokens of message framing plus one per word.
        return httpx2.Response(200, json={"input_tokens": 5 + len(text.split())})

    client = anthropic.Anthropic(
        api_key="test-key",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    return client, seen


def test_anthropic_counter_subtracts_framing_and_caches() -> None:
    client, seen = counting_client()
    count = AnthropicTokenCounter(client, model="claude-test")
    assert count("one two three") == 3
    assert count("one two three") == 3
    assert count("") == 0
    assert len(seen) == 2  # the framing probe, then the text once
    assert seen[1] == {
        "model": "claude-test",
        "messages": [{"role": "user", "content": "one two three"}],
    }
    assert count.name == "anthropic.count_tokens(claude-test)"


def test_context_with_the_anthropic_counter_stays_in_budget() -> None:
    client, seen = counting_client()
    count = AnthropicTokenCounter(client, model="claude-test")
    ctx = build(40, estimator=count)
    assert ctx.estimator == "anthropic.count_tokens(claude-test)"
    assert count(ctx.prompt) <= 40 and ctx.used <= 40
    assert statuses(ctx)["write_report"] == "included"
    assert any(b["status"] == "dropped" for b in ctx.breakdown)
    assert seen  # it really went through the SDK


def test_anthropic_counter_falls_back_when_the_api_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client, seen = counting_client(status=500)
    count = AnthropicTokenCounter(client, model="claude-test")
    with caplog.at_level(logging.WARNING, logger="argus_lab"):
        assert count("abcdef") == estimate_tokens("abcdef")
        assert count("ghijkl") == estimate_tokens("ghijkl")
    assert len(seen) == 2
    assert sum("count_tokens failed" in r.message for r in caplog.records) == 1


def test_token_estimator_uses_the_network_only_when_allowed() -> None:
    client, seen = counting_client()
    assert token_estimator() is estimate_tokens
    assert token_estimator(client, allow=False) is estimate_tokens
    exact = token_estimator(client, model="claude-test")
    assert isinstance(exact, AnthropicTokenCounter)
    assert not seen  # nothing is counted until asked


def test_an_async_client_is_refused_clearly() -> None:
    aclient = anthropic.AsyncAnthropic(
        api_key="test-key",
        max_retries=0,
        http_client=httpx2.AsyncClient(
            transport=httpx2.MockTransport(lambda r: httpx2.Response(500))
        ),
    )
    with pytest.raises(TypeError, match="sync"):
        AnthropicTokenCounter(aclient, model="m")("hello")


def test_a_cut_never_ends_inside_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task text cut to fit holds each secret whole or none of it: a model
    quoting a cut prefix would store what no mask recognises."""
    secret = "Zq8vN3kP7wR2xT6mB9cL4hJ1"
    monkeypatch.setenv("ARGUS_TEST_CTX_TOKEN", secret)
    for shift in range(0, 40, 3):
        desc = "word " * (20 + shift) + secret + " tail" * 50
        ctx = build_context(
            task={"id": "t", "description": desc},
            goal=None,
            dep_results={},
            memories=[],
            budget_tokens=40,
            estimator=lambda s: len(s) // 4,
        )
        body = ctx.prompt.split("\n", 1)[1]
        for n in range(12, len(secret)):
            part = secret[:n]
            assert part not in body or secret in body, (shift, n)
