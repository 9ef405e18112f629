"""A runner of quick inline tools that tests/test_inline_crash.py SIGKILLs.

Run as ``python tests/inline_crash_worker.py WORKSPACE [doubts]``: opens (or
creates) the session "inline" (or "doubts") and ``run()``s it; exit 0 if it
succeeded. The test imports this module too, for the same tools and plans.

The "doubts" plan: ``N_PAY`` non-idempotent writes (``pay``) that start together,
so their intents share one commit; each logs its call to ``paid.log`` and blocks
until the file ``release`` appears.

The plan mixes the three ways a quick sync call runs (runtime/attempt.py):

- ``note`` (side_effect="none", ``inline=True``): on the loop, its intent
  deferred into the outcome's commit. Logs every call to ``calls.log``.
- ``stamp`` (an idempotent write, ``inline=True``): on the loop, after its
  intent was committed in a group with the intents starting beside it. Appends
  ``<key> <task>`` to ``ledger.txt`` unless the key is there already.
- ``wrapped`` (side_effect="none", left to the gate): goes inline after a few
  quick calls, where it refuses to run inside an event loop and is moved to a
  thread, its deferred intent committed first.
"""

from __future__ import annotations

import asyncio
import random
import sys
import threading
from pathlib import Path
from typing import Any

import argus_lab as al

try:  # imported as tests.<worker>, or run as a script with tests/ on sys.path
    from tests.crash_worker import append_line, read_lines
except ImportError:
    from crash_worker import append_line, read_lines  # type: ignore[no-redef]

SEED = 1811
LAYERS = (1, 8, 16, 24, 24, 24, 16, 8, 1)
N_TASKS = sum(LAYERS)
_lock = threading.Lock()


@al.tool(inline=True)
def note(task: str, *, ctx: al.ToolContext) -> dict[str, Any]:
    """Logs the call (one fsynced line) and echoes the task."""
    append_line(ctx.workspace / "calls.log", f"{task} {ctx.attempt}")
    return {"task": task}


@al.tool(side_effect="write", idempotent=True, inline=True)
def stamp(task: str, *, ctx: al.ToolContext) -> dict[str, Any]:
    """Appends this task's idempotency key to the ledger, once."""
    ledger = ctx.workspace / "ledger.txt"
    with _lock:
        keys = {ln.split(" ", 1)[0] for ln in read_lines(ledger)}
        if ctx.idempotency_key not in keys:
            append_line(ledger, f"{ctx.idempotency_key} {task}")
    append_line(ctx.workspace / "calls.log", f"{task} {ctx.attempt}")
    return {"task": task, "key": ctx.idempotency_key}


@al.tool
def wrapped(task: str, *, ctx: al.ToolContext) -> dict[str, Any]:
    """A sync wrapper of async code: refuses to run inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        append_line(ctx.workspace / "calls.log", f"{task} {ctx.attempt}")
        return {"task": task}
    raise RuntimeError("cannot be called from a running event loop")


TOOLS = [note, stamp, wrapped]
KINDS = ("note", "stamp", "wrapped")


def plan(seed: int = SEED) -> dict[str, Any]:
    """Layers of tasks, each depending on 1-2 of the layer above, tools mixed."""
    rng = random.Random(seed)
    tasks: list[dict[str, Any]] = []
    prev: list[str] = []
    n = 0
    for size in LAYERS:
        layer = [f"t{n + i:03d}" for i in range(size)]
        n += size
        for t in layer:
            deps = sorted(rng.sample(prev, min(len(prev), rng.randint(1, 2))))
            tasks.append(
                {"id": t, "tool": rng.choice(KINDS), "args": {"task": t}, "deps": deps}
            )
        prev = layer
    return {"goal": "inline crash test", "tasks": tasks}


N_PAY = 4


@al.tool(side_effect="write", idempotent=False)
def pay(n: int, *, ctx: al.ToolContext) -> int:
    """A non-idempotent write: logs the call, then waits for ``release``."""
    append_line(ctx.workspace / "paid.log", f"{ctx.task_id} {ctx.idempotency_key}")
    release = ctx.workspace / "release"
    for _ in range(60_000):  # the test kills us first, or releases us
        if release.exists():
            return n
        threading.Event().wait(0.002)
    raise RuntimeError("never released")


def doubts_plan() -> dict[str, Any]:
    tasks = [{"id": f"pay{i}", "tool": "pay", "args": {"n": i}} for i in range(N_PAY)]
    return {"goal": "grouped non-idempotent writes", "tasks": tasks}


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    which = argv[1] if len(argv) > 1 else "inline"
    tools, make = (TOOLS, plan) if which == "inline" else ([pay], doubts_plan)
    ws = al.Workspace(root)
    opts: dict[str, Any] = {"approvals": (), "concurrency": 8}
    try:
        s = ws.open(which, tools=tools, **opts)
    except KeyError:
        s = ws.new_session(plan=make(), tools=tools, name=which, **opts)
    try:
        result = s.run()
    finally:
        s.close()
    print(result, flush=True)
    return 0 if result.status == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
