"""Retries: ``RetryPolicy`` and ``complete_with_retries`` for TransientErrors."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from argus_lab.errors import TransientError

if TYPE_CHECKING:
    from argus_lab.llm.base import Model, ModelRequest, ModelResponse

__all__ = ["OnRetry", "RetryPolicy", "complete_with_retries"]


@dataclass(frozen=True)
class RetryPolicy:
    """How ``complete_with_retries`` retries TransientErrors.

    A retry-after the server sent is honoured exactly; otherwise the delay is
    exponential (``base * 2**(n-1)``, capped at ``cap``) with equal jitter.
    """

    retries: int = 3
    """Retries after the first attempt."""
    base: float = 1.0
    """First backoff delay in seconds."""
    cap: float = 30.0
    """Longest backoff delay."""
    max_retry_after: float = 120.0
    """A longer retry-after is not waited out: the TransientError is raised so the
    caller (the session) can schedule the retry instead of blocking."""
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    """How to wait (tests pass a recorder)."""
    rng: random.Random = field(default_factory=random.Random)
    """Jitter source."""

    def delay(self, retry: int, retry_after: float | None) -> float | None:
        """Seconds before retry number ``retry`` (1-based); None: do not wait."""
        if retry_after is not None:
            if retry_after > self.max_retry_after:
                return None
            return max(0.0, float(retry_after))
        backoff = min(self.cap, self.base * 2 ** (retry - 1))
        return float(backoff / 2 + self.rng.uniform(0, backoff / 2))


OnRetry = Callable[[int, TransientError, float], None]
"""Called before each retry with (retry number, error, delay in seconds)."""


async def complete_with_retries(
    model: Model,
    request: ModelRequest,
    *,
    policy: RetryPolicy | None = None,
    on_retry: OnRetry | None = None,
) -> ModelResponse:
    """``model.complete(request)``, retrying TransientErrors per ``policy``.

    Raises:
        TransientError: when retries run out, or the server asks to wait longer
            than ``policy.max_retry_after`` (its ``retry_after`` says how long).
        ModelError: at once; permanent errors are not retried.
    """
    policy = policy or RetryPolicy()
    retry = 0
    while True:
        try:
            return await model.complete(request)
        except TransientError as e:
            retry += 1
            if retry > policy.retries:
                raise
            delay = policy.delay(retry, e.retry_after)
            if delay is None:
                raise TransientError(
                    f"{e.message} (the server asked to wait {e.retry_after:.0f}s, "
                    "more than RetryPolicy.max_retry_after="
                    f"{policy.max_retry_after:.0f}s; retry later)",
                    retry_after=e.retry_after,
                ) from e
            if on_retry is not None:
                on_retry(retry, e, delay)
            await policy.sleep(delay)
