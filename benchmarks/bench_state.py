"""Typed state transactions: bytes and time per commit of a 1 MB state.

Each commit changes one field of a ~1 MB pydantic state. Argus stores a JSON
Patch per commit and a full snapshot every ``snapshot_every`` commits; the
baseline writes the whole state as one JSON document per commit (every version
kept, as Argus keeps them), into the same diskcache/SQLite store with the same
envelope. Both run in one process, one after the other, in one run.

Usage::

    .venv/bin/python benchmarks/bench_state.py            # markdown to stdout
    .venv/bin/python benchmarks/bench_state.py --write    # and results_state.md
    .venv/bin/python benchmarks/bench_state.py --commits 128 --every 16,64
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, Field

import argus_lab as al
from argus_lab.store.envelope import encode, open_cache

HERE = Path(__file__).parent


class Book(BaseModel):
    cash: float = 0.0
    prices: dict[str, float] = Field(default_factory=dict)


def big_book(target: int = 1 << 20) -> Book:
    rng = random.Random(7)
    prices: dict[str, float] = {}
    while len(json.dumps(prices)) < target:  # ~26 bytes an entry
        for _ in range(2000):
            prices[f"SYM{len(prices):06d}"] = round(rng.uniform(1, 1000), 4)
    return Book(cash=1e6, prices=prices)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def stored_bytes(cache: object, prefix: str) -> int:
    """Bytes of the values under ``prefix`` (what the commits wrote)."""
    rows = cache._sql(  # type: ignore[attr-defined]
        "SELECT SUM(LENGTH(value)) FROM Cache WHERE key >= ? AND key < ?",
        (prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)),
    ).fetchone()
    return int(rows[0] or 0)


def run_argus(root: Path, book: Book, n: int, every: int) -> dict[str, float]:
    ws = al.Workspace(root / f"argus-{every}")
    st = ws.state("book", model=Book, snapshot_every=every, initial=book)
    base_db = folder_bytes(ws.path / "states")
    base_rec = stored_bytes(st._log.cache, "v:")
    times = []
    c0 = time.process_time()
    for i in range(n):
        t0 = time.perf_counter()
        with st.transaction() as s:
            s.cash = 1e6 - i - 1  # one field changes
        times.append(time.perf_counter() - t0)
    cpu = (time.process_time() - c0) / n
    rec = stored_bytes(st._log.cache, "v:") - base_rec
    st._log.cache._sql("PRAGMA wal_checkpoint(TRUNCATE)")
    db = folder_bytes(ws.path / "states") - base_db
    t_read = []
    rng = random.Random(1)
    for _ in range(20):
        v = rng.randint(1, st.version)
        t0 = time.perf_counter()
        st.at(v)
        t_read.append(time.perf_counter() - t0)
    assert st.get().cash == 1e6 - n
    st.close()
    ws.close()
    return {
        "bytes": rec / n,
        "disk": db / n,
        "ms_median": statistics.median(times) * 1000,
        "ms_mean": statistics.fmean(times) * 1000,
        "cpu_ms": cpu * 1000,
        "read_ms": statistics.median(t_read) * 1000,
    }


def run_baseline(root: Path, book: Book, n: int) -> dict[str, float]:
    cache = open_cache(root / "baseline")
    cache.set("v:000000000000", encode(book.model_dump_json()))
    base_db = folder_bytes(root / "baseline")
    base_rec = stored_bytes(cache, "v:")
    cur = book.model_copy(deep=True)
    times = []
    c0 = time.process_time()
    for i in range(n):
        t0 = time.perf_counter()
        cur.cash = 1e6 - i - 1
        with cache.transact(retry=True):
            cache.set(f"v:{i + 1:012d}", encode(cur.model_dump_json()))
            cache.set("head", encode(json.dumps({"version": i + 1})))
        times.append(time.perf_counter() - t0)
    cpu = (time.process_time() - c0) / n
    rec = stored_bytes(cache, "v:") - base_rec
    cache._sql("PRAGMA wal_checkpoint(TRUNCATE)")
    db = folder_bytes(root / "baseline") - base_db
    t_read = []
    for v in range(1, 21):
        t0 = time.perf_counter()
        Book.model_validate_json(cache.get(f"v:{v * (n // 21):012d}").split("|", 2)[2])
        t_read.append(time.perf_counter() - t0)
    cache.close()
    return {
        "bytes": rec / n,
        "disk": db / n,
        "ms_median": statistics.median(times) * 1000,
        "ms_mean": statistics.fmean(times) * 1000,
        "cpu_ms": cpu * 1000,
        "read_ms": statistics.median(t_read) * 1000,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=256)
    ap.add_argument("--every", default="16,64,256", help="snapshot_every values")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    book = big_book()
    size = len(book.model_dump_json())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = run_baseline(root, book, args.commits)
        rows.append(("whole JSON document per commit (baseline)", base))
        for every in [int(x) for x in args.every.split(",")]:
            r = run_argus(root, book, args.commits, every)
            label = f"Argus, JSON Patch, snapshot every {every}"
            if every == 64:
                label += " (default)"
            rows.append((label, r))
    lines = [
        f"State of {size / 1e6:.2f} MB ({len(book.prices):,} prices), one field "
        f"changed per commit, {args.commits} commits, load "
        f"{os.getloadavg()[0]:.1f}, {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| storage | KB per commit (records) | KB per commit (disk) | ms per commit "
        "(median / mean) | CPU ms per commit | read an old version (ms, median) |",
        "|---|---|---|---|---|---|",
    ]
    for label, r in rows:
        lines.append(
            f"| {label} | {r['bytes'] / 1024:.1f} | {r['disk'] / 1024:.1f} | "
            f"{r['ms_median']:.2f} / {r['ms_mean']:.2f} | {r['cpu_ms']:.2f} | "
            f"{r['read_ms']:.1f} |"
        )
    default = next(r for label, r in rows if "(default)" in label)
    lines += [
        "",
        f"Default vs baseline: {base['bytes'] / default['bytes']:.0f}x fewer bytes "
        f"per commit ({default['bytes'] / 1024:.1f} KB; target <= 20 KB), "
        f"{default['cpu_ms'] / base['cpu_ms']:.1f}x the baseline's CPU time and "
        f"{default['ms_mean'] / base['ms_mean']:.1f}x its wall time per commit "
        "(means, snapshots included).",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        (HERE / "results_state.md").write_text(
            "# State transactions: bytes and time per commit\n\n"
            "`.venv/bin/python benchmarks/bench_state.py --write`\n\n" + text + "\n"
        )


if __name__ == "__main__":
    main()
