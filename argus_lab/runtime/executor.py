"""One call of one tool: validate, call (with a timeout), check, and classify
how it ended as a typed outcome (outcome.py); it never raises for tool errors."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

from pydantic_core import to_jsonable_python

from argus_lab.errors import ArgusError, StorageError
from argus_lab.runtime import abandoned
from argus_lab.runtime.classify import error_outcome, failed
from argus_lab.runtime.options import RemoteExecutor
from argus_lab.runtime.outcome import (
    Failed,
    InDoubt,
    Outcome,
    ShutDown,
    Succeeded,
    TimedOut,
)
from argus_lab.runtime.toolcall import await_tool, call_tool, error_text
from argus_lab.store.artifacts import ArtifactStore, to_stored
from argus_lab.store.head import HOST
from argus_lab.tools.registry import Tool, ToolContext

__all__ = [
    "INLINE_AFTER",
    "INLINE_BUDGET_S",
    "InlineGate",
    "call_inline",
    "check_success",
    "run_attempt",
]

INLINE_BUDGET_S = 0.001
"""A sync call at most this long may run on the event loop (``Tool.inline``)."""
INLINE_AFTER = 1
"""Calls in a row within the budget, on a tool thread, before going inline.

One: each call on a thread costs a hop and its intent a commit of its own, and
more quick calls first protect the loop no better (a tool that turns slow goes
back to threads after two slow inline calls, whatever came before)."""
_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Result types that are JSON as they are (exactly these: no subclasses)."""
_RESULT_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False)  # made once


