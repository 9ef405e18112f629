"""Models for tests, notebooks and free replays: no network, no key.

- ``FunctionModel(fn)``: ``fn(request)`` scripts the reply (text, a tool call, a
  list of blocks, or a full ModelResponse; sync or async).
- ``RecordingModel(inner, cache)``: calls ``inner`` and records every reply.
- ``ReplayModel(cache)``: serves recorded replies keyed by (model, request hash);
  a miss in strict mode raises ``ReplayMiss`` naming the request. With
  ``strict=False, fallback=model`` a miss is asked of the fallback and recorded.
"""

from __future__ import annotations

import inspect
import itertools
import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

from argus_lab.llm.base import (
    DEFAULT_MODEL,
    Block,
    Model,
    ModelRequest,
    ModelResponse,
    Price,
    TextBlock,
    ToolUseBlock,
    Usage,
    block_from_dict,
    block_to_dict,
    cost,
    run_sync,
)
from argus_lab.llm.cache import CacheStore, ReplayMiss, ReplyCache

__all__ = [
    "FunctionModel",
    "RecordingModel",
    "ReplayMiss",
    "ReplayModel",
    "Reply",
    "tool_call",
]

Reply: TypeAlias = "str | Block | dict[str, Any] | Sequence[str | Block | dict[str, Any]] | ModelResponse"  # noqa: E501
"""What a FunctionModel's function may return: text, a block, a tool call spec
``{"name": ..., "input": {...}}``, a list of those, or a full ModelResponse."""

_ids = itertools.count(1)


def tool_call(
    name: str, input: Mapping[str, Any] | None = None, *, id: str = ""
) -> ToolUseBlock:
    """A tool_use block for a scripted reply (the id is made up if not given)."""
    return ToolUseBlock(
        id=id or f"toolu_fn_{next(_ids):04d}", name=name, input=dict(input or {})
    )


def _to_block(part: str | Block | dict[str, Any]) -> Block:
    if isinstance(part, str):
        return TextBlock(text=part)
    if isinstance(part, dict):
        if "type" in part:
            return block_from_dict(part)
        if "name" in part:
            return tool_call(
                str(part["name"]), part.get("input") or {}, id=part.get("id", "")
            )
        raise ValueError(
            f"cannot read {part!r} as a reply block: give a 'type' (wire format) "
            "or 'name' and 'input' (a tool call)"
        )
    return part


