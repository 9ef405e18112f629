"""Session options, run results, and the hashes that name calls and keys."""

from __future__ import annotations

import hashlib
import json
import logging
import numbers
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, TypeVar, runtime_checkable

from argus_lab.events import EventBase
from argus_lab.model import SessionStatus, idempotency_key
from argus_lab.plan import Plan
from argus_lab.tools.approval import DEFAULT_POLICIES, ApprovalPolicy
from argus_lab.tools.registry import Tool

if TYPE_CHECKING:
    from argus_lab.llm.base import Model
    from argus_lab.plan.patch import PlanPatch
    from argus_lab.redact import Redactor

__all__ = [
    "HTNPlanning",
    "RemoteExecutor",
    "Replanning",
    "RunResult",
    "SessionArgs",
    "SessionOptions",
    "Subscriber",
    "failed_reason",
    "idempotency_key",
    "input_hash",
    "input_hashes",
    "plain_args",
    "tool_replay_key",
]

log = logging.getLogger("argus_lab")
T = TypeVar("T")
Subscriber = Callable[[EventBase], None]


class RemoteExecutor(Protocol):
    """Runs sync tool calls elsewhere (e.g. ``al.DaskExecutor`` on a cluster).

    ``call`` must raise TransientError for failures worth retrying (a worker
    lost, a timeout) and re-raise the tool's own exception otherwise. Results
    come back to the session's process, which stores them (never pickled into
    a checkpoint).
    """

    async def call(
        self,
        fn: Callable[..., Any],
        kwargs: dict[str, Any],
        *,
        timeout: float | None,
        key: str,
        idempotent: bool,
    ) -> Any:
        """Runs ``fn(**kwargs)`` remotely and returns its result; raises
        InDoubtError when a non-idempotent call was lost mid-way."""
        ...


@runtime_checkable
class HTNPlanning(Protocol):
    """A planner that works on the plan while it runs (``al.HTNPlanner``):
    expands lazy compound tasks and backtracks a failed subtree."""

    on_decision: Callable[[dict[str, Any]], None] | None
    """Called with each decision's payload (the session records them)."""

    def expand(
        self,
        plan: Plan,
        task_id: str,
        dep_results: Mapping[str, Any],
        *,
        reserved: Collection[str] = (),
    ) -> PlanPatch:
        """Decomposes the lazy compound ``task_id`` now that it is ready."""
        ...

    def repair(
        self,
        plan: Plan,
        failed_task_id: str,
        *,
        reason: str = "",
        dep_results: Mapping[str, Any] | None = None,
        protected: Collection[str] = (),
        reserved: Collection[str] = (),
    ) -> PlanPatch | None:
        """A patch trying the next method of the nearest compound, or None."""
        ...

    def restore(self, decisions: Iterable[Mapping[str, Any]]) -> None:
        """Relearns the decisions made before a restart (from the trajectory)."""
        ...


@runtime_checkable
class Replanning(Protocol):
    """A planner that replaces a failed task by new ones (``al.LLMPlanner``)."""

    rounds: list[dict[str, Any]]
    """Its model calls of the last planning round (recorded as llm_call)."""

    def replan(
        self,
        plan: Plan,
        failed_task_id: str,
        *,
        error: str,
        finished: Iterable[str],
        tools: dict[str, Tool],
        reserved: Collection[str] = (),
    ) -> PlanPatch:
        """A patch removing the failed task (and what follows) and adding
        others, whose ids are none of the plan's nor of ``reserved`` (ids
        used before: a task under one would share its idempotency keys)."""
        ...


