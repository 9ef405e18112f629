"""Runs a session of ledger tools, then dies by SIGKILL with its WAL in place.

Run as ``python tests/ledger_worker.py WORKSPACE LEDGER N [K]``: creates session
"ledger" of N independent tasks, alternating ``charge`` (a write tool that is
*not* idempotent) and ``stamp`` (an idempotent write tool that takes effect once
per idempotency key). Both append ``<task id> <idempotency key>`` to LEDGER, a
file outside the workspace. When every task has succeeded the process kills
itself: nothing closes SQLite, so the last commits are still WAL frames (SQLite
checkpoints the WAL into cache.db when the last connection closes), and the
test can damage them. With K, it dies after K tasks succeeded instead, in the
middle of the run with its lease held. The tests import this module for the same
tools and plan.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import argus_lab as al

APPROVE_ALL = [al.ApprovalPolicy("approve")]


def _ledger() -> Path:
    return Path(os.environ["ARGUS_TEST_LEDGER"])


def _append(line: str) -> None:
    fd = os.open(_ledger(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def ledger_lines() -> list[str]:
    """Every line of the ledger (none before the first call)."""
    p = _ledger()
    return p.read_text().splitlines() if p.exists() else []


@al.tool(side_effect="write")
def charge(n: int, *, ctx: al.ToolContext) -> int:
    """Charges once per call: a repeat is a second charge."""
    _append(f"{ctx.task_id} {ctx.idempotency_key}")
    return n


@al.tool(side_effect="write", idempotent=True)
def stamp(n: int, *, ctx: al.ToolContext) -> int:
    """Takes effect once per idempotency key (a repeat with the same key is free)."""
    line = f"{ctx.task_id} {ctx.idempotency_key}"
    if line not in ledger_lines():
        _append(line)
    return n


TOOLS = [charge, stamp]


def plan(n: int) -> al.Plan:
    """N independent tasks, alternating the two tools."""
    return al.Plan.from_dict(
        {
            "goal": "ledger",
            "tasks": [
                {
                    "id": f"t{i:03d}",
                    "tool": ("charge", "stamp")[i % 2],
                    "args": {"n": i},
                }
                for i in range(n)
            ],
        }
    )


def main() -> None:
    root, ledger, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    kill_after = int(sys.argv[4]) if len(sys.argv) > 4 else None
    os.environ["ARGUS_TEST_LEDGER"] = ledger
    ws = al.Workspace(root)
    s = ws.new_session(
        plan=plan(n), tools=TOOLS, name="ledger", approvals=APPROVE_ALL, concurrency=1
    )
    done: list[str] = []

    def die_mid_run(ev: Any) -> None:
        # SIGKILL from the loop thread right after a commit: the lease is held.
        if ev.kind == "task_succeeded":
            done.append(ev.task_id)
            if len(done) == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)

    s.subscribe(die_mid_run)
    res = s.run()
    print(res.status, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
