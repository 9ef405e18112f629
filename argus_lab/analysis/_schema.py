"""The documented schema: every frame's column specs, with dtypes and meanings.

Frames link by ids: ``session_id`` everywhere; ``task_id`` for tasks; ``(session_id,
task_id, attempt)`` for attempts and the events, LLM calls and tool calls made in
them; ``(session_id, seq)`` for anything that came from one event.
``al.analysis.schema()`` prints it all as a table.

Every duration column (``duration``, ``busy``, ``retry_delay``, ``wait``) is
float64 seconds, NaN when unknown; timestamps are UTC (NaT when unknown); ids,
texts, counts and flags are pandas nullable dtypes (``pd.NA`` when missing).
"""

from __future__ import annotations

from typing import Any

from argus_lab.analysis._columns import Column, Columns, DtypeSpec
from argus_lab.events import EVENT_KINDS
from argus_lab.model import SESSION_STATUSES, STATUSES

__all__ = [
    "APPROVAL_COLUMNS",
    "APPROVAL_DECISIONS",
    "ATTEMPT_COLUMNS",
    "ATTEMPT_OUTCOMES",
    "EVENT_COLUMNS",
    "EVENT_ID_COLUMNS",
    "FRAME_COLUMNS",
    "LLM_CALL_COLUMNS",
    "SESSION_COLUMNS",
    "TASK_COLUMNS",
    "TOOL_CALL_COLUMNS",
    "USAGE_COLUMNS",
]

ATTEMPT_OUTCOMES = ("running", "succeeded", "retried", "failed", "interrupted")
"""How an attempt ended: "retried" is a transient failure with a retry scheduled;
"interrupted" an attempt a crash or a close cut short: found running on resume,
or still stored as running while no run goes on (``tasks_df().interrupted``)."""
APPROVAL_DECISIONS = ("pending", "granted", "rejected")
APPROVAL_STATES = ("asked", "approved", "rejected")
TOOL_CALL_SOURCES = ("task", "llm")


def _c(
    name: str,
    dtype: DtypeSpec,
    doc: str,
    *,
    path: str | None = None,
    categories: tuple[str, ...] = (),
    value: Any = None,
    span: tuple[str, str] | None = None,
) -> Column:
    return Column(
        name, dtype, path=path, value=value, categories=categories, doc=doc, span=span
    )


SPAN = ("started", "ended")

SESSION_ID = Columns(_c("session_id", "string", "The session (links every frame)."))

USAGE_COLUMNS = Columns(
    _c("cost_usd", "float64", "USD spent on model calls (0.0 when none)."),
    _c("input_tokens", "Int64", "Input tokens of model calls."),
    _c("output_tokens", "Int64", "Output tokens of model calls."),
    _c("n_llm_calls", "Int64", "Number of model calls."),
)
"""Model usage summed over LLM-call events (shared by sessions_df and tasks_df)."""

SESSION_COLUMNS = (
    SESSION_ID
    + Columns(
        _c("name", "string", "Unique name in its workspace."),
        _c("goal", "string", "The goal the session pursues."),
        _c(
            "status",
            "category",
            "Where its last run ended.",
            categories=SESSION_STATUSES,
        ),
        _c("reason", "string", "Why it paused or failed."),
        _c("parent_id", "string", "The session it was forked from.", path="parent"),
        _c("forked_at", "string", "The task the fork started again from."),
        _c("created", "timestamp", "When it was created."),
        _c("updated", "timestamp", "When its status last changed."),
        _c("started", "timestamp", "When its first attempt started."),
        _c("ended", "timestamp", "When its last task reached a final status."),
        _c(
            "duration",
            "duration",
            "ended - started (wall time, waits included).",
            span=SPAN,
        ),
        _c("n_tasks", "Int64", "Tasks in the plan."),
    )
    + Columns(
        *(_c(f"n_{s}", "Int64", f"Tasks now {s.replace('_', ' ')}.") for s in STATUSES)
    )
    + Columns(
        _c("n_attempts", "Int64", "Attempts started (all tasks, retries included)."),
        _c("n_retries", "Int64", "Transient failures that were retried."),
        _c("n_events", "Int64", "Events in its trajectory."),
    )
    + USAGE_COLUMNS
)
"""Columns of ``sessions_df``: one row per session, oldest first."""

TASK_COLUMNS = (
    SESSION_ID
    + Columns(
        _c("task_id", "string", "The task (unique within its session)."),
        _c("title", "string", "Its title, else its id."),
        _c("tool", "string", "The tool it calls."),
        _c("parent", "string", "The compound task it was decomposed from (HTN)."),
        _c("deps", "json", "JSON list of the ids it depends on."),
        _c("status", "category", "Its status now.", categories=STATUSES),
        _c(
            "interrupted",
            "boolean",
            "Stored as running while no run goes on (its run was closed, or its "
            "process or kernel died): nothing runs it; the next run reruns it or "
            "holds it in doubt (the widget draws it interrupted).",
        ),
        _c("attempts", "Int64", "Attempts started (all generations)."),
        _c("generation", "Int64", "Manual retries and reruns so far."),
        _c("started", "timestamp", "First attempt of the current generation."),
        _c("ended", "timestamp", "When it last reached a final status."),
        _c(
            "duration",
            "duration",
            "ended - started: retries and backoff included.",
            span=SPAN,
        ),
        _c("busy", "duration", "Time its attempts ran (waits excluded)."),
        _c("error_type", "string", "The last error's class name."),
        _c("error", "string", "The last error message."),
        _c("reason", "string", "Why it is blocked, skipped or in doubt."),
        _c(
            "approval",
            "category",
            "Approval state of this generation.",
            categories=APPROVAL_STATES,
        ),
        _c(
            "reused",
            "boolean",
            "Result a fork kept or replayed from its parent (not run here).",
        ),
        _c("result", "json", "The result as JSON text (NA unless succeeded)."),
        _c("result_ref", "string", "Artifact id of a large result."),
        _c("input_hash", "string", "Hash of the tool name and resolved arguments."),
        _c("tool_hash", "string", "Hash of the tool's code when it succeeded."),
        _c("idempotency_key", "string", "Key handed to the tool (per generation)."),
    )
    + USAGE_COLUMNS
)
"""Columns of ``tasks_df``: one row per task, in plan order."""

