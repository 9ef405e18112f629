"""The failure policy: what happens after an attempt, decided from its outcome.

Pure: no I/O, no clock, no randomness of its own (the caller hands in the
jitter, and the look-up of calls left running, which reads lock files), so
every rule here is a unit test away. The settler (settle.py)
carries out the decision; this module only makes it.

=================  ============================================================
outcome            decision
=================  ============================================================
Succeeded          Accept
InDoubt            AskInDoubt: the task waits for a person, the run pauses
OverBudget         StopForBudget: the task waits (pending), the run pauses
TimedOut, Failed   RetryLater while attempts are left, then GiveUp
(transient)
Failed             GiveUp: try the remedies (HTN repair, fallback tool, replan)
                   in order, then fail or skip as ``Task.on_failure`` says
Rejected           GiveUp with no remedy: a person's (or a policy's) no stands
Interrupted        ``after_interrupt``: Rerun if repeating the call is safe,
                   else AskInDoubt (invariant 2)
ShutDown           LeaveIntent: never a failure. A call that may have begun
                   keeps its committed intent, decided on the next open as
                   after a crash (Interrupted); one refused before the call is
                   simply pending again
=================  ============================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from argus_lab.model import Task
from argus_lab.runtime.abandoned import AbandonedCall
from argus_lab.runtime.budget import BudgetHit
from argus_lab.runtime.outcome import (
    Failed,
    Failure,
    InDoubt,
    Interrupted,
    Outcome,
    OverBudget,
    Rejected,
    ShutDown,
    Succeeded,
    TimedOut,
)
from argus_lab.tools.registry import Tool

__all__ = [
    "INTERRUPTED_RERUNS",
    "INTERRUPTED_RERUNS_TOGETHER",
    "Accept",
    "AskInDoubt",
    "Decision",
    "FailurePolicy",
    "GiveUp",
    "LeaveIntent",
    "Remedy",
    "Rerun",
    "RetryLater",
    "StopForBudget",
    "ended_reason",
    "unsafe",
]

Remedy = Literal["repair", "fallback", "replan"]


@dataclass(frozen=True, slots=True)
class Accept:
    """Keep the result: the task succeeded."""


@dataclass(frozen=True, slots=True)
class RetryLater:
    """Try again after ``delay`` seconds (same idempotency key)."""

    delay: float


@dataclass(frozen=True, slots=True)
class Rerun:
    """An interrupted attempt is safe to repeat: make the task pending again."""


@dataclass(frozen=True, slots=True)
class AskInDoubt:
    """The task may have taken effect: mark it in doubt and pause for a person."""

    reason: str


@dataclass(frozen=True, slots=True)
class LeaveIntent:
    """Shutting down: write no outcome. If the call may have begun, its
    committed intent stays, to be decided on the next open as after a crash;
    else the task is pending again. The run stops starting tasks."""

    why: str
    started: bool


@dataclass(frozen=True, slots=True)
class StopForBudget:
    """A budget ran out: the task waits (pending) and the run pauses."""

    hit: BudgetHit


@dataclass(frozen=True, slots=True)
class GiveUp:
    """No more attempts. Try ``remedies`` in order; if none applies, ``then``."""

    outcome: Failure
    """The failure to record (a transient one says how many attempts it took)."""
    remedies: tuple[Remedy, ...]
    """What may still save the task, first that works wins."""
    then: Literal["fail", "skip"]
    """What becomes of the task when no remedy applies."""
    ask: bool
    """Pause the run for a person after failing (``on_failure="ask"``)."""
    counted: bool
    """Counts towards ``max_consecutive_failures`` and leaves a lesson in
    memory (a rejection is a decision, not a failure to learn from)."""


Decision = (
    Accept | RetryLater | Rerun | AskInDoubt | StopForBudget | GiveUp | LeaveIntent
)
"""What happens after an attempt."""


INTERRUPTED_RERUNS = 3
"""Interrupts in a row, the task the only one running and nothing done in
between, that a resume reruns."""
INTERRUPTED_RERUNS_TOGETHER = 10
"""The same, for a task interrupted while others ran beside it: any of them
may be what killed the process (memory running out, say), so each gets more
reruns before all of them wait for a person."""


class FailurePolicy:
    """Turns outcomes into decisions.

    Args:
        backoff: (first delay, largest delay) in seconds between transient
            retries; each delay doubles, with jitter.
        abandoned: Task id -> its call abandoned while it ran on, in this
            process (running or ended) or in another one of this host
            (running: ``abandoned.lookup_anywhere`` for the session), for
            ``after_interrupt`` to say so.
    """

    def __init__(
        self,
        backoff: tuple[float, float],
        abandoned: Callable[[str], AbandonedCall | None] | None = None,
    ) -> None:
        self.backoff = backoff
        self._abandoned = abandoned

    def decide(
        self,
        task: Task,
        out: Outcome,
        *,
        attempt: int,
        retries: int,
        jitter: float,
        can_repair: bool = False,
        can_replan: bool = False,
    ) -> Decision:
        """The decision for ``out``, the outcome of attempt number ``attempt``.

        Args:
            task: The task the attempt was for.
            out: How the attempt ended.
            attempt: 1 for the first attempt of this generation.
            retries: Transient failures retried before giving up.
            jitter: A number in [0, 1) that spreads retry delays.
            can_repair: The planner can backtrack the task's HTN compound.
            can_replan: The planner can replace a failed task by a patch.
        """
        match out:
            case Succeeded():
                return Accept()
            case ShutDown(why, started):  # a shutdown is not the task's failure
                return LeaveIntent(why, started)
            case InDoubt(running=True):
                return AskInDoubt(
                    f"task {task.id!r} is in doubt: {out.error}. Wait for the "
                    "call to end (while the session is open in that process, "
                    "this reason and an in_doubt event will say how it ended; "
                    f"s.retry({task.id!r}) refuses until then, in any process "
                    f"of this host), check, then s.retry({task.id!r}) or "
                    f"s.skip({task.id!r})"
                )
            case InDoubt():
                return AskInDoubt(
                    f"task {task.id!r} is in doubt: {out.error}; check, then "
                    f"s.retry({task.id!r}) or s.skip({task.id!r})"
                )
            case OverBudget():
                return StopForBudget(out.hit)
            case Rejected():
                return GiveUp(out, (), "fail", ask=False, counted=False)
            case TimedOut() | Failed(kind="transient"):
                if attempt <= retries:
                    return RetryLater(
                        self.retry_delay(attempt, out.retry_after, jitter)
                    )
                out = replace(
                    out, error=f"{out.error} (gave up after {attempt} attempt(s))"
                )
        remedies: list[Remedy] = []
        if can_repair and task.parent:
            remedies.append("repair")
        if (
            task.on_failure == "fallback"
            and task.fallback
            and task.fallback != task.tool
        ):
            remedies.append("fallback")
        if task.on_failure == "replan" and can_replan:
            remedies.append("replan")
        elif task.on_failure == "replan" and isinstance(out, Failed | TimedOut):
            out = replace(  # say why the remedy the plan asked for did not run
                out,
                error=f"{out.error} (on_failure is 'replan', but the session has "
                "no planner that replans: pass planner=al.LLMPlanner(model) to "
                "ws.new_session or ws.open)",
            )
        return GiveUp(
            out,
            tuple(remedies),
            "skip" if task.on_failure == "skip" else "fail",
            ask=task.on_failure == "ask",
            counted=True,
        )

    def retry_delay(
        self, attempt: int, retry_after: float | None, jitter: float
    ) -> float:
        """Exponential backoff with jitter, never shorter than a server asked."""
        base, cap = self.backoff
        delay = min(cap, base * 2.0 ** (attempt - 1)) * (0.5 + jitter / 2)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return delay

    def after_interrupt(
        self,
        task: Task,
        out: Interrupted,
        tool: Tool | None,
        tools: Mapping[str, Tool],
        *,
        unsafe_when_started: bool = False,
        in_a_row: int = 1,
        alone: bool = True,
    ) -> Rerun | AskInDoubt:
        """What to do about an attempt a dead process left RUNNING (invariant 2).

        Rerun when the call may be repeated (read-only or idempotent, with the
        same idempotency key); otherwise a person decides. The tool as it was
        when the attempt started counts too (``unsafe_when_started``): code
        redefined as idempotent after a crash did not run, the old code did.
        A person decides too when this is the task's ``in_a_row``-th interrupt
        with nothing done in between, past ``INTERRUPTED_RERUNS`` (the only
        task running: ``alone``) or ``INTERRUPTED_RERUNS_TOGETHER``: its call
        may be what kills the process.
        """
        call = self._abandoned(task.id) if self._abandoned is not None else None
        if call is not None and call.attempt == out.attempt:
            return self._left_running(task.id, call)
        what = (
            f"tool {task.tool!r}"
            if task.tool
            else f"an LLM task (its tools: {', '.join(task.llm_tools) or 'none'})"
        )
        if unsafe_when_started and tool is not None and not unsafe(task, tool, tools):
            return AskInDoubt(
                f"task {task.id!r} was interrupted during attempt {out.attempt} of "
                f"{what}, which had side effects and was not "
                "idempotent when that attempt started (it has been redefined "
                "since): it may or may not have taken effect. Check, then call "
                f"s.retry({task.id!r}) to run it again or s.skip({task.id!r}) if "
                "it took effect."
            )
        if tool is not None and not unsafe(task, tool, tools):
            limit = INTERRUPTED_RERUNS if alone else INTERRUPTED_RERUNS_TOGETHER
            if in_a_row <= limit:
                return Rerun()
            beside = "" if alone else ", each time with other tasks running beside it"
            return AskInDoubt(
                f"task {task.id!r} was interrupted during attempt {out.attempt} "
                f"of {what}, the {in_a_row}th time in a row with no task done "
                f"in between{beside}: the process running it may die because "
                "of it (os._exit, a crash in native code, memory running out), "
                f"or was stopped that often. After {limit} reruns it is not "
                f"rerun automatically: check, then call s.retry({task.id!r}) to "
                f"run it again or s.skip({task.id!r})."
            )
        return AskInDoubt(
            f"task {task.id!r} was interrupted during attempt {out.attempt} of "
            f"{what}, which has side effects and is "
            "not idempotent (or is not registered): it may or may not have "
            f"taken effect. Check, then call s.retry({task.id!r}) to run it "
            f"again or s.skip({task.id!r}) if it took effect."
        )

    @staticmethod
    def _left_running(tid: str, call: AbandonedCall) -> AskInDoubt:
        """The attempt's call ran on after it was abandoned, in this process
        or (its lock file held: abandoned.held) in another one of this host
        (only calls that may make a write that is not idempotent are kept)."""
        if call.ended is None and not call.here():
            return AskInDoubt(
                f"task {tid!r} is in doubt: {call.what()} {call.why}, and its "
                f"call is still running {call.where()} (abandoned there at "
                f"{call.at()}; a thread cannot be stopped): it may yet take "
                f"effect. Wait for it to end there (s.retry({tid!r}) refuses "
                "until then; this reason does not change when it does), or end "
                f"process {call.pid} if it must not go on; check, then "
                f"s.retry({tid!r}) or s.skip({tid!r})."
            )
        if call.ended is None:
            return AskInDoubt(
                f"task {tid!r} is in doubt: {call.what()} {call.why}, and its "
                "call is still running in this process (a thread cannot be "
                "stopped): it may yet take effect. Wait for it to end (this "
                "reason and an in_doubt event will say how it ended; "
                f"s.retry({tid!r}) refuses until then), check, then "
                f"s.retry({tid!r}) or s.skip({tid!r})."
            )
        return AskInDoubt(ended_reason(tid, call))


def ended_reason(tid: str, call: AbandonedCall) -> str:
    """The in-doubt reason of a task whose abandoned call has ended."""
    return (
        f"task {tid!r} is in doubt: {call.what()} {call.why} and ran on in "
        f"this process; it has since ended: it {call.ended}. Check whether it "
        f"took effect, then s.retry({tid!r}) or s.skip({tid!r})."
    )


def unsafe(task: Task, tool: Tool, tools: Mapping[str, Tool]) -> bool:
    """Whether an attempt of ``task`` with ``tool`` may make a write that is not
    idempotent: the tool's own, or (an LLM task) one its model may call."""
    if tool.unsafe_to_repeat:
        return True
    if not task.llm_tools:  # every step asks: no generator for an empty list
        return False
    return any(
        (t := tools.get(n)) is not None and t.unsafe_to_repeat for n in task.llm_tools
    )
