"""A tool that calls sys.exit() fails its task; the run goes on and returns
(SystemExit let through stops the session's event loop: run() never returned).
So does a tool raising CancelledError without being cancelled."""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import pytest

import argus_lab as al
from argus_lab.llm import ModelRequest
from argus_lab.llm.testing import FunctionModel, tool_call

pytestmark = pytest.mark.timeout(60)


@al.tool
def quick_exit(code: int) -> int:
    """Side-effect-free and quick: runs inline on the loop after a few calls."""
    if code:
        sys.exit(code)
    return code


@al.tool(inline=True)
def inline_exit() -> int:
    """Declared inline: runs on the loop from the first call."""
    sys.exit("usage: inline_exit [-h]")


@al.tool(timeout=30)
def thread_exit() -> int:
    """A timeout keeps it on a thread."""
    raise SystemExit(2)


@al.tool
async def async_exit() -> int:
    """An async tool exiting inside the loop's own task."""
    raise SystemExit(3)


def run_within(s: al.Session, seconds: float = 30) -> Any:
    """s.run() on a thread, so a hung loop fails the test instead of hanging it."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(s.run()), daemon=True)
    t.start()
    t.join(seconds)
    assert out, "run() did not return: the tool's SystemExit stopped the loop"
    return out[0]


@pytest.mark.parametrize("tool", ["inline_exit", "thread_exit", "async_exit"])
def test_a_tool_calling_sys_exit_fails_its_task_and_the_run_goes_on(
    ws: al.Workspace, tool: str
) -> None:
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "bye", "tool": tool},
            {"id": "after", "tool": "quick_exit", "args": {"code": 0}},
        ],
    }
    tools = [quick_exit, inline_exit, thread_exit, async_exit]
    s = ws.new_session(plan=plan, tools=tools, name=f"exit-{tool}")
    res = run_within(s)
    assert res.status == "failed"
    rec = s.record("bye")
    assert rec.status == "failed" and rec.error_type == "ToolExit"
    assert "called sys.exit(" in (rec.error or "")
    assert s.record("after").status == "succeeded"  # the loop ran on
    s.close()


def test_a_quick_tool_exiting_once_it_runs_inline_fails_only_its_task(
    ws: al.Workspace,
) -> None:
    # Five quick calls put the tool on the loop; the sixth exits there.
    tasks: list[dict[str, Any]] = [
        {"id": f"ok{i}", "tool": "quick_exit", "args": {"code": 0}} for i in range(5)
    ]
    deps = [t["id"] for t in tasks]
    tasks.append({"id": "bye", "tool": "quick_exit", "args": {"code": 4}, "deps": deps})
    s = ws.new_session(plan={"goal": "g", "tasks": tasks}, tools=[quick_exit])
    res = run_within(s)
    assert res.status == "failed"
    assert s.record("bye").error_type == "ToolExit"
    assert "sys.exit(4)" in (s.record("bye").error or "")
    s.close()


def test_an_llm_tasks_tool_exiting_is_an_error_the_model_reads(
    ws: al.Workspace,
) -> None:
    def script(req: ModelRequest) -> object:
        if not any(m.role == "assistant" for m in req.messages):
            return tool_call("thread_exit", {})
        return "it exited; done"

    model = FunctionModel(script)
    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": "ask",
                "kind": "llm",
                "description": "Call it.",
                "llm_tools": ["thread_exit"],
            }
        ],
    }
    s = ws.new_session(plan=plan, tools=[thread_exit], models=model)
    assert run_within(s).status == "succeeded"
    call = next(e for e in s.events() if e.kind == "tool_call")
    assert call.ok is False and call.error_type == "ToolExit"
    s.close()


@al.tool
def cancelled_sync() -> None:
    """Raises CancelledError though nobody cancelled it."""
    raise asyncio.CancelledError("leaked by a client library")


@al.tool
async def cancelled_async() -> None:
    """Raises CancelledError though nobody cancelled it."""
    raise asyncio.CancelledError("leaked by a client library")


@pytest.mark.parametrize("tool", [cancelled_sync, cancelled_async])
def test_a_cancelled_error_a_tool_raises_fails_its_task_not_the_run(
    ws: al.Workspace, tool: al.Tool
) -> None:
    # It read as the cancellation of the run itself: run() raised it, and the
    # session and its task stayed "running".
    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "t", "tool": tool.name}]}, tools=[tool]
    )
    assert s.run().status == "failed"
    rec = s.record("t")
    assert rec.status == "failed" and rec.error_type == "ToolCancelled"
    assert "leaked by a client library" in (rec.error or "")
    assert s.status == "failed"
    s.close()
