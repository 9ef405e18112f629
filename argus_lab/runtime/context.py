"""The context of an LLM task, assembled by priority under a token budget.

Four kinds of content compete for the budget, in this order of priority:

1. the task: its description and expected output;
2. the results of its direct dependencies, in the order given;
3. retrieved memories, best first;
4. general context: the goal, then each constraint.

Items are taken in that order while they fit; the first one that does not fit is
truncated to the room left (or dropped when too little room is left to be
useful), and every item after it is dropped. ``Context.breakdown`` says, item by
item, what was included, truncated or dropped and why; ``Context.event_payload``
is what the ``context_built`` event stores.

Tokens are counted by an *estimator*, any ``str -> int`` function. The default,
:func:`estimate_tokens`, is ``ceil(utf8_bytes / 3)``: deterministic, offline, and
deliberately pessimistic (Claude averages ~3.5-4 characters per token on English
prose and ~3 on code or JSON; a CJK character is 3 bytes and about one token), so
a prompt it fits is very unlikely to overflow a real window. For exact counts use
:class:`AnthropicTokenCounter` (``client.messages.count_tokens``), or
:func:`token_estimator`, which picks one of the two. Whatever the estimator, the
assembled prompt is re-counted as a whole and cut further if needed: the prompt
is never over budget by the estimator's own count.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from argus_lab.redact import cut_clear

if TYPE_CHECKING:
    from argus_lab.model import Task
    from argus_lab.store.memory import MemoryHit

__all__ = [
    "AnthropicTokenCounter",
    "Context",
    "Estimator",
    "build_context",
    "estimate_tokens",
    "token_estimator",
]

log = logging.getLogger("argus_lab")

Estimator = Callable[[str], int]
"""Counts the tokens of a text."""
Section = Literal["task", "dependency", "memory", "goal", "constraint"]
Status = Literal["included", "truncated", "dropped"]

TRUNCATED = " … [truncated]"
MIN_USEFUL_TOKENS = 16
"""A lower-priority item is dropped rather than cut to fewer tokens than this."""
_HEADERS: dict[Section, str] = {
    "goal": "## Goal\n",
    "constraint": "## Constraints\n",
    "memory": "## Relevant memories\n",
    "dependency": "## Results of the tasks this one depends on\n",
    "task": "## Your task\n",
}
_PRIORITY: tuple[Section, ...] = ("task", "dependency", "memory", "goal", "constraint")
_LAYOUT: tuple[Section, ...] = ("goal", "constraint", "memory", "dependency", "task")
"""Order in the prompt: background first, the task last (where models look)."""


def estimate_tokens(text: str) -> int:
    """The default estimator: ``ceil(len(text.encode("utf-8")) / 3)``.

    Deterministic and pessimistic on purpose; see the module docstring.
    """
    return math.ceil(len(text.encode("utf-8")) / 3)


class AnthropicTokenCounter:
    """Counts tokens exactly with Anthropic's ``messages.count_tokens`` endpoint.

    Each text is counted as one user message; the fixed cost of the message
    framing (measured once, on a one-character message) is subtracted so item
    counts add up. Counts are cached by text. If the API fails, the count falls
    back to ``fallback`` (logged once), so a network hiccup cannot break a run.

    Counting is a blocking HTTP call: from async code, build the context in a
    worker thread (``asyncio.to_thread``).

    Args:
        client: A (sync) ``anthropic.Anthropic`` client.
        model: The model whose tokenizer counts; default the LLM module's
            ``DEFAULT_MODEL``.
        fallback: Estimator used when the API call fails.
        cache_size: Texts whose counts are remembered.
    """

    def __init__(
        self,
        client: Any,
        *,
        model: str | None = None,
        fallback: Estimator = estimate_tokens,
        cache_size: int = 4096,
    ) -> None:
        if model is None:
            from argus_lab.llm.base import DEFAULT_MODEL

            model = DEFAULT_MODEL
        self.client = client
        self.model = model
        self.fallback = fallback
        self.cache_size = cache_size
        self._cache: dict[str, int] = {}
        self._overhead: int | None = None
        self._warned = False

    @property
    def name(self) -> str:
        """Names the estimator in breakdowns and events."""
        return f"anthropic.count_tokens({self.model})"

    def _count(self, text: str) -> int:
        out = self.client.messages.count_tokens(
            model=self.model, messages=[{"role": "user", "content": text}]
        )
        if inspect.isawaitable(out):
            close = getattr(out, "close", None)
            if close is not None:
                close()  # never awaited: avoid a "never awaited" warning
            raise TypeError(
                "AnthropicTokenCounter needs a sync anthropic.Anthropic client, "
                "not an AsyncAnthropic one"
            )
        return int(out.input_tokens)

    def __call__(self, text: str) -> int:
        if not text:
            return 0
        hit = self._cache.get(text)
        if hit is not None:
            return hit
        import anthropic

        try:
            if self._overhead is None:
                self._overhead = max(0, self._count(".") - 1)
            n = max(1, self._count(text) - self._overhead)
        except anthropic.APIError as e:
            if not self._warned:
                log.warning("count_tokens failed (%s); estimating instead", e)
                self._warned = True
            return self.fallback(text)
        if len(self._cache) >= self.cache_size:
            self._cache.clear()
        self._cache[text] = n
        return n


def token_estimator(
    client: Any = None, *, model: str | None = None, allow: bool = True
) -> Estimator:
    """The exact counter when a client is given and network calls are allowed,
    else the offline default :func:`estimate_tokens`."""
    if client is not None and allow:
        return AnthropicTokenCounter(client, model=model)
    return estimate_tokens


@dataclass(frozen=True)
class Context:
    """An assembled prompt and how it was assembled."""

    prompt: str
    """The prompt text."""
    breakdown: list[dict[str, Any]]
    """One dict per candidate item, in priority order: section, id, tokens (in
    the prompt), full_tokens, status (included | truncated | dropped), why."""
    budget: int
    """The token budget."""
    used: int
    """Tokens of the whole prompt, by the estimator."""
    estimator: str = "estimate_tokens"
    """Which estimator counted."""
    sections: dict[str, int] = field(default_factory=dict)
    """Tokens per section in the prompt."""

    @property
    def dropped(self) -> list[dict[str, Any]]:
        """The items left out."""
        return [b for b in self.breakdown if b["status"] == "dropped"]

    def event_payload(self) -> dict[str, Any]:
        """The payload of the ``context_built`` event."""
        return {
            "budget": self.budget,
            "used": self.used,
            "estimator": self.estimator,
            "items": self.breakdown,
        }


@dataclass
class _Item:
    section: Section
    id: str
    body: str
    full: int = 0
    text: str = ""  # what goes in the prompt: header (if first) + body
    tokens: int = 0
    status: Status = "dropped"
    why: str = ""


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _task_text(task: Task | str | Mapping[str, Any]) -> tuple[str, str]:
    if isinstance(task, str):
        return "task", task
    fields = task if isinstance(task, Mapping) else vars(task)
    get = fields.get
    tid = str(get("id", "") or "task")
    title = str(get("title", "") or "")
    lines = [f"{tid}" + (f" — {title}" if title and title != tid else "")]
    desc = str(get("description", "") or "")
    if desc:
        lines.append(desc)
    expected = str(get("expected_output", "") or "")
    if expected:
        lines.append(f"Expected output: {expected}")
    return tid, "\n".join(lines)


def _memory_text(hit: MemoryHit) -> str:
    where = "/".join(x for x in (hit.session_id, hit.task_id) if x)
    origin = f", from {where}" + (f" event {hit.seq}" if hit.seq is not None else "")
    return f"- [{hit.kind}{origin if where else ''}] {hit.text}"


def _fit(head: str, body: str, room: int, est: Estimator) -> str | None:
    """The longest ``head + body[:n] + TRUNCATED + "\n\n"`` within ``room``."""
    if est(head + TRUNCATED + "\n\n") > room:
        return None
    lo, hi = 0, len(body)
    while lo < hi:  # largest n whose cut fits, by bisection
        mid = (lo + hi + 1) // 2
        if est(head + body[:mid].rstrip() + TRUNCATED + "\n\n") <= room:
            lo = mid
        else:
            hi = mid - 1
    # Not inside a secret: an argument read through ${env.X}, a goal quoting a
    # key; a model quoting a cut prefix would store what no mask knows.
    return head + cut_clear(body, lo).rstrip() + TRUNCATED + "\n\n"


def build_context(
    *,
    task: Task | str | Mapping[str, Any],
    goal: str | None,
    constraints: Sequence[str] = (),
    dep_results: Mapping[str, Any],
    memories: Sequence[MemoryHit],
    budget_tokens: int,
    estimator: Estimator | None = None,
    session_id: str | None = None,
) -> Context:
    """Assembles an LLM task's prompt by priority within ``budget_tokens``.

    Args:
        task: The task (a Task, a dict with id/title/description/expected_output,
            or the task text).
        goal: The session's goal.
        constraints: The plan's constraints.
        dep_results: Direct dependency id -> its result, most important first.
        memories: Retrieved memories, best first.
        budget_tokens: Most tokens the prompt may take (by the estimator).
        estimator: Token counter; default :func:`estimate_tokens`.
        session_id: When given, a ``result`` memory of this session for a task in
            ``dep_results`` is dropped as a duplicate of that result.

    Returns:
        The prompt and its breakdown.

    Raises:
        ValueError: budget_tokens < 1.
    """
    if budget_tokens < 1:
        raise ValueError(f"budget_tokens must be >= 1, got {budget_tokens}")
    est = estimator or estimate_tokens
    tid, ttext = _task_text(task)
    items = [_Item("task", tid, ttext)]
    for d, v in dep_results.items():
        items.append(_Item("dependency", d, f"### {d}\n{_render(v)}"))
    dupes: set[str] = set()
    for m in memories:
        items.append(_Item("memory", m.id, _memory_text(m)))
        own = session_id and m.kind == "result" and m.session_id == session_id
        if own and m.task_id in dep_results:
            dupes.add(m.id)
    if goal:
        items.append(_Item("goal", "goal", goal))
    for i, c in enumerate(constraints, 1):
        items.append(_Item("constraint", f"constraint-{i}", f"- {c}"))

    left = budget_tokens
    started: set[Section] = set()
    full = False
    for it in items:
        it.full = est(it.body + "\n\n")
        if it.id in dupes and it.section == "memory":
            it.why = "duplicate of a dependency result already in the context"
            continue
        head = "" if it.section in started else _HEADERS[it.section]
        if full:
            it.why = (
                f"no room: the budget of {budget_tokens} tokens was used up by "
                "higher-priority items"
            )
            continue
        whole = head + it.body + "\n\n"
        cost = est(whole)
        if cost <= left:
            it.text, it.tokens, it.status = whole, cost, "included"
            it.why = f"{it.section} (priority {_PRIORITY.index(it.section) + 1}) fits"
        else:
            full = True
            cut = _fit(head, it.body, left, est)
            usable = cut is not None and (
                it.section == "task" or est(cut) >= min(MIN_USEFUL_TOKENS, it.full)
            )
            if cut is not None and usable:
                it.text, it.status = cut, "truncated"
                it.tokens = est(it.text)
                it.why = (
                    f"cut from {it.full} to {it.tokens} tokens: only {left} were left"
                )
            else:
                it.why = (
                    f"only {left} tokens were left, too few for a useful part of it"
                )
                continue
        left -= it.tokens
        started.add(it.section)

    prompt = _assemble(items)
    # A non-additive estimator may count the whole above the sum of its parts:
    # cut the lowest-priority content until the whole fits too.
    while est(prompt) > budget_tokens:
        last = next(i for i in reversed(items) if i.status != "dropped")
        excess = est(prompt) - budget_tokens
        text = last.text.rstrip("\n").removesuffix(TRUNCATED)
        cut = _fit("", text, last.tokens - excess - 1, est)
        # Each round must shorten the prompt, or the item goes.
        if cut is None or len(cut) >= len(last.text):
            last.status, last.text, last.tokens = "dropped", "", 0
            last.why = "dropped when the whole prompt was re-counted over budget"
        else:
            last.text, last.status = cut, "truncated"
            last.tokens = est(last.text)
            last.why = (
                f"cut to {last.tokens} tokens when the whole prompt was re-counted"
            )
        prompt = _assemble(items)

    sections: dict[str, int] = {}
    for it in items:
        sections[it.section] = sections.get(it.section, 0) + it.tokens
    return Context(
        prompt=prompt,
        breakdown=[
            {
                "section": it.section,
                "id": it.id,
                "tokens": it.tokens,
                "full_tokens": it.full,
                "status": it.status,
                "why": it.why,
            }
            for it in items
        ],
        budget=budget_tokens,
        used=est(prompt),
        estimator=getattr(est, "name", getattr(est, "__name__", type(est).__name__)),
        sections=sections,
    )


def _assemble(items: list[_Item]) -> str:
    parts = [it.text for s in _LAYOUT for it in items if it.section == s and it.text]
    return "".join(parts).rstrip("\n")