@dataclass(frozen=True)
class SessionOptions:
    """How a session runs (not stored: pass them again to ``ws.open``)."""

    concurrency: int = 4
    """Tasks that may run at once."""
    backoff: tuple[float, float] = (0.5, 30.0)
    """(first delay, largest delay) in seconds between transient retries;
    each delay doubles, with jitter, and honours a server's retry-after."""
    lease_ttl: float = 30.0
    """Seconds a runner lease lasts without renewal (renewed while running)."""
    inline_result_bytes: int = 64 * 1024
    """Results larger than this (as JSON) go to content-addressed artifacts."""
    approvals: tuple[ApprovalPolicy, ...] | None = None
    """Approval policies, first match decides; None: ask before write tools."""
    secrets: tuple[str, ...] = field(default=(), repr=False)  # s.options shown
    """Values to redact besides env vars named like KEY/TOKEN/SECRET/PASSWORD."""
    max_consecutive_failures: int | None = 5
    """Pause (an anomaly) after this many tasks in a row failed for good."""
    anomaly_factor: float = 3.0
    """An attempt running this many times over its task's expected_seconds is
    an anomaly: no new task starts until a person looks."""
    remember: bool | None = None
    """Write finished results (and lessons from failures) to the workspace's
    memory, with provenance. None: only when the plan has LLM tasks or uses
    memory tools (plain tool pipelines stay as fast as they are)."""
    context_tokens: int = 8000
    """Token budget of an LLM task's prompt (see runtime/context.py)."""
    models: Model | Mapping[str, Model] | None = None
    """Models for LLM tasks: one Model, or a dict of name -> Model where
    "default" serves tasks that name none (``Task.model`` picks another)."""
    executor: RemoteExecutor | None = None
    """Where sync tool calls run: None for this process's thread pool, or a
    RemoteExecutor such as ``al.DaskExecutor(client)`` (async tools and the
    session itself always stay here)."""
    clock: Callable[[], float] | None = None
    """Wall-clock time stamped on records and events (default ``time.time``);
    a seam for tests and simulations that need a reproducible trajectory."""
    planner: HTNPlanning | Replanning | None = None
    """An HTNPlanner: expands lazy compound tasks when they become ready and
    backtracks a failed subtree to the next method; or an LLMPlanner, which
    replaces tasks whose ``on_failure`` is "replan" (code: hand it in again on
    ``ws.open``, like tools)."""

    shutdown_grace: float = 2.0
    """Seconds attempts in flight get to finish and commit when the session is
    closed or its process shuts down (kernel restart, interpreter exit,
    SIGTERM); attempts still running then are left as their committed
    intents, decided on the next open exactly as after a crash. Kept below
    the 2.5 s a Jupyter server waits before it sends SIGTERM."""

    def __post_init__(self) -> None:
        if self.approvals is not None:
            object.__setattr__(self, "approvals", tuple(self.approvals))
        if self.secrets:
            from argus_lab.redact import check_secrets
            from argus_lab.store._vocabulary import row_words

            check_secrets(self.secrets, row_words())
        object.__setattr__(self, "secrets", tuple(self.secrets))
        for name, kind in (
            ("concurrency", numbers.Integral),  # numpy's too
            ("lease_ttl", numbers.Real),
            ("shutdown_grace", numbers.Real),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, kind):
                want = "an int" if kind is numbers.Integral else "a number"
                raise _OptionType(
                    f"{name} must be {want}, got {v!r} ({type(v).__name__})"
                )
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.lease_ttl <= 0:
            raise ValueError(f"lease_ttl must be positive, got {self.lease_ttl}")
        if not self.shutdown_grace >= 0:  # also refuses NaN
            raise ValueError(
                f"shutdown_grace must be >= 0 seconds, got {self.shutdown_grace}"
            )

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> SessionOptions:
        """Options from keyword arguments; an unknown one names the known ones."""
        try:
            return cls(**options)
        except _OptionType:
            raise
        except TypeError as e:  # an unknown keyword
            known = ", ".join(cls.__dataclass_fields__)
            raise TypeError(f"{e}; session options are: {known}") from None

    @property
    def policies(self) -> tuple[ApprovalPolicy, ...]:
        """The approval policies in force (the defaults when none were given)."""
        return DEFAULT_POLICIES if self.approvals is None else self.approvals


class _OptionType(TypeError):
    """A session option of the wrong type (no list of the known options)."""


class SessionArgs(TypedDict, total=False):
    """The keyword options of ``ws.new_session`` and ``ws.open``, typed: the
    fields of SessionOptions (see there for what each does)."""

    concurrency: int
    backoff: tuple[float, float]
    lease_ttl: float
    inline_result_bytes: int
    approvals: Sequence[ApprovalPolicy] | None
    secrets: Sequence[str]
    max_consecutive_failures: int | None
    anomaly_factor: float
    remember: bool | None
    context_tokens: int
    models: Model | Mapping[str, Model] | None
    executor: RemoteExecutor | None
    clock: Callable[[], float] | None
    planner: HTNPlanning | Replanning | None
    shutdown_grace: float


@dataclass(frozen=True)
class RunResult:
    """How a ``run()`` ended."""

    status: SessionStatus
    """succeeded, failed or paused."""
    reason: str | None = None
    """Why it failed or paused, naming tasks."""
    counts: dict[str, int] = field(default_factory=dict)
    """Tasks per status."""
    failed: dict[str, str] = field(default_factory=dict)
    """Failed task id -> its error."""

    def __bool__(self) -> bool:
        return self.status == "succeeded"

    def __str__(self) -> str:
        done = ", ".join(f"{n} {s}" for s, n in self.counts.items() if n)
        reason = self.reason
        if reason and self.status == "failed" and self.counts:
            # The stored reason starts with its own counts (a listing of
            # sessions shows only the reason); here they are already shown.
            reason = _FAILED_COUNTS.sub("", reason, count=1)
        return f"{self.status}: {done}" + (f" — {reason}" if reason else "")


