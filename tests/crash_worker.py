"""A session runner that tests kill (SIGKILL / SIGSTOP) at awkward moments.

Run as ``python tests/crash_worker.py WORKSPACE [--plan ledger|indoubt|slow]``: it
opens the plan's session in WORKSPACE if it exists, else creates it, and ``run()``s
it. Exit codes: 0 the run succeeded, 1 it paused or failed (the result is printed),
3 ``ConcurrentSessionError`` (its message is printed to stderr).

The tests import this module too (by path), to hand the same tools to
``ws.open`` in their own process and to rebuild the same plans.

Plans:

- ``ledger`` (session "crash"): 200 tasks in layers, fan-out and fan-in, built
  from a seed. Every tool is a write tool declared idempotent: it appends
  ``<idempotency key> <task id>`` to ``ledger.txt`` unless the key is already
  there, so a repeat with the same key takes effect once.
- ``indoubt`` (session "doubt"): ``charge`` is a write tool that is *not*
  idempotent; it logs each call to ``charges.log`` and ``started.charge``, then
  blocks until the file ``release`` appears in the workspace.
- ``slow`` (session "slow"): five quick tasks, then ``slow`` (an idempotent write
  tool that blocks until ``release`` appears), then three tasks after it.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

import argus_lab as al

SEED = 20240611
N_TASKS = 200
LAYERS = (1, 6, 14, 24, 32, 34, 30, 24, 16, 10, 6, 2, 1)
assert sum(LAYERS) == N_TASKS
BLOCK_LIMIT = 120.0
"""Seconds a blocking tool waits for ``release`` before giving up (orphan guard)."""

_lock = threading.Lock()


# -- shared helpers -----------------------------------------------------------


def append_line(path: Path, line: str) -> None:
    """Appends one line with a single write, flushed to disk (survives SIGKILL)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_lines(path: Path) -> list[str]:
    """The complete lines of a file (none if it does not exist yet)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return data.decode().splitlines()


def _work(task_id: str) -> None:
    # Stand-in for real work, 3-10 ms, so kills land while tools run.
    time.sleep(0.003 + (sum(map(ord, task_id)) % 8) / 1000)


def _wait_for_release(ctx: al.ToolContext) -> None:
    release = ctx.workspace / "release"
    deadline = time.monotonic() + BLOCK_LIMIT
    while not release.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{release} did not appear within {BLOCK_LIMIT}s")
        time.sleep(0.005)


# -- the ledger plan ------------------------------------------------------------


def _ledger_append(task: str, ctx: al.ToolContext) -> dict[str, Any]:
    ledger = ctx.workspace / "ledger.txt"
    _work(task)
    with _lock:
        keys = {ln.split(" ", 1)[0] for ln in read_lines(ledger)}
        if ctx.idempotency_key not in keys:
            append_line(ledger, f"{ctx.idempotency_key} {task}")
    return {"task": task, "key": ctx.idempotency_key}


@al.tool(side_effect="write", idempotent=True)
def record_root(task: str, *, ctx: al.ToolContext) -> dict[str, Any]:
    """Appends this task's idempotency key to the ledger, once."""
    return _ledger_append(task, ctx)


@al.tool(side_effect="write", idempotent=True)
def record_step(task: str, upstream: str, *, ctx: al.ToolContext) -> dict[str, Any]:
    """Appends this task's idempotency key to the ledger, once; echoes upstream."""
    return {**_ledger_append(task, ctx), "upstream": upstream}


LEDGER_TOOLS = [record_root, record_step]


def ledger_plan(seed: int = SEED) -> dict[str, Any]:
    """A layered DAG of N_TASKS tasks: each depends on 1-3 tasks of the layer above,
    and every task of a layer feeds at least one task of the next (fan-out, fan-in).
    The first dependency's result is passed in through a ``${...}`` reference."""
    rng = random.Random(seed)
    tasks: list[dict[str, Any]] = []
    prev: list[str] = []
    n = 0
    for size in LAYERS:
        layer = [f"t{n + i:03d}" for i in range(size)]
        n += size
        if not prev:
            tasks += [
                {"id": t, "tool": "record_root", "args": {"task": t}} for t in layer
            ]
        else:
            deps = {
                t: set(rng.sample(prev, min(len(prev), rng.randint(1, 3))))
                for t in layer
            }
            for p in prev:  # nobody is a dead end
                if not any(p in d for d in deps.values()):
                    deps[rng.choice(layer)].add(p)
            for t in layer:
                ds = sorted(deps[t])
                tasks.append(
                    {
                        "id": t,
                        "tool": "record_step",
                        "deps": ds,
                        "args": {"task": t, "upstream": f"${{{ds[0]}.result.task}}"},
                    }
                )
        prev = layer
    return {"goal": "crash-test ledger", "tasks": tasks}


