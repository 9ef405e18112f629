"""Demo benchmark: the research study's first run against its cached rerun.

A script, not a test. The issue's claim is that rerunning ``argus demo`` from the
cache takes a fraction of the first run's time. Measured two ways:

- **in process** (the work itself): plan the study, run it, approve publishing
  (as ``argus demo`` does), run to the end; then fork it at its root with
  ``reuse="cached"`` (``argus demo --again``) and run the fork, every task served
  from the first run's recordings. One warm-up study first (imports, font cache),
  then ``--repeat`` pairs, each in a fresh workspace.
- **as a user runs it** (``--cli``, on by default): ``argus demo`` and then
  ``argus demo --again NAME`` as fresh processes, Python start-up and imports
  included, the first with its stop-and-resume from the checkpoint.

Every figure is the median of the runs (min-max beside it). CPU is this process's
CPU time over all threads (in-process rows only): on a shared machine it says what
the work costs when wall time also counts waiting for a core.

Usage::

    .venv/bin/python benchmarks/bench_demo.py            # markdown to stdout
    .venv/bin/python benchmarks/bench_demo.py --write    # results_demo.md
    .venv/bin/python benchmarks/bench_demo.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results_demo.md"

import argus_lab as al  # noqa: E402
from argus_lab.demo import runner  # noqa: E402


def study_pair(folder: Path) -> dict[str, float]:
    """One first run and one cached rerun of the study; their times and counts."""
    ws = al.Workspace(folder / "ws")
    t0, c0 = time.perf_counter(), time.process_time()
    with runner.new_session(ws, name="study", out=folder / "published") as s:
        res = s.run()
        for tid in s.pending_approvals():
            s.approve(tid, by="bench")
        res = s.run()
        assert res.status == "succeeded", res
        tasks = len(s.plan.tasks)
    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    with runner.rerun_cached(ws, "study", new_name="again") as again:
        res = again.run()
        assert res.status == "succeeded", res
        replayed = sum(
            1
            for e in again.events()
            if e.kind == "task_succeeded" and getattr(e, "cached", None)
        )
    cached, cached_cpu = time.perf_counter() - t0, time.process_time() - c0
    ws.close()
    return {
        "first": first,
        "first_cpu": first_cpu,
        "cached": cached,
        "cached_cpu": cached_cpu,
        "tasks": tasks,
        "replayed": replayed,
    }


def cli_pair(folder: Path) -> dict[str, float]:
    """``argus demo`` then ``argus demo --again`` as fresh processes."""
    argus = [sys.executable, "-m", "argus_lab.cli", "-w", str(folder / "ws")]
    out = ["--out", str(folder / "published"), "--json"]
    t0 = time.perf_counter()
    p = subprocess.run([*argus, "demo", "--name", "d", *out], capture_output=True)
    first = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr.decode()
    t0 = time.perf_counter()
    p = subprocess.run([*argus, "demo", "--again", "d", "--json"], capture_output=True)
    cached = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr.decode()
    again = json.loads(p.stdout)
    return {"first": first, "cached": cached, "replayed": again["replayed"]}


def med(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s"


def span(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="in-process pairs")
    ap.add_argument("--cli-repeat", type=int, default=3, help="CLI pairs (0: none)")
    ap.add_argument("--quick", action="store_true", help="1 pair each, a smoke run")
    ap.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    args = ap.parse_args()
    repeat, cli_repeat = (1, 1) if args.quick else (args.repeat, args.cli_repeat)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        study_pair(base / "warm-up")
        runs = [study_pair(base / f"run{i}") for i in range(repeat)]
        clis = [cli_pair(base / f"cli{i}") for i in range(cli_repeat)]
    first = [r["first"] for r in runs]
    cached = [r["cached"] for r in runs]
    ratio = statistics.median(cached) / statistics.median(first)
    rows = [
        "| what | tasks | wall, median | wall, min-max | CPU, median |",
        "|---|---:|---:|---:|---:|",
        f"| first run, in process | {runs[0]['tasks']} | {med(first)} | "
        f"{span(first)} | {med([r['first_cpu'] for r in runs])} |",
        f"| cached rerun (fork at the root, reuse='cached'), in process | "
        f"{runs[0]['replayed']:.0f} replayed | {med(cached)} | {span(cached)} | "
        f"{med([r['cached_cpu'] for r in runs])} |",
    ]
    cli_ratio = None
    if clis:
        cf, cc = [c["first"] for c in clis], [c["cached"] for c in clis]
        cli_ratio = statistics.median(cc) / statistics.median(cf)
        rows += [
            f"| `argus demo` (a new process; stop + resume + approval) | "
            f"{runs[0]['tasks']} | {med(cf)} | {span(cf)} | - |",
            f"| `argus demo --again NAME` (a new process) | "
            f"{clis[0]['replayed']:.0f} replayed | {med(cc)} | {span(cc)} | - |",
        ]
    versions = ", ".join(
        f"{m} {metadata.version(m)}" for m in ("pandas", "numpy", "matplotlib")
    )
    load = f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "n/a"
    text = "\n".join(
        [
            "## Demo: first run vs cached rerun",
            "",
            "`benchmarks/bench_demo.py` (rerun: `.venv/bin/python "
            "benchmarks/bench_demo.py --write`). The research demo (an HTN-planned "
            "study of the Palmer Penguins table: 62 tasks, 10 figures, a report) "
            "run for the first time, then rerun as a fork at its root with "
            '`reuse="cached"`: every task is served from the first run\'s '
            "recordings (same inputs, same tool code), nothing is recomputed, "
            "redrawn or published again. In process: median of "
            f"{repeat} pairs after a warm-up; CLI: median of {cli_repeat} pairs of "
            "fresh processes (start-up and imports included).",
            "",
            f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, load average "
            f"{load} at the end; Python {platform.python_version()}, {versions}; "
            f"{dt.date.today().isoformat()}.",
            "",
            *rows,
            "",
            f"The cached rerun takes **{100 * ratio:.0f}%** of the first run's time "
            "in process"
            + (
                f" and {100 * cli_ratio:.0f}% as a user runs it (there, Python "
                "start-up and imports are most of what is left)."
                if cli_ratio is not None
                else "."
            ),
            "",
        ]
    )
    print(text)
    if args.write:
        RESULTS.write_text(text, encoding="utf-8")
        print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
