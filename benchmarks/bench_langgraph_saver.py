"""ArgusSaver vs LangGraph's SqliteSaver: the same graphs, in one run.

A script, not a test. The graph (issue 16): a chain of N no-op nodes whose state
accumulates each node's 512-byte result in a list (``Annotated[list,
operator.add]``), plus an int counter; N = 100, 1,000, 5,000; invoked with
``durability="sync"`` (each step's checkpoint is written before the next step).

- **SqliteSaver**: ``langgraph-checkpoint-sqlite``, WAL (its ``setup()``), and
  ``PRAGMA synchronous=FULL`` set on the connection (read back and reported).
- **ArgusSaver**: ``ArgusSaver(ws, durability="full")``: WAL + synchronous=FULL,
  every commit fsynced.

Every measurement runs in a fresh process (this file re-runs itself with
``--child``), the savers interleaved within each repeat (which goes first
alternates). *ms/step* is the wall time of ``invoke`` over N; *in put* the wall
time spent inside the saver's ``put``, which each step waits for (the rest is
LangGraph's own work, which grows with N in a chain of N nodes whatever the
saver); *per repeat* SqliteSaver's ms/step over ArgusSaver's in the same repeat;
*CPU ms/step* the process's CPU time over the same span; *bytes/step* the size
of the store after the run (the WAL folded into the database by a final
``PRAGMA wal_checkpoint(TRUNCATE)``), over N.

- **ArgusSaver** groups a task's writes with the checkpoint that follows into one
  commit (``argus_lab/langgraph/_group.py``): one fsync per step where SqliteSaver
  makes two; each call still returns only once its commit is fsynced.

Usage::

    .venv/bin/python benchmarks/bench_langgraph_saver.py           # ~15 min
    .venv/bin/python benchmarks/bench_langgraph_saver.py --quick   # N = 100, 1,000
    .venv/bin/python benchmarks/bench_langgraph_saver.py --n 100 1000 --repeats 3
    .venv/bin/python benchmarks/bench_langgraph_saver.py --write   # + results file

Needs the ``bench`` and ``langgraph`` extras. SqliteSaver at N = 5,000 writes
~8 GB (every checkpoint holds the whole list), so it runs once there.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import bench_runtime as rt

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results_langgraph_saver.md"
SAVERS = ("SqliteSaver", "ArgusSaver")
PAYLOAD = 512


class State(TypedDict):
    results: Annotated[list[str], operator.add]
    i: int


def build(n: int) -> Any:
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(State)
    for k in range(n):
        text = f"{k:08d}" * (PAYLOAD // 8)
        g.add_node(f"n{k}", lambda s, text=text: {"results": [text], "i": s["i"] + 1})
    g.add_edge(START, "n0")
    for k in range(n - 1):
        g.add_edge(f"n{k}", f"n{k + 1}")
    g.add_edge(f"n{n - 1}", END)
    return g


def child(saver_name: str, n: int, folder: Path) -> dict[str, Any]:
    """One run in this (fresh) process."""
    if saver_name == "SqliteSaver":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(folder / "lg.db", check_same_thread=False)
        saver: Any = SqliteSaver(conn)
        saver.setup()
        conn.execute("PRAGMA synchronous=FULL")
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    else:
        sys.path.insert(0, str(ROOT))
        import argus_lab as al
        from argus_lab.langgraph import ArgusSaver

        saver = ArgusSaver(al.Workspace(folder), durability="full")
        sync, mode = 2, "wal"
    inside = _time_inside(saver)
    app = build(n).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "bench"}, "recursion_limit": n + 10}
    t0, c0 = time.perf_counter(), time.process_time()
    out = app.invoke({"results": [], "i": 0}, cfg, durability="sync")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert out["i"] == n and len(out["results"]) == n
    return {
        "wall": wall,
        "cpu": cpu,
        "saver": inside[0],
        "synchronous": sync,
        "journal_mode": mode,
    }


def _time_inside(saver: Any) -> list[float]:
    """Wraps the saver's ``put`` to add up the wall time spent in it: with
    durability="sync" the step waits for it. (``put_writes`` runs in the
    background, not awaited; its commit comes before the put's, SqliteSaver's
    through its connection lock, ArgusSaver's in the same transaction.)"""
    total = [0.0]
    for name in ("put",):
        fn = getattr(saver, name)

        def timed(*args: Any, _fn: Any = fn, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return _fn(*args, **kw)
            finally:
                total[0] += time.perf_counter() - t

        setattr(saver, name, timed)
    return total


def fold_wal(folder: Path) -> int:
    """Folds every SQLite WAL under ``folder`` into its database; total bytes."""
    for db in folder.rglob("*.db"):
        con = sqlite3.connect(db)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def spawn(saver_name: str, n: int, tmp: Path) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(dir=tmp))
    try:
        r = subprocess.run(
            [sys.executable, __file__, "--child", saver_name, str(n), str(folder)],
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            raise RuntimeError(f"{saver_name} N={n} failed:\n{r.stderr[-3000:]}")
        res: dict[str, Any] = json.loads(r.stdout.splitlines()[-1])
        res["bytes"] = fold_wal(folder)
        return res
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure(ns: list[int], repeats: int, tmp: Path) -> dict[tuple[str, int], list[Any]]:
    runs: dict[tuple[str, int], list[Any]] = {}
    for rep in range(repeats):
        for n in ns:
            # Alternate which saver goes first, so a drift in the machine's load
            # does not always favour the same one.
            for s in SAVERS if rep % 2 == 0 else SAVERS[::-1]:
                if n >= 5000 and (rep > 0 if s == "SqliteSaver" else rep > 2):
                    continue  # ~8 GB a run for SqliteSaver: once is enough
                res = spawn(s, n, tmp)
                runs.setdefault((s, n), []).append(res)
                print(
                    f"rep {rep} {s:<11} N={n:<5} {res['wall'] * 1000 / n:7.3f} ms/step "
                    f"{res['bytes'] / n / 1024:9.1f} KB/step",
                    file=sys.stderr,
                    flush=True,
                )
    return runs


def table(
    runs: dict[tuple[str, int], list[Any]], ns: list[int]
) -> tuple[str, dict[str, float]]:
    def med(s: str, n: int, f: str) -> float:
        return statistics.median(r[f] for r in runs[(s, n)]) / n

    lines = [
        "| saver | N | runs | ms/step | in put, ms/step | CPU ms/step | bytes/step |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for s in SAVERS:
        for n in ns:
            ms, cpu = med(s, n, "wall") * 1000, med(s, n, "cpu") * 1000
            inside = med(s, n, "saver") * 1000
            kb = med(s, n, "bytes") / 1024
            lines.append(
                f"| {s} | {n:,} | {len(runs[(s, n)])} | {ms:.3f} | {inside:.3f} | "
                f"{cpu:.3f} | {kb:,.1f} KB |"
            )
    lo, hi = ns[0], ns[-1]
    mid = 1000 if 1000 in ns else ns[len(ns) // 2]
    v = {
        "time_ratio": med("SqliteSaver", mid, "wall") / med("ArgusSaver", mid, "wall"),
        "cpu_ratio": med("SqliteSaver", mid, "cpu") / med("ArgusSaver", mid, "cpu"),
        "bytes_ratio": med("SqliteSaver", mid, "bytes")
        / med("ArgusSaver", mid, "bytes"),
        "argus_growth": med("ArgusSaver", hi, "bytes") / med("ArgusSaver", lo, "bytes"),
        "sqlite_growth": med("SqliteSaver", hi, "bytes")
        / med("SqliteSaver", lo, "bytes"),
        "argus_time_growth": med("ArgusSaver", hi, "wall")
        / med("ArgusSaver", lo, "wall"),
        "sqlite_time_growth": med("SqliteSaver", hi, "wall")
        / med("SqliteSaver", lo, "wall"),
        "argus_saver_growth": med("ArgusSaver", hi, "saver")
        / med("ArgusSaver", lo, "saver"),
        "sqlite_saver_growth": med("SqliteSaver", hi, "saver")
        / med("SqliteSaver", lo, "saver"),
        "saver_ratio": med("SqliteSaver", mid, "saver")
        / med("ArgusSaver", mid, "saver"),
        "pair_ratios": ", ".join(
            f"{a['wall'] / b['wall']:.2f}"
            for a, b in zip(
                runs[("SqliteSaver", mid)], runs[("ArgusSaver", mid)], strict=True
            )
        ),
        "mid": mid,
        "lo": lo,
        "hi": hi,
    }
    ok = {True: "met", False: "**missed**"}
    lines += [
        "",
        "| target | measured | result |",
        "|---|--:|---|",
        f"| ArgusSaver >= 2x faster per step than SqliteSaver at N = {mid:,} | "
        f"{v['time_ratio']:.2f}x (CPU {v['cpu_ratio']:.2f}x; per repeat "
        f"{v['pair_ratios']}) | {ok[v['time_ratio'] >= 2]} |",
        f"| ArgusSaver bytes/step flat, N = {hi:,} / N = {lo:,} <= 1.5x | "
        f"{v['argus_growth']:.2f}x (SqliteSaver {v['sqlite_growth']:.1f}x) | "
        f"{ok[v['argus_growth'] <= 1.5]} |",
        f"| >= 20x fewer bytes per step at N = {mid:,} | {v['bytes_ratio']:.1f}x | "
        f"{ok[v['bytes_ratio'] >= 20]} |",
        f"| (time per step, N = {hi:,} / N = {lo:,}) | ArgusSaver "
        f"{v['argus_time_growth']:.2f}x, SqliteSaver "
        f"{v['sqlite_time_growth']:.2f}x | — |",
        f"| (time in put: SqliteSaver / ArgusSaver at N = {mid:,}; growth "
        f"N = {hi:,} / N = {lo:,}) | {v['saver_ratio']:.2f}x; ArgusSaver "
        f"{v['argus_saver_growth']:.2f}x, SqliteSaver "
        f"{v['sqlite_saver_growth']:.2f}x | — |",
    ]
    return "\n".join(lines), v


def _versions() -> str:
    from importlib import metadata

    names = ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite")
    return ", ".join(f"{d} {metadata.version(d)}" for d in names)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", nargs=3, metavar=("SAVER", "N", "FOLDER"))
    p.add_argument("--quick", action="store_true", help="N = 100, 1,000; 1 repeat")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--n", type=int, nargs="+", help="chain lengths (default 100 1000 5000)"
    )
    p.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], int(a.child[1]), Path(a.child[2]))))
        return
    ns = sorted(a.n) if a.n else [100, 1000] if a.quick else [100, 1000, 5000]
    repeats = 1 if a.quick else a.repeats
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        info = rt.machine_info(tmp)
        load0 = os.getloadavg()
        t0 = time.time()
        runs = measure(ns, repeats, tmp)
        load1 = os.getloadavg()
    text, _ = table(runs, ns)
    sync = {r["synchronous"] for rs in runs.values() for r in rs}
    modes = {r["journal_mode"] for rs in runs.values() for r in rs}
    head = (
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t0))}, "
        f"{time.time() - t0:.0f} s, medians of {repeats} fresh processes per cell "
        f"(N = 5,000: ArgusSaver 3, SqliteSaver 1). Read back from the connections: "
        f"journal_mode {sorted(modes)}, synchronous {sorted(sync)} (2 = FULL). "
        f"Load average {load0[0]:.1f} at start, {load1[0]:.1f} at the end.\n\n"
        f"**Machine.** {info['cpu']}, {info['cores_usable']} usable cores, "
        f"{info['ram_gib']} GiB RAM; {info['disk']}; a 4 KiB write + fsync "
        f"{info['fsync_ms']:.2f} ms; {info['os']}; Python {info['python']}, SQLite "
        f"{info['sqlite']}, diskcache {info['diskcache']}; {_versions()}; "
        f"{info['git']}.\n"
    )
    out = f"## ArgusSaver vs SqliteSaver\n\n{head}\n{text}\n"
    print(out)
    if a.write:
        RESULTS.write_text(out)


if __name__ == "__main__":
    main()
