"""Resuming after a tool was redefined judges the code that ran, not the new one.

``tests/crash_worker.py --plan indoubt`` is SIGKILLed while its non-idempotent
``charge`` runs. The user then redefines ``charge`` as idempotent (or without
side effects) and resumes. Recovery decided with the new definition alone, so
the interrupted charge, made by the old code, ran again in silence: two charges.
The intent now records that its tool was not safe to repeat when it started.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from tests import crash_worker as cw
from tests.test_crash import Worker, _kill_during_charge


@pytest.fixture
def started() -> Iterator[list[Worker]]:
    """Workers started; any left running are killed at the end."""
    out: list[Worker] = []
    yield out
    for w in out:
        w.kill()


def _redefined(how: str) -> al.Tool:
    kwargs: dict[str, Any] = (
        {"side_effect": "write", "idempotent": True} if how == "idempotent" else {}
    )

    @al.tool(name="charge", **kwargs)
    def charge(amount: int, *, ctx: al.ToolContext) -> dict[str, Any]:
        """The new code: it would charge again."""
        cw.append_line(ctx.workspace / "charges.log", f"{ctx.idempotency_key} new")
        return {"charged": amount}

    return charge


@pytest.mark.slow
@pytest.mark.parametrize("how", ["idempotent", "no side effect"])
def test_an_attempt_of_a_tool_redefined_as_safe_is_still_in_doubt(
    tmp_path: Path, started: list[Worker], how: str
) -> None:
    root = tmp_path / "ws"
    _kill_during_charge(root, started)
    tools = [cw.prepare, _redefined(how), cw.notify]
    with al.Workspace(root).open("doubt", tools=tools, **cw.NO_APPROVALS) as s:
        assert s.record("charge").status == "running"
        res = s.run()
        assert res.status == "paused"
        rec = s.record("charge")
        assert rec.status == "in_doubt"
        assert "when that attempt started (it has been redefined since)" in (
            rec.reason or ""
        )
        assert len(cw.read_lines(root / "charges.log")) == 1  # not charged again
        # The person decides: retrying runs the new code once.
        s.retry("charge")
        assert s.run().status == "succeeded"
    assert [ln.split()[1] for ln in cw.read_lines(root / "charges.log")] == [
        "1",
        "new",
    ]
