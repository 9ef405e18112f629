"""``AnthropicModel``: the Model protocol on the official ``anthropic`` SDK.

This module maps records to and from the Messages API wire format and SDK errors
to Argus errors; it holds no policy. The SDK is imported on first use, so
``import argus_lab`` stays light.

Retries: the SDK's own retry loop is turned off (``max_retries=0``, also on a
client you hand in), so every 429/529/5xx surfaces as a ``TransientError`` with
the server's retry-after, and the caller's policy (``complete_with_retries``, the
session's backoff) retries it visibly, as events, within budgets.
"""

from __future__ import annotations

import asyncio
import email.utils
import inspect
import json
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from argus_lab.errors import TransientError
from argus_lab.llm.base import (
    DEFAULT_MODEL,
    OFFLINE_ALTERNATIVES,
    ModelError,
    ModelRequest,
    ModelResponse,
    Price,
    Usage,
    block_from_dict,
    cost,
    run_sync,
)
from argus_lab.llm.prices import unknown_price_note

__all__ = ["AnthropicModel", "from_wire", "map_error", "to_wire"]

_EPHEMERAL = {"type": "ephemeral"}
_MAX_NONSTREAMING_TOKENS = 21_333
"""anthropic 2.x refuses non-streaming requests whose max_tokens could take over
ten minutes (3600 s * max_tokens / 128k > 600 s)."""


def to_wire(
    request: ModelRequest, *, model: str, max_tokens: int, cache_prompt: bool = True
) -> dict[str, Any]:
    """Keyword arguments for ``client.messages.create`` for request.

    With ``cache_prompt`` (and ``request.cache_prompt``), the system prompt and
    the last tool definition carry ``cache_control``, so the stable prefix
    (tools, then system) is cached across rounds and tasks.
    """
    cache = cache_prompt and request.cache_prompt
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [m.to_wire() for m in request.messages],
    }
    if request.system:
        block: dict[str, Any] = {"type": "text", "text": request.system}
        if cache:
            block["cache_control"] = dict(_EPHEMERAL)
        params["system"] = [block]
    if request.tools:
        tools = [dict(t) for t in request.tools]
        if cache:
            tools[-1]["cache_control"] = dict(_EPHEMERAL)
        params["tools"] = tools
    if request.tool_choice is not None:
        params["tool_choice"] = dict(request.tool_choice)
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.stop_sequences:
        params["stop_sequences"] = list(request.stop_sequences)
    if request.extra:
        params["extra_body"] = dict(request.extra)
    return params


def from_wire(
    message: Any,
    *,
    request_hash: str,
    prices: Mapping[str, Price] | None = None,
    requested_model: str | None = None,
) -> ModelResponse:
    """A ModelResponse from an SDK ``Message``, with usage and cost."""
    content = [block_from_dict(b.to_dict(mode="json")) for b in message.content]
    u = message.usage
    usage = Usage(
        input_tokens=int(u.input_tokens or 0),
        output_tokens=int(u.output_tokens or 0),
        cache_read_tokens=int(getattr(u, "cache_read_input_tokens", None) or 0),
        cache_write_tokens=int(getattr(u, "cache_creation_input_tokens", None) or 0),
    )
    answered = str(message.model or requested_model or "")
    usd = cost(usage, answered, prices)
    if usd is None and requested_model:
        usd = cost(usage, requested_model, prices)
    return ModelResponse(
        content=content,
        stop_reason=message.stop_reason,
        usage=usage,
        model=answered,
        cost_usd=usd,
        cost_note=None if usd is not None else unknown_price_note(answered),
        request_hash=request_hash,
        id=getattr(message, "id", None),
    )


def _retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        return max(0.0, float(email.utils.mktime_tz(parsed) - time.time()))


_ADVICE = {
    400: "the API rejected the request as invalid; check the parameters this "
    "model accepts (current models reject temperature, assistant prefill and, "
    "on some, a forced tool_choice)",
    401: "authentication failed; check ANTHROPIC_API_KEY (or the api_key / "
    "client you passed)",
    402: "billing problem; check the plan and credits of the account that owns the key",
    403: "the key may not use this model or resource; check its workspace and "
    "permissions, or pick another model",
    404: "not found; check the model name (e.g. 'claude-opus-5-5', "
    "'claude-sonnet-5-5', 'claude-haiku-5-5')",
    413: "the request is too large; shorten the prompt or the tool results",
}


