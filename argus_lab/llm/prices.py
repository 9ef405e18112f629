"""Model prices: the built-in table (``PRICES``) and the cost of a call's usage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from argus_lab.llm.base import Usage

__all__ = [
    "PRICES",
    "PRICES_AS_OF",
    "Price",
    "cost",
    "price_for",
    "unknown_price_note",
]


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens of each kind.

    ``cache_write`` is the 5-minute cache write rate (what ``cache_control``
    ``{"type": "ephemeral"}`` buys). A model priced by prompt length names the
    threshold (input + cache read + cache write tokens) above which
    ``long_prompt`` applies to every token of the request.
    """

    input: float
    output: float
    cache_write: float
    cache_read: float
    long_prompt_threshold: int | None = None
    long_prompt: Price | None = None

    def cost(self, usage: Usage) -> float:
        """The USD cost of ``usage`` at these rates."""
        p = self
        prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        if (
            self.long_prompt is not None
            and self.long_prompt_threshold is not None
            and prompt > self.long_prompt_threshold
        ):
            p = self.long_prompt
        return (
            usage.input_tokens * p.input
            + usage.output_tokens * p.output
            + usage.cache_write_tokens * p.cache_write
            + usage.cache_read_tokens * p.cache_read
        ) / 1_000_000


PRICES_AS_OF = "2026-11-30"
"""When PRICES was last checked against Anthropic's published prices."""

# Source: https://platform.claude.com/docs/en/about-claude/pricing and each model's
# page under https://platform.claude.com/docs/en/models/ (checked 2026-11-30).
# Standard API tier; batch, fast mode, data-residency multipliers and 1-hour cache
# writes are not modelled. Override with AnthropicModel(prices={...}).
_OPUS_45 = Price(input=5.0, output=25.0, cache_write=6.25, cache_read=0.50)
_SONNET_4 = Price(input=3.0, output=15.0, cache_write=3.75, cache_read=0.30)
_FABLE_51 = Price(input=10.0, output=50.0, cache_write=12.50, cache_read=0.25)
_FABLE_5 = Price(input=10.0, output=50.0, cache_write=12.50, cache_read=1.0)
PRICES: dict[str, Price] = {
    "claude-fable-5-1": _FABLE_51,
    "claude-mythos-5-1": _FABLE_51,
    "claude-fable-5": _FABLE_5,
    "claude-mythos-5": _FABLE_5,
    "claude-opus-5-5": Price(input=4.0, output=20.0, cache_write=5.0, cache_read=0.20),
    "claude-opus-5": _OPUS_45,
    "claude-opus-4-8": _OPUS_45,
    "claude-opus-4-7": _OPUS_45,
    "claude-opus-4-6": _OPUS_45,
    "claude-opus-4-5": _OPUS_45,
    # Sonnet 5.5 cache reads went from $0.20 to $0.10 on 2026-10-07.
    "claude-sonnet-5-5": Price(
        input=2.0, output=10.0, cache_write=2.5, cache_read=0.10
    ),
    "claude-sonnet-5": Price(input=2.0, output=10.0, cache_write=2.5, cache_read=0.20),
    "claude-sonnet-4-6": _SONNET_4,
    "claude-sonnet-4-5": _SONNET_4,
    # Haiku 5.5 is priced by prompt length: above 100k prompt tokens, 5x.
    "claude-haiku-5-5": Price(
        input=0.10,
        output=0.50,
        cache_write=0.125,
        cache_read=0.01,
        long_prompt_threshold=100_000,
        long_prompt=Price(input=0.50, output=2.50, cache_write=0.625, cache_read=0.05),
    ),
    "claude-haiku-4-5": Price(input=1.0, output=5.0, cache_write=1.25, cache_read=0.10),
}
"""Built-in prices by model name (dated snapshots fall back to their alias)."""


def price_for(model: str, prices: Mapping[str, Price] | None = None) -> Price | None:
    """The price of ``model``: exact name, else without a ``-YYYYMMDD`` or ``[1m]``
    suffix; ``prices`` entries win over the built-in table. None if unknown."""
    table: Mapping[str, Price] = {**PRICES, **prices} if prices else PRICES
    name = model.strip()
    candidates = [name, name.removesuffix("[1m]")]
    base, _, tail = candidates[-1].rpartition("-")
    if base and len(tail) == 8 and tail.isdigit():
        candidates.append(base)
    for c in candidates:
        if c in table:
            return table[c]
    return None


def cost(
    usage: Usage, model: str, prices: Mapping[str, Price] | None = None
) -> float | None:
    """The USD cost of ``usage`` on ``model``, or None when the model has no price."""
    p = price_for(model, prices)
    return None if p is None else p.cost(usage)


def unknown_price_note(model: str) -> str:
    """Explains a None cost."""
    return (
        f"no price for model {model!r} in the price table (as of {PRICES_AS_OF}); "
        "pass prices={name: al.llm.Price(...)} to the model to count its cost"
    )
