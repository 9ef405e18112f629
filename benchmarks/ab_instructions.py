"""A/B of the instructions a run executes, two source trees of argus-lab, under
callgrind: deterministic where CPU time on a shared 2-core VM spreads +-5-10%.

A script, not a test. Each measurement is a fresh process under
``valgrind --tool=callgrind --instr-atstart=no`` (Debian's ``valgrind``; ~10x
slower than a plain run): it builds a workspace, then counts the user-space
instructions of one part of an N-step chain of a no-op tool (``import``: the
``Workspace`` modules' import and the workspace's creation; ``new``:
``new_session()``; ``run``: ``s.run()``; ``close``: ``s.close()``).
``PYTHONHASHSEED`` is fixed and the part starts after a collection of the
cyclic garbage collector, so a tree gives the same count to ~0.03% run after
run. Kernel time (syscalls, page faults, thread creation) and cache
misses are not counted: pair it with ``ab_runtime.py`` (CPU time).

Usage::

    .venv/bin/python benchmarks/ab_instructions.py /work/main . --n 100
    .venv/bin/python benchmarks/ab_instructions.py /work/main . --n 1000 --parts run

Both trees get the same conditions: byte code cached (``.pyc``, as in an
installed package) under a fresh ``PYTHONPYCACHEPREFIX`` per tree, written by
one plain run of the child before the measured ones.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import gc, sys, tempfile
from pathlib import Path

def gate(part, name, word):
    if part == name:
        if word == "on":
            # The cyclic collector runs when allocations since its last pass
            # cross a threshold: start the part from a pass, or where its
            # passes fall (and what they cost) depends on everything before.
            gc.collect()
        print(word, flush=True)
        sys.stdin.readline()

n, part = int(sys.argv[1]), sys.argv[2]
with tempfile.TemporaryDirectory() as d:
    gate(part, "import", "on")
    import argus_lab as al

    ws = al.Workspace(Path(d) / "ws", durability="normal")
    gate(part, "import", "off")

    @al.tool
    def noop(i: int) -> str:
        return "x" * 256

    tasks = [{"id": f"t{i}", "tool": "noop", "args": {"i": i},
              **({"deps": [f"t{i - 1}"]} if i else {})} for i in range(n)]
    gate(part, "new", "on")
    s = ws.new_session(plan={"tasks": tasks}, tools=[noop], name="c", concurrency=4)
    gate(part, "new", "off")
    gate(part, "run", "on")
    assert s.run().status == "succeeded"
    gate(part, "run", "off")
    gate(part, "close", "on")
    s.close()
    gate(part, "close", "off")
    ws.close()
"""


def child_env(tree: Path, pycache: Path) -> dict[str, str]:
    """The child's environment: argus_lab from ``tree``, byte code cached in
    ``pycache``, a fixed hash seed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {
        **env,
        "PYTHONPATH": str(tree),
        "PYTHONPYCACHEPREFIX": str(pycache),
        "PYTHONHASHSEED": "0",
    }


def warm_up(tree: Path, n: int, pycache: Path) -> None:
    """One plain run of the child, which writes the byte code caches."""
    subprocess.run(
        [sys.executable, "-c", CHILD, str(n), "none"],
        cwd=tree,
        env=child_env(tree, pycache),
        check=True,
        capture_output=True,
    )


def measure(tree: Path, n: int, part: str, pycache: Path) -> int:
    """Instructions of ``part`` of an ``n``-step chain, argus_lab from ``tree``."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "callgrind.out"
        env = child_env(tree, pycache)
        proc = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-c",
                CHILD,
                str(n),
                part,
            ],
            cwd=tree,  # python -c puts the working folder first on sys.path
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        for word in ("on", "off"):
            line = proc.stdout.readline().strip()
            if line != word:
                proc.kill()
                raise SystemExit(f"child said {line!r}, expected {word!r}")
            # Returns once callgrind has switched counting on or off.
            subprocess.run(
                ["callgrind_control", "-i", word, str(proc.pid)],
                check=True,
                capture_output=True,
            )
            proc.stdin.write("\n")
            proc.stdin.flush()
        err = proc.communicate()[1]
    found = re.search(r"Collected : (\d+)", err)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed ({proc.returncode}):\n{err[-2000:]}")
    return int(found.group(1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", type=Path, help="tree A (the baseline), e.g. /work/main")
    p.add_argument("b", type=Path, help="tree B, e.g. .")
    p.add_argument("--n", type=int, default=100, help="steps in the chain")
    p.add_argument(
        "--parts",
        default="new,run,close",
        help="comma-separated, of: import, new, run, close",
    )
    args = p.parse_args()
    a, b = args.a.resolve(), args.b.resolve()
    with tempfile.TemporaryDirectory() as caches:
        ca, cb = Path(caches) / "a", Path(caches) / "b"
        warm_up(a, args.n, ca)
        warm_up(b, args.n, cb)
        for part in args.parts.split(","):
            ia, ib = measure(a, args.n, part, ca), measure(b, args.n, part, cb)
            print(
                f"{part:6s} N={args.n}: A {ia / 1e6:9.2f}M  B {ib / 1e6:9.2f}M  "
                f"B - A {(ib - ia) / 1e6:+8.2f}M  B / A {ib / ia:.4f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
