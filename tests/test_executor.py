"""One call of one tool (argus_lab/runtime/executor.py): how it ended, as a type.

The failure policy matches on these types, so each way a call can end must come
back as the right one (never as an exception, never as a string to compare).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.runtime.executor import run_attempt
from argus_lab.runtime.outcome import Failed, InDoubt, Outcome, Succeeded, TimedOut
from argus_lab.store.artifacts import ArtifactStore


@pytest.fixture
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(2) as p:
        yield p


def call(
    tool: al.Tool,
    ctx: al.ToolContext,
    pool: concurrent.futures.Executor,
    tmp_path: Path,
    args: dict[str, Any] | None = None,
    **kw: Any,
) -> Outcome:
    kw.setdefault("timeout", None)
    kw.setdefault("success", None)
    return asyncio.run(
        run_attempt(
            tool,
            args or {},
            ctx,
            pool=pool,
            artifacts=lambda: ArtifactStore(tmp_path / "artifacts"),
            **kw,
        )
    )


@al.tool
def double(x: int) -> dict[str, int]:
    return {"y": 2 * x}


@al.tool
def flaky() -> None:
    raise al.TransientError("503 from upstream", retry_after=7.0)


@al.tool
def broken() -> None:
    raise ValueError("bad input")


@al.tool
def lost() -> None:
    raise al.InDoubtError("the cluster lost the write")


@al.tool
def unserialisable() -> object:
    return object()


@al.tool
async def hangs() -> None:
    await asyncio.Event().wait()  # never set: only the timeout ends it


@al.tool(side_effect="write")
async def hangs_writing() -> None:
    await asyncio.Event().wait()


def test_a_result_that_passes_is_a_success_with_its_json(
    ctx: al.ToolContext, pool: Any, tmp_path: Path
) -> None:
    out = call(double, ctx, pool, tmp_path, {"x": 2})
    assert isinstance(out, Succeeded)
    assert out.result == {"y": 4} and out.result_json == '{"y": 4}'
    assert out.duration > 0


def test_a_transient_error_is_a_transient_failure_with_its_retry_after(
    ctx: al.ToolContext, pool: Any, tmp_path: Path
) -> None:
    out = call(flaky, ctx, pool, tmp_path)
    assert isinstance(out, Failed) and out.transient
    assert (out.error_type, out.retry_after) == ("TransientError", 7.0)
    assert out.traceback is not None and "503 from upstream" in out.traceback


def test_an_exception_is_a_permanent_failure(
    ctx: al.ToolContext, pool: Any, tmp_path: Path
) -> None:
    out = call(broken, ctx, pool, tmp_path)
    assert isinstance(out, Failed) and not out.transient
    assert (out.kind, out.error, out.error_type) == ("error", "bad input", "ValueError")


def test_arguments_that_do_not_fit_are_invalid_args(
    ctx: al.ToolContext, pool: Any, tmp_path: Path
) -> None:
    out = call(double, ctx, pool, tmp_path, {"x": "many"})
    assert isinstance(out, Failed) and out.kind == "invalid_args"
    assert out.traceback is None  # the message says it all


@pytest.mark.parametrize(
    ("tool", "args", "success", "why"),
    [
        (unserialisable, {}, None, "not JSON"),
        (double, {"x": 1}, {"type": "object", "required": ["z"]}, "success schema"),
    ],
)
def test_a_result_that_fails_its_checks_is_a_bad_result(
    ctx: al.ToolContext,
    pool: Any,
    tmp_path: Path,
    tool: al.Tool,
    args: dict[str, Any],
    success: dict[str, Any] | None,
    why: str,
) -> None:
    out = call(tool, ctx, pool, tmp_path, args, success=success)
    assert isinstance(out, Failed) and out.kind == "bad_result"
    assert out.error_type == "ToolError" and why in out.error


def test_a_timeout_is_timed_out_unless_the_call_may_have_written(
    ctx: al.ToolContext, pool: Any, tmp_path: Path
) -> None:
    out = call(hangs, ctx, pool, tmp_path, timeout=0.05)
    assert isinstance(out, TimedOut)
    assert out.error == "tool 'hangs' timed out after 0.05s"
    doubt = call(hangs_writing, ctx, pool, tmp_path, timeout=0.05)
    assert isinstance(doubt, InDoubt)
    assert "may or may not have taken effect" in doubt.error


def test_a_lost_write_is_in_doubt(
    ctx: al.ToolContext, pool: Any, tmp_path: Path
) -> None:
    out = call(lost, ctx, pool, tmp_path)
    assert isinstance(out, InDoubt)
    assert out.error == "the cluster lost the write"