def map_error(
    e: BaseException, *, model: str, secrets: tuple[str, ...] = ()
) -> Exception:
    """The Argus error for an SDK/HTTP error: TransientError or ModelError.

    429, 529, 408, 409, 5xx, timeouts and connection errors are transient (the
    retry-after header goes to ``TransientError.retry_after``); an
    ``x-should-retry`` header, when present, decides. Other 4xx are permanent.
    Secrets (the API key) never appear in the message.
    """
    import anthropic

    from argus_lab.redact import Redactor

    clean = Redactor(secrets).text
    if isinstance(e, anthropic.APITimeoutError):
        return TransientError(f"{model}: the request timed out; it will be retried")
    if isinstance(e, anthropic.APIConnectionError):
        cause = e.__cause__ or e.__context__
        why = f" ({clean(str(cause))})" if cause is not None else ""
        return TransientError(f"{model}: could not reach the API{why}")
    if isinstance(e, anthropic.APIStatusError):
        status = e.status_code
        headers = e.response.headers
        detail = clean(str(e.api_message or e.message))
        request_id = e.request_id
        should = headers.get("x-should-retry")
        transient = status in (408, 409, 429) or status >= 500
        if should in ("true", "false"):
            transient = should == "true"
        if transient:
            kind = {429: "rate limited", 529: "overloaded"}.get(status, "server error")
            return TransientError(
                f"{model}: {kind} ({status}): {detail}",
                retry_after=_retry_after(headers),
            )
        advice = _ADVICE.get(status, "the request was refused; it is not retried")
        return ModelError(
            f"{model}: HTTP {status}: {detail} -- {advice}"
            + (f" (request id {request_id})" if request_id else ""),
            status_code=status,
            model=model,
            request_id=request_id,
        )
    if isinstance(e, json.JSONDecodeError):  # a 2xx whose body is not JSON
        return TransientError(
            f"{model}: the API's reply is not valid JSON ({e.msg} at character "
            f"{e.pos}){_UNREADABLE}"
        )
    if isinstance(e, TypeError) and "authentication" in str(e).lower():
        return _no_key_error(model)
    if isinstance(e, anthropic.AnthropicError):
        return ModelError(f"{model}: {clean(str(e))}", model=model)
    return e if isinstance(e, Exception) else RuntimeError(str(e))


_UNREADABLE = (
    "; a reply cut off in transit, or a proxy or ANTHROPIC_BASE_URL answering "
    "for the API (it is retried)"
)


def _check_reply(message: Any, model: str) -> None:
    """Raises TransientError unless ``message`` has a Message's content and usage.

    The SDK hands back whatever a 2xx carried: text for an HTML page, a Message
    with None fields for JSON of another shape.
    """
    content = getattr(message, "content", None)
    usage = getattr(message, "usage", None)
    if isinstance(content, list) and usage is not None:
        return
    got = (
        f"text {_start(message)!r}"
        if isinstance(message, str)
        else f"JSON without {'content' if not isinstance(content, list) else 'usage'}"
    )
    raise TransientError(
        f"{model}: the API answered with {got}, not a message" + (_UNREADABLE)
    )


def _start(message: str) -> str:
    """The first 80 characters of a reply, for an error (stored, masked):
    ended before a secret the cut would split (a proxy's page echoing the
    request's header), whose prefix no mask would recognise."""
    from argus_lab.redact import cut_clear

    return cut_clear(message, 80)


def _no_key_error(model: str) -> ModelError:
    return ModelError(
        f"no Anthropic API key: AnthropicModel({model!r}) needs ANTHROPIC_API_KEY "
        "set in the environment (or api_key=..., or a ready anthropic.Anthropic "
        "client=...). " + OFFLINE_ALTERNATIVES,
        model=model,
    )


