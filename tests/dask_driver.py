"""Tools and plans for tests/test_dask.py, and a driver process the tests SIGKILL.

Run as ``python tests/dask_driver.py WORKSPACE SCHEDULER_ADDRESS``: it opens the
session "dask" in WORKSPACE (or creates it), runs it with a ``DaskExecutor`` on
the cluster at SCHEDULER_ADDRESS, and prints the RunResult. Exit code 0 when the
run succeeded, 1 otherwise.

The tools run on Dask workers (other processes), so every side effect goes to
files in the workspace, and the ledger is guarded by an advisory file lock
(``fcntl.flock``): two workers may run the same idempotency key at once (an
orphan of a dead driver and its rerun), and a repeat must still take effect
once, as a real idempotent API would ensure.

The tests load this module by path and register it with cloudpickle to be
pickled by value, so workers need not import it; here it is ``__main__``, which
cloudpickle ships by value anyway.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
import time
from pathlib import Path
from typing import Any

import argus_lab as al

GATE_LIMIT = 60.0
"""Seconds the gate tool waits for ``release`` before giving up (orphan guard)."""


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
        return path.read_bytes().decode().splitlines()
    except FileNotFoundError:
        return []


def ledger_append(ctx: al.ToolContext) -> None:
    """Appends ``<idempotency key> <task>`` to the ledger unless the key is there."""
    ledger = ctx.workspace / "ledger.txt"
    fd = os.open(ctx.workspace / "ledger.lock", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # across worker processes
        keys = {ln.split(" ", 1)[0] for ln in read_lines(ledger)}
        if ctx.idempotency_key not in keys:
            append_line(ledger, f"{ctx.idempotency_key} {ctx.task_id}")
    finally:
        os.close(fd)  # releases the lock


# -- tools -----------------------------------------------------------------------


@al.tool
def square(i: int, *, ctx: al.ToolContext) -> dict[str, Any]:
    """A fan-out item: JSON of several types, and where it ran."""
    return {
        "i": i,
        "square": i * i,
        "seventh": i / 7,
        "word": f"n°{i}",
        "digits": [int(d) for d in str(i)],
        "odd": None if i % 2 == 0 else True,
        "task": ctx.task_id,
        "attempt": ctx.attempt,
        "pid": os.getpid(),
    }


@al.tool
def big(n: int) -> dict[str, Any]:
    """A result larger than inline_result_bytes: stored as an artifact by the driver."""
    return {"values": [f"value-{i:06d}" for i in range(n)]}


@al.tool
def blob(n: int) -> bytes:
    """Bytes: stored as a content-addressed artifact."""
    return bytes(range(256)) * n


@al.tool
def total(parts: list[int]) -> dict[str, int]:
    """The fan-in."""
    return {"n": len(parts), "sum": sum(parts)}


@al.tool(side_effect="write", idempotent=True)
def record(*, ctx: al.ToolContext) -> dict[str, Any]:
    """An idempotent write: appends its key to the ledger once."""
    ledger_append(ctx)
    append_line(ctx.workspace / "calls.log", f"{ctx.idempotency_key} {ctx.task_id}")
    return {"task": ctx.task_id, "key": ctx.idempotency_key}


@al.tool(side_effect="write", idempotent=True)
def gate(*, ctx: al.ToolContext) -> dict[str, Any]:
    """An idempotent write that, after its side effect, says it started (its pid
    in ``gate.log``) and waits for the file ``release``: the moment to kill."""
    ledger_append(ctx)
    append_line(ctx.workspace / "calls.log", f"{ctx.idempotency_key} {ctx.task_id}")
    append_line(ctx.workspace / "gate.log", f"{os.getpid()} {ctx.idempotency_key}")
    deadline = time.monotonic() + GATE_LIMIT
    while not (ctx.workspace / "release").exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"release did not appear within {GATE_LIMIT}s")
        time.sleep(0.005)
    return {"task": ctx.task_id, "key": ctx.idempotency_key}


@al.tool(retries=2)
def flaky(*, ctx: al.ToolContext) -> dict[str, int]:
    """Fails transiently on its first attempt (retry_after 0.01 s), then works."""
    if ctx.attempt == 1:
        raise al.TransientError("try again", retry_after=0.01, task_id=ctx.task_id)
    return {"attempt": ctx.attempt}


@al.tool
def refuse(reason: str) -> None:
    """Fails permanently with a ToolError."""
    raise al.ToolError(f"refused: {reason}")


@al.tool
def crash(n: int) -> float:
    """Fails with a plain Python error."""
    return 1 / n


@al.tool(timeout=0.5)
def stuck(*, ctx: al.ToolContext) -> str:
    """Waits for ``release`` (longer than its timeout, in a test)."""
    deadline = time.monotonic() + GATE_LIMIT
    while not (ctx.workspace / "release").exists():
        if time.monotonic() > deadline:
            break
        time.sleep(0.005)
    return "released"


TOOLS = [square, big, blob, total, record, gate, flaky, refuse, crash, stuck]
NO_APPROVALS: dict[str, Any] = {"approvals": ()}
"""Write tools run without asking (approvals have tests of their own)."""


# -- plans -----------------------------------------------------------------------


def fanout_plan(n: int = 196) -> dict[str, Any]:
    """A root, n squares, a big result, a blob and a fan-in: n + 4 tasks."""
    items = [f"sq{i:03d}" for i in range(n)]
    tasks: list[dict[str, Any]] = [{"id": "root", "tool": "square", "args": {"i": 0}}]
    tasks += [
        {"id": t, "tool": "square", "args": {"i": i + 1}, "deps": ["root"]}
        for i, t in enumerate(items)
    ]
    tasks += [
        {"id": "big", "tool": "big", "args": {"n": 5000}, "deps": ["root"]},
        {"id": "blob", "tool": "blob", "args": {"n": 3}, "deps": ["root"]},
        {
            "id": "join",
            "tool": "total",
            "args": {"parts": [f"${{{t}.result.square}}" for t in items]},
        },
    ]
    return {"goal": "dask fan-out", "tasks": tasks}


def errors_plan() -> dict[str, Any]:
    """One task per way a call can end."""
    return {
        "goal": "dask errors",
        "tasks": [
            {"id": "ok", "tool": "square", "args": {"i": 3}},
            {"id": "flaky", "tool": "flaky"},
            {"id": "refuse", "tool": "refuse", "args": {"reason": "no"}},
            {"id": "crash", "tool": "crash", "args": {"n": 0}},
            {"id": "stuck", "tool": "stuck"},
            {"id": "after", "tool": "square", "args": {"i": 4}, "deps": ["ok"]},
        ],
    }


def ledger_plan(n: int = 40, gate_at: int = 10, retries: int = 0) -> dict[str, Any]:
    """n idempotent writes, the gate among them (deps keep it mid-run)."""
    tasks: list[dict[str, Any]] = []
    for i in range(n):
        tid = f"w{i:02d}"
        tasks.append(
            {
                "id": tid,
                "tool": "gate" if i == gate_at else "record",
                "retries": retries,
                # a chain of layers of four: the gate starts after the first ones
                **({"deps": [f"w{i - 4:02d}"]} if i >= 4 else {}),
            }
        )
    return {"goal": "dask ledger", "tasks": tasks}


def main(argv: list[str] | None = None) -> int:
    from argus_lab.runtime.dask import DaskExecutor

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workspace", type=Path)
    p.add_argument("scheduler")
    a = p.parse_args(argv)
    ws = al.Workspace(a.workspace)
    with DaskExecutor(a.scheduler) as ex:
        opts: dict[str, Any] = {**NO_APPROVALS, "executor": ex, "concurrency": 2}
        try:
            s = ws.open("dask", tools=TOOLS, **opts)
        except KeyError:
            s = ws.new_session(plan=ledger_plan(), tools=TOOLS, name="dask", **opts)
        try:
            result = s.run()
        finally:
            s.close()
    ws.close()
    print(result, flush=True)
    return 0 if result.status == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