EVENT_ID_COLUMNS = SESSION_ID + Columns(
    _c("seq", "Int64", "Position in the session's trajectory (from 1)."),
    _c("ts", "timestamp", "When it happened."),
    _c("task_id", "string", "The task concerned, if any."),
    _c("attempt", "Int64", "The attempt concerned, if any."),
)
"""The ids every event-derived frame starts with."""

EVENT_COLUMNS = EVENT_ID_COLUMNS + Columns(
    _c("kind", "category", "What happened (an event kind).", categories=EVENT_KINDS),
    _c("duration", "duration", "How long the thing took, when it took time."),
    _c(
        "details",
        "json",
        "The kind's own typed fields, JSON text (see argus_lab.events).",
    ),
)
"""Columns of ``events_df``: one row per committed event, in seq order."""

ATTEMPT_COLUMNS = SESSION_ID + Columns(
    _c("task_id", "string", "The task."),
    _c("attempt", "Int64", "Attempt number (1, 2, ...; never reused)."),
    _c("seq", "Int64", "Seq of its task_started event."),
    _c("tool", "string", "The task's tool."),
    _c(
        "outcome",
        "category",
        "How it ended.",
        categories=ATTEMPT_OUTCOMES,
    ),
    _c("started", "timestamp", "When it started."),
    _c("ended", "timestamp", "When its outcome was committed."),
    _c("duration", "duration", "ended - started.", span=SPAN),
    _c("error_type", "string", "Error class, if it failed."),
    _c("error", "string", "Error message, if it failed."),
    _c("retry_delay", "duration", "Backoff before the next attempt."),
)
"""Columns of ``attempts_df``: one row per attempt, in the order they started."""

LLM_CALL_COLUMNS = EVENT_ID_COLUMNS + Columns(
    _c("duration", "duration", "Request latency."),
    _c("model", "string", "Model name."),
    _c("purpose", "string", "planning, task, repair, ..."),
    _c("input_tokens", "Int64", "Input tokens."),
    _c("output_tokens", "Int64", "Output tokens."),
    _c(
        "cache_read_tokens",
        "Int64",
        "Tokens read from the prompt cache.",
    ),
    _c(
        "cache_write_tokens",
        "Int64",
        "Tokens written to the prompt cache.",
    ),
    _c("cost_usd", "float64", "Cost in USD."),
    _c("cached", "boolean", "Served from the replay cache."),
    _c("stop_reason", "string", "Why the model stopped."),
    _c(
        "request_hash",
        "string",
        "Replay-cache key of the request.",
    ),
)
"""Columns of ``llm_calls_df``: one row per ``llm_call`` event."""

TOOL_CALL_COLUMNS = EVENT_ID_COLUMNS + Columns(
    _c(
        "source",
        "category",
        '"task": a task attempt; "llm": a call made by a model in an LLM task.',
        categories=TOOL_CALL_SOURCES,
    ),
    _c("tool", "string", "The tool called."),
    _c("ok", "boolean", "Whether it succeeded (NA while running)."),
    _c("duration", "duration", "How long it took."),
    _c("error_type", "string", "Error class, if it failed."),
    _c("error", "string", "Error message, if it failed."),
    _c("args", "json", "Arguments, JSON text (LLM tool calls only)."),
)
"""Columns of ``tool_calls_df``: every tool call, by the runtime or by a model."""

APPROVAL_COLUMNS = SESSION_ID + Columns(
    _c("task_id", "string", "The task whose call needed a decision."),
    _c("seq", "Int64", "Seq of the request (or of the decision, if none)."),
    _c("tool", "string", "The tool to be called."),
    _c(
        "decision",
        "category",
        "What was decided.",
        categories=APPROVAL_DECISIONS,
    ),
    _c("by", "string", "Who decided ('policy' for a policy's refusal)."),
    _c("requested", "timestamp", "When it was asked."),
    _c("decided", "timestamp", "When it was decided."),
    _c("wait", "duration", "decided - requested.", span=("requested", "decided")),
    _c("policy", "string", "The policy rule that matched."),
    _c("reason", "string", "Why it was asked (the policy's reason)."),
    _c("decision_reason", "string", "Why it was rejected."),
    _c("args", "json", "The arguments asked about, JSON text."),
    _c("edited_args", "json", "Arguments the approver substituted, JSON text."),
)
"""Columns of ``approvals_df``: one row per approval request or policy refusal."""

FRAME_COLUMNS: dict[str, Columns] = {
    "sessions": SESSION_COLUMNS,
    "tasks": TASK_COLUMNS,
    "events": EVENT_COLUMNS,
    "attempts": ATTEMPT_COLUMNS,
    "llm_calls": LLM_CALL_COLUMNS,
    "tool_calls": TOOL_CALL_COLUMNS,
    "approvals": APPROVAL_COLUMNS,
}
"""Every frame's default spec, by frame name (as in Frames and exported files)."""
