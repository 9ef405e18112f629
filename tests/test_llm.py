"""The model layer: records, hashing, prices, AnthropicModel over MockTransport,
error mapping, retries, and record/replay. No test reaches the network."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest

import argus_lab as al
from argus_lab.llm import (
    DEFAULT_MODEL,
    AnthropicModel,
    JsonDirStore,
    JsonlStore,
    MemoryStore,
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    Price,
    RawBlock,
    ReplayMiss,
    ReplyCache,
    RetryPolicy,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    complete_with_retries,
    cost,
    price_for,
)
from argus_lab.llm.testing import FunctionModel, RecordingModel, ReplayModel, tool_call
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


TOOL = {
    "name": "lookup",
    "description": "Looks a word up.",
    "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}},
}


def ask(
    words: str = "Plan a three-day tech salon in Lisbon", **kw: Any
) -> ModelRequest:
    return ModelRequest(messages=[Message.user(words)], **kw)


class Sleeps:
    """An injected sleep that records the delays it was asked for."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


# ---------------------------------------------------------------------- the guard


def test_the_network_guard_refuses_real_requests() -> None:
    with pytest.raises(RuntimeError, match="real network request"):
        httpx2.Client().get("https://api.anthropic.com/v1/models")


def test_import_argus_lab_does_not_import_the_sdk() -> None:
    code = (
        "import sys, argus_lab, argus_lab.llm, argus_lab.plan.llm; "
        "print('anthropic' in sys.modules, 'httpx2' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "False"]


# ------------------------------------------------------------------------ records


def test_request_hash_is_canonical_and_ignores_volatile_fields() -> None:
    a = ask(tools=[TOOL], purpose="plan", model="claude-opus-5-5")
    shuffled = dict(reversed(list(TOOL.items())))
    b = ask(tools=[shuffled], purpose="llm_task")
    assert a.hash() == b.hash()
    assert ask().hash() != ask("Plan a four-day salon").hash()
    assert ask().hash() != ask(system="Be brief.").hash()
    assert ask().hash() == ask(max_tokens=None, extra={}).hash()


def test_a_recording_keeps_no_hash_of_a_secret_to_test_guesses_against(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The recording stores the masked request beside its hash: a hash over
    the clear text let anyone holding the file test guesses of a weak secret."""
    import hashlib

    from argus_lab.redact import MASK

    def clear_hash(req: ModelRequest) -> str:  # the hash as it was made before
        data = req.model_dump(
            mode="json", exclude={"model", "purpose"}, exclude_defaults=True
        )
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    plain = ask("Plan a four-day salon")
    assert plain.hash() == clear_hash(plain)  # recordings without secrets match

    monkeypatch.setenv("SALON_API_TOKEN", "pw-lemon-42")
    secret = ask("call it with pw-lemon-42 and sk-ant-api03-" + "x" * 40)
    store = MemoryStore()
    cache = ReplyCache(store)
    cache.put("m", secret, ModelResponse(content=[text("ok")], stop_reason="end_turn"))
    (key,) = list(store.keys())
    row = store.get(key)
    assert row is not None
    assert "pw-lemon-42" not in json.dumps(row)
    for guess in ("pw-lemon-41", "pw-lemon-42", "pw-lemon-43"):
        guessed = ask(f"call it with {guess} and sk-ant-api03-" + "x" * 40)
        assert clear_hash(guessed) != row["request_hash"]
    masked = ask(f"call it with {MASK} and {MASK}")
    assert row["request_hash"] == secret.hash() == masked.hash()
    # A replay finds the reply under another value of the same secret.
    monkeypatch.setenv("SALON_API_TOKEN", "dummy-in-ci-000")
    assert (
        ask("call it with dummy-in-ci-000 and sk-ant-api03-" + "y" * 40).hash()
        == (row["request_hash"])
    )


def test_blocks_round_trip_including_thinking_verbatim() -> None:
    thinking = {"type": "thinking", "thinking": "", "signature": "sig=="}
    r = ModelResponse(
        content=[thinking, text("hi"), tool_use("lookup", {"word": "x"})],
        stop_reason="tool_use",
    )
    assert isinstance(r.content[0], RawBlock)
    assert isinstance(r.content[1], TextBlock)
    assert r.tool_uses == [
        ToolUseBlock(id="toolu_01", name="lookup", input={"word": "x"})
    ]
    assert r.as_message().to_wire()["content"][0] == thinking
    back = ModelResponse.model_validate_json(r.model_dump_json())
    assert back == r


def test_last_user_text_reads_tool_results_too() -> None:
    req = ModelRequest(
        messages=[
            Message.user("first"),
            Message.assistant(tool_call("lookup", {"word": "a"}, id="t1")),
            Message.user(
                ToolResultBlock(tool_use_id="t1", content="cycle: a -> b -> a")
            ),
        ]
    )
    assert req.last_user_text() == "cycle: a -> b -> a"


# ------------------------------------------------------------------------- prices


def test_cost_from_the_dated_price_table() -> None:
    u = Usage(
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_read_tokens=1_000_000,
        cache_write_tokens=1_000_000,
    )
    assert cost(u, "claude-opus-5-5") == pytest.approx(4 + 20 + 0.20 + 5)
    assert cost(u, "claude-sonnet-5-5-20260928") == pytest.approx(2 + 10 + 0.10 + 2.5)
    assert cost(u, "claude-fable-5-1[1m]") == pytest.approx(10 + 50 + 0.25 + 12.5)
    assert cost(u, "gpt-something") is None
    mine = {"gpt-something": Price(input=1, output=2, cache_write=0, cache_read=0)}
    assert cost(u, "gpt-something", mine) == pytest.approx(3)


def test_haiku_5_5_long_prompts_cost_more() -> None:
    short = Usage(input_tokens=100_000, output_tokens=1_000_000)
    long = Usage(input_tokens=100_001, output_tokens=1_000_000)
    assert cost(short, "claude-haiku-5-5") == pytest.approx(0.01 + 0.5)
    assert cost(long, "claude-haiku-5-5") == pytest.approx(0.0500005 + 2.5)


def test_default_model_is_priced_and_not_deprecated() -> None:
    from anthropic._data import DEPRECATED_MODELS
    from anthropic.types.model_param import ModelParam

    assert DEFAULT_MODEL not in DEPRECATED_MODELS
    assert DEFAULT_MODEL in ModelParam.__args__[0].__args__  # type: ignore[attr-defined]
    assert price_for(DEFAULT_MODEL) is not None


# ------------------------------------------------------------ AnthropicModel wire


def test_request_carries_cache_control_and_no_sampling_params() -> None:
    api = FakeAPI(message(text("ok"), cache_read=900, cache_write=0))
    m = AnthropicModel(client=api.client())
    r = m.complete_sync(ask(system="You plan.", tools=[TOOL, {**TOOL, "name": "b"}]))
    body = api.bodies[0]
    assert body["model"] == DEFAULT_MODEL
    assert body["system"] == [
        {"type": "text", "text": "You plan.", "cache_control": {"type": "ephemeral"}}
    ]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][1]["cache_control"] == {"type": "ephemeral"}
    assert "temperature" not in body and "tool_choice" not in body
    assert r.text == "ok" and r.usage.cache_read_tokens == 900
    assert (
        r.request_hash
        == ask(system="You plan.", tools=[TOOL, {**TOOL, "name": "b"}]).hash()
    )


def test_caching_can_be_turned_off() -> None:
    api = FakeAPI(message(text("ok")))
    AnthropicModel(client=api.client(), cache_prompt=False).complete_sync(
        ask(system="S", tools=[TOOL])
    )
    assert "cache_control" not in json.dumps(api.bodies[0])


def test_usage_and_cost_are_read_from_the_reply() -> None:
    api = FakeAPI(
        message(
            text("done"),
            input_tokens=2_000,
            output_tokens=500,
            cache_read=10_000,
            cache_write=3_000,
        )
    )
    r = AnthropicModel(client=api.client()).complete_sync(ask())
    assert r.usage == Usage(
        input_tokens=2_000,
        output_tokens=500,
        cache_read_tokens=10_000,
        cache_write_tokens=3_000,
    )
    want = (2_000 * 4 + 500 * 20 + 10_000 * 0.2 + 3_000 * 5) / 1e6
    assert r.cost_usd == pytest.approx(want)
    payload = r.event_payload("plan")
    assert set(payload) == {
        "model",
        "purpose",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "cost_usd",
        "request_hash",
        "cached",
        "stop_reason",
    }


def test_unknown_model_has_no_cost_and_says_why() -> None:
    api = FakeAPI(message(text("ok"), model="claude-new-9"))
    r = AnthropicModel("claude-new-9", client=api.client()).complete_sync(ask())
    assert r.cost_usd is None
    assert r.cost_note is not None and "prices=" in r.cost_note
    priced = AnthropicModel(
        "claude-new-9",
        client=FakeAPI(message(text("ok"), model="claude-new-9")).client(),
        prices={"claude-new-9": Price(input=1, output=1, cache_write=1, cache_read=1)},
    ).complete_sync(ask())
    assert priced.cost_usd == pytest.approx(1500 / 1e6)


def test_async_client_works_too() -> None:
    api = FakeAPI(message(tool_use("lookup", {"word": "x"})))
    m = AnthropicModel(client=api.async_client())
    r = asyncio.run(m.complete(ask(tools=[TOOL])))
    assert r.tool_uses[0].input == {"word": "x"} and r.stop_reason == "tool_use"


def test_sync_convenience_works_inside_a_running_loop() -> None:
    api = FakeAPI(message(text("from a thread")))
    m = AnthropicModel(client=api.client())

    async def in_a_notebook_cell() -> str:
        return m.complete_sync(ask()).text  # a loop is running here, as in Jupyter

    assert asyncio.run(in_a_notebook_cell()) == "from a thread"


def test_repr_and_errors_never_show_the_key() -> None:
    assert FAKE_KEY not in repr(AnthropicModel(api_key=FAKE_KEY))
    plain = "plain-secret-value-123"  # not key-shaped: masked because it is the key
    api = FakeAPI(error(401, f"invalid key {plain} or {FAKE_KEY}"))
    client = api.client().with_options(api_key=plain)
    with pytest.raises(ModelError) as e:
        AnthropicModel(client=client).complete_sync(ask())
    assert plain not in str(e.value) and FAKE_KEY not in str(e.value)
    assert "ANTHROPIC_API_KEY" in str(e.value)


def test_a_broken_credentials_config_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("ANTHROPIC_PROFILE", "work")
    with pytest.raises(ModelError) as e:
        AnthropicModel().complete_sync(ask())
    assert "ANTHROPIC_API_KEY" in e.value.message and "ReplayModel" in e.value.message


# ---------------------------------------------------------------- error mapping


@pytest.mark.parametrize(
    ("status", "headers", "retry_after"),
    [
        (429, {"retry-after": "7"}, 7.0),
        (429, {"retry-after-ms": "1500"}, 1.5),
        (529, {}, None),
        (500, {}, None),
        (503, {"retry-after": "2"}, 2.0),
    ],
)
def test_transient_statuses_map_to_transient_error(
    status: int, headers: dict[str, str], retry_after: float | None
) -> None:
    api = FakeAPI(error(status, "busy", headers))
    m = AnthropicModel(client=api.client())  # the SDK's default max_retries=2 ...
    with pytest.raises(al.TransientError) as e:
        m.complete_sync(ask())
    assert e.value.retry_after == retry_after
    assert api.calls == 1  # ... is turned off: our policy owns retries


@pytest.mark.parametrize(
    ("status", "advice"),
    [
        (400, "invalid"),
        (401, "ANTHROPIC_API_KEY"),
        (403, "permission"),
        (404, "model name"),
    ],
)
def test_permanent_statuses_map_to_model_error(status: int, advice: str) -> None:
    api = FakeAPI(error(status, "nope"))
    with pytest.raises(ModelError) as e:
        AnthropicModel(client=api.client()).complete_sync(ask())
    assert not isinstance(e.value, al.TransientError)
    assert isinstance(e.value, al.ArgusError)
    assert e.value.status_code == status and advice in e.value.message
    assert "nope" in e.value.message and api.calls == 1


def test_x_should_retry_header_decides() -> None:
    api = FakeAPI(error(400, "try again", {"x-should-retry": "true"}))
    with pytest.raises(al.TransientError):
        AnthropicModel(client=api.client()).complete_sync(ask())


@pytest.mark.parametrize(
    "exc",
    [
        httpx2.ConnectError("connection refused"),
        httpx2.ReadTimeout("read timed out"),
    ],
)
def test_connection_errors_and_timeouts_are_transient(exc: Exception) -> None:
    api = FakeAPI(exc)
    with pytest.raises(al.TransientError):
        AnthropicModel(client=api.client()).complete_sync(ask())
    assert api.calls == 1


def test_missing_key_names_the_offline_alternatives() -> None:
    m = AnthropicModel()  # constructing is fine: the key is checked on first use
    with pytest.raises(ModelError) as e:
        m.complete_sync(ask())
    msg = e.value.message
    for needed in (
        "ANTHROPIC_API_KEY",
        "YAML",
        "HTNPlanner",
        "FunctionModel",
        "ReplayModel",
    ):
        assert needed in msg


def test_a_key_without_a_client_reaches_for_the_network() -> None:
    # With a key and no client, a real SDK client is built: the guard stops it.
    m = AnthropicModel(api_key=FAKE_KEY)
    with pytest.raises(al.TransientError) as e:
        m.complete_sync(ask())
    assert "real network request" in str(e.value)


def test_too_large_max_tokens_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="streaming"):
        AnthropicModel(max_tokens=64_000)
    with pytest.raises(ModelError, match="streaming"):
        AnthropicModel(client=FakeAPI().client()).complete_sync(ask(max_tokens=64_000))


# -------------------------------------------------------------------- retries


def test_429_with_retry_after_is_retried_after_exactly_that_long() -> None:
    api = FakeAPI(error(429, "slow down", {"retry-after": "3"}), message(text("ok")))
    sleeps = Sleeps()
    seen: list[tuple[int, float | None, float]] = []
    r = asyncio.run(
        complete_with_retries(
            AnthropicModel(client=api.client()),
            ask(),
            policy=RetryPolicy(sleep=sleeps),
            on_retry=lambda n, e, d: seen.append((n, e.retry_after, d)),
        )
    )
    assert r.text == "ok" and api.calls == 2
    assert sleeps.delays == [3.0] and seen == [(1, 3.0, 3.0)]


def test_400_is_not_retried() -> None:
    api = FakeAPI(error(400, "bad"), message(text("never")))
    sleeps = Sleeps()
    with pytest.raises(ModelError):
        asyncio.run(
            complete_with_retries(
                AnthropicModel(client=api.client()),
                ask(),
                policy=RetryPolicy(sleep=sleeps),
            )
        )
    assert api.calls == 1 and sleeps.delays == []


def test_retries_back_off_and_then_give_up() -> None:
    api = FakeAPI(*[error(529, "overloaded")] * 3)
    sleeps = Sleeps()
    policy = RetryPolicy(retries=2, base=1.0, sleep=sleeps)
    with pytest.raises(al.TransientError):
        asyncio.run(
            complete_with_retries(
                AnthropicModel(client=api.client()), ask(), policy=policy
            )
        )
    assert api.calls == 3
    assert 0.5 <= sleeps.delays[0] <= 1.0 and 1.0 <= sleeps.delays[1] <= 2.0


def test_a_very_long_retry_after_is_handed_back_not_waited_out() -> None:
    api = FakeAPI(error(429, "quota", {"retry-after": "3600"}))
    sleeps = Sleeps()
    with pytest.raises(al.TransientError) as e:
        asyncio.run(
            complete_with_retries(
                AnthropicModel(client=api.client()),
                ask(),
                policy=RetryPolicy(sleep=sleeps),
            )
        )
    assert e.value.retry_after == 3600 and sleeps.delays == []
    assert "max_retry_after" in e.value.message


# ------------------------------------------------------------- record and replay


@pytest.mark.parametrize("kind", ["dir", "jsonl"])
def test_record_then_replay_makes_no_requests(tmp_path: Path, kind: str) -> None:
    path = tmp_path / ("replies" if kind == "dir" else "replies.jsonl")
    api = FakeAPI(
        message(text("first"), cache_write=1000),
        message(tool_use("lookup", {"word": "salon"}), id="msg_02"),
    )
    live = RecordingModel(AnthropicModel(client=api.client()), path)
    requests = [ask(system="S", tools=[TOOL]), ask("Look up salon", tools=[TOOL])]
    recorded = [live.complete_sync(r) for r in requests]
    assert api.calls == 2

    replay = ReplayModel(path)  # a fresh process would do the same: it reads files
    replayed = [replay.complete_sync(r) for r in requests]
    assert api.calls == 2  # zero new HTTP requests
    for a, b in zip(recorded, replayed, strict=True):
        assert (a.content, a.usage, a.stop_reason, a.model, a.request_hash) == (
            b.content,
            b.usage,
            b.stop_reason,
            b.model,
            b.request_hash,
        )
        assert b.cached and b.cost_usd == 0.0 and not a.cached
    assert replay.hits == 2

    files = list(path.glob("*/*.json")) if kind == "dir" else [path]
    for f in files:  # plain JSON, no pickle
        for line in f.read_text().splitlines() if kind == "jsonl" else [f.read_text()]:
            json.loads(line)


def test_strict_miss_names_the_request_and_what_changed(tmp_path: Path) -> None:
    store = JsonDirStore(tmp_path / "c")
    recorder = RecordingModel(
        FunctionModel(lambda r: "hello", name=DEFAULT_MODEL), store
    )
    recorder.complete_sync(ask(system="v1"))
    replay = ReplayModel(store)
    req = ask(system="v2")
    with pytest.raises(ReplayMiss) as e:
        replay.complete_sync(req)
    msg = e.value.message
    assert DEFAULT_MODEL in msg and req.hash() in msg
    assert "Plan a three-day tech salon" in msg
    assert "differs in: system" in msg
    assert e.value.request_hash == req.hash()


def test_miss_for_another_model_says_so() -> None:
    store = MemoryStore()
    RecordingModel(
        FunctionModel(lambda r: "hi", name="claude-sonnet-5-5"), store
    ).complete_sync(ask())
    with pytest.raises(ReplayMiss, match="pass model="):
        ReplayModel(store).complete_sync(ask())
    assert (
        ReplayModel(store, model="claude-sonnet-5-5").complete_sync(ask()).text == "hi"
    )


def test_non_strict_replay_asks_the_fallback_once_and_records() -> None:
    api = FakeAPI(message(text("paid once")))
    store = MemoryStore()
    m = ReplayModel(store, strict=False, fallback=AnthropicModel(client=api.client()))
    first = m.complete_sync(ask())
    second = m.complete_sync(ask())
    assert api.calls == 1 and (m.misses, m.hits) == (1, 1)
    assert not first.cached and second.cached and second.text == "paid once"
    with pytest.raises(ValueError, match="strict=False"):
        ReplayModel(store, fallback=AnthropicModel(client=api.client()))


def test_a_corrupt_recording_is_a_clear_error(tmp_path: Path) -> None:
    store = JsonDirStore(tmp_path / "c")
    cache = ReplyCache(store)
    RecordingModel(
        FunctionModel(lambda r: "x", name=DEFAULT_MODEL), cache
    ).complete_sync(ask())
    (f,) = (tmp_path / "c").glob("*/*.json")
    f.write_text("{not json")
    with pytest.raises(al.CorruptCheckpointError, match="delete it"):
        ReplayModel(cache).complete_sync(ask())


def test_recorded_requests_are_redacted_but_still_hit(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "c.jsonl")
    req = ask(f"use the key {FAKE_KEY} please")
    RecordingModel(
        FunctionModel(lambda r: "ok", name=DEFAULT_MODEL), store
    ).complete_sync(req)
    assert FAKE_KEY not in (tmp_path / "c.jsonl").read_text()
    assert ReplayModel(JsonlStore(tmp_path / "c.jsonl")).complete_sync(req).text == "ok"


# ------------------------------------------------------------------ FunctionModel


def test_function_model_scripts_text_tool_calls_and_async() -> None:
    async def fn(req: ModelRequest) -> Any:
        if len(req.messages) == 1:
            return ["Let me look.", {"name": "lookup", "input": {"word": "x"}}]
        return "done"

    m = FunctionModel(fn)
    r1 = m.complete_sync(ask(tools=[TOOL]))
    assert r1.stop_reason == "tool_use" and r1.tool_uses[0].name == "lookup"
    assert r1.usage.input_tokens > 0 and r1.cost_usd == 0.0
    follow = ask(tools=[TOOL]).model_copy(
        update={
            "messages": [
                *ask().messages,
                r1.as_message(),
                Message.user(
                    ToolResultBlock(tool_use_id=r1.tool_uses[0].id, content="42")
                ),
            ]
        }
    )
    r2 = m.complete_sync(follow)
    assert r2.text == "done" and r2.stop_reason == "end_turn"
    assert len(m.requests) == 2
    assert isinstance(m, al.llm.Model)
