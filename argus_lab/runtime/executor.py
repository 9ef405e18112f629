"""One attempt of one task: validate, call (with a timeout), check, classify."""

from __future__ import annotations

import asyncio
import functools
import json
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic_core import to_jsonable_python

from argus_lab.errors import ArgusError, InDoubtError, TransientError
from argus_lab.store.artifacts import ArtifactStore, to_stored
from argus_lab.tools.registry import Tool, ToolContext

__all__ = ["Outcome", "RemoteExecutor", "run_attempt"]


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


@dataclass(slots=True)
class Outcome:
    """What one attempt produced."""

    ok: bool
    result: Any = None
    result_json: str | None = None
    error: str | None = None
    error_type: str | None = None
    traceback: str | None = None
    transient: bool = False
    retry_after: float | None = None
    duration: float = 0.0


def _fail(e: BaseException, *, transient: bool, tb: bool = True) -> Outcome:
    return Outcome(
        ok=False,
        error=str(e) or type(e).__name__,
        error_type=type(e).__name__,
        traceback="".join(traceback.format_exception(e)) if tb else None,
        transient=transient,
        retry_after=getattr(e, "retry_after", None),
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
    artifacts: ArtifactStore,
    remote: RemoteExecutor | None = None,
) -> Outcome:
    """Runs one attempt and classifies its outcome (never raises for tool errors)."""
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
    )
    out.duration = time.perf_counter() - t0
    return out


async def _attempt(
    tool: Tool,
    args: dict[str, Any],
    ctx: ToolContext,
    *,
    timeout: float | None,
    success: dict[str, Any] | None,
    pool: Executor,
    artifacts: ArtifactStore,
    remote: RemoteExecutor | None = None,
) -> Outcome:
    try:
        kwargs = tool.validate(args)
    except ArgusError as e:
        return _fail(e, transient=False, tb=False)
    if tool.takes_ctx:
        kwargs["ctx"] = ctx
    try:
        if tool.is_async:
            result = await asyncio.wait_for(tool.fn(**kwargs), timeout)
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
            loop = asyncio.get_running_loop()
            fut = loop.run_in_executor(pool, functools.partial(tool.fn, **kwargs))
            # A sync tool cannot be killed: on timeout its thread runs on, but the
            # attempt is abandoned and counted as a transient failure.
            result = await asyncio.wait_for(fut, timeout)
    except TimeoutError as e:
        if tool.side_effect == "write" and not tool.idempotent:
            # Abandoned mid-call, it may still take effect: never run it again
            # on our own (invariant 2); a person decides.
            return _fail(
                InDoubtError(
                    f"tool {tool.name!r} timed out after {timeout:g}s and may or may "
                    "not have taken effect"
                ),
                transient=False,
                tb=False,
            )
        if timeout is not None and not str(e):
            msg = f"tool {tool.name!r} timed out after {timeout:g}s"
            return _fail(TransientError(msg), transient=True, tb=False)
        return _fail(e, transient=True)
    except (TransientError, ConnectionError) as e:
        return _fail(e, transient=True)
    except asyncio.CancelledError:
        raise
    except Exception as e:
        return _fail(e, transient=False)
    try:
        # DataFrames, Figures, bytes and produced files become artifacts.
        jsonable = to_jsonable_python(to_stored(result, artifacts))
        text = json.dumps(jsonable, ensure_ascii=False, allow_nan=False)
    except ArgusError as e:  # e.g. binary data holding a secret: refused
        return _fail(e, transient=False, tb=False)
    except (ValueError, TypeError) as e:
        return Outcome(
            ok=False,
            error=f"tool {tool.name!r} returned a result that is not JSON: {e}",
            error_type="ToolError",
        )
    if success is not None:
        why = check_success(jsonable, success)
        if why is not None:
            return Outcome(ok=False, error=why, error_type="ToolError")
    return Outcome(ok=True, result=jsonable, result_json=text)
