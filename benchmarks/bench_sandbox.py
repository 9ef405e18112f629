"""Sandbox benchmark: what the ``python`` tool's isolation costs per call.

A script, not a test. It times, interleaved so machine load hits all alike:

- **bare**: ``python -I -c pass`` as an asyncio subprocess, the floor any
  subprocess-based tool pays;
- **sandbox**: ``run_python("pass")`` with every layer this machine allows (the
  launcher, namespaces, the read-only view, the tmpfs quota, cgroups, Landlock,
  seccomp, copying files out), the code itself the same ``pass``;
- **sandbox + file**: the same, the code writing one 1 MiB file that is copied out.

The overhead is the sandbox's median minus the bare median (target: < 150 ms).

Usage::

    .venv/bin/python benchmarks/bench_sandbox.py            # 30 rounds, ~15 s
    .venv/bin/python benchmarks/bench_sandbox.py --write    # + results_sandbox.md
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from argus_lab.tools.sandbox import Limits, run_python, sandbox_status  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results_sandbox.md"
TARGET_MS = 150.0


async def bare(folder: Path) -> float:
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-c", "pass", cwd=folder
    )
    await proc.wait()
    return time.perf_counter() - t0


async def sandboxed(folder: Path, code: str) -> float:
    shutil.rmtree(folder, ignore_errors=True)
    t0 = time.perf_counter()
    res = await run_python(code, folder, limits=Limits(wall_time=30))
    took = time.perf_counter() - t0
    assert res.exit_code == 0, res.stderr
    return took


async def measure(rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"bare": [], "sandbox": [], "sandbox + file": []}
    write = "open('f', 'wb').write(b'x' * (1 << 20))"
    with tempfile.TemporaryDirectory(prefix="argus-bench-sandbox-") as d:
        folder = Path(d)
        for _ in range(3):  # warm-up: caches, the probe, the seccomp filter
            await sandboxed(folder / "t", "pass")
            await bare(folder)
        for _ in range(rounds):
            times["bare"].append(await bare(folder))
            times["sandbox"].append(await sandboxed(folder / "t", "pass"))
            times["sandbox + file"].append(await sandboxed(folder / "t", write))
    return times


def report(times: dict[str, list[float]]) -> str:
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    rows = [
        "| call | median ms | p90 ms | overhead over bare (median) |",
        "|---|---|---|---|",
    ]
    for k, v in times.items():
        p90 = sorted(v)[int(0.9 * (len(v) - 1))] * 1000
        over = med[k] - med["bare"]
        rows.append(f"| {k} | {med[k]:.1f} | {p90:.1f} | {over:+.1f} |")
    over = med["sandbox"] - med["bare"]
    verdict = "met" if over < TARGET_MS else "MISSED"
    status = sandbox_status()
    layers = ", ".join(f"{k}: {v}" for k, v in status["rules"].items())
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return "\n".join(
        [
            f"Sandbox start-up overhead per call: {over:.1f} ms median "
            f"(target < {TARGET_MS:.0f} ms: {verdict}).",
            "",
            *rows,
            "",
            f"{len(times['bare'])} interleaved rounds; Python "
            f"{platform.python_version()}, {platform.machine()}, kernel "
            f"{platform.release()}, {os.cpu_count()} cores, load {load:.2f} at the "
            f"end; uid {os.getuid()}.",
            f"Layers: {layers}.",
            f"Warnings: {status['warnings'] or 'none'}.",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--write", action="store_true", help="write results_sandbox.md")
    args = ap.parse_args()
    text = report(asyncio.run(measure(args.rounds)))
    print(text)
    if args.write:
        stamp = time.strftime("%Y-%m-%d", time.gmtime())
        RESULTS.write_text(
            f"# Sandbox benchmark\n\n`benchmarks/bench_sandbox.py --write`, "
            f"{stamp}.\n\n{text}\n"
        )


if __name__ == "__main__":
    main()
