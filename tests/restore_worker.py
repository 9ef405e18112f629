"""Continues session "pay" to its end, then dies by SIGKILL (nothing closed).

Run as ``python tests/restore_worker.py WORKSPACE LEDGER``: opens session "pay"
of WORKSPACE (``test_restore_backup.py`` created it and ran its first task),
runs it, prints the result's status and kills itself: the witness, journal and
mark were last written by commits, never by a close. With ``ARGUS_TEST_HOLD``
set, task c waits for the test (``pay``). The tests import this
module for the same tools and plan.

The plan is a chain ``a -> b -> c -> d``: ``a``, ``b`` and ``c`` call ``pay``
(a write tool that is *not* idempotent: each call is a payment), ``d`` calls
``stamp`` (an idempotent write: once per idempotency key). Both append
``<task id> <idempotency key>`` to LEDGER, a file outside the workspace.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import argus_lab as al

APPROVE_ALL = [al.ApprovalPolicy("approve")]


def _ledger() -> Path:
    return Path(os.environ["ARGUS_TEST_LEDGER"])


def ledger_lines() -> list[str]:
    """Every line of the ledger (none before the first call)."""
    p = _ledger()
    return p.read_text().splitlines() if p.exists() else []


def _append(line: str) -> None:
    fd = os.open(_ledger(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@al.tool(side_effect="write")
def pay(amount: int, *, ctx: al.ToolContext) -> int:
    """Pays once per call: a repeat is a second payment.

    With ``ARGUS_TEST_HOLD`` set to a folder, task c first makes
    ``started.c`` there and waits for ``release`` to appear: the test copies
    the session folder meanwhile, with the run holding its lease."""
    hold = os.environ.get("ARGUS_TEST_HOLD")
    if hold and ctx.task_id == "c":
        Path(hold, "started.c").touch()
        while not Path(hold, "release").exists():
            time.sleep(0.005)
    _append(f"{ctx.task_id} {ctx.idempotency_key}")
    return amount


@al.tool(side_effect="write", idempotent=True)
def stamp(n: int, *, ctx: al.ToolContext) -> int:
    """Takes effect once per idempotency key (a repeat with the same key is free)."""
    line = f"{ctx.task_id} {ctx.idempotency_key}"
    if line not in ledger_lines():
        _append(line)
    return n


TOOLS = [pay, stamp]


def plan() -> al.Plan:
    """a -> b -> c (payments) -> d (an idempotent stamp)."""
    return al.Plan.from_dict(
        {
            "goal": "pay three bills",
            "tasks": [
                {"id": "a", "tool": "pay", "args": {"amount": 1}},
                {"id": "b", "tool": "pay", "args": {"amount": 2}, "deps": ["a"]},
                {"id": "c", "tool": "pay", "args": {"amount": 3}, "deps": ["b"]},
                {"id": "d", "tool": "stamp", "args": {"n": 4}, "deps": ["c"]},
            ],
        }
    )


def main() -> None:
    root, ledger = sys.argv[1], sys.argv[2]
    os.environ["ARGUS_TEST_LEDGER"] = ledger
    s = al.Workspace(root).open("pay", tools=TOOLS)
    res = s.run()
    print(res.status, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
