"""Shows this machine's slow phases: the same 100-step loop, run again and again
in one process, takes two distinct amounts of CPU.

A script, not a test. For each of ``--processes`` fresh processes it runs
``--runs`` times, back to back, (a) the bare diskcache floor of
``bench_step.py`` (100 transactions of a step's two rows, diskcache as
shipped) and
(b) Argus's 100-step chain of no-op tools (a new session each time), and
prints each run's CPU ms per step. On the 2-core VMs of issue 18 both fall in
two bands ~1.5x apart, in phases of a few hundred ms (a run lasts 8-20 ms), so
the median of a handful of fresh processes lands in either band by chance.
Nothing here is tuned for speed: it only shows the spread.

Usage::

    .venv/bin/python benchmarks/bench_phases.py --processes 3 --runs 12
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
N = 100


def bare_run(folder: Path) -> float:
    """CPU ms per step of the bare floor's 100 transactions (``bench_step.py``'s)."""
    import bench_vs_langgraph as vs

    spec = {"mode": "floor", "n": N, "durability": "normal", "commits": 1}
    return float(
        vs.child_floor({**spec, "bare": True, "dir": str(folder)})["cpu_ms_per_step"]
    )


def child(runs: int) -> dict[str, list[float]]:
    sys.path.insert(0, str(HERE))
    import bench_runtime as rt

    import argus_lab as al

    tool = al.tool(rt.noop)
    tmp = Path(tempfile.mkdtemp(prefix="phases-"))
    out: dict[str, list[float]] = {"bare": [], "argus": []}
    try:
        ws = al.Workspace(tmp / "ws", durability="normal")
        for k in range(runs):
            out["bare"].append(bare_run(tmp / f"bare{k}"))
            plan = rt._plan(al, "chain", N)
            s = ws.new_session(plan=plan, tools=[tool], name=f"p{k}", concurrency=4)
            c0 = time.process_time()
            s.run()
            out["argus"].append((time.process_time() - c0) * 1000 / N)
            s.close()
        ws.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=3)
    p.add_argument("--runs", type=int, default=12)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.runs)))
        return 0
    for i in range(args.processes):
        cmd = [sys.executable, __file__, "--child", "--runs", str(args.runs)]
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True).stdout)
        for name, cpus in res.items():
            cells = " ".join(f"{c:.3f}" for c in cpus)
            print(f"process {i + 1} {name:<5} CPU ms/step: {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