_FAILED_COUNTS = re.compile(r"^\d+ task\(s\) failed, \d+ blocked — ")


def failed_reason(failed: dict[str, str], blocked: int) -> str:
    """A failed run's stored reason: its counts, then up to five failed tasks
    with their errors (``RunResult.__str__`` leaves the counts out)."""
    summary = "; ".join(f"{t}: {e}" for t, e in list(failed.items())[:5])
    if len(failed) > 5:
        summary += f"; and {len(failed) - 5} more"
    return f"{len(failed)} task(s) failed, {blocked} blocked — {summary}"


def current_user() -> str:
    """Who is deciding (the OS user name), for approvals."""
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


_FLAT = frozenset({int, float, bool, type(None)})


def plain_args(args: dict[str, Any]) -> bool:
    """Whether ``args`` is a flat dict of scalars and of strings without
    ``${``: no reference to resolve or watch, so ``resolve_args`` would only
    copy it (the common case: checked in ~0.3 us instead of two walks).

    Plain arguments are the plan's own text, stored with it and checked for
    secrets when they entered it: ``input_hash`` needs no redactor for them.
    """
    for v in args.values():
        t = type(v)
        if t is str:
            if "${" in v:
                return False
        elif t not in _FLAT:
            return False
    return True


def input_hash(tool_name: str, args: Any, redactor: Redactor | None = None) -> str:
    """Hash of a call's tool name and resolved arguments (staleness, caching).

    With a ``redactor``, secrets in the arguments (``${env.NAME}`` values, a
    session's ``secrets=``, secret shapes and keys) are masked before hashing:
    the hash is stored, and a 64-bit hash of a weak password lets anyone who
    reads the checkpoint test guesses of it. A call whose secret alone changed
    hashes the same (it is not stale). Callers pass one for arguments that are
    not ``plain_args`` (what references resolved to may hold a secret).
    """
    return input_hashes(tool_name, args, redactor)[0]


def input_hashes(
    tool_name: str, args: Any, redactor: Redactor | None = None
) -> tuple[str, ...]:
    """``input_hash`` (stored), then, when masking changed the text, the same
    call's hash in clear: the redactor differs between processes (``secrets=``
    handed in on a reopen, secret-named env vars), so a hash taken where a
    value was not yet a secret is this call's too. The clear one is only
    compared, never stored (nothing to guess from)."""
    # json.dumps(..., sort_keys=True, default=str) would build this encoder
    # on every call: the same text from one made once, or, for the usual
    # flat dict of plain values, written here (stored hashes depend on it).
    text = _flat_json(tool_name, args) or _HASH_JSON.encode([tool_name, args])
    if redactor is not None and redactor.may_hold_secrets(text):
        masked = redactor.value(args)
        hidden = _flat_json(tool_name, masked) or _HASH_JSON.encode([tool_name, masked])
        if hidden != text:
            return (_digest(hidden), _digest(text))
    return (hashlib.sha256(text.encode()).hexdigest()[:16],)  # _digest, inline


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_HASH_JSON = json.JSONEncoder(sort_keys=True, default=str)
_STR = json.encoder.encode_basestring_ascii  # what the encoder writes a str as
_WORDS = {None: "null", True: "true", False: "false"}


def _flat_json(tool_name: str, args: Any) -> str | None:
    """``_HASH_JSON.encode([tool_name, args])`` when ``args`` is a dict of str
    keys to str, int, finite float, bool or None (exactly these types); None
    otherwise. ``tests/test_options.py`` pins the texts equal."""
    if type(args) is not dict or type(tool_name) is not str:
        return None
    parts = []
    for k in sorted(args):  # str keys only (else None below): no mixed sort
        if type(k) is not str:
            return None
        v = args[k]
        t = type(v)
        if t is str:
            text = _STR(v)
        elif t is int:
            text = int.__repr__(v)
        elif t is float and v - v == 0.0:  # finite
            text = float.__repr__(v)
        elif t is bool or v is None:
            text = _WORDS[v]
        else:
            return None
        parts.append(f"{_STR(k)}: {text}")
    return f"[{_STR(tool_name)}, {{{', '.join(parts)}}}]"


def tool_replay_key(task_id: str, in_hash: str, tool_hash: str) -> str:
    """Replay-cache key of a tool result: the task, its inputs and its tool's code."""
    return f"tool:{task_id}:{in_hash}:{tool_hash}"
