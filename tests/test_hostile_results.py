"""A tool result built to break the store: the task fails, the run goes on.

A tool may hand back whatever an outside service sent it (JSON parsed from a
web page, an API's reply), so a result nested deeper than the interpreter's
recursion limit is hostile input like any other: it must fail its own task
with a clear error, never end the whole run with a RecursionError.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

import pytest

import argus_lab as al


@al.tool
def nested(depth: int, kind: str) -> Any:
    """A dict (or list) nested ``depth`` levels deep, as json.loads builds one."""
    value: Any = {"leaf": 1} if kind == "dict" else [1]
    for _ in range(depth):
        value = {"x": value} if kind == "dict" else [value]
    return value


@al.tool
def fine() -> str:
    """An ordinary task beside the hostile one."""
    return "ok"


@pytest.mark.parametrize("kind", ["dict", "list"])
def test_a_result_nested_past_the_recursion_limit_fails_only_its_task(
    ws: al.Workspace, kind: str
) -> None:
    depth = sys.getrecursionlimit() + 100
    s = ws.new_session(
        plan={
            "goal": "g",
            "tasks": [
                {
                    "id": "deep",
                    "tool": "nested",
                    "args": {"depth": depth, "kind": kind},
                },
                {"id": "fine", "tool": "fine"},
                {"id": "after", "tool": "fine", "deps": ["fine"]},
            ],
        },
        tools=[nested, fine],
        name=f"deep-{uuid.uuid4().hex[:6]}",
        max_consecutive_failures=None,
    )
    s.run()  # returns: the run is not ended by the result
    rec = s.record("deep")
    assert rec.status == "failed"
    assert "nested too deeply" in (rec.error or ""), rec.error
    assert s.record("after").status == "succeeded"
    s.close()
