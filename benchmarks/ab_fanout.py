"""Interleaved A/B of the fan-out between two source trees, beside bare asyncio.

A script, not a test. Each round runs, in fresh processes, bench_scale.py's
fan-out child (1,000 async tasks sleeping 10 ms at concurrency 128) as bare
asyncio, then with argus_lab from tree A, then from tree B (PYTHONPATH);
medians are printed. CPU is that of all threads of the measuring process.

Usage::

    .venv/bin/python benchmarks/ab_fanout.py /work/main . --rounds 9
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent / "bench_scale.py"


def one(tree: str, bare: bool) -> dict[str, Any]:
    """One fan-out in a fresh process importing argus_lab from ``tree``."""
    d = tempfile.mkdtemp(prefix="ab-fan-")
    spec = json.dumps({"mode": "fan", "bare": bare, "dir": str(Path(d) / "ws")})
    try:
        out = subprocess.run(
            [sys.executable, str(BENCH), "--child", spec],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(tree).resolve())},
        )
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if out.returncode != 0:
        raise SystemExit(f"fan-out child failed ({tree}):\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", help="tree A (e.g. /work/main)")
    p.add_argument("b", help="tree B (e.g. .)")
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"bare": [], "A": [], "B": []}
    load0, t0 = os.getloadavg()[0], time.time()
    for _ in range(args.rounds):
        runs["bare"].append(one(args.b, True))
        runs["A"].append(one(args.a, False))
        runs["B"].append(one(args.b, False))

    def med(key: str, field: str) -> float:
        return statistics.median(r[field] for r in runs[key])

    print(
        f"{os.cpu_count()} cores, load average {load0:.1f} at the start and "
        f"{os.getloadavg()[0]:.1f} at the end; {args.rounds} rounds of (bare, A, "
        f"B) in fresh processes, {time.time() - t0:.0f} s; medians.\n"
    )
    print("| | wall s | CPU s | wall / bare | min wall | max wall |")
    print("|---|--:|--:|--:|--:|--:|")
    bare = med("bare", "wall")
    for key, label in (
        ("bare", "bare asyncio (Semaphore(128) + gather)"),
        ("A", f"A: {args.a}"),
        ("B", f"B: {args.b}"),
    ):
        walls = [r["wall"] for r in runs[key]]
        print(
            f"| {label} | {med(key, 'wall'):.3f} | {med(key, 'cpu'):.3f} "
            f"| {med(key, 'wall') / bare:.1f}x | {min(walls):.3f} | {max(walls):.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