def _timed(fn: Any, kwargs: dict[str, Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    result = call_tool(fn, kwargs)
    return result, time.perf_counter() - t0


class _NotStarted(Exception):
    """The tool pool refused the call (the process is shutting down)."""


class InlineGate:
    """Decides, per session, which sync tools run on the event loop.

    ``@al.tool(inline=True/False)`` decides for itself. Otherwise a sync tool
    with ``side_effect="none"`` and no timeout goes inline once ``INLINE_AFTER``
    call(s) in a row took at most ``INLINE_BUDGET_S`` on a tool thread, and goes
    back to threads for good (in this session) when two inline calls in a row
    take longer, or one fails. Only the session's loop thread uses it.
    """

    def __init__(self) -> None:
        self.fast_calls: dict[str, int] = {}
        """Tool name -> quick calls in a row (-1: stays on threads)."""
        self.slow: set[str] = set()
        """Tools whose last inline call went over the budget."""

    def inline_now(self, tool: Tool, timeout: float | None) -> bool:
        """Whether this call of a local sync ``tool`` runs on the loop."""
        if tool.is_async or timeout is not None:  # only a thread can time out
            return False
        if tool.inline is not None:
            return tool.inline
        return (
            tool.side_effect == "none"
            and self.fast_calls.get(tool.name, 0) >= INLINE_AFTER
        )

    def took(self, tool: Tool, seconds: float) -> None:
        """Notes how long a call on a tool thread took."""
        n = self.fast_calls.get(tool.name, 0)
        if tool.inline is None and n >= 0:
            self.fast_calls[tool.name] = n + 1 if seconds <= INLINE_BUDGET_S else 0

    def demote(self, tool: Tool) -> None:
        """Keeps ``tool`` on threads from now on."""
        self.fast_calls[tool.name] = -1

    def inline_took(self, tool: Tool, seconds: float) -> None:
        """Notes how long an inline call took: two slow ones in a row send the
        tool back to threads (one alone may be the machine preempting us)."""
        if seconds <= INLINE_BUDGET_S:
            self.slow.discard(tool.name)
        elif tool.name in self.slow:
            self.demote(tool)
        else:
            self.slow.add(tool.name)


def _refused_the_loop(e: BaseException) -> bool:
    """Whether a call failed only because it ran inside an event loop: asyncio's
    own words for it ("cannot be called from a running event loop", "This event
    loop is already running"). Any other failure is the tool's and is counted."""
    text = error_text(e).lower() if isinstance(e, RuntimeError) else ""
    return "event loop" in text or "running loop" in text


_REFUSED: Any = object()
"""``_run_inline``'s answer for a call that refused to run inside an event loop."""


def _run_inline(tool: Tool, kwargs: dict[str, Any], gate: InlineGate) -> Any:
    """Calls a sync tool on the event loop and tells the gate how long it took.

    A failure is raised like any other (the attempt counts it), except one
    that only says the call refused to run inside an event loop (asyncio.run,
    sync wrappers of async clients) for a tool we chose to run inline (not
    declared ``inline=True``): the gate sends the tool to threads for good and
    this returns ``_REFUSED``, for the caller to run it again there (harmless:
    ``inline_now`` says yes only to tools without side effects or declared
    inline).
    """
    t0 = time.perf_counter()
    try:
        result = call_tool(tool.fn, kwargs)
    except Exception as e:
        if tool.inline is None and _refused_the_loop(e):
            gate.demote(tool)
            return _REFUSED
        raise
    if tool.inline is None:
        gate.inline_took(tool, time.perf_counter() - t0)
    return result


class _OwnTimeout(Exception):
    """The executor's own timeout ran out (not a TimeoutError the tool raised)."""

    def __init__(
        self,
        timeout: float,
        *,
        running: bool,
        began: bool = True,
        call: abandoned.AbandonedCall | None = None,
    ) -> None:
        super().__init__(f"timed out after {timeout:g}s")
        self.timeout = timeout
        self.running = running
        """The call still runs, on a thread (kept in abandoned.py if unsafe)."""
        self.began = began
        """False: it waited for a tool thread all along and never began."""
        self.call = call
        """How abandoned.py keeps it (an unsafe call still running)."""


def keep_abandoned(
    tool: Tool, ctx: ToolContext | None, fut: concurrent.futures.Future[Any], why: str
) -> abandoned.AbandonedCall | None:
    """Keeps an unsafe call that runs on after its attempt was abandoned in
    the process-wide registry (abandoned.py): no retry starts beside it.

    Called before the attempt's outcome goes back to the run, so its lock
    file is held before the run can release the session's lease: no other
    process may retry in between."""
    if tool.unsafe_to_repeat and ctx is not None:
        return abandoned.abandon(
            fut,
            session_id=ctx.session_id,
            task_id=ctx.task_id,
            attempt=ctx.attempt,
            tool=tool.name,
            why=why,
            sessions=ctx.workspace / "sessions",
            key_of=ctx._key_of,
        )
    return None


async def _call_sync(
    tool: Tool,
    kwargs: dict[str, Any],
    timeout: float | None,
    pool: Executor,
    gate: InlineGate | None,
    on_thread: Callable[[], Awaitable[bool]] | None = None,
    ctx: ToolContext | None = None,
) -> Any:
    if gate is not None and gate.inline_now(tool, timeout):
        # The thread hop (submit, wake-up, future) costs more than a quick call.
        result = _run_inline(tool, kwargs, gate)
        if result is not _REFUSED:
            return result
        # The loop runs on while the thread calls: an intent deferred for an
        # inline call is committed now, before the call (False: it was not,
        # the session is shutting down).
        if on_thread is not None and not await on_thread():
            raise _NotStarted("the session is shutting down") from None
    try:
        cfut = pool.submit(_timed, tool.fn, kwargs)
    except RuntimeError as e:  # the pool refuses: the interpreter is shutting down
        raise _NotStarted(str(e)) from e
    fut = asyncio.wrap_future(cfut)
    # A sync call cannot be stopped: past its timeout, or when the session
    # shuts down, its thread runs on. One that has not begun is cancelled.
    try:
        if timeout is None:  # awaited as it is: no waiter, no extra loop turn
            result, took = await fut
        else:
            done, _ = await asyncio.wait((fut,), timeout=timeout)
            if not done:
                fut.cancel()
                if cfut.cancel():  # still queued: it never began
                    raise _OwnTimeout(timeout, running=False, began=False)
                call = keep_abandoned(tool, ctx, cfut, f"timed out after {timeout:g}s")
                raise _OwnTimeout(timeout, running=True, call=call)
            result, took = fut.result()
    except asyncio.CancelledError:
        fut.cancel()
        if not cfut.cancel() and not cfut.done():  # cancel: if not begun
            keep_abandoned(
                tool, ctx, cfut, "was left running when the session shut down"
            )
        raise
    if gate is not None:
        gate.took(tool, took)
    return result


async def _call_async(tool: Tool, kwargs: dict[str, Any], timeout: float | None) -> Any:
    if timeout is None:
        return await await_tool(tool.fn, kwargs)
    try:
        async with asyncio.timeout(timeout) as deadline:
            return await await_tool(tool.fn, kwargs)
    except TimeoutError:
        if deadline.expired():  # ours (else the tool raised it itself)
            raise _OwnTimeout(timeout, running=False) from None
        raise


def _timed_out(tool: Tool, e: _OwnTimeout) -> Outcome:
    """How an attempt whose call ran past the executor's timeout ended."""
    t = e.timeout
    if not e.began:
        return TimedOut(
            f"tool {tool.name!r} waited {t:g}s for a tool thread (all busy) and "
            "timed out before its call began"
        )
    if not tool.unsafe_to_repeat:
        return TimedOut(f"tool {tool.name!r} timed out after {t:g}s")
    # Abandoned mid-call, it may still take effect: never run it again on our
    # own (invariant 2); a person decides.
    if e.running:
        seen = (
            ""
            if e.call is None or e.call.locked
            else "; its lock file could not be written, so only that process "
            "refuses to retry it while it runs"
        )
        return InDoubt(
            f"tool {tool.name!r} timed out after {t:g}s, and its call is still "
            f"running in process {os.getpid()} on host {HOST}, which made it (a "
            f"thread cannot be stopped): it may yet take effect{seen}",
            running=True,
        )
    return InDoubt(
        f"tool {tool.name!r} timed out after {t:g}s and was cancelled mid-call: "
        "it may or may not have taken effect (work it shielded from "
        "cancellation, or handed to another task, may still go on while this "
        "run lasts: check before a retry)"
    )


def check_success(result: Any, schema: dict[str, Any]) -> str | None:
    """Returns why ``result`` fails the JSON Schema ``schema``, or None if it passes."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(result), key=lambda e: list(e.path))
    if not errors:
        return None
    parts = []
    for err in errors[:5]:
        where = "result" + "".join(f"[{p!r}]" for p in err.path)
        parts.append(f"{where}: {err.message}")
    return "result does not match the task's success schema: " + "; ".join(parts)


async def run_attempt(
    tool: Tool,
    args: dict[str, Any],
    ctx: ToolContext,
    *,
    timeout: float | None,
    success: dict[str, Any] | None,
    pool: Executor,
    artifacts: Callable[[], ArtifactStore],
    remote: RemoteExecutor | None = None,
    gate: InlineGate | None = None,
    on_thread: Callable[[], Awaitable[bool]] | None = None,
) -> Outcome:
    """Runs one attempt and classifies its outcome (never raises for tool errors).

    ``gate``: decides which sync calls run on the event loop (None: only tools
    declared ``inline=True``). ``on_thread``: awaited before a call that was
    to run inline goes to a thread after all (it commits a deferred intent;
    False: it could not, and the call does not start)."""
    t0 = time.perf_counter()
    out = await _attempt(
        tool,
        args,
        ctx,
        timeout=timeout,
        success=success,
        pool=pool,
        artifacts=artifacts,
        remote=remote,
        gate=gate,
        on_thread=on_thread,
    )
    return _stamped(out, t0)


def call_inline(
    tool: Tool,
    args: dict[str, Any],
    ctx: ToolContext | None,
    *,
    success: dict[str, Any] | None,
    artifacts: Callable[[], ArtifactStore],
    gate: InlineGate,
) -> Outcome | None:
    """One attempt of a sync tool on the event loop, now, without awaiting
    (``gate.inline_now`` said yes); its outcome as ``run_attempt`` would give it.

    None: the call refused to run inside an event loop (asyncio's own words,
    for a tool not declared ``inline=True``); the gate sends the tool to threads
    and the caller runs the attempt again there (harmless: ``inline_now`` only
    says yes to tools without side effects or declared inline).
    """
    t0 = time.perf_counter()
    kwargs = _kwargs(tool, args, ctx)
    if isinstance(kwargs, Failed):
        return _stamped(kwargs, t0)
    try:
        result = _run_inline(tool, kwargs, gate)
    except Exception as e:
        return _stamped(error_outcome(tool, e, None), t0)
    if result is _REFUSED:
        return None
    return _stamped(_result_outcome(tool, result, success, artifacts), t0)


def _stamped(out: Outcome, t0: float) -> Outcome:
    # Made just now, held by no one: stamped in place, no dataclasses.replace.
    object.__setattr__(out, "duration", time.perf_counter() - t0)
    return out


def _kwargs(tool: Tool, args: dict[str, Any], ctx: ToolContext | None) -> Any:
    """The call's keyword arguments, or the Failed outcome of bad ones."""
    try:
        kwargs = tool.validate(args)
    except ArgusError as e:
        return failed(e, "invalid_args", tb=False)
    if tool.takes_ctx:
        kwargs["ctx"] = ctx
    return kwargs


async def _attempt(
    tool: Tool,
    args: dict[str, Any],
    ctx: ToolContext,
    *,
    timeout: float | None,
    success: dict[str, Any] | None,
    pool: Executor,
    artifacts: Callable[[], ArtifactStore],
    remote: RemoteExecutor | None = None,
    gate: InlineGate | None = None,
    on_thread: Callable[[], Awaitable[bool]] | None = None,
) -> Outcome:
    kwargs = _kwargs(tool, args, ctx)
    if isinstance(kwargs, Failed):
        return kwargs
    try:
        if tool.is_async:
            result = await _call_async(tool, kwargs, timeout)
        elif remote is not None:
            # Shipped to a cluster: the executor owns timeouts and cancellation
            # there, and turns a lost worker into a TransientError.
            result = await remote.call(
                tool.fn,
                kwargs,
                timeout=timeout,
                key=ctx.idempotency_key,
                idempotent=tool.idempotent or tool.side_effect != "write",
            )
        else:
            try:
                result = await _call_sync(
                    tool, kwargs, timeout, pool, gate, on_thread, ctx
                )
            except _NotStarted as e:
                # "cannot schedule new futures after (interpreter) shutdown": the
                # process is exiting, which is no failure of the task's; the call
                # never began.
                return ShutDown(str(e), started=False)
    except asyncio.CancelledError:
        raise
    except _OwnTimeout as e:
        return _timed_out(tool, e)
    except Exception as e:
        return error_outcome(tool, e, timeout)
    return _result_outcome(tool, result, success, artifacts)


def _result_outcome(
    tool: Tool,
    result: Any,
    success: dict[str, Any] | None,
    artifacts: Callable[[], ArtifactStore],
) -> Outcome:
    """How an attempt whose call returned ``result`` ended (checked, as JSON)."""
    try:
        # DataFrames, Figures, bytes and produced files become artifacts; a
        # plain scalar is JSON as it is.
        jsonable = (
            result
            if result.__class__ in _SCALARS
            else to_jsonable_python(to_stored(result, artifacts()))
        )
        text = _RESULT_JSON.encode(jsonable)
    except StorageError:  # not the result's fault: the run stops, says so
        raise
    except ArgusError as e:  # e.g. binary data holding a secret: refused
        return failed(e, "bad_result", tb=False)
    except (ValueError, TypeError, RecursionError) as e:
        # RecursionError: outside JSON nested thousands deep (never end the run)
        deep = "nested too deeply to store" if isinstance(e, RecursionError) else ""
        what = deep or f"that is not JSON: {e}"
        if "Out of range float" in str(e):  # NaN or an infinity, e.g. a mean
            what += (
                " (NaN and infinities have no JSON form: return None for a "
                "missing number, a string, or a DataFrame, which is stored as is)"
            )
        elif not deep and "numpy array" not in what:
            what += (
                " (return JSON: text, numbers, lists and dicts of them; a "
                "DataFrame, bytes, a Figure or a Path is stored as an artifact)"
            )
        return Failed(
            "bad_result", f"tool {tool.name!r} returned a result {what}", "ToolError"
        )
    if success is not None:
        why = check_success(jsonable, success)
        if why is not None:
            return Failed("bad_result", why, "ToolError")
    return Succeeded(jsonable, text)
