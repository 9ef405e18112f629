"""A slow plan that tests shut down mid-run (kernel restart, SIGTERM, exit).

Imported by a Jupyter kernel the tests drive (tests/test_shutdown_kernel.py) and
run as ``python tests/shutdown_worker.py WORKSPACE [--grace S]`` by the plain
process test: it opens the session "slow" in WORKSPACE if it exists, else creates
it, and ``run()``s it (exit 0: succeeded, 1: paused or failed).

The plan: ``N_TASKS`` tasks in chains of four (task i depends on task i-4), each
taking ``WORK_S`` seconds. Even tasks call ``stamp``, a write tool declared
idempotent: it adds ``<key> <task>`` to ``ledger.txt`` unless its idempotency
key is there already. Odd tasks call ``pay``, a write tool that is *not*
idempotent: every call that gets to its end appends ``<key> <task>`` to
``ledger.txt``, so a call repeated silently shows as a key written twice.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import argus_lab as al

try:  # imported as tests.<worker>, or run as a script with tests/ on sys.path
    from tests.crash_worker import append_line
except ImportError:
    from crash_worker import append_line  # type: ignore[no-redef]

NAME = "slow"
N_TASKS = 24
WIDTH = 4
"""Chains run side by side (the session's concurrency too)."""
WORK_S = 0.3

_lock = threading.Lock()


def ledger(root: Path) -> list[tuple[str, str]]:
    """The ledger's (key, task) lines, in order."""
    try:
        text = (root / "ledger.txt").read_text()
    except FileNotFoundError:
        return []
    return [(k, t) for k, t in (ln.split(" ", 1) for ln in text.splitlines())]


@al.tool(side_effect="write", idempotent=True)
def stamp(task: str, *, ctx: al.ToolContext) -> dict[str, Any]:
    """Works a while, then records its key in the ledger once."""
    time.sleep(WORK_S)
    with _lock:
        if ctx.idempotency_key not in {k for k, _ in ledger(ctx.workspace)}:
            append_line(ctx.workspace / "ledger.txt", f"{ctx.idempotency_key} {task}")
    return {"task": task, "key": ctx.idempotency_key}


@al.tool(side_effect="write", idempotent=False)
def pay(task: str, *, ctx: al.ToolContext) -> dict[str, Any]:
    """Works a while, then records its key in the ledger (every call)."""
    time.sleep(WORK_S)
    append_line(ctx.workspace / "ledger.txt", f"{ctx.idempotency_key} {task}")
    return {"task": task, "key": ctx.idempotency_key}


TOOLS = [stamp, pay]
IDEMPOTENT = {"stamp": True, "pay": False}


def plan() -> dict[str, Any]:
    """N_TASKS tasks in WIDTH chains, alternating the two tools."""
    tasks: list[dict[str, Any]] = []
    for i in range(N_TASKS):
        t: dict[str, Any] = {
            "id": f"t{i:02d}",
            "tool": "stamp" if i % 2 == 0 else "pay",
            "args": {"task": f"t{i:02d}"},
        }
        if i >= WIDTH:
            t["deps"] = [f"t{i - WIDTH:02d}"]
        tasks.append(t)
    return {"goal": "shutdown test", "tasks": tasks}


def open_or_create(ws: al.Workspace, **options: Any) -> al.Session:
    """Opens the session in ws, or creates it (write tools run without asking)."""
    options = {"approvals": (), "concurrency": WIDTH, **options}
    try:
        return ws.open(NAME, tools=TOOLS, **options)
    except KeyError:
        return ws.new_session(plan=plan(), tools=TOOLS, name=NAME, **options)


def resume(ws: al.Workspace) -> dict[str, Any]:
    """Opens the session after a shutdown and runs it to the end, as a user
    would: run(), settle the tasks in doubt by looking at the ledger (skip one
    whose key is there: it took effect; retry one whose key is not), run().

    Returns what happened, JSON-ready: ``opened`` (the session's status and
    reason as opened), ``before`` (status and key of each task as opened),
    ``first`` (how the first run ended), ``doubted`` (tasks in doubt after
    it), ``rerun`` (task -> key of each "resumed ... rerun" event),
    ``settled`` (task -> "skip" or "retry"), ``status`` and ``final`` (status
    and key of each task), ``failed_events`` (tasks of task_failed events).
    """
    s = open_or_create(ws)
    try:
        opened = [s.status, s.reason]
        before = {t: [r.status, r.idempotency_key] for t, r in s.records.items()}
        since = s.events()[-1].seq
        first = s.run()
        doubted = sorted(t for t, r in s.records.items() if r.status == "in_doubt")
        rerun = {
            e.task_id: e.key
            for e in s.events(since)
            if e.kind == "resumed" and getattr(e, "recovered", None) == "rerun"
        }
        done = {k for k, _ in ledger(ws.path)}
        settled: dict[str, str] = {}
        for t in doubted:
            if s.record(t).idempotency_key in done:
                s.skip(t, "took effect before the shutdown (its key is in the ledger)")
                settled[t] = "skip"
            else:
                s.retry(t)
                settled[t] = "retry"
        result = s.run() if doubted else first
        final = {t: [r.status, r.idempotency_key] for t, r in s.records.items()}
        return {
            "opened": opened,
            "before": before,
            "first": first.status,
            "doubted": doubted,
            "rerun": rerun,
            "settled": settled,
            "status": result.status,
            "final": final,
            "failed_events": [e.task_id for e in s.events() if e.kind == "task_failed"],
        }
    finally:
        s.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workspace", type=Path)
    p.add_argument("--grace", type=float, default=None)
    a = p.parse_args(argv)
    extra = {} if a.grace is None else {"shutdown_grace": a.grace}
    s = open_or_create(al.Workspace(a.workspace), **extra)
    append_line(a.workspace / "opened.log", str(os.getpid()))
    try:
        result = s.run()
    finally:
        s.close()
    print(result, flush=True)
    return 0 if result.status == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
