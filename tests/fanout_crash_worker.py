"""A fan-out runner that tests/test_outcomes_crash.py SIGKILLs mid-batch.

Run as ``python tests/fanout_crash_worker.py WORKSPACE [before|after]``: opens
(or creates) the session "fan" and ``run()``s it; exit 0 if it succeeded, 1 if
it paused or failed. The test imports this module too, for the same tools.

The plan: ``N_EACH`` tasks of each of three async tools, all independent, then
``join`` after all of them. The fan's calls meet: each waits until every call
of this run has begun, so they all end in the same turn of the loop and their
outcomes share one transaction (runtime/outcomes.py).

- ``look`` (side_effect="none"): logs every call to ``calls.log``.
- ``stamp`` (an idempotent write): appends ``<key> <task>`` to ``ledger.txt``
  unless the key is there already; logs every call to ``calls.log``.
- ``pay`` (a write, *not* idempotent): logs every call to ``paid.log``.

With ``before`` (``after``), the first commit holding more than one
``task_succeeded`` stops just before (after) it is written: the process
writes the task ids of the batch to ``holding.txt`` and waits there to be
killed.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

import argus_lab as al
from argus_lab.store.checkpoints import SessionStore

try:  # imported as tests.<worker>, or run as a script with tests/ on sys.path
    from tests.crash_worker import append_line
except ImportError:
    from crash_worker import append_line  # type: ignore[no-redef]

N_EACH = 6
KINDS = ("look", "stamp", "pay")
FAN = [f"{k}{i}" for k in KINDS for i in range(N_EACH)]


def make_tools(n: int) -> list[al.Tool]:
    """The plan's tools; the fan's first ``n`` calls end in the same turn."""
    met: dict[str, Any] = {"began": 0, "all": None}

    async def meet() -> None:
        if met["all"] is None:
            met["all"] = asyncio.Event()
        everyone: asyncio.Event = met["all"]
        met["began"] += 1
        if met["began"] >= n:
            everyone.set()
        await everyone.wait()

    @al.tool
    async def look(*, ctx: al.ToolContext) -> str:
        """Side-effect-free."""
        append_line(ctx.workspace / "calls.log", f"{ctx.task_id} {ctx.attempt}")
        await meet()
        return ctx.task_id

    @al.tool(side_effect="write", idempotent=True)
    async def stamp(*, ctx: al.ToolContext) -> str:
        """Stamps the ledger once per idempotency key."""
        ledger = ctx.workspace / "ledger.txt"
        keys = {ln.split(" ", 1)[0] for ln in read_lines(ledger)}
        if ctx.idempotency_key not in keys:
            append_line(ledger, f"{ctx.idempotency_key} {ctx.task_id}")
        append_line(ctx.workspace / "calls.log", f"{ctx.task_id} {ctx.attempt}")
        await meet()
        return ctx.task_id

    @al.tool(side_effect="write", idempotent=False)
    async def pay(*, ctx: al.ToolContext) -> str:
        """A side effect that must never be repeated silently."""
        append_line(ctx.workspace / "paid.log", f"{ctx.task_id} {ctx.idempotency_key}")
        await meet()
        return ctx.task_id

    @al.tool
    def finish(*, ctx: al.ToolContext) -> str:
        """After the whole fan."""
        append_line(ctx.workspace / "calls.log", f"{ctx.task_id} {ctx.attempt}")
        return "done"

    return [look, stamp, pay, finish]


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def plan() -> dict[str, Any]:
    tasks: list[dict[str, Any]] = [
        {"id": t, "tool": t.rstrip("0123456789")} for t in FAN
    ]
    tasks.append({"id": "join", "tool": "finish", "deps": list(FAN)})
    return {"goal": "a fan-out of outcomes", "tasks": tasks}


def to_run(records: dict[str, Any]) -> int:
    """How many of the fan's calls a run makes (those not succeeded yet)."""
    return sum(1 for t in FAN if t not in records or records[t].status != "succeeded")


def hold(where: str, root: Path) -> None:
    """Stops the first commit of a batch of outcomes before or after it is
    written, reports the batch, and waits to be killed."""
    real = SessionStore.commit

    def commit(store: SessionStore, *args: Any, **kwargs: Any) -> Any:
        done = [
            e.task_id for e in kwargs.get("events") or [] if e.kind == "task_succeeded"
        ]
        if len(done) < 2:
            return real(store, *args, **kwargs)
        if where == "after":
            real(store, *args, **kwargs)
        append_line(root / "holding.txt", " ".join(str(t) for t in done))
        while True:  # the test kills us here
            threading.Event().wait(0.01)

    SessionStore.commit = commit  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    if len(argv) > 1:
        hold(argv[1], root)
    ws = al.Workspace(root)
    opts: dict[str, Any] = {"approvals": (), "concurrency": len(FAN)}
    try:
        s = ws.open("fan", tools=make_tools(0), **opts)
        s.update_tools(*make_tools(to_run(s.records)))
    except KeyError:
        s = ws.new_session(plan=plan(), tools=make_tools(len(FAN)), name="fan", **opts)
    try:
        result = s.run()
    finally:
        s.close()
    print(result, flush=True)
    return 0 if result.status == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
