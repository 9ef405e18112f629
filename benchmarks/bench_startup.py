"""Start-up cost: ``import argus_lab`` and ``argus --help``, in CPU time.

A script, not a test. Each measurement is a fresh interpreter; its CPU time (user +
system, from ``getrusage(RUSAGE_CHILDREN)``) is less disturbed by other load on a
shared machine than wall time, which is reported beside it. The commands are
interleaved, round after round, with a bare ``python -c pass`` as the baseline in
the same run; medians over the rounds.

Usage::

    .venv/bin/python benchmarks/bench_startup.py             # 10 rounds, markdown
    .venv/bin/python benchmarks/bench_startup.py --rounds 20
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"import argus_lab": 0.3, "argus --help": 0.15}


def commands() -> dict[str, list[str]]:
    py = sys.executable
    argus = str(Path(py).parent / "argus")
    return {
        "python -c pass (baseline)": [py, "-c", "pass"],
        "import argus_lab": [py, "-c", "import argus_lab"],
        "argus --help": [argus, "--help"],
        # What a first real use then costs (pydantic, the runtime, the store).
        "import argus_lab; argus_lab.Workspace": [
            py,
            "-c",
            "import argus_lab; argus_lab.Workspace",
        ],
    }


def measure(cmd: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``cmd``."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, env=os.environ)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return cpu, wall


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args()
    cmds = commands()
    for cmd in cmds.values():  # warm the page cache and the .pyc files
        measure(cmd)
    res: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    for _ in range(args.rounds):
        for name, cmd in cmds.items():
            res[name].append(measure(cmd))
    load = os.getloadavg()[0]
    print(
        f"Medians of {args.rounds} fresh processes each, interleaved; load average "
        f"{load:.1f} on {os.cpu_count()} cores at the end.\n"
    )
    print("| command | CPU s (median) | wall s (median) | target (CPU) | met |")
    print("|---|--:|--:|--:|---|")
    for name, runs in res.items():
        cpu = statistics.median(c for c, _ in runs)
        wall = statistics.median(w for _, w in runs)
        target = TARGETS.get(name)
        met = "—" if target is None else ("yes" if cpu <= target else "**no**")
        t = "—" if target is None else f"<= {target}"
        print(f"| `{name}` | {cpu:.3f} | {wall:.3f} | {t} | {met} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
