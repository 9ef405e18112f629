"""Memory benchmark: insert throughput and query latency at 10k and 100k memories.

A script, not a test. For each size it builds a fresh memory folder and measures:

- **embedding**: texts per second through ``HashEmbedder(dim)`` (the offline
  deterministic embedder), timed apart from storage;
- **bulk insert**: ``add_many`` in batches of 1,000 (merge-insert on ``id``, the
  same upsert every write uses), with vectors precomputed so only storage is timed;
  then ``optimize()`` (index update + compaction) and the IVF_RQ ANN index build;
- **single upserts**: ``add`` of one memory at a time into the full table, as the
  session writes automatic memories, including the automatic ``optimize()`` that
  runs every 64 writes (p50, p95, max);
- **query latency** for full-text (BM25), vector (ANN) and hybrid (both + reciprocal
  rank fusion), k=10, p50 and p95 over N queries after a warm-up, plus the same
  with a ``kind`` filter;
- **quality checks** (not targets): how often the query's source document is in the
  top 10 for each mode, and the ANN's recall@10 against exact cosine search.

Query texts are 4 words drawn from a random stored memory, so each has a known
source. Texts are synthetic: 20-60 words drawn with Zipf-like frequencies from
30,000 pronounceable pseudo-words (seeded, so every run is the same).

Usage::

    .venv/bin/python benchmarks/bench_memory.py           # 10k and 100k, ~2-3 min
    .venv/bin/python benchmarks/bench_memory.py --quick   # 10k only, ~15 s
    .venv/bin/python benchmarks/bench_memory.py --write   # + results_memory.md
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from argus_lab.store.memory import HashEmbedder, Memory  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results_memory.md"
NOTES = "<!-- notes: written by hand, kept by --write -->"
TARGETS_MS = {"fts": 10.0, "vector": 10.0, "hybrid": 25.0}
"""p50 targets at 100k memories."""
KINDS = ("result", "note", "document", "lesson")


def pseudo_words(n: int, rng: random.Random) -> list[str]:
    cons, vow = "bcdfghjklmnprstvwz", "aeiou"
    out: set[str] = set()
    while len(out) < n:
        out.add(
            "".join(
                rng.choice(cons) + rng.choice(vow) for _ in range(rng.randint(2, 4))
            )
        )
    return sorted(out)


def corpus(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    words = pseudo_words(30_000, rng)
    weights = [1 / (i + 1) ** 0.9 for i in range(len(words))]
    cum = list(np.cumsum(weights))
    return [
        " ".join(rng.choices(words, cum_weights=cum, k=rng.randint(20, 60)))
        for _ in range(n)
    ]


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


class Lookup:
    """An 'embedder' serving precomputed vectors, so inserts time storage only."""

    def __init__(
        self, texts: list[str], vectors: np.ndarray, live: HashEmbedder
    ) -> None:
        self.index = {t: i for i, t in enumerate(texts)}
        self.vectors = vectors
        self.live = live

    def __call__(self, texts: list[str]) -> np.ndarray:
        idx = [self.index.get(t) for t in texts]
        if all(i is not None for i in idx):
            return self.vectors[idx]
        return self.live(texts)


def run_size(n: int, *, dim: int, n_queries: int, n_upserts: int) -> dict[str, Any]:
    texts = corpus(n)
    emb = HashEmbedder(dim)
    t_embed, vectors = timed(lambda: emb(texts))
    res: dict[str, Any] = {"n": n, "embed_per_s": n / t_embed}
    folder = Path(tempfile.mkdtemp(prefix="argus-bench-memory-"))
    try:
        m = Memory(folder / "memory", embedder=Lookup(texts, vectors, emb))
        # Bulk load: no automatic optimize in between, then one at the end.
        m.optimize_every, m.optimize_rows = 10**9, 10**9
        recs = [
            {
                "id": f"m{i:07d}",
                "text": t,
                "kind": KINDS[i % 4],
                "session_id": f"s{i % 50}",
            }
            | {"task_id": f"t{i}", "seq": i}
            for i, t in enumerate(texts)
        ]

        def bulk() -> None:
            for s in range(0, n, 1000):
                m.add_many(recs[s : s + 1000])

        t_bulk, _ = timed(bulk)
        res["bulk_per_s"] = n / t_bulk
        res["optimize_s"], _ = timed(m.optimize)
        res["ann_build_s"], _ = timed(m.create_vector_index)

        rng = random.Random(1)
        sources = [rng.randrange(n) for _ in range(n_queries)]
        queries = [" ".join(rng.sample(texts[i].split(), 4)) for i in sources]
        qvecs = emb(queries)
        for mode in ("fts", "vector", "hybrid"):
            for q in queries[:10]:  # warm caches
                m.search(q, k=10, mode=mode)  # type: ignore[arg-type]
            lat, found = [], 0
            for q, src in zip(queries, sources, strict=True):
                t, hits = timed(lambda q=q, mode=mode: m.search(q, k=10, mode=mode))
                lat.append(t * 1000)
                found += any(h.id == f"m{src:07d}" for h in hits)
            res[mode] = {
                "p50": pct(lat, 50),
                "p95": pct(lat, 95),
                "found": found / n_queries,
            }
            flat = []
            for q in queries[: n_queries // 2]:
                t, _ = timed(
                    lambda q=q, mode=mode: m.search(q, k=10, mode=mode, kind="lesson")
                )
                flat.append(t * 1000)
            res[mode]["filtered_p50"] = pct(flat, 50)

        # ANN recall@10 against exact cosine search over the same vectors.
        recall = 0.0
        for q, qv in zip(queries[:100], qvecs[:100], strict=True):
            exact = {f"m{i:07d}" for i in np.argsort(-(vectors @ qv))[:10]}
            got = {h.id for h in m.search(q, k=10, mode="vector")}
            recall += len(exact & got) / 10
        res["ann_recall10"] = recall / min(100, len(queries))

        # One memory at a time, as a session's automatic memories arrive.
        m.optimize_every, m.optimize_rows = 64, 4096
        ups = []
        new = corpus(n_upserts, seed=99)
        for i, t in enumerate(new):
            dt, _ = timed(lambda i=i, t=t: m.add(t, id=f"u{i}", kind="result"))
            ups.append(dt * 1000)
        res["upsert"] = {
            "p50": pct(ups, 50),
            "p95": pct(ups, 95),
            "max": max(ups),
            "per_s": 1000 / statistics.mean(ups),
        }
        m.optimize(keep_versions=timedelta(seconds=1))  # drop superseded versions
        res["disk_mb"] = (
            sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return res


def render(
    results: list[dict[str, Any]], *, dim: int, n_queries: int, wall: float
) -> str:
    env = (
        f"{os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}, lancedb {metadata.version('lancedb')}, "
        f"pyarrow {metadata.version('pyarrow')}"
    )
    lines = [
        "## Memory (LanceDB)",
        "",
        f"`benchmarks/bench_memory.py` — {env}; vectors {dim}-d from `HashEmbedder`, "
        f"k=10, {n_queries} queries per mode; whole run {wall:.0f} s. Latencies are "
        "end-to-end `Memory.search` calls (query embedding, LanceDB query, building "
        "`MemoryHit`s).",
        "",
        "| memories | mode | p50 ms | p95 ms | p50 with `kind` filter | target p50 "
        "| source in top 10 |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for mode in ("fts", "vector", "hybrid"):
            q = r[mode]
            tgt = f"<= {TARGETS_MS[mode]:.0f}" if r["n"] >= 100_000 else ""
            ok = " ✓" if tgt and q["p50"] <= TARGETS_MS[mode] else (" ✗" if tgt else "")
            lines.append(
                f"| {r['n']:,} | {mode} | {q['p50']:.1f}{ok} | {q['p95']:.1f} | "
                f"{q['filtered_p50']:.1f} | {tgt} | {q['found']:.0%} |"
            )
    lines += [
        "",
        "| memories | embed texts/s | bulk insert rows/s | optimize s "
        "| IVF_RQ build s | ANN recall@10 | single upsert p50 / p95 / max ms "
        "| upserts/s | disk MB after cleanup |",
        "|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in results:
        u = r["upsert"]
        lines.append(
            f"| {r['n']:,} | {r['embed_per_s']:,.0f} | {r['bulk_per_s']:,.0f} | "
            f"{r['optimize_s']:.2f} | {r['ann_build_s']:.2f} | "
            f"{r['ann_recall10']:.2f} | "
            f"{u['p50']:.1f} / {u['p95']:.1f} / {u['max']:.0f} | {u['per_s']:,.0f} | "
            f"{r['disk_mb']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10k memories only (~15 s)")
    ap.add_argument("--sizes", type=int, nargs="*", help="memory counts to run")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--upserts", type=int, default=200)
    ap.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    a = ap.parse_args()
    sizes = a.sizes or ([10_000] if a.quick else [10_000, 100_000])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as warm:  # imports and first-use costs
        Memory(Path(warm) / "memory", embedder=HashEmbedder(8)).add("warm up")
    results = []
    for n in sizes:
        print(f"# {n:,} memories ...", file=sys.stderr, flush=True)
        results.append(run_size(n, dim=a.dim, n_queries=a.queries, n_upserts=a.upserts))
    md = render(results, dim=a.dim, n_queries=a.queries, wall=time.perf_counter() - t0)
    print(md)
    if a.write:
        # Hand-written notes below the marker survive a rewrite.
        old = RESULTS.read_text() if RESULTS.exists() else ""
        notes = old[old.index(NOTES) :] if NOTES in old else NOTES + "\n"
        RESULTS.write_text(md + "\n" + notes)
        print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
