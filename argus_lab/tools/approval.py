"""Approval policies: which tool calls run at once, which are refused, which wait.

Policies are checked in order; the first that matches decides. With no policy
given, a session uses ``DEFAULT_POLICIES``: ask before any ``side_effect="write"``
tool, approve everything else.
"""

from __future__ import annotations

import fnmatch
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
    "decide",
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
        if not fnmatch.fnmatchcase(tool.name, self.tools):
            return False
        if self.side_effect is not None and tool.side_effect != self.side_effect:
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
