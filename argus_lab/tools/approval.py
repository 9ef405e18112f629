"""Approval policies: which tool calls run at once, which are refused, which wait.

Policies are checked in order; the first that matches decides. With no policy
given, a session uses ``DEFAULT_POLICIES``: ask before any ``side_effect="write"``
tool, approve everything else.
"""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from argus_lab.errors import ApprovalRequired

if TYPE_CHECKING:
    from argus_lab.tools.registry import SideEffect, Tool

__all__ = [
    "DEFAULT_POLICIES",
    "ApprovalPolicy",
    "Decision",
    "PolicyNotRestoredWarning",
    "decide",
    "policies_from_data",
    "policies_to_data",
    "require_approval",
]

Decision = Literal["approve", "reject", "ask"]


@dataclass(frozen=True)
class ApprovalPolicy:
    """One rule: which calls it matches and what it decides for them.

    Args:
        decision: "approve" (run), "reject" (fail the task, blocking its
            dependents) or "ask" (wait for ``s.approve`` / ``s.reject``).
        tools: Glob over tool names (``"send_*"``); "*" matches every tool.
        side_effect: Match only tools with this side effect.
        when: Match only calls whose resolved arguments satisfy this predicate.
        reason: Shown to the person asked, and in a rejection's error.
    """

    decision: Decision = "ask"
    tools: str = "*"
    side_effect: SideEffect | None = None
    when: Callable[[dict[str, Any]], bool] | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.decision not in ("approve", "reject", "ask"):
            raise ValueError(
                f"decision must be 'approve', 'reject' or 'ask', got {self.decision!r}"
            )

    def matches(self, tool: Tool, args: dict[str, Any]) -> bool:
        """Whether this policy applies to calling ``tool`` with ``args``."""
        # The side effect first: the default policy ("*", writes) then costs
        # no pattern match for a tool without side effects (every step asks).
        if self.side_effect is not None and tool.side_effect != self.side_effect:
            return False
        if self.tools != "*" and not fnmatch.fnmatchcase(tool.name, self.tools):
            return False
        return self.when is None or bool(self.when(args))

    def describe(self) -> str:
        """A short text naming the rule (stored with each decision)."""
        parts = [f"tools={self.tools}"]
        if self.side_effect:
            parts.append(f"side_effect={self.side_effect}")
        if self.when is not None:
            parts.append(f"when={getattr(self.when, '__name__', 'predicate')}")
        text = f"{self.decision} ({', '.join(parts)})"
        return f"{text}: {self.reason}" if self.reason else text


DEFAULT_POLICIES: tuple[ApprovalPolicy, ...] = (
    ApprovalPolicy(
        "ask", side_effect="write", reason="this tool changes things outside Argus"
    ),
)


def decide(
    policies: Sequence[ApprovalPolicy], tool: Tool, args: dict[str, Any]
) -> tuple[Decision, ApprovalPolicy | None]:
    """The first matching policy's decision; "approve" when none matches.

    A predicate that raises counts as "ask": a broken rule must not silently
    let a call through.
    """
    for p in policies:
        try:
            hit = p.matches(tool, args)
        except Exception:
            return "ask", p
        if hit:
            return p.decision, p
    return "approve", None


def require_approval(
    policies: Sequence[ApprovalPolicy], tool: Tool, args: dict[str, Any]
) -> None:
    """Raises ApprovalRequired unless the policies approve the call outright:
    the check of a caller that cannot wait for a person (an LLM task's tool
    call; a task's own call pauses the session instead)."""
    decision, policy = decide(policies, tool, args)
    if decision != "approve":
        rule = f" ({policy.describe()})" if policy is not None else ""
        raise ApprovalRequired(
            f"calling {tool.name!r} needs a person's approval{rule}, which an LLM "
            "task cannot wait for; do without it or say what you need"
        )


# -- policies stored with a session ----------------------------------------------


class PolicyNotRestoredWarning(UserWarning):
    """A stored policy had a Python predicate; it asks until handed in again."""


def policies_to_data(policies: Sequence[ApprovalPolicy]) -> list[dict[str, Any]]:
    """Policies as JSON data; a predicate is stored by its name only (it is code)."""
    out: list[dict[str, Any]] = []
    for p in policies:
        d: dict[str, Any] = {"decision": p.decision, "tools": p.tools}
        if p.side_effect is not None:
            d["side_effect"] = p.side_effect
        if p.reason:
            d["reason"] = p.reason
        if p.when is not None:
            d["when"] = getattr(p.when, "__qualname__", None) or "predicate"
        out.append(d)
    return out


def policies_from_data(
    data: Sequence[dict[str, Any]], *, session: str
) -> tuple[ApprovalPolicy, ...]:
    """Stored policies back as ApprovalPolicy objects.

    A policy whose predicate was stored by name cannot be rebuilt: it becomes
    "ask" for the calls it could have matched (never "approve", never a blanket
    "reject"), and one warning names every such policy and how to hand them in.
    """
    out: list[ApprovalPolicy] = []
    lost: list[str] = []
    for d in data:
        tools, side = str(d.get("tools", "*")), d.get("side_effect")
        reason = str(d.get("reason", ""))
        when = d.get("when")
        if when:
            lost.append(f"{d.get('decision')} (tools={tools}, when={when})")
            reason = (
                f"{reason}; " if reason else ""
            ) + f"its rule's predicate {when} was not handed in again, so it asks"
            out.append(ApprovalPolicy("ask", tools, side, reason=reason))
        else:
            out.append(
                ApprovalPolicy(d.get("decision", "ask"), tools, side, reason=reason)
            )
    if lost:
        warnings.warn(
            f"session {session}: {len(lost)} approval polic"
            f"{'y has' if len(lost) == 1 else 'ies have'} a Python predicate, which "
            f"is code and not stored: {'; '.join(lost)}. Until handed in again they "
            f"ask for every call they could match; hand them in with "
            f"ws.open({session!r}, approvals=[...]).",
            PolicyNotRestoredWarning,
            stacklevel=3,
        )
    return tuple(out)
