"""The model layer: request/response records, the ``Model`` protocol, prices, retries.

A model is anything with a ``name`` and one async method,
``complete(ModelRequest) -> ModelResponse``. Records mirror the Anthropic Messages
API (content blocks: text, tool_use, tool_result; anything else, such as thinking
blocks, is kept verbatim so it can be echoed back). Provider modules only map this
shape to and from their wire format; nothing here imports a provider SDK.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import hashlib
import json
from collections.abc import Coroutine, Mapping
from typing import Annotated, Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter

from argus_lab.errors import ModelError
from argus_lab.llm.prices import (
    PRICES,
    PRICES_AS_OF,
    Price,
    cost,
    price_for,
)
from argus_lab.llm.retry import RetryPolicy, complete_with_retries

__all__ = [
    "DEFAULT_MODEL",
    "PRICES",
    "PRICES_AS_OF",
    "Block",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "Price",
    "RawBlock",
    "RetryPolicy",
    "TextBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
    "complete_with_retries",
    "cost",
    "price_for",
    "run_sync",
]

T = TypeVar("T")

DEFAULT_MODEL = "claude-opus-5-5"
"""The default Anthropic model: current and not flagged deprecated by anthropic 2.14
(Anthropic's docs recommend it as the starting point for most workloads)."""

OFFLINE_ALTERNATIVES = (
    "To work offline: write the plan as YAML (al.Plan.from_yaml), plan with "
    "al.HTNPlanner(domain), or use al.llm.testing.FunctionModel(fn) / "
    "al.llm.testing.ReplayModel(cache) in place of AnthropicModel."
)


# --------------------------------------------------------------------- content blocks

_BLOCK_CONFIG = ConfigDict(frozen=True, extra="allow")


class TextBlock(BaseModel):
    """Text from the user or the model."""

    model_config = _BLOCK_CONFIG

    type: Literal["text"] = "text"
    """Always "text"."""
    text: str
    """The text."""


class ToolUseBlock(BaseModel):
    """The model asks for a tool call."""

    model_config = _BLOCK_CONFIG

    type: Literal["tool_use"] = "tool_use"
    """Always "tool_use"."""
    id: str
    """Call id; the matching ToolResultBlock names it."""
    name: str
    """Tool name."""
    input: dict[str, Any] = Field(default_factory=dict)
    """Arguments, as JSON."""


class ToolResultBlock(BaseModel):
    """The answer to a ToolUseBlock, sent in the next user message."""

    model_config = _BLOCK_CONFIG

    type: Literal["tool_result"] = "tool_result"
    """Always "tool_result"."""
    tool_use_id: str
    """The id of the ToolUseBlock this answers."""
    content: str | list[dict[str, Any]] = ""
    """The result as text (or content blocks)."""
    is_error: bool = False
    """True when the call failed; the content says why."""


class RawBlock(BaseModel):
    """Any other block (thinking, redacted_thinking, server tools), kept verbatim.

    Thinking blocks must be echoed back unchanged in the next request, so every
    field the API sent is kept as an extra field.
    """

    model_config = _BLOCK_CONFIG

    type: str
    """The block type as the API named it."""


def _block_tag(v: Any) -> str:
    t = v.get("type") if isinstance(v, dict) else getattr(v, "type", None)
    return t if t in ("text", "tool_use", "tool_result") else "raw"


Block = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[RawBlock, Tag("raw")],
    Discriminator(_block_tag),
]
"""Any content block; unknown types parse as RawBlock."""

_block_adapter: TypeAdapter[Block] = TypeAdapter(Block)


def block_from_dict(data: Mapping[str, Any]) -> Block:
    """Parses one content block in Anthropic wire format."""
    return _block_adapter.validate_python(dict(data))


def block_to_dict(block: Block) -> dict[str, Any]:
    """Returns a block in Anthropic wire format (raw blocks exactly as received)."""
    if isinstance(block, RawBlock):
        return block.model_dump(mode="json")
    return block.model_dump(mode="json", exclude_none=True)


class Message(BaseModel):
    """One turn of a conversation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["user", "assistant"]
    """Who speaks."""
    content: str | list[Block]
    """Plain text, or content blocks."""

    @classmethod
    def user(cls, *content: str | Block) -> Message:
        """A user message from text and/or blocks."""
        return cls(role="user", content=_content(content))

    @classmethod
    def assistant(cls, *content: str | Block) -> Message:
        """An assistant message from text and/or blocks."""
        return cls(role="assistant", content=_content(content))

    def to_wire(self) -> dict[str, Any]:
        """The message in Anthropic wire format."""
        if isinstance(self.content, str):
            return {"role": self.role, "content": self.content}
        return {"role": self.role, "content": [block_to_dict(b) for b in self.content]}

    @property
    def text(self) -> str:
        """The message's text blocks, joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


def _content(parts: tuple[str | Block, ...]) -> str | list[Block]:
    if len(parts) == 1 and isinstance(parts[0], str):
        return parts[0]
    return [TextBlock(text=p) if isinstance(p, str) else p for p in parts]


# --------------------------------------------------------------- request and response

_VOLATILE = frozenset({"model", "purpose"})
"""Fields left out of the request hash: the model is the key's other half, and the
purpose is a label for events, not part of what the model sees."""


