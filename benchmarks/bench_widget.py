"""Widget benchmark: layout time, and comm messages a long run sends.

A script, not a test. Two questions from the Jupyter issue:

1. How long does the Python-side layout of a 1,000-node plan take (target <= 200
   ms)? Measured on layered random DAGs (1-25 tasks a layer, 1-3 dependencies a
   task), flat and with half the tasks in HTN groups of up to 4, plus 10,000
   nodes for scale. Median of several runs, min and max beside it.
2. How many comm messages does the widget send while a 10,000-task session runs
   with it attached? Live updates are coalesced (at most one flush per
   ``update_interval``), so the count is bounded by the run's duration, not by
   its task count; "one message per event" is what an uncoalesced widget would
   send. Also: bytes sent, and the time to build the widget on the finished
   session (layout, event scan, first state).

The widget runs without a front end (ipywidgets' dummy comm); ``comm_messages``
counts what it would send. Usage::

    .venv/bin/python benchmarks/bench_widget.py           # markdown to stdout
    .venv/bin/python benchmarks/bench_widget.py --write   # and write results_widget.md
    .venv/bin/python benchmarks/bench_widget.py --quick   # smaller, for a smoke run
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results_widget.md"
TARGET_LAYOUT_MS = 200.0


def random_dag(n: int, *, groups: bool, seed: int = 1) -> list[Any]:
    from argus_lab.layout import TaskSpec

    rng = random.Random(seed)
    tasks: list[TaskSpec] = []
    prev: list[str] = []
    i = 0
    while i < n:
        size = min(n - i, rng.randint(1, 25))
        layer = [f"t{i + k}" for k in range(size)]
        i += size
        for k, t in enumerate(layer):
            deps = rng.sample(prev, min(len(prev), rng.randint(1, 3))) if prev else []
            parent = f"g{i}-{k // 4}" if groups and rng.random() < 0.5 else None
            tasks.append(TaskSpec(t, t, deps, parent))
        prev = layer
    return tasks


def bench_layout(n: int, groups: bool, repeats: int) -> dict[str, Any]:
    from argus_lab.layout import crossings, layout_graph

    tasks = random_dag(n, groups=groups)
    times = []
    lay = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        lay = layout_graph(tasks)
        times.append((time.perf_counter() - t0) * 1000)
    assert lay is not None
    return {
        "n": n,
        "groups": groups,
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "edges": len(lay["edges"]),
        "crossings": crossings(lay) if n <= 1000 else None,
    }


def bench_run(n: int, interval: float) -> dict[str, Any]:
    import argus_lab as al
    from argus_lab.jupyter.widget import GraphWidget

    @al.tool
    def noop(i: int) -> int:
        """Does nothing, fast."""
        return i

    # Chains of 10 fanning out from a root: deep enough to need many steps,
    # wide enough to keep the 4 workers busy.
    tasks: list[dict[str, Any]] = [{"id": "root", "tool": "noop", "args": {"i": 0}}]
    for k in range(1, n):
        dep = "root" if k % 10 == 1 else f"t{k - 1}"
        tasks.append({"id": f"t{k}", "tool": "noop", "args": {"i": k}, "deps": [dep]})
    with tempfile.TemporaryDirectory() as d:
        ws = al.Workspace(d)
        s = ws.new_session(plan={"goal": "bench", "tasks": tasks}, tools=[noop])
        w = GraphWidget(s, update_interval=interval)
        base_msgs, base_bytes = w.comm_messages, w.comm_bytes
        t0 = time.perf_counter()
        result = s.run()
        took = time.perf_counter() - t0
        msgs = w.comm_messages - base_msgs
        sent = w.comm_bytes - base_bytes
        flushes = w.flushes
        events = len(s.events())
        w.close()
        t1 = time.perf_counter()
        w2 = GraphWidget(s)
        build = time.perf_counter() - t1
        w2.close()
        s.close()
        ws.close()
    assert result.status == "succeeded", result
    return {
        "n": n,
        "interval": interval,
        "run_s": took,
        "events": events,
        "messages": msgs,
        "flushes": flushes,
        "bytes": sent,
        "bound": int(took / interval) + 2,
        "build_s": build,
    }


def render(layouts: list[dict[str, Any]], runs: list[dict[str, Any]]) -> str:
    lines = [
        "# Widget benchmark results",
        "",
        f"{dt.date.today().isoformat()}, Python {platform.python_version()}, "
        f"{platform.machine()}, `benchmarks/bench_widget.py`.",
        "",
        f"## Layout (target: 1,000 nodes <= {TARGET_LAYOUT_MS:.0f} ms)",
        "",
        "| nodes | HTN groups | median ms | min-max ms | edges | crossings | ok |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in layouts:
        ok = "" if r["n"] != 1000 else (
            "yes" if r["median_ms"] <= TARGET_LAYOUT_MS else "NO"
        )  # fmt: skip
        lines.append(
            f"| {r['n']:,} | {'yes' if r['groups'] else 'no'} | "
            f"{r['median_ms']:.1f} | {r['min_ms']:.1f}-{r['max_ms']:.1f} | "
            f"{r['edges']:,} | {r['crossings'] if r['crossings'] is not None else '—'}"
            f" | {ok} |"
        )
    lines += [
        "",
        "## Comm messages during a run (coalesced live updates)",
        "",
        "| tasks | events | run s | update interval s | messages sent | "
        "bound (run s / interval + 2) | uncoalesced (1 per event) | KB sent | "
        "widget on finished session, s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        lines.append(
            f"| {r['n']:,} | {r['events']:,} | {r['run_s']:.1f} | {r['interval']} | "
            f"{r['messages']:,} | {r['bound']:,} | {r['events']:,} | "
            f"{r['bytes'] / 1024:,.0f} | {r['build_s']:.2f} |"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"also write {OUT.name}")
    p.add_argument("--quick", action="store_true", help="smaller sizes")
    a = p.parse_args(argv)
    repeats = 3 if a.quick else 7
    layouts = [
        bench_layout(1000, False, repeats),
        bench_layout(1000, True, repeats),
    ]
    if not a.quick:
        layouts.append(bench_layout(10_000, True, 3))
    runs = [bench_run(1000 if a.quick else 10_000, 0.25)]
    text = render(layouts, runs)
    print(text)
    if a.write:
        OUT.write_text(text)
    worst = max(r["median_ms"] for r in layouts if r["n"] == 1000)
    bounded = all(r["messages"] <= r["bound"] for r in runs)
    return 0 if worst <= TARGET_LAYOUT_MS and bounded else 1


if __name__ == "__main__":
    sys.exit(main())
