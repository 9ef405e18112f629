"""Dask benchmark: a CPU-bound fan-out, local executor vs DaskExecutor, and overhead.

A script, not a test. It starts a ``distributed.LocalCluster`` of 2 worker
processes (1 thread each, loopback only) and measures, each run ``--repeat``
times (the median is reported):

- **CPU-bound fan-out**: ``--tasks`` independent tasks (default 40), each ~0.2 s
  of pure-Python work (the loop length is calibrated at start-up), run as:

  * ``serial``: the work called in a loop, no session (the 1x reference);
  * ``local threads``: a session with the default local executor (a thread
    pool; ``concurrency=2``). The GIL serialises pure-Python work, so this is
    about as slow as serial;
  * ``local processes``: a session whose tool is ``async`` and awaits a
    2-process ``ProcessPoolExecutor`` (``spawn``, warmed up): what one can do on
    one machine without Dask, and the fair local baseline for CPU-bound work;
  * ``raw process pool``: the same pool without a session (the ceiling);
  * ``dask``: a session with ``DaskExecutor`` on the 2 workers, with
    ``concurrency`` 2 and 4 (4 keeps a task queued per worker, so a worker
    never waits for the driver between tasks).

- **Per-task overhead**: a fan-out of ``--noops`` (default 200) tasks that do
  nothing, with the local executor and with DaskExecutor (concurrency 2, 4, 8;
  and with a tool that has a timeout, whose start DaskExecutor reports from the
  worker), as wall time per task; and, for reference, Dask alone
  (``client.submit`` / ``result`` one at a time, and 200 submitted at once then
  gathered).

Cluster start-up (``LocalCluster`` + ``Client``) is timed separately and is not in
any number above; neither is the process pool's start-up.

Usage::

    .venv/bin/python benchmarks/bench_dask.py            # ~2 min on 2 cores
    .venv/bin/python benchmarks/bench_dask.py --quick    # 1 repeat, 20 tasks
    .venv/bin/python benchmarks/bench_dask.py --write    # + results_dask.md
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import argus_lab as al  # noqa: E402
from argus_lab.runtime.dask import DaskExecutor  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results_dask.md"
NOTES = "<!-- notes: written by hand, kept by --write -->"
TARGET_TASK_SECONDS = 0.2

_POOL: concurrent.futures.ProcessPoolExecutor | None = None
"""The process pool of the "local processes" variant (set in main)."""


def burn(n: int) -> int:
    """Pure-Python CPU work: holds the GIL all along."""
    x = 0
    for i in range(n):
        x = (x * 31 + i) % 1_000_003
    return x


def nothing(i: int) -> int:
    return i


@al.tool
def cpu(i: int, n: int) -> dict[str, int]:
    """~0.2 s of pure-Python work."""
    return {"i": i, "x": burn(n + i)}


@al.tool
async def cpu_in_process(i: int, n: int) -> dict[str, int]:
    """The same work in the local process pool (async tools stay on the loop)."""
    loop = asyncio.get_running_loop()
    return {"i": i, "x": await loop.run_in_executor(_POOL, burn, n + i)}


@al.tool
def noop(i: int) -> int:
    """Nothing at all: the cost of a task itself."""
    return i


@al.tool(timeout=60)
def noop_timed(i: int) -> int:
    """Nothing, with a timeout: DaskExecutor then starts its clock on the worker."""
    return i


TOOLS = [cpu, cpu_in_process, noop, noop_timed]


def fanout(tool: str, n_tasks: int, n: int = 0) -> dict[str, Any]:
    args = (lambda i: {"i": i, "n": n}) if n else (lambda i: {"i": i})
    tasks = [{"id": f"t{i:04d}", "tool": tool, "args": args(i)} for i in range(n_tasks)]
    return {"goal": f"{n_tasks} x {tool}", "tasks": tasks}


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def rounds(
    repeat: int, variants: dict[str, Callable[[], Any]], unit: str, scale: float
) -> dict[str, float]:
    """Runs every variant once per round; returns each one's median time."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(repeat):
        for name, fn in variants.items():
            times[name].append(timed(fn))
            print(
                f"round {r + 1}: {name:<42} {times[name][-1] * scale:7.2f} {unit}",
                file=sys.stderr,
            )
    return {name: statistics.median(ts) for name, ts in times.items()}


def calibrate() -> tuple[int, float]:
    """A loop length for ~TARGET_TASK_SECONDS, and what it really takes."""
    n = 50_000
    while (t := timed(lambda n=n: burn(n))) < 0.05:
        n *= 2
    n = int(n * TARGET_TASK_SECONDS / t)
    return n, statistics.median(timed(lambda: burn(n)) for _ in range(3))


