"""Interleaved A/B of the cost per step between two source trees of argus-lab.

A script, not a test. Each run is a fresh process that imports argus_lab from one
tree (PYTHONPATH), runs an N-step chain of a no-op tool and prints its CPU and
wall milliseconds per step; the trees alternate, so drift on a shared machine hits
both alike. Medians and the ratio B / A are printed (CPU time is the steadier
figure on a busy machine).

Usage::

    .venv/bin/python benchmarks/ab_runtime.py /work/main . --n 100 --rounds 10
    .venv/bin/python benchmarks/ab_runtime.py /work/main . --n 1 --durability full

Besides ``s.run()`` per step it prints the CPU of ``new_session()`` + ``run()`` +
``close()`` in all: work moved out of ``run()`` into the others is no saving.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import sys, tempfile, time
from pathlib import Path
import argus_lab as al

@al.tool
def noop(i: int) -> str:
    return "x" * 256

n, durability = int(sys.argv[1]), sys.argv[2]
tasks = [{"id": f"t{i}", "tool": "noop", "args": {"i": i},
          **({"deps": [f"t{i - 1}"]} if i else {})} for i in range(n)]
with tempfile.TemporaryDirectory() as d:
    ws = al.Workspace(Path(d) / "ws", durability=durability)
    cn = time.process_time()
    s = ws.new_session(plan={"tasks": tasks}, tools=[noop], name="c", concurrency=4)
    c0, w0 = time.process_time(), time.perf_counter()
    assert s.run().status == "succeeded"
    c1, w1 = time.process_time(), time.perf_counter()
    s.close()
    c2 = time.process_time()
    ws.close()
print((c1 - c0) / n * 1000, (w1 - w0) / n * 1000, (c2 - cn) * 1000)
"""


def run(tree: Path, n: int, durability: str) -> tuple[float, float, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(n), durability],
        env=env,
        # ``python -c`` puts the working folder first on sys.path, ahead of
        # PYTHONPATH: run in the tree, or every run imports the caller's tree.
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(out[0]), float(out[1]), float(out[2])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", type=Path, help="tree A (the baseline), e.g. /work/main")
    p.add_argument("b", type=Path, help="tree B, e.g. .")
    p.add_argument("--n", type=int, default=1000, help="steps in the chain")
    p.add_argument("--rounds", type=int, default=6, help="runs of each tree")
    p.add_argument("--durability", choices=("normal", "full"), default="normal")
    args = p.parse_args()
    res: dict[str, list[tuple[float, float, float]]] = {"A": [], "B": []}
    for _ in range(args.rounds):
        res["A"].append(run(args.a.resolve(), args.n, args.durability))
        res["B"].append(run(args.b.resolve(), args.n, args.durability))
    med = {
        k: [statistics.median(r[i] for r in v) for i in range(3)]
        for k, v in res.items()
    }
    for k, tree in (("A", args.a), ("B", args.b)):
        print(
            f"{k} {tree}: CPU {med[k][0]:.3f} ms/step, wall {med[k][1]:.3f} ms/step; "
            f"new_session+run+close CPU {med[k][2]:.2f} ms"
        )
    print(
        f"B / A: CPU {med['B'][0] / med['A'][0]:.2f}x, "
        f"wall {med['B'][1] / med['A'][1]:.2f}x, "
        f"new_session+run+close CPU {med['B'][2] / med['A'][2]:.2f}x "
        f"(N={args.n}, {args.durability}, {args.rounds} runs each, medians)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
