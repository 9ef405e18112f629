"""Tools for the sessions the server tests drive (``argus serve --tools``)."""

from __future__ import annotations

import argus_lab as al


@al.tool
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


@al.tool(side_effect="write", idempotent=True)
def send(x: int) -> dict[str, int]:
    """A write: asks for approval before it runs."""
    return {"sent": x}


@al.tool
def flaky(fail: bool = True) -> str:
    """Fails for good (a ToolError), so a test can retry or skip it."""
    if fail:
        raise al.ToolError("flaky failed on purpose")
    return "ok"


TOOLS = [add, send, flaky]

APPROVE = {
    "goal": "send after adding",
    "tasks": [
        {"id": "one", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "two", "tool": "send", "args": {"x": "${one.result}"}, "deps": ["one"]},
    ],
}
FAILING = {
    "goal": "a task that fails",
    "tasks": [
        {"id": "bad", "tool": "flaky", "args": {}},
        {"id": "after", "tool": "add", "args": {"a": 1, "b": 1}, "deps": ["bad"]},
    ],
}
