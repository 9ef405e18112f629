"""Records: the pydantic models every plan, task and checkpoint is made of.

Timestamps are float seconds since the epoch (UTC): cheap to store and compare;
the DataFrames turn them into tz-aware UTC timestamps.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from difflib import get_close_matches
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

__all__ = [
    "SESSION_STATUSES",
    "STATUSES",
    "Budget",
    "SessionInfo",
    "SessionStatus",
    "Status",
    "Task",
    "TaskRecord",
    "blank_record",
    "idempotency_key",
    "updated",
]

Status = Literal[
    "pending",
    "running",
    "awaiting_approval",
    "succeeded",
    "failed",
    "skipped",
    "blocked",
    "in_doubt",
]
"""A task's stored status. "ready" is derived: pending with every dependency done."""

STATUSES: tuple[Status, ...] = (
    "pending",
    "running",
    "awaiting_approval",
    "succeeded",
    "failed",
    "skipped",
    "blocked",
    "in_doubt",
)

SessionStatus = Literal["created", "running", "paused", "succeeded", "failed"]
"""A session's status: where its last run ended (or "running" while one goes on)."""

SESSION_STATUSES: tuple[SessionStatus, ...] = (
    "created",
    "running",
    "paused",
    "succeeded",
    "failed",
)

TASK_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_./:-]{0,199}$"


class Budget(BaseModel):
    """Limits on a session, a task or an HTN subtree; None means no limit."""

    # Infinity is taken as None too. The docstring is the schema's description,
    # which the LLM planner's prompt holds: a change to it changes every
    # recorded planning request (notebooks/replay), so it says no more.
    model_config = ConfigDict(extra="forbid")

    max_cost_usd: float | None = Field(default=None, ge=0)
    """Model spend in US dollars."""
    max_tokens: int | None = Field(default=None, ge=0)
    """Model tokens, input and output together."""
    max_wall_s: float | None = Field(default=None, ge=0)
    """Seconds spent running (summed over runs)."""
    max_steps: int | None = Field(default=None, ge=0)
    """Attempts started."""

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        # "Extra inputs are not permitted" does not say which limit was meant.
        if isinstance(data, dict):
            for key in data:
                if key not in cls.model_fields:
                    meant = _BUDGET_SYNONYMS.get(str(key)) or next(
                        iter(get_close_matches(str(key), cls.model_fields, 1)), None
                    )
                    hint = f"did you mean {meant!r}? " if meant else ""
                    raise ValueError(
                        f"Budget has no limit {key!r}; {hint}(the limits are "
                        f"{', '.join(cls.model_fields)})"
                    )
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _a_limit(cls, v: Any, info: ValidationInfo) -> Any:
        # "Input should be greater than or equal to 0" for NaN, True taken
        # for 1, 1.5 tokens: say what a limit is instead.
        if v is None:
            return v
        name = info.field_name
        whole = name in ("max_tokens", "max_steps")
        number = isinstance(v, int | float) and not isinstance(v, bool)
        if number and v == math.inf:
            return None  # no limit, as stored (JSON has no infinity)
        if (
            not number
            or not math.isfinite(v)
            or v < 0
            or (whole and isinstance(v, float) and not v.is_integer())
        ):
            got = repr(v) if number else f"{v!r} ({type(v).__name__})"
            raise ValueError(
                f"{name} must be a {'whole ' if whole else ''}number >= 0 "
                f"(0 allows nothing; None: no limit), got {got}"
            )
        return v

    @classmethod
    def of(cls, value: Budget | Mapping[str, Any]) -> Budget:
        """``value`` as a Budget; a bad limit raises one ValueError saying
        which and what a limit takes (not pydantic's report)."""
        if isinstance(value, Budget):
            return value
        try:
            return cls.model_validate(dict(value))
        except ValidationError as e:
            raise ValueError(
                "; ".join(
                    str(err["msg"]).removeprefix("Value error, ") for err in e.errors()
                )
            ) from None


_BUDGET_SYNONYMS = {
    "max_cost": "max_cost_usd",
    "cost": "max_cost_usd",
    "max_usd": "max_cost_usd",
    "usd": "max_cost_usd",
    "max_wall_seconds": "max_wall_s",
    "max_seconds": "max_wall_s",
    "max_time": "max_wall_s",
    "wall_time": "max_wall_s",
    "timeout": "max_wall_s",
    "max_attempts": "max_steps",
    "steps": "max_steps",
    "tokens": "max_tokens",
}


