"""Events of one task: its attempts, their outcomes, approvals and tool calls."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from argus_lab.events._base import EventBase

__all__ = [
    "ApprovalGranted",
    "ApprovalRejected",
    "ApprovalRequested",
    "InDoubt",
    "RetryScheduled",
    "TaskBlocked",
    "TaskFailed",
    "TaskRetried",
    "TaskSkipped",
    "TaskStarted",
    "TaskSucceeded",
    "ToolCall",
]


class TaskStarted(EventBase):
    """An attempt's intent was committed; its tool is about to run."""

    kind: Literal["task_started"] = "task_started"
    tool: str | None = None
    """The tool the attempt calls."""


class TaskSucceeded(EventBase):
    """An attempt succeeded and its result was stored."""

    kind: Literal["task_succeeded"] = "task_succeeded"
    cached: bool = False
    """True when a recorded result was reused instead of running the tool."""
    bytes: int | None = None
    """Size of the stored result's JSON, when it ran."""


class TaskFailed(EventBase):
    """A task failed for good (after its retries)."""

    kind: Literal["task_failed"] = "task_failed"
    error: str | None = None
    """The error message."""
    error_type: str | None = None
    """The error's class name."""
    blocked: int = 0
    """Dependents blocked by this failure."""
    policy: str | None = None
    """The ``on_failure`` policy that took over (skip, fallback, replan), if any;
    "waiting": its remedies wait for a person's answer about a task in doubt."""
    backtracked: str | None = None
    """The HTN compound task that backtracks because of it, if any."""


class RetryScheduled(EventBase):
    """A transient failure; another attempt is due after ``delay`` seconds."""

    kind: Literal["retry_scheduled"] = "retry_scheduled"
    delay: float = 0.0
    """Seconds until the next attempt."""
    error: str | None = None
    """The error message."""
    error_type: str | None = None
    """The error's class name."""


class TaskSkipped(EventBase):
    """A task was skipped (by a person or its ``on_failure="skip"``); its
    dependents may go on."""

    RENAMED: ClassVar[dict[str, str]] = {"from": "previous"}
    kind: Literal["task_skipped"] = "task_skipped"
    reason: str | None = None
    """Why it was skipped."""
    previous: str | None = None
    """Its status before (payload key "from" in schema_version 1)."""


class TaskBlocked(EventBase):
    """A task cannot run because a dependency failed."""

    kind: Literal["task_blocked"] = "task_blocked"
    by: str | None = None
    """The failed task that blocks it."""


class TaskRetried(EventBase):
    """A task (and what it blocked) was set to run again: by a person, or because
    its inputs went stale."""

    RENAMED: ClassVar[dict[str, str]] = {"from": "previous"}
    kind: Literal["task_retried"] = "task_retried"
    previous: str | None = None
    """Its status before (payload key "from" in schema_version 1)."""
    unblocked: int | None = None
    """Blocked dependents set pending again."""
    why: str | None = None
    """"stale" when its inputs changed; None for a person's retry."""


class InDoubt(EventBase):
    """A non-idempotent attempt was interrupted; a person must decide."""

    kind: Literal["in_doubt"] = "in_doubt"
    reason: str | None = None
    """What happened and what to do."""
    call_ended: str | None = None
    """Set when the attempt's call, abandoned while it ran on in this process
    (a thread past its timeout), ended: how ("returned", "raised ...")."""


class ApprovalRequested(EventBase):
    """A call waits for a person."""

    kind: Literal["approval_requested"] = "approval_requested"
    tool: str | None = None
    """The tool to be called."""
    args: Any = None
    """The arguments it would be called with."""
    policy: str | None = None
    """The policy rule that matched."""
    reason: str | None = None
    """Why it asks (the policy's reason)."""


class ApprovalGranted(EventBase):
    """A person approved a call."""

    kind: Literal["approval_granted"] = "approval_granted"
    by: str | None = None
    """Who approved."""
    args: Any = None
    """The arguments asked about."""
    edited_args: Any = None
    """Arguments the approver substituted, if any."""


class ApprovalRejected(EventBase):
    """A person or a policy refused a call."""

    kind: Literal["approval_rejected"] = "approval_rejected"
    by: str | None = None
    """Who refused ("policy" for a policy's refusal)."""
    reason: str | None = None
    """Why."""
    tool: str | None = None
    """The tool (a policy's refusal)."""
    args: Any = None
    """The arguments asked about."""
    policy: str | None = None
    """The policy rule that refused (a policy's refusal)."""


class ToolCall(EventBase):
    """A tool call made inside an LLM task."""

    kind: Literal["tool_call"] = "tool_call"
    tool: str | None = None
    """The tool the model called."""
    args: Any = None
    """Its arguments."""
    ok: bool | None = None
    """Whether it succeeded."""
    error: str | None = None
    """What went wrong, if it failed."""
    error_type: str | None = None
    """The error's class name, if known."""
