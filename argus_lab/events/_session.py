"""Events of a session and its plan: creation, planning, model calls, budgets,
memory, anomalies, pauses, forks and the end."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from argus_lab.events._base import EventBase

__all__ = [
    "Anomaly",
    "BudgetExceeded",
    "CheckpointSaved",
    "ContextBuilt",
    "Forked",
    "HtnDecision",
    "LlmCall",
    "MemoryWritten",
    "Paused",
    "PlanCreated",
    "PlanPatched",
    "Resumed",
    "SessionCreated",
    "SessionFailed",
    "SessionSucceeded",
]


class SessionCreated(EventBase):
    """A session was created."""

    kind: Literal["session_created"] = "session_created"
    name: str = ""
    """The session's name."""
    goal: str = ""
    """Its goal."""
    parent: str | None = None
    """The session it was forked from, if any."""


class PlanCreated(EventBase):
    """The session's plan was stored."""

    kind: Literal["plan_created"] = "plan_created"
    n_tasks: int = 0
    """Tasks in the plan."""
    version: int = 1
    """The plan version (1 for a new session)."""


class LlmCall(EventBase):
    """One model request. ``cached`` is true when a recorded reply was served."""

    kind: Literal["llm_call"] = "llm_call"
    model: str | None = None
    """Model name."""
    purpose: str | None = None
    """What the call was for: "plan", "llm_task", "decompose", ..."""
    input_tokens: int = 0
    """Input tokens."""
    output_tokens: int = 0
    """Output tokens."""
    cache_read_tokens: int = 0
    """Tokens read from the prompt cache."""
    cache_write_tokens: int = 0
    """Tokens written to the prompt cache."""
    cost_usd: float | None = None
    """Cost in US dollars; None when the model's price is unknown."""
    request_hash: str | None = None
    """Replay-cache key of the request."""
    cached: bool = False
    """Served from the replay cache."""
    stop_reason: str | None = None
    """Why the model stopped."""
    round: int | None = None
    """Planning round (LLM planner calls)."""
    tool_choice: str | None = None
    """"tool" or "auto" (LLM planner calls)."""
    retries: list[dict[str, Any]] | None = None
    """Transient failures retried before this reply (LLM planner calls)."""
    problems: list[str] | None = None
    """What was wrong with the plan the reply held (LLM planner calls)."""
    error: str | None = None
    """The error, when the call failed."""
    error_type: str | None = None
    """The error's class name, when the call failed."""


class PlanPatched(EventBase):
    """The plan changed."""

    kind: Literal["plan_patched"] = "plan_patched"
    version: int | None = None
    """The new plan version."""
    added: list[str] = Field(default_factory=list)
    """Ids of tasks added."""
    removed: list[str] = Field(default_factory=list)
    """Ids of tasks removed."""
    rewired: dict[str, list[str]] = Field(default_factory=dict)
    """Task id -> its new deps."""
    changed: dict[str, Any] = Field(default_factory=dict)
    """Task id -> {field: [old, new]} (a fallback's tool swap)."""
    reason: str | None = None
    """Why the plan changed."""
    compound: str | None = None
    """The compound task re-decomposed, if any."""
    method: str | None = None
    """The method that produced the added tasks, if any."""


class HtnDecision(EventBase):
    """An HTN planning decision; ``decision`` is one of tried, chosen, rejected,
    backtracked."""

    RENAMED: ClassVar[dict[str, str]] = {"kwargs": "keyword_args"}

    kind: Literal["htn_decision"] = "htn_decision"
    compound: str | None = None
    """Id of the compound task decided on."""
    task: str | None = None
    """The compound task's name in the domain."""
    call: str | None = None
    """The call as text (name and arguments)."""
    method: str | None = None
    """The method concerned."""
    decision: str | None = None
    """tried, chosen, rejected or backtracked."""
    reason: str | None = None
    """Why."""
    phase: str | None = None
    """When: while planning, or backtracking at run time."""
    args: Any = None
    """Positional arguments of the call (chosen)."""
    keyword_args: Any = None
    """Keyword arguments of the call (chosen; payload key "kwargs" in
    schema_version 1)."""
    parent: str | None = None
    """The compound it belongs to (chosen)."""
    subtasks: list[str] | None = None
    """Ids of the subtasks it became (chosen)."""
    continuation: bool | None = None
    """Whether the method continues an earlier decomposition (chosen)."""

    @staticmethod
    def fields_of(decision: Mapping[str, Any]) -> dict[str, Any]:
        """A planner's decision dict (``on_decision``) as this event's fields."""
        return {"keyword_args" if k == "kwargs" else k: v for k, v in decision.items()}

    def as_planner_decision(self) -> dict[str, Any]:
        """This event as the planner's decision dict (for ``planner.restore``)."""
        d = self.own_fields()
        if "keyword_args" in d:
            d["kwargs"] = d.pop("keyword_args")
        return d