class Task(BaseModel):
    """One node of a plan: a tool call with its arguments and dependencies."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=TASK_ID_PATTERN)
    """Unique within the plan; letters, digits and ``_ . / : -``."""
    title: str = ""
    """A short human label; the id is shown when empty."""
    description: str = ""
    """What the task is for (shown in the widget, given to LLM tasks)."""
    kind: Literal["tool", "llm"] = "tool"
    """"tool": call ``tool`` with ``args``. "llm": a model works on the task
    (its description, expected output, args and dependency results) in a
    bounded tool-use loop; its final answer is the result."""
    tool: str | None = None
    """Name of the tool this task calls (kind "tool")."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Arguments; strings may hold ``${task.result.path}`` references."""
    deps: list[str] = Field(default_factory=list)
    """Ids of tasks that must finish first (references add theirs implicitly)."""
    retries: int | None = Field(default=None, ge=0)
    """Retries after a TransientError; None takes the tool's default."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds per attempt; None takes the tool's default."""
    expected_output: str = ""
    """What a good result looks like, in words."""
    success: dict[str, Any] | None = None
    """Optional JSON Schema the result must satisfy, else the attempt fails."""
    parent: str | None = None
    """Id of the compound task this one was decomposed from (HTN), if any."""
    budget: Budget | None = None
    """Limits for this task alone (its attempts, its model calls)."""
    on_failure: Literal["fail", "skip", "ask", "fallback", "replan"] = "fail"
    """What happens when it fails for good (after its retries): fail (block its
    dependents), skip (dependents go on), ask (the session pauses for a person),
    fallback (run it again with ``fallback`` as the tool), or replan (the
    session's planner patches the not-yet-run part of the plan)."""
    model: str | None = None
    """LLM tasks: which of the session's models answers (tiering: a strong one
    to plan, a cheap one for simple steps); None takes "default"."""
    llm_tools: list[str] = Field(default_factory=list)
    """LLM tasks: the session tools the model may call."""
    max_turns: int = Field(default=8, ge=1)
    """LLM tasks: model calls at most, before the task fails."""
    output_schema: dict[str, Any] | None = None
    """LLM tasks: JSON Schema of the final answer (asked for through a forced
    final_answer tool and validated)."""
    fallback: str | None = None
    """The tool to degrade to when ``on_failure`` is "fallback"."""
    expected_seconds: float | None = Field(default=None, gt=0)
    """How long an attempt should take; far over it is an anomaly (see
    SessionOptions.anomaly_factor)."""


class TaskRecord(BaseModel):
    """The stored state of one task in one session."""

    task_id: str
    """The task this record belongs to."""
    status: Status = "pending"
    """Where the task stands."""
    attempts: int = 0
    """Attempts started so far (an interrupted attempt counts)."""
    generation: int = 0
    """Bumped by a manual retry or rerun; part of the idempotency key."""
    result: Any = None
    """The JSON result, unless it was large and went to ``result_ref``."""
    result_ref: str | None = None
    """Artifact id (``sha256:...``) of a large result stored beside the checkpoint."""
    error: str | None = None
    """The last error message."""
    error_type: str | None = None
    """The last error's class name."""
    traceback: str | None = None
    """The last error's traceback, when it came from a tool."""
    started: float | None = None
    """When the last attempt started (epoch seconds)."""
    ended: float | None = None
    """When the task last reached a final status (epoch seconds)."""
    idempotency_key: str | None = None
    """Stable across crash-retries of the same generation."""
    key_of: str | None = None
    """The session whose idempotency keys this task's attempts use, when not
    its own: in a fork, a task whose attempt was running or in doubt in the
    parent (its effect may have happened there) keeps the parent's key for
    its generation, so a remote that deduplicates recognises a rerun. A new
    generation (a retry of a failure, a rerun) drops it."""
    input_hash: str | None = None
    """Hash of the tool name and resolved arguments of the last attempt."""
    tool_hash: str | None = None
    """Hash of the tool's code when the task last succeeded (staleness)."""
    cost_usd: float = 0.0
    """Model spend of this task so far (LLM tasks), over all attempts."""
    tokens: int = 0
    """Model tokens of this task so far, over all attempts."""
    approval: dict[str, Any] | None = None
    """The approval decision for this generation: state (asked, approved,
    rejected), by, at, args, edited_args, policy, reason."""
    next_attempt_at: float | None = None
    """When a scheduled retry becomes due (wall-clock time)."""
    retry_delay: float | None = None
    """The delay that set ``next_attempt_at``, in seconds: a later run waits
    at most this long for it, so a clock set back in between (NTP, a VM
    restored) never stretches the wait by the jump."""
    reason: str | None = None
    """Why the task is blocked, skipped or in doubt."""
    unsafe_intent: bool = False
    """The last attempt's tool, when it started, had side effects and was not
    idempotent: if that attempt was interrupted, it is held in doubt even when
    the tool has been redefined as safe to repeat since (the old code ran)."""
    interrupts: int = 0
    """Attempts in a row that a process died during, no task of the session
    done in between (``done_at_interrupt``): a resume reruns a task safe to
    repeat until this passes ``INTERRUPTED_RERUNS`` (it ran alone) or
    ``INTERRUPTED_RERUNS_TOGETHER``, then asks a person (a tool that kills its
    own process would otherwise run, and kill it, at every resume)."""
    done_at_interrupt: int = -1
    """How many tasks of the session were done at the last interrupt."""

    def key_in(self, session_id: str) -> str:
        """The idempotency key of this generation's attempts in session
        ``session_id`` (or in the session ``key_of`` names)."""
        return idempotency_key(self.key_of or session_id, self.task_id, self.generation)

    def next_generation(self, new: bool = True) -> dict[str, Any]:
        """The fields of this task's next record that depend on whether it
        starts a new generation (a retry of a failure or a skip, a stale
        rerun, a fallback, a lost commit of a finished task): a new one
        gets new idempotency keys, so it drops what keyed the old one (a
        fork's ``key_of``) and the approval given to the old one's call.
        ``new=False`` (an in-doubt task asked again) keeps all three."""
        if not new:
            return {
                "generation": self.generation,
                "key_of": self.key_of,
                "approval": self.approval,
            }
        return {"generation": self.generation + 1, "key_of": None, "approval": None}