# -- the in-doubt plan ----------------------------------------------------------


@al.tool
def prepare(*, ctx: al.ToolContext) -> str:
    """A side-effect-free first step."""
    return "ready"


@al.tool(side_effect="write", idempotent=False)
def charge(amount: int, *, ctx: al.ToolContext) -> dict[str, Any]:
    """A non-idempotent side effect: logs the call, then blocks until released."""
    append_line(ctx.workspace / "charges.log", f"{ctx.idempotency_key} {ctx.attempt}")
    append_line(ctx.workspace / "started.charge", str(os.getpid()))
    _wait_for_release(ctx)
    return {"charged": amount, "pid": os.getpid()}


@al.tool
def notify(*, ctx: al.ToolContext) -> str:
    """Runs after the charge (it needs it done or skipped, not its result)."""
    append_line(ctx.workspace / "notified.log", ctx.task_id)
    return "notified"


INDOUBT_TOOLS = [prepare, charge, notify]


def indoubt_plan() -> dict[str, Any]:
    return {
        "goal": "in-doubt test",
        "tasks": [
            {"id": "prep", "tool": "prepare"},
            {
                "id": "charge",
                "tool": "charge",
                "args": {"amount": 42},
                "deps": ["prep"],
            },
            {"id": "after", "tool": "notify", "deps": ["charge"]},
            {"id": "side", "tool": "notify", "deps": ["prep"]},
        ],
    }


# -- the slow plan --------------------------------------------------------------


@al.tool
def quick(i: int, *, ctx: al.ToolContext) -> dict[str, Any]:
    """Returns at once, saying which process ran it."""
    return {"i": i, "pid": os.getpid()}


@al.tool(side_effect="write", idempotent=True)
def slow(*, ctx: al.ToolContext) -> dict[str, Any]:
    """Signals it started, then blocks until released."""
    append_line(ctx.workspace / "started.slow", f"{os.getpid()} {ctx.attempt}")
    _wait_for_release(ctx)
    return {"pid": os.getpid(), "attempt": ctx.attempt}


SLOW_TOOLS = [quick, slow]
N_QUICK = 5


def slow_plan() -> dict[str, Any]:
    fast = [f"fast{i}" for i in range(N_QUICK)]
    tasks: list[dict[str, Any]] = [
        {"id": t, "tool": "quick", "args": {"i": i}} for i, t in enumerate(fast)
    ]
    tasks.append({"id": "slow", "tool": "slow", "deps": fast})
    tasks += [
        {"id": f"tail{i}", "tool": "quick", "args": {"i": 100 + i}, "deps": ["slow"]}
        for i in range(3)
    ]
    return {"goal": "lease test", "tasks": tasks}


NO_APPROVALS: dict[str, Any] = {"approvals": ()}
"""Session options that let write tools run without asking (approval policies
have tests of their own; these tests are about crashes and leases)."""

PLANS: dict[str, tuple[str, Any, list[al.Tool]]] = {
    "ledger": ("crash", ledger_plan, LEDGER_TOOLS),
    "indoubt": ("doubt", indoubt_plan, INDOUBT_TOOLS),
    "slow": ("slow", slow_plan, SLOW_TOOLS),
}


def open_or_create(ws: al.Workspace, plan: str, **options: Any) -> al.Session:
    """Opens the plan's session in ws, or creates it if it does not exist yet."""
    name, make_plan, tools = PLANS[plan]
    options = {**NO_APPROVALS, **options}
    try:
        return ws.open(name, tools=tools, **options)
    except KeyError:
        return ws.new_session(plan=make_plan(), tools=tools, name=name, **options)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workspace", type=Path)
    p.add_argument("--plan", choices=sorted(PLANS), default="ledger")
    p.add_argument("--lease-ttl", type=float, default=30.0)
    p.add_argument("--concurrency", type=int, default=4)
    a = p.parse_args(argv)
    ws = al.Workspace(a.workspace)
    s = open_or_create(ws, a.plan, concurrency=a.concurrency, lease_ttl=a.lease_ttl)
    # Tells the test the session is open and run() (lease, recovery) comes next.
    append_line(a.workspace / "opened.log", str(os.getpid()))
    try:
        result = s.run()
    except al.ConcurrentSessionError as e:
        print(f"ConcurrentSessionError: {e}", file=sys.stderr, flush=True)
        return 3
    finally:
        s.close()
    print(result, flush=True)
    return 0 if result.status == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