class BudgetExceeded(EventBase):
    """A budget would be crossed; the session pauses."""

    kind: Literal["budget_exceeded"] = "budget_exceeded"
    budget: str | None = None
    """The scope: "session" or a task id."""
    limit: str | None = None
    """Which limit: max_cost_usd, max_tokens, max_wall_s or max_steps."""
    value: float | None = None
    """The limit's value."""
    used: float | None = None
    """Used so far in that scope."""
    needed: float | None = None
    """What the next step would add."""


class MemoryWritten(EventBase):
    """A memory was written with this event's provenance."""

    RENAMED: ClassVar[dict[str, str]] = {"kind": "memory_kind"}
    kind: Literal["memory_written"] = "memory_written"
    id: str | None = None
    """The memory's id."""
    memory_kind: str | None = None
    """The memory's kind (payload key "kind" in schema_version 1)."""


class ContextBuilt(EventBase):
    """An LLM prompt was assembled within a token budget."""

    kind: Literal["context_built"] = "context_built"
    budget: int | None = None
    """The token budget."""
    used: int | None = None
    """Tokens of the whole prompt."""
    estimator: str | None = None
    """Which estimator counted."""
    items: list[dict[str, Any]] = Field(default_factory=list)
    """Every item considered: included, truncated or dropped, each with why."""


class Anomaly(EventBase):
    """Something looks wrong: consecutive failures, or an attempt far over its
    expected time. The session pauses for a person."""

    kind: Literal["anomaly"] = "anomaly"
    what: str | None = None
    """"slow" or "consecutive_failures"."""
    detail: str | None = None
    """What happened and what to do."""
    limit_s: float | None = None
    """The time limit crossed ("slow")."""
    count: int | None = None
    """Failures in a row ("consecutive_failures")."""


class Paused(EventBase):
    """The session paused."""

    kind: Literal["paused"] = "paused"
    reason: str | None = None
    """Why."""


class Resumed(EventBase):
    """A run began or resumed; with a task, an interrupted attempt is rerun; with
    ``recovered="lost_commits"``, a session went on past commits SQLite lost."""

    kind: Literal["resumed"] = "resumed"
    recovered: str | None = None
    """"rerun" for an interrupted idempotent attempt run again; "lost_commits"
    when ``ws.open(..., accept_lost_commits=True)`` went on past lost commits;
    "not started: shutting down" for a call a shutdown kept from starting."""
    why: str | None = None
    """Why (a shutdown's reason)."""
    key: str | None = None
    """Its idempotency key (the same on the rerun)."""
    head_version: int | None = None
    """lost_commits: the version the checkpoint held."""
    witness_version: int | None = None
    """lost_commits: the latest version that had been committed."""
    tasks: list[str] | None = None
    """lost_commits: the tasks those commits touched (None: not known, any)."""


class Forked(EventBase):
    """This session was forked from another."""

    kind: Literal["forked"] = "forked"
    parent: str | None = None
    """The parent session's id."""
    parent_name: str | None = None
    """The parent session's name."""
    at: str | None = None
    """The task the fork reruns from, if any."""
    kept: list[str] = Field(default_factory=list)
    """Tasks whose finished results were kept."""
    carried: list[str] = Field(default_factory=list)
    """Tasks whose attempt was running or in doubt in the parent (its effect
    may have happened there): in doubt here, or, safe to repeat, rerun under
    the parent's idempotency key."""


class SessionSucceeded(EventBase):
    """Every task succeeded or was skipped."""

    kind: Literal["session_succeeded"] = "session_succeeded"


class SessionFailed(EventBase):
    """Nothing more can run and some task failed."""

    kind: Literal["session_failed"] = "session_failed"
    failed: dict[str, str | None] = Field(default_factory=dict)
    """Failed task id -> its error."""
    summary: str | None = None
    """The session's reason, in one line."""


class CheckpointSaved(EventBase):
    """A LangGraph checkpoint was committed (``argus_lab.langgraph``: a thread's
    events are read from its checkpoints and writes, not stored as events)."""

    kind: Literal["checkpoint_saved"] = "checkpoint_saved"
    checkpoint_id: str | None = None
    """The LangGraph checkpoint id."""
    checkpoint_ns: str = ""
    """Its namespace ("" for the root graph, else a subgraph's)."""
    step: int | None = None
    """LangGraph's step number (-1 for the input)."""
    source: str | None = None
    """"input", "loop", "update" or "fork" (LangGraph's metadata)."""