class AnthropicModel:
    """A Claude model through the official ``anthropic`` SDK.

    Args:
        model: Model name; the default is current and not deprecated in the
            installed SDK.
        client: A ready ``anthropic.Anthropic`` or ``AsyncAnthropic`` (e.g. built on
            an ``httpx2.MockTransport`` in tests). A copy with the SDK's retries
            off is used. Without one, a sync client is made on first use.
        api_key: Used when no client is given; defaults to ANTHROPIC_API_KEY.
        max_tokens: Output limit when a request names none (thinking included).
        prices: Price overrides by model name, merged over ``al.llm.PRICES``.
        timeout: Seconds per request; None keeps the SDK default.
        cache_prompt: Mark the stable prefix (tools, system) for prompt caching.

    The key is checked on first use, not here, so a model that only backs a
    replay cache needs no key until a reply is missing.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        client: Any = None,
        api_key: str | None = None,
        max_tokens: int = 16_000,
        prices: Mapping[str, Price] | None = None,
        timeout: float | None = None,
        cache_prompt: bool = True,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(  # else the first request fails, after the key check
                f"model must be a model name such as {DEFAULT_MODEL!r}, got {model!r}"
            )
        if not 0 < max_tokens <= _MAX_NONSTREAMING_TOKENS:
            raise ValueError(
                f"max_tokens must be 1..{_MAX_NONSTREAMING_TOKENS} (the SDK requires "
                f"streaming above that), got {max_tokens}"
            )
        self._name = model
        self.max_tokens = max_tokens
        self.prices: dict[str, Price] = dict(prices or {})
        self.timeout = timeout
        self.cache_prompt = cache_prompt
        self._api_key = api_key
        self._lock = threading.Lock()
        self._client: Any = None
        self._is_async = False
        if client is not None:
            self._client = self._adopt(client)

    @property
    def name(self) -> str:
        """The model name requests default to."""
        return self._name

    def __repr__(self) -> str:
        return f"AnthropicModel({self._name!r}, max_tokens={self.max_tokens})"

    def _adopt(self, client: Any) -> Any:
        if not hasattr(client, "messages"):
            raise TypeError(
                "client must be an anthropic.Anthropic or anthropic.AsyncAnthropic, "
                f"got {type(client).__name__}"
            )
        if hasattr(client, "with_options"):
            client = client.with_options(max_retries=0)
        # The SDK wraps create() in a decorator; look through it.
        create = inspect.unwrap(client.messages.create)
        self._is_async = inspect.iscoroutinefunction(create)
        return client

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                import anthropic

                key = self._api_key or os.environ.get("ANTHROPIC_API_KEY") or None
                try:
                    client = anthropic.Anthropic(api_key=key, max_retries=0)
                except anthropic.AnthropicError as e:
                    raise ModelError(
                        f"could not load Anthropic credentials ({e}); set "
                        "ANTHROPIC_API_KEY or pass api_key=... or client=... "
                        + OFFLINE_ALTERNATIVES,
                        model=self._name,
                    ) from None
                if not (client.api_key or client.auth_token or client.credentials):
                    raise _no_key_error(self._name)
                self._client = self._adopt(client)
            return self._client

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Sends request to the Messages API and returns the reply with its cost.

        Raises:
            TransientError: 429, 529, other 5xx, timeouts, connection errors.
            ModelError: 400/401/403/404 and other permanent errors, or no key.
        """
        model = request.model or self._name
        max_tokens = request.max_tokens or self.max_tokens
        if max_tokens > _MAX_NONSTREAMING_TOKENS:
            raise ModelError(
                f"max_tokens={max_tokens} needs streaming, which AnthropicModel does "
                f"not use; ask for at most {_MAX_NONSTREAMING_TOKENS}",
                model=model,
            )
        params = to_wire(
            request, model=model, max_tokens=max_tokens, cache_prompt=self.cache_prompt
        )
        if self.timeout is not None:
            params["timeout"] = self.timeout
        client = self._get_client()
        try:
            if self._is_async:
                message = await client.messages.create(**params)
            else:
                message = await asyncio.to_thread(client.messages.create, **params)
        except Exception as e:
            held = (
                self._api_key,
                getattr(client, "api_key", None),
                getattr(client, "auth_token", None),
            )
            secrets = tuple(s for s in held if isinstance(s, str) and s)
            mapped = map_error(e, model=model, secrets=secrets)
            if mapped is e:
                raise
            raise mapped from None
        _check_reply(message, model)
        return from_wire(
            message,
            request_hash=request.hash(),
            prices=self.prices,
            requested_model=model,
        )

    def complete_sync(self, request: ModelRequest) -> ModelResponse:
        """``complete`` for sync code (works inside Jupyter's running loop too)."""
        return run_sync(self.complete(request))