class SessionInfo(BaseModel):
    """What a workspace knows about a session without running it."""

    id: str
    """Unique, sortable by creation time."""
    name: str
    """Unique within the workspace; used by ``ws.open`` and the CLI."""
    goal: str = ""
    """The goal the session pursues."""
    status: SessionStatus = "created"
    """Where the last run ended."""
    reason: str | None = None
    """Why it paused or failed."""
    created: float
    """When it was created (epoch seconds)."""
    updated: float
    """When its status last changed (epoch seconds)."""
    parent: str | None = None
    """Id of the session this one was forked from."""
    forked_at: str | None = None
    """The task the fork starts again from."""
    n_tasks: int = 0
    """Number of tasks in the plan."""
    breakpoints: list[str] = Field(default_factory=list)
    """Tasks a run pauses before (set with ``s.set_breakpoint``)."""
    budgets: dict[str, Budget] = Field(default_factory=dict)
    """Budgets by scope: "session", "task:<id>" or "subtree:<id prefix>"."""
    plan_version: int = 1
    """Bumped each time the plan is patched (lazy expansion, backtracking, replan)."""
    counts: dict[str, int] = Field(default_factory=dict)
    """Tasks per status, as of the last status change."""
    approvals: list[dict[str, Any]] | None = None
    """The session's approval policies as data (decision, tools, side_effect,
    reason; ``when``: the name of a predicate, which is code and not stored);
    None: the default policies. Restored by ``ws.open``."""
    n_secrets: int = 0
    """How many secret values were handed in as ``secrets=[...]`` (never the
    values): ``ws.open`` warns when fewer are handed in again."""


_new, _set = object.__new__, object.__setattr__


def updated(rec: TaskRecord, upd: dict[str, Any]) -> TaskRecord:
    """``rec.model_copy(update=upd)``: the same shallow copy (no validation,
    the updated fields marked set), in half the time; every step makes two.

    What pydantic's ``__copy__`` does for a model with no extra fields and no
    private attributes (TaskRecord's config; else ``model_copy`` itself).
    """
    if not _PLAIN:
        return rec.model_copy(update=upd)
    new = _new(TaskRecord)
    d = rec.__dict__.copy()
    d.update(upd)
    _set(new, "__dict__", d)
    # BaseModel's slots set through their descriptors: object.__setattr__
    # would look each up by name first (~0.4k instructions each).
    _set_fields(new, rec.__pydantic_fields_set__.union(upd))
    _set_extra(new, None)
    _set_private(new, None)
    return new


_set_fields = vars(BaseModel)["__pydantic_fields_set__"].__set__
_set_extra = vars(BaseModel)["__pydantic_extra__"].__set__
_set_private = vars(BaseModel)["__pydantic_private__"].__set__


_PLAIN = TaskRecord.model_config.get("extra") in (None, "ignore", "forbid") and not (
    TaskRecord.__private_attributes__
)


_BLANK = TaskRecord(task_id="")


def blank_record(task_id: str) -> TaskRecord:
    """``TaskRecord(task_id=task_id)``, a pending record never run, copied
    from a validated one (a step reads one for every task it starts)."""
    return updated(_BLANK, {"task_id": task_id})


def idempotency_key(session_id: str, task_id: str, generation: int) -> str:
    """Stable for a task's generation: the same across crash- and transient
    retries (a store that only knows the record can name the key an attempt
    of it ran under, e.g. one whose commit was lost)."""
    raw = f"{session_id}\x00{task_id}\x00{generation}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]