def _estimate_tokens(data: Any) -> int:
    text = (
        data if isinstance(data, str) else json.dumps(data, sort_keys=True, default=str)
    )
    return max(1, len(text) // 4)


class FunctionModel:
    """A model whose replies come from a Python function.

    Args:
        fn: ``fn(request) -> Reply`` (or an awaitable of one).
        name: The model name (used in replay keys and events).
        usage: Fixed usage per reply; by default estimated as characters / 4.
        prices: Prices by model name; without one for ``name``, cost is 0.0.

    Attributes:
        requests: Every request received, in order.
    """

    def __init__(
        self,
        fn: Callable[[ModelRequest], Reply | Awaitable[Reply]],
        *,
        name: str = "function",
        usage: Usage | None = None,
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        self.fn = fn
        self._name = name
        self.usage = usage
        self.prices = dict(prices or {})
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        """The model name."""
        return self._name

    def __repr__(self) -> str:
        return (
            f"FunctionModel({getattr(self.fn, '__name__', 'fn')}, name={self._name!r})"
        )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Calls the function and wraps what it returns as a ModelResponse."""
        self.requests.append(request)
        out = self.fn(request)
        if inspect.isawaitable(out):
            out = await out
        model = request.model or self._name
        if isinstance(out, ModelResponse):
            return out.model_copy(update={"request_hash": request.hash()})
        parts: Sequence[str | Block | dict[str, Any]] = (
            out if isinstance(out, list | tuple) else [out]  # type: ignore[list-item]
        )
        content = [_to_block(p) for p in parts]
        usage = self.usage or Usage(
            input_tokens=_estimate_tokens(
                request.model_dump(mode="json", exclude_defaults=True)
            ),
            output_tokens=_estimate_tokens([block_to_dict(b) for b in content]),
        )
        usd = cost(usage, model, self.prices) if self.prices else None
        return ModelResponse(
            content=content,
            stop_reason="tool_use"
            if any(isinstance(b, ToolUseBlock) for b in content)
            else "end_turn",
            usage=usage,
            model=model,
            cost_usd=0.0 if usd is None else usd,
            cost_note="scripted by FunctionModel" if usd is None else None,
            request_hash=request.hash(),
            id=f"msg_fn_{next(_ids):04d}",
        )

    def complete_sync(self, request: ModelRequest) -> ModelResponse:
        """``complete`` for sync code."""
        return run_sync(self.complete(request))


def _cache(cache: ReplyCache | CacheStore | str | os.PathLike[str]) -> ReplyCache:
    return cache if isinstance(cache, ReplyCache) else ReplyCache(cache)


class RecordingModel:
    """Calls ``inner`` and records every reply in ``cache``.

    Args:
        inner: The model that really answers.
        cache: A ReplyCache, a store, or a path (``*.jsonl`` or a directory).
    """

    def __init__(
        self, inner: Model, cache: ReplyCache | CacheStore | str | os.PathLike[str]
    ) -> None:
        self.inner = inner
        self.cache = _cache(cache)

    @property
    def name(self) -> str:
        """The inner model's name."""
        return self.inner.name

    def __repr__(self) -> str:
        return f"RecordingModel({self.inner!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Asks the inner model and records its reply."""
        response = await self.inner.complete(request)
        self.cache.put(request.model or self.inner.name, request, response)
        return response

    def complete_sync(self, request: ModelRequest) -> ModelResponse:
        """``complete`` for sync code."""
        return run_sync(self.complete(request))


class ReplayModel:
    """Serves recorded replies; free, offline and deterministic.

    Args:
        cache: A ReplyCache, a store, or a path (``*.jsonl`` or a directory).
        strict: A miss raises ReplayMiss (for CI and nbval). With ``strict=False``
            a miss goes to ``fallback`` and its reply is recorded.
        fallback: The model to ask on a miss (only with ``strict=False``).
        model: The model name requests default to; by default the fallback's
            name, else ``al.llm.DEFAULT_MODEL``. It must match the recording.

    Attributes:
        hits: Replies served from the cache.
        misses: Requests not found in the cache.

    Served replies have ``cached=True`` and ``cost_usd=0.0`` (replays are free);
    their usage is the recorded one.
    """

    def __init__(
        self,
        cache: ReplyCache | CacheStore | str | os.PathLike[str],
        *,
        strict: bool = True,
        fallback: Model | None = None,
        model: str | None = None,
    ) -> None:
        if strict and fallback is not None:
            raise ValueError(
                "a strict ReplayModel never calls its fallback; pass strict=False "
                "to send misses to the fallback (and record them)"
            )
        self.cache = _cache(cache)
        self.strict = strict
        self.fallback = fallback
        self._name = model or (fallback.name if fallback is not None else DEFAULT_MODEL)
        self.hits = 0
        self.misses = 0

    @property
    def name(self) -> str:
        """The model name requests default to."""
        return self._name

    def __repr__(self) -> str:
        mode = "strict" if self.strict else f"fallback={self.fallback!r}"
        return f"ReplayModel({self._name!r}, {mode})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The recorded reply, else (non-strict) the fallback's, recorded.

        Raises:
            ReplayMiss: nothing recorded and no fallback to ask.
        """
        model = request.model or self._name
        found = self.cache.get(model, request)
        if found is not None:
            self.hits += 1
            return found.model_copy(
                update={
                    "cached": True,
                    "cost_usd": 0.0,
                    "cost_note": "served from the replay cache"
                    + (
                        f" (recorded cost ${found.cost_usd:.6f})"
                        if found.cost_usd
                        else ""
                    ),
                }
            )
        self.misses += 1
        if self.strict or self.fallback is None:
            raise self.cache.miss(model, request)
        response = await self.fallback.complete(request)
        self.cache.put(model, request, response)
        return response

    def complete_sync(self, request: ModelRequest) -> ModelResponse:
        """``complete`` for sync code."""
        return run_sync(self.complete(request))