class Sessions:
    """Runs a plan in a fresh session each time, in one scratch workspace."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="argus-bench-dask-"))
        self.ws = al.Workspace(self.dir / "ws")
        self.count = 0

    def run(self, plan: dict[str, Any], **options: Any) -> float:
        self.count += 1
        s = self.ws.new_session(
            plan=plan, tools=TOOLS, name=f"b{self.count}", **options
        )
        try:
            t0 = time.perf_counter()
            result = s.run()
            elapsed = time.perf_counter() - t0
            assert result.status == "succeeded", result
            return elapsed
        finally:
            s.close()

    def close(self) -> None:
        self.ws.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def main() -> None:
    global _POOL
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=40)
    p.add_argument("--noops", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="1 repeat, 20 tasks")
    p.add_argument("--write", action="store_true", help="write results_dask.md")
    a = p.parse_args()
    if a.quick:
        a.repeat, a.tasks = 1, 20
    import distributed

    t_all = time.perf_counter()
    n, per_task = calibrate()
    print(f"work: burn({n:,}) takes {per_task:.3f} s", file=sys.stderr)

    _POOL = pool = concurrent.futures.ProcessPoolExecutor(
        2, mp_context=multiprocessing.get_context("spawn")
    )
    list(pool.map(nothing, range(8)))  # start both processes before timing

    t0 = time.perf_counter()
    cluster = distributed.LocalCluster(
        n_workers=2,
        processes=True,
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    )
    client = distributed.Client(cluster, set_as_default=False)
    startup = time.perf_counter() - t0
    ex = DaskExecutor(client)
    runs = Sessions()
    k, m = a.tasks, a.noops
    plan, noops = fanout("cpu", k, n), fanout("noop", m)
    timed_noops = fanout("noop_timed", m)
    cpu_variants: dict[str, Callable[[], Any]] = {
        "serial (no session)": lambda: [burn(n + i) for i in range(k)],
        "local threads, concurrency 2": lambda: runs.run(plan, concurrency=2),
        "local processes, concurrency 2": lambda: runs.run(
            fanout("cpu_in_process", k, n), concurrency=2
        ),
        "raw process pool (no session)": lambda: list(
            pool.map(burn, [n + i for i in range(k)])
        ),
        "dask, 2 workers, concurrency 2": lambda: runs.run(
            plan, executor=ex, concurrency=2
        ),
        "dask, 2 workers, concurrency 4": lambda: runs.run(
            plan, executor=ex, concurrency=4
        ),
    }
    overhead_variants: dict[str, Callable[[], Any]] = {
        "local threads, concurrency 4": lambda: runs.run(noops, concurrency=4),
        **{
            f"dask, concurrency {c}": lambda c=c: runs.run(
                noops, executor=ex, concurrency=c
            )
            for c in (2, 4, 8)
        },
        **{
            f"dask, concurrency {c}, tool with a timeout": lambda c=c: runs.run(
                timed_noops, executor=ex, concurrency=c
            )
            for c in (2, 8)
        },
        "dask alone: submit + result, 1 by 1": lambda: [
            client.submit(nothing, i, pure=False).result() for i in range(m)
        ],
        "dask alone: all submitted, gathered": lambda: client.gather(
            [client.submit(nothing, i, pure=False) for i in range(m)]
        ),
    }
    load = [os.getloadavg()[0]]
    try:
        client.submit(burn, 10, pure=False).result()  # warm the workers up
        # Rounds of every variant, so that load from elsewhere on a shared
        # machine falls on all of them alike; the median of the rounds is kept.
        cpu_times = rounds(a.repeat, cpu_variants, "s", 1.0)
        overhead_times = rounds(a.repeat, overhead_variants, "ms/task", 1000 / m)
    finally:
        runs.close()
        ex.close()
        client.close()
        cluster.close()
        pool.shutdown()
    load.append(os.getloadavg()[0])
    cpu_rows = list(cpu_times.items())
    overhead_rows = list(overhead_times.items())
    total = time.perf_counter() - t_all
    md = render(a, n, per_task, startup, cpu_rows, overhead_rows, total, load)
    print(md)
    if a.write:
        old = RESULTS.read_text() if RESULTS.exists() else ""
        notes = old[old.index(NOTES) :] if NOTES in old else NOTES + "\n"
        RESULTS.write_text(md + "\n" + notes)
        print(f"wrote {RESULTS}", file=sys.stderr)


def render(
    a: argparse.Namespace,
    n: int,
    per_task: float,
    startup: float,
    cpu_rows: list[tuple[str, float]],
    overhead_rows: list[tuple[str, float]],
    total: float,
    load: list[float],
) -> str:
    serial = cpu_rows[0][1]
    lines = [
        "## Dask: CPU-bound fan-out and per-task overhead",
        "",
        f"`benchmarks/bench_dask.py` — {os.cpu_count()} cores, "
        f"{platform.machine()}, Python {platform.python_version()}, "
        f"dask/distributed {metadata.version('distributed')}; "
        "`LocalCluster(n_workers=2, processes=True, threads_per_worker=1)` on "
        f"loopback (start-up {startup:.1f} s, not counted); median of {a.repeat} "
        f"round(s) of all variants; whole run {total:.0f} s; 1-minute load "
        f"average {load[0]:.1f} at the start, {load[1]:.1f} at the end.",
        "",
        f"**CPU-bound fan-out**: {a.tasks} independent tasks, each `burn({n:,})` "
        f"= {per_task:.3f} s of pure-Python work on this machine.",
        "",
        "| variant | wall s | speed-up vs serial | s per task |",
        "|---|---:|---:|---:|",
    ]
    for name, t in cpu_rows:
        lines.append(f"| {name} | {t:.2f} | {serial / t:.2f}x | {t / a.tasks:.3f} |")
    lines += [
        "",
        f"**Per-task overhead**: {a.noops} tasks that do nothing (wall time / "
        "tasks; the session's own work — intent commit, result commit, events — "
        "is in every row but the last two).",
        "",
        "| variant | ms per task |",
        "|---|---:|",
    ]
    for name, t in overhead_rows:
        lines.append(f"| {name} | {t / a.noops * 1000:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