class ModelRequest(BaseModel):
    """What to ask a model. Mirrors the Anthropic Messages API."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    messages: list[Message]
    """The conversation so far; the last one is usually the user's."""
    system: str = ""
    """The system prompt (cached as part of the stable prefix)."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """Tool definitions in Anthropic format: name, description, input_schema."""
    tool_choice: dict[str, Any] | None = None
    """E.g. {"type": "auto"} or {"type": "tool", "name": "submit_plan"}."""
    max_tokens: int | None = None
    """Output limit; None takes the model's default."""
    model: str | None = None
    """Model name; None takes the Model object's own ``name``."""
    temperature: float | None = None
    """Sampling temperature; None sends none (current Claude models reject it)."""
    stop_sequences: list[str] = Field(default_factory=list)
    """Texts that end the reply."""
    cache_prompt: bool = True
    """Mark the stable prefix (tools, system) for prompt caching."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Other API body fields, sent as they are (e.g. output_config, thinking)."""
    purpose: str = ""
    """A label for events ("plan", "llm_task"); not sent, not hashed."""

    def hash(self) -> str:
        """The canonical hash of what the model sees (the replay cache key).

        Sorted-key JSON of the request without volatile fields (model, purpose)
        and without fields left at their defaults, so adding an optional field to
        this class later does not change existing hashes. Its secrets masked:
        a recording keeps the masked request beside this hash, which must not
        let its reader test guesses of a weak secret (and a reply recorded
        with a real key is found with a dummy one).
        """
        from argus_lab._redact_given import masked_strings

        data = self.model_dump(
            mode="json", exclude=set(_VOLATILE), exclude_defaults=True
        )
        data = masked_strings(data)
        text = json.dumps(
            data, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def last_user_text(self, words: int = 12) -> str:
        """The first words of the last user message's text, for error messages."""
        for m in reversed(self.messages):
            if m.role != "user":
                continue
            text = m.text
            if not text and isinstance(m.content, list):
                for b in m.content:
                    if isinstance(b, ToolResultBlock):
                        c = b.content
                        text = c if isinstance(c, str) else json.dumps(c)
                        break
            parts = text.split()
            if len(parts) <= words:
                return " ".join(parts)
            # Cut before a secret the cut would split (a passphrase's words):
            # this names the request in an error, which is stored masked.
            from argus_lab.redact import cut_clear

            some = " ".join(parts[:words])
            return cut_clear(" ".join(parts), len(some)).rstrip() + " ..."
        return ""


class Usage(BaseModel):
    """Tokens one model call used (Anthropic counts cached input apart)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int = 0
    """Input tokens billed at the base rate (not read from or written to cache)."""
    output_tokens: int = 0
    """Output tokens, thinking included."""
    cache_read_tokens: int = 0
    """Input tokens read from the prompt cache."""
    cache_write_tokens: int = 0
    """Input tokens written to the prompt cache."""

    @property
    def total_tokens(self) -> int:
        """All tokens of every kind."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


class ModelResponse(BaseModel):
    """A model's reply, its usage and cost."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    content: list[Block]
    """Content blocks: text, tool_use, and any others verbatim."""
    stop_reason: str | None = None
    """end_turn, tool_use, max_tokens, stop_sequence, refusal, ..."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens used."""
    model: str = ""
    """The model that answered, as the provider named it."""
    cost_usd: float | None = None
    """Cost in USD; 0.0 when served from a replay cache; None if unknown."""
    cost_note: str | None = None
    """Why cost_usd is None or 0.0."""
    request_hash: str = ""
    """``ModelRequest.hash()`` of the request this answers."""
    cached: bool = False
    """True when a recorded reply was served instead of calling the model."""
    id: str | None = None
    """The provider's message id."""

    @property
    def text(self) -> str:
        """All text blocks, joined."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        """The tool calls the model asked for, in order."""
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    def as_message(self) -> Message:
        """The reply as an assistant message, to continue the conversation."""
        return Message(role="assistant", content=list(self.content))

    def event_payload(self, purpose: str = "") -> dict[str, Any]:
        """The payload of an ``llm_call`` event for this reply."""
        return {
            "model": self.model,
            "purpose": purpose,
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
            "cache_read_tokens": self.usage.cache_read_tokens,
            "cache_write_tokens": self.usage.cache_write_tokens,
            "cost_usd": self.cost_usd,
            "request_hash": self.request_hash,
            "cached": self.cached,
            "stop_reason": self.stop_reason,
        }


# -------------------------------------------------------------------------- protocol


@runtime_checkable
class Model(Protocol):
    """Anything that answers a ModelRequest.

    Implementations: ``AnthropicModel``, and for tests and replays
    ``al.llm.testing.FunctionModel``, ``ReplayModel`` and ``RecordingModel``.
    """

    @property
    def name(self) -> str:
        """The model name requests default to (part of the replay cache key)."""
        ...

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answers one request.

        Raises:
            TransientError: worth retrying (rate limit, overload, 5xx, timeout).
            ModelError: permanent; the message says what to change.
        """
        ...


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine to completion from sync code.

    Inside a running event loop (a Jupyter cell), it runs on a fresh loop in a
    helper thread, so it never nests loops.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # The caller's context goes along (llm/recording.py), as asyncio.to_thread
    # would carry it.
    ctx = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1, "argus-llm") as pool:
        return pool.submit(ctx.run, asyncio.run, coro).result()
