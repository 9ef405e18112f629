"""Tools and a worker process for notebooks/02_crash_and_resume.ipynb.

A batch of invoices is charged through a fake payment provider that, like real
ones (Stripe, Adyen), deduplicates requests by an idempotency key: a charge sent
twice with the same key takes effect once. Every call the tool makes is logged,
so the notebook can show a call repeated after a crash and a charge that was not.

Run as ``python crash_demo.py WORKSPACE [--stall-at TASK]``: it creates (or opens)
the session "invoices" in WORKSPACE and runs it. With ``--stall-at``, that task's
tool stops *after* the provider has charged and *before* the tool returns, and
waits there to be killed: the worst moment for a crash.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import argus_lab as al

INVOICES = {
    "inv-101": 1200,
    "inv-102": 800,
    "inv-103": 4500,
    "inv-104": 300,
    "inv-105": 2250,
    "inv-106": 990,
}
"""Invoice id -> amount in cents."""

STALL_LIMIT = 120.0
"""Seconds a stalled tool waits to be killed before it gives up (orphan guard)."""


def _append(path: Path, record: dict[str, Any]) -> None:
    # One write per line, flushed to disk: a SIGKILL leaves whole lines only.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def provider_charges(workspace: str | Path) -> list[dict[str, Any]]:
    """What the payment provider actually charged (one line per real charge)."""
    return _read(Path(workspace) / "provider.jsonl")


def tool_calls(workspace: str | Path) -> list[dict[str, Any]]:
    """Every call of the ``charge`` tool, by any process."""
    return _read(Path(workspace) / "calls.jsonl")


@al.tool
def list_invoices() -> list[str]:
    """The invoices to charge today."""
    return sorted(INVOICES)


@al.tool(side_effect="write", idempotent=True)
def charge(invoice: str, *, ctx: al.ToolContext) -> dict[str, Any]:
    """Charges one invoice through the provider, keyed by ctx.idempotency_key.

    Args:
        invoice: The invoice id.
    """
    ws = ctx.workspace
    _append(ws / "calls.jsonl", {"task": ctx.task_id, "key": ctx.idempotency_key,
                                 "pid": os.getpid()})  # fmt: skip
    done = {c["key"]: c for c in provider_charges(ws)}
    if ctx.idempotency_key in done:  # the provider has seen this request
        return {**done[ctx.idempotency_key], "replayed": True}
    charged = {"invoice": invoice, "cents": INVOICES[invoice],
               "key": ctx.idempotency_key}  # fmt: skip
    _append(ws / "provider.jsonl", charged)
    if os.environ.get("CRASH_DEMO_STALL") == ctx.task_id:
        (ws / "stalled").write_text(str(os.getpid()))
        deadline = time.monotonic() + STALL_LIMIT
        while time.monotonic() < deadline:  # waits here to be SIGKILLed
            time.sleep(0.05)
        raise RuntimeError("the stalled tool was not killed in time")
    return {**charged, "replayed": False}


@al.tool
def total(charges: list[dict[str, Any]]) -> dict[str, Any]:
    """Adds up the charges."""
    return {"invoices": len(charges), "cents": sum(c["cents"] for c in charges)}


TOOLS = [list_invoices, charge, total]
APPROVALS = [al.ApprovalPolicy("approve", tools="charge", reason="batch approved")]
"""The batch was approved up front, so charges need no click."""


def plan() -> dict[str, Any]:
    """list_invoices, one charge per invoice, then the total."""
    tasks: list[dict[str, Any]] = [{"id": "list", "tool": "list_invoices"}]
    ids = []
    for inv in sorted(INVOICES):
        tid = "charge_" + inv.split("-")[1]
        ids.append(tid)
        tasks.append(
            {"id": tid, "tool": "charge", "args": {"invoice": inv}, "deps": ["list"]}
        )
    tasks.append(
        {
            "id": "total",
            "tool": "total",
            "args": {"charges": [f"${{{t}.result}}" for t in ids]},
        }
    )
    return {"goal": "Charge today's invoices", "tasks": tasks}


def start_worker(
    workspace: str | Path, stall_at: str | None = None
) -> subprocess.Popen[bytes]:
    """Starts this module as a worker process running the session."""
    env = dict(os.environ)
    if stall_at:
        env["CRASH_DEMO_STALL"] = stall_at
    return subprocess.Popen(
        [sys.executable, __file__, str(workspace)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for(
    path: str | Path, proc: subprocess.Popen[bytes], timeout: float = 60
) -> None:
    """Waits until ``path`` exists; fails if the worker exits or time runs out."""
    path = Path(path)
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited ({proc.returncode}) first")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout} s")
        time.sleep(0.02)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workspace", type=Path)
    a = p.parse_args(argv)
    ws = al.Workspace(a.workspace)
    opts: dict[str, Any] = {"approvals": APPROVALS, "concurrency": 1}
    try:
        s = ws.open("invoices", tools=TOOLS, **opts)
    except KeyError:
        s = ws.new_session(plan=plan(), tools=TOOLS, name="invoices", **opts)
    try:
        result = s.run()
    finally:
        s.close()
    print(result, flush=True)
    return 0 if result else 1


if __name__ == "__main__":
    sys.exit(main())
