"""Memory on LanceDB: upsert, full-text / vector / hybrid ranking, provenance,
filters, documents, the memory tools."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import argus_lab as al
from argus_lab.errors import ArgusError
from argus_lab.store.chunking import chunk_text, detect_format, html_to_text
from argus_lab.store.memory import (
    HashEmbedder,
    Memory,
    MemoryHit,
    memory_id,
    open_memory,
    remember_lesson,
    remember_result,
)
from argus_lab.store.memory_tools import MEMORY_TOOLS, memory_add, memory_search
from argus_lab.tools.registry import ToolContext

CORPUS = Path(__file__).parent / "fixtures" / "memory_corpus"
DOCS = [json.loads(line) for line in (CORPUS / "docs.jsonl").read_text().splitlines()]
QUERIES: list[dict[str, Any]] = json.loads((CORPUS / "queries.json").read_text())


@pytest.fixture
def mem(tmp_path: Path) -> Memory:
    return Memory(tmp_path / "memory", embedder=HashEmbedder())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Memory:
    m = Memory(tmp_path_factory.mktemp("corpus") / "memory", embedder=HashEmbedder())
    m.add_many(DOCS)
    return m


# -- writing and upsert --------------------------------------------------------


@pytest.mark.slow
def test_add_get_round_trip(mem: Memory) -> None:
    mid = mem.add(
        "The Lisbon venue costs 4,100 EUR a day",
        kind="result",
        session_id="s1",
        task_id="venue",
        seq=7,
        metadata={"city": "Lisbon", "price": 4100, "tags": ["venue"]},
    )
    got = mem.get(mid)
    assert got is not None
    assert (got.kind, got.session_id, got.task_id, got.seq) == (
        "result",
        "s1",
        "venue",
        7,
    )
    assert got.metadata == {"city": "Lisbon", "price": 4100, "tags": ["venue"]}
    assert got.created_at > 0
    assert mem.get("nope") is None
    assert len(mem) == 1


def test_same_id_twice_is_one_memory_holding_the_latest(mem: Memory) -> None:
    mem.add("first version", id="m1")
    mem.add("second version", id="m1", metadata={"v": 2})
    assert len(mem) == 1
    got = mem.get("m1")
    assert got is not None and got.text == "second version" and got.metadata == {"v": 2}
    assert [h.id for h in mem.search("version", mode="fts")] == ["m1"]
    assert [h.id for h in mem.search("second version", mode="vector")] == ["m1"]


def test_add_many_upserts_and_last_duplicate_in_a_batch_wins(mem: Memory) -> None:
    ids = mem.add_many(
        [
            {"id": "a", "text": "alpha"},
            {"id": "b", "text": "beta", "kind": "lesson"},
            {"id": "a", "text": "alpha two"},
        ]
    )
    assert ids == ["a", "b"]
    mem.add_many([{"id": "b", "text": "beta two"}, {"id": "c", "text": "gamma"}])
    assert len(mem) == 3
    assert mem.get("a").text == "alpha two"  # type: ignore[union-attr]
    assert mem.get("b").text == "beta two"  # type: ignore[union-attr]
    assert mem.add_many([]) == []


def test_default_ids_key_automatic_memories_by_task_and_notes_by_text() -> None:
    r1 = memory_id("result", session_id="s", task_id="t", text="one")
    r2 = memory_id("result", session_id="s", task_id="t", text="two")
    assert r1 == r2 and r1.startswith("result-")
    assert memory_id("lesson", session_id="s", task_id="t") != r1
    assert memory_id("result", session_id="s2", task_id="t") != r1
    n1 = memory_id("note", session_id="s", task_id="t", text="one")
    assert n1 != memory_id("note", session_id="s", task_id="t", text="two")
    assert n1 == memory_id("note", session_id="s", task_id="t", text="one")


def test_bad_records_are_refused(mem: Memory) -> None:
    with pytest.raises(ValueError, match="kind"):
        mem.add("x", kind="gossip")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="colour"):
        mem.add_many([{"text": "x", "colour": "red"}])
    assert len(mem) == 0


def test_concurrent_writers_lose_nothing(mem: Memory) -> None:
    errors: list[BaseException] = []

    def write(t: int) -> None:
        try:
            for i in range(5):
                mem.add(f"thread {t} memory {i}", id=f"t{t}-{i}")
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not errors
    assert len(mem) == 20


def test_a_second_instance_sees_writes_at_once(mem: Memory) -> None:
    other = Memory(mem.path, embedder=HashEmbedder())  # as another process would
    assert other.search("zeppelin") == []
    mem.add("the zeppelin landed in Friedrichshafen", id="z")
    assert [h.id for h in other.search("zeppelin", mode="fts")] == ["z"]
    other.add("a second zeppelin note", id="z2")
    assert len(mem) == 2


# -- full-text index upkeep ----------------------------------------------------


def test_new_rows_are_searchable_before_and_after_the_index_catches_up(
    tmp_path: Path,
) -> None:
    m = Memory(tmp_path / "memory", optimize_every=3, optimize_rows=10_000)
    m.add("the quartz clock ticks", id="q1")
    table: Any = m._open()

    def unindexed() -> int:
        return int(table.index_stats("text_idx").num_unindexed_rows)

    assert unindexed() == 1  # searched by a scan until the index is updated
    assert [h.id for h in m.search("quartz", mode="fts")] == ["q1"]
    m.add("a quartz watch needs a battery", id="q2")
    assert unindexed() == 2
    m.add("quartz sand for the aquarium", id="q3")  # third write: optimize runs
    assert unindexed() == 0
    assert {h.id for h in m.search("quartz", mode="fts")} == {"q1", "q2", "q3"}
    m.add("the quartz clock ticks loudly", id="q1")  # an update after indexing
    hits = m.search("loudly", mode="fts")
    assert [h.id for h in hits] == ["q1"] and len(m) == 3


# -- ranking on the corpus -----------------------------------------------------


def _recall_at_5(m: Memory, mode: Any) -> float:
    total = 0.0
    for q in QUERIES:
        got = {h.id for h in m.search(q["query"], k=5, mode=mode)}
        total += len(got & set(q["relevant"])) / len(q["relevant"])
    return total / len(QUERIES)


@pytest.mark.parametrize("mode", ["fts", "vector", "hybrid"])
def test_each_mode_ranks_the_answer_first_on_its_easy_cases(
    corpus: Memory, mode: Any
) -> None:
    easy = [q for q in QUERIES if mode in q["easy"]]
    assert len(easy) >= 6
    for q in easy:
        hits = corpus.search(q["query"], k=5, mode=mode)
        assert hits, q["query"]
        assert hits[0].id in q["relevant"], (q["query"], [h.id for h in hits])
        assert hits[0].mode == mode and hits[0].note is None


def test_typos_defeat_full_text_but_not_vector_search(corpus: Memory) -> None:
    assert corpus.search("sourdogh startr feding", mode="fts") == []
    assert corpus.search("sourdogh startr feding", mode="vector")[0].id == "d05"


def test_hybrid_recall_is_at_least_the_better_of_fts_and_vector(
    corpus: Memory, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(QUERIES) >= 20
    r = {mode: _recall_at_5(corpus, mode) for mode in ("fts", "vector", "hybrid")}
    with capsys.disabled():
        print(
            f"\nrecall@5 over {len(QUERIES)} queries: fts {r['fts']:.3f}, "
            f"vector {r['vector']:.3f}, hybrid {r['hybrid']:.3f}"
        )
    assert r["hybrid"] >= max(r["fts"], r["vector"])
    assert r["hybrid"] >= 0.9


def test_hybrid_scores_are_weighted_reciprocal_rank_fusion(corpus: Memory) -> None:
    hits = corpus.search("venue prices per day", k=5)
    assert [h.mode for h in hits] == ["hybrid"] * len(hits)
    for h in hits:
        fts = 0.3 * (h.term_coverage or 0.0) / (10 + h.fts_rank) if h.fts_rank else 0
        vec = 1.0 / (10 + h.vector_rank) if h.vector_rank else 0.0
        assert h.score == pytest.approx(fts + vec)
        assert (h.term_coverage is None) == (h.fts_rank is None)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    both = hits[0]
    assert both.fts_score is not None and both.distance is not None
    assert both.term_coverage is not None and 0 < both.term_coverage <= 1


def test_hybrid_without_an_embedder_falls_back_to_full_text_with_a_note(
    tmp_path: Path,
) -> None:
    m = Memory(tmp_path / "memory", embedder=None)
    m.add_many(DOCS[:10])
    hits = m.search("sourdough starter hydration", mode="hybrid")
    assert hits[0].id == "d05"
    assert all(h.mode == "fts" for h in hits)
    assert all("fell back to full-text" in (h.note or "") for h in hits)
    auto = m.search("sourdough starter hydration")  # "auto": full text, no note
    assert [h.id for h in auto] == [h.id for h in hits]
    assert all(h.mode == "fts" and h.note is None for h in auto)
    with pytest.raises(ArgusError, match="embedding function"):
        m.search("anything", mode="vector")


def test_search_validates_its_arguments(corpus: Memory) -> None:
    with pytest.raises(ValueError, match="mode"):
        corpus.search("x", mode="semantic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must"):
        corpus.search("x", k=0)
    assert corpus.search("   ") == []
    assert Memory(corpus.path.parent / "empty").search("anything") == []


@pytest.mark.parametrize(
    "query", ["title:foo", '"unclosed', "(", "AND OR NOT", "it's", "a\\b", "*", "ü"]
)
def test_query_syntax_never_raises(corpus: Memory, query: str) -> None:
    for mode in ("fts", "hybrid"):
        corpus.search(query, mode=mode)  # type: ignore[arg-type]


# -- filters -----------------------------------------------------------------


def test_filters_by_session_kind_time_where_and_metadata(mem: Memory) -> None:
    mem.add("deploy failed: disk full", id="a", kind="lesson", session_id="s1")
    mem.add("deploy succeeded after cleanup", id="b", kind="result", session_id="s1")
    mem.add("deploy of the docs site", id="c", kind="note", session_id="s2", seq=3)
    mem.add(
        "deploy checklist",
        id="d",
        kind="document",
        metadata={"source": "ops.md", "team": "o'neil", "nested": {"team": "x"}},
    )
    mem.add("deploy freeze", id="e", metadata={"nested": {"team": "o'neil"}})
    mem.add("deploy window", id="f", metadata={"team": "o'neil ops"})
    for mode in ("fts", "vector", "hybrid"):

        def ids(**kw: Any) -> set[str]:
            return {h.id for h in mem.search("deploy", k=10, mode=mode, **kw)}  # noqa: B023

        assert ids(session_id="s1") == {"a", "b"}
        assert ids(session_id=["s1", "s2"]) == {"a", "b", "c"}
        assert ids(kind="lesson") == {"a"}
        assert ids(kind=["lesson", "result"]) == {"a", "b"}
        assert ids(where="seq >= 3") == {"c"}
        assert ids(metadata={"team": "o'neil"}) == {"d"}
        assert ids(metadata={"source": "ops.md", "team": "o'neil"}) == {"d"}
        assert ids(metadata={"team": "nobody"}) == set()
    later = mem.get("f").created_at  # type: ignore[union-attr]
    assert {h.id for h in mem.search("deploy", k=10, since=later)} == {"f"}


# -- automatic memory, provenance and cross-session recall ---------------------


@al.tool
def find_venue(city: str) -> dict[str, Any]:
    """Finds a venue."""
    return {"city": city, "venue": "LX Factory", "price_eur": 4100}


@al.tool
def find_venue_v2(city: str) -> dict[str, Any]:
    """Finds a venue (a newer version)."""
    return {"city": city, "venue": "LX Factory", "price_eur": 3900}


VENUE_PLAN = {
    "goal": "Find a venue",
    "tasks": [{"id": "venue", "tool": "find_venue", "args": {"city": "Lisbon"}}],
}


def _succeeded_seq(s: al.Session, task_id: str) -> int:
    seqs = [
        e.seq for e in s.events() if e.kind == "task_succeeded" and e.task_id == task_id
    ]
    return seqs[-1]


def test_a_search_hit_leads_back_to_the_event_that_wrote_it(
    ws: al.Workspace,
) -> None:
    s = ws.new_session(plan=VENUE_PLAN, tools=[find_venue], name="venues")
    assert s.run()
    seq = _succeeded_seq(s, "venue")
    m = Memory(ws.path / "memory", embedder=HashEmbedder())
    mid = remember_result(
        m,
        session_id=s.id,
        task_id="venue",
        seq=seq,
        result=s.result("venue"),
        title="Find a venue in Lisbon",
    )
    s.close()
    hit = m.search("venue in Lisbon price", k=1)[0]
    assert hit.id == mid and hit.kind == "result"
    assert "LX Factory" in hit.text and hit.text.startswith("Find a venue in Lisbon: ")
    assert hit.provenance == {"session_id": s.id, "task_id": "venue", "seq": seq}
    reopened = ws.open(hit.session_id)  # type: ignore[arg-type]
    try:
        ev = [e for e in reopened.events() if e.seq == hit.seq]
        assert len(ev) == 1
        assert (ev[0].kind, ev[0].task_id) == ("task_succeeded", "venue")
    finally:
        reopened.close()


def test_the_same_task_committed_twice_leaves_one_memory(ws: al.Workspace) -> None:
    m = Memory(ws.path / "memory")
    s = ws.new_session(plan=VENUE_PLAN, tools=[find_venue], name="twice")
    assert s.run()
    first = _succeeded_seq(s, "venue")
    kw = {"session_id": s.id, "task_id": "venue", "title": "venue"}
    a = remember_result(m, seq=first, result=s.result("venue"), **kw)
    # A crash after the commit and before the memory was recorded: on resume the
    # session writes it again.
    assert remember_result(m, seq=first, result=s.result("venue"), **kw) == a
    # The tool changes and the task reruns: a second commit of the same task.
    s.update_tools(al.tool(find_venue_v2.fn, name="find_venue"))
    assert s.rerun_stale()
    second = _succeeded_seq(s, "venue")
    s.close()
    assert second > first
    assert remember_result(m, seq=second, result={"price_eur": 3900}, **kw) == a
    assert m.count("kind = 'result'") == 1
    got = m.get(a)
    assert got is not None and got.seq == second and "3900" in got.text


def test_results_are_truncated_or_summarised(mem: Memory) -> None:
    big = {"rows": list(range(2000))}
    mid = remember_result(
        mem, session_id="s", task_id="t", seq=1, result=big, title="t", max_chars=100
    )
    got = mem.get(mid)
    assert got is not None and "[truncated" in got.text and len(got.text) < 200
    assert got.metadata["truncated"] is True and got.metadata["chars"] > 100
    remember_result(
        mem,
        session_id="s",
        task_id="t",
        seq=2,
        result=big,
        title="t",
        max_chars=100,
        summarize=lambda text: f"{text.count(',') + 1} rows",
    )
    got = mem.get(mid)
    assert got is not None and got.text == "t: 2000 rows" and got.metadata["summarized"]


def test_lessons_are_recalled_across_sessions(tmp_path: Path) -> None:
    m = Memory(tmp_path / "memory", embedder=HashEmbedder())
    m.add_many(DOCS)
    lid = remember_lesson(
        m,
        session_id="monday",
        task_id="book_flight",
        seq=12,
        error="TimeoutError: booking API did not answer within 30 s",
        attempts=3,
        tool="book_flight",
        args={"to": "LIS"},
    )
    again = remember_lesson(
        m,
        session_id="monday",
        task_id="book_flight",
        seq=12,
        error="TimeoutError: booking API did not answer within 30 s",
        attempts=3,
        tool="book_flight",
    )
    assert again == lid
    # Tuesday's session, planning a similar task, asks for lessons first.
    hits = m.search("book a flight to Lisbon", k=3, kind="lesson")
    assert hits[0].id == lid
    assert hits[0].session_id == "monday" and hits[0].seq == 12
    assert "after 3 attempt(s)" in hits[0].text
    assert hits[0].metadata["tool"] == "book_flight"


# -- embedders ---------------------------------------------------------------


@pytest.mark.slow
def test_hash_embedder_is_deterministic_across_processes() -> None:
    e = HashEmbedder(64)
    here = e(["Durable agents checkpoint every step"])[0].tolist()
    code = (
        "from argus_lab.store.memory import HashEmbedder;"
        "print(HashEmbedder(64)(['Durable agents checkpoint every step'])[0].tolist())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == pytest.approx(here)
    assert sum(x * x for x in here) == pytest.approx(1.0, abs=1e-5)
    assert e([""])[0].tolist()[0] == 1.0  # blank text: a valid unit vector


def test_an_embedder_added_later_backfills_missing_vectors(tmp_path: Path) -> None:
    m = Memory(tmp_path / "memory", embedder=None)
    m.add_many(DOCS[:12])
    m.embedder = HashEmbedder()
    assert m.search("sourdogh startr", mode="vector")[0].id == "d05"  # backfilled
    assert m.count("vector IS NULL") == 0
    assert m.backfill_vectors() == 0


def test_a_different_embedding_size_is_refused_until_reembed(mem: Memory) -> None:
    mem.add_many(DOCS[:5])
    mem.embedder = HashEmbedder(128)
    with pytest.raises(ArgusError, match="reembed"):
        mem.add("another note")
    assert mem.reembed() == 5
    mem.add("another note", id="n")
    assert mem.search("another note", mode="vector")[0].id == "n"


class RegistryStyle:
    """Duck-types a LanceDB embedding-registry function (source/query calls)."""

    def __init__(self) -> None:
        self.inner = HashEmbedder()
        self.queries: list[str] = []

    def compute_source_embeddings(self, texts: list[str]) -> list[Any]:
        return list(self.inner(texts))

    def compute_query_embeddings(self, query: str) -> list[Any]:
        self.queries.append(query)
        return list(self.inner([query]))


def test_lancedb_registry_style_embedding_functions_work(tmp_path: Path) -> None:
    fn = RegistryStyle()
    m = Memory(tmp_path / "memory", embedder=fn)
    m.add_many(DOCS)
    assert m.search("colimate newtonian telescop", mode="vector")[0].id == "d12"
    assert fn.queries == ["colimate newtonian telescop"]


def test_bad_embedders_are_reported(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="embedder"):
        Memory(tmp_path / "m", embedder=42)
    m = Memory(tmp_path / "m", embedder=lambda texts: [[1.0, 0.0]])
    with pytest.raises(ArgusError, match="one vector per text"):
        m.add_many([{"text": "a"}, {"text": "b"}])
    m.embedder = lambda texts: [[float("nan"), 1.0] for _ in texts]
    with pytest.raises(ArgusError, match="NaN"):
        m.add("a")


def test_the_ann_index_is_built_from_enough_rows_used_and_rebuilt_as_it_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argus_lab.store.memory as memory_module

    monkeypatch.setattr(memory_module, "_PARTITION_ROWS", 800)
    m = Memory(
        tmp_path / "memory", embedder=HashEmbedder(64), vector_index_min_rows=600
    )

    def records(lo: int, hi: int) -> list[dict[str, str]]:
        text = "record {0} about topic {1} and item {2}"
        return [
            {"id": f"r{i}", "text": text.format(i, i % 37, i * 7)}
            for i in range(lo, hi)
        ]

    m.add_many(records(0, 599))
    m.optimize()
    assert m._vector_index_names() == []  # too few rows: exact search
    m.add_many(records(599, 600))
    m.optimize()
    assert m._vector_index_names() == ["vector_onepart_rq4_idx"]
    assert m._refine() is None  # 4-bit codes: no re-ranking step
    hit = m.search("record 123 about topic 12 and item 861", k=1, mode="vector")[0]
    assert hit.id == "r123" and hit.distance == pytest.approx(0.0, abs=1e-3)
    m.add_many(records(600, 900))
    assert m.search("record 850 about topic 36", k=1, mode="vector")[0].id == "r850"
    m.optimize()  # grown past _PARTITION_ROWS: rebuilt with real partitions
    assert m._vector_index_names() == ["vector_rq4_idx"]
    hit = m.search("record 850 about topic 36 and item 5950", k=1, mode="vector")[0]
    assert hit.id == "r850"
    # Ranked from the codes alone, the hits still carry exact cosine distances
    # (LanceDB's own figure there is an estimate of another metric), in order.
    emb = HashEmbedder(64)
    query = "topic 12 and item 861"
    hits = m.search(query, k=5, mode="vector")
    q = emb([query])[0]
    for h in hits:
        v = emb([h.text])[0]
        cos = float((q * v).sum() / ((q * q).sum() ** 0.5 * (v * v).sum() ** 0.5))
        assert h.distance == pytest.approx(1 - cos, abs=1e-5)
    dists = [h.distance for h in hits]
    assert dists == sorted(dists)


def _cosine_distances(hits: list[MemoryHit], query: str) -> list[float]:
    emb = HashEmbedder(64)
    q = emb([query])[0]
    out = []
    for h in hits:
        v = emb([h.text])[0]
        cos = float((q * v).sum() / ((q * q).sum() ** 0.5 * (v * v).sum() ** 0.5))
        out.append(1 - cos)
    return out


def test_distances_stay_cosine_when_another_memory_builds_the_index(
    tmp_path: Path,
) -> None:
    """A Memory that found no index remembers that; another one (or a CLI run
    in another process) then builds the 4-bit index. The first one's hits
    still carry exact cosine distances, not LanceDB's estimates from codes."""
    texts = [f"record {i} about topic {i % 37} and item {i * 7}" for i in range(700)]
    rows = [{"id": f"r{i}", "text": t} for i, t in enumerate(texts)]
    a = Memory(tmp_path / "m", embedder=HashEmbedder(64), vector_index_min_rows=10**6)
    a.add_many(rows)
    query = "topic 12 and item 861"
    assert a.search(query, k=1, mode="vector")  # no index yet: remembered
    Memory(tmp_path / "m", embedder=HashEmbedder(64)).create_vector_index()
    hits = a.search(query, k=5, mode="vector")
    assert [h.distance for h in hits] == pytest.approx(
        _cosine_distances(hits, query), abs=1e-5
    )


def test_a_one_bit_index_of_an_earlier_version_is_reranked_then_rebuilt(
    tmp_path: Path,
) -> None:
    """Indexes built before the 4-bit codes (LanceDB's 1-bit default, named
    vector_idx) are searched with a re-ranking step until optimize rebuilds
    them; an explicit refine_factor is used as given, 0 meaning none."""
    from lancedb.index import IvfRq

    texts = [f"record {i} about topic {i % 37} and item {i * 7}" for i in range(700)]
    rows = [{"id": f"r{i}", "text": t} for i, t in enumerate(texts)]
    Memory(tmp_path / "memory", embedder=HashEmbedder(64)).add_many(rows)
    import lancedb

    t = lancedb.connect(tmp_path / "memory").open_table("memories")
    t.create_index("vector", config=IvfRq(distance_type="cosine", num_partitions=1))
    m = Memory(tmp_path / "memory", embedder=HashEmbedder(64))
    assert m._vector_index_names() == ["vector_idx"] and m._refine() == 10
    assert m.search(texts[123], k=1, mode="vector")[0].id == "r123"
    # Re-ranked on the full vectors, so LanceDB's distances are exact cosine
    # (from the 1-bit codes they would be ~2x off).
    query = "topic 12 and item 861"
    hits = m.search(query, k=5, mode="vector")
    assert len(hits) == 5
    assert [h.distance for h in hits] == pytest.approx(
        _cosine_distances(hits, query), abs=1e-5
    )
    m.optimize()
    assert m._vector_index_names() == ["vector_onepart_rq4_idx"]
    assert m._refine() is None
    assert m.search(texts[123], k=1, mode="vector")[0].id == "r123"
    assert Memory(tmp_path / "memory", refine_factor=3)._refine() == 3
    assert Memory(tmp_path / "memory", refine_factor=0)._refine() is None
    for bad in (-1, 2.5, "10", True):
        with pytest.raises(ValueError, match="refine_factor must be an int >= 0"):
            Memory(tmp_path / "memory", refine_factor=bad)  # type: ignore[arg-type]


# -- documents -----------------------------------------------------------------


def test_ingest_markdown_keeps_source_offsets_and_headings(mem: Memory) -> None:
    path = CORPUS / "guide.md"
    ids = mem.ingest(path, chunk_size=400, overlap=80)
    text = path.read_text()
    assert len(ids) >= 3
    for mid in ids:
        rec = mem.get(mid)
        assert rec is not None and rec.kind == "document"
        md = rec.metadata
        assert md["source"] == str(path.resolve()) and md["format"] == "markdown"
        assert text[md["start"] : md["end"]] == rec.text
        assert md["n_chunks"] == len(ids)
    hit = mem.search("windowpane test for dough", k=1, kind="document")[0]
    assert hit.metadata["heading"] == "Kitchen handbook > Field notes > Kneading"
    assert "windowpane" in hit.text


def test_ingest_html_strips_tags_scripts_and_styles(mem: Memory) -> None:
    ids = mem.ingest(str(CORPUS / "page.html"), chunk_size=300, overlap=50)
    texts = [mem.get(i).text for i in ids]  # type: ignore[union-attr]
    joined = " ".join(texts)
    assert "<" not in joined and "trackVisitor" not in joined and "color:" not in joined
    assert "Reef early" in joined and "&amp;" not in joined and "wind & waves" in joined
    assert all(mem.get(i).metadata["format"] == "html" for i in ids)  # type: ignore[union-attr]


def test_reingesting_a_source_replaces_its_chunks(mem: Memory) -> None:
    long = "\n\n".join(
        f"Paragraph {i} talks about lighthouse number {i}." for i in range(40)
    )
    first = mem.ingest(long, source="lighthouses", chunk_size=200, overlap=20)
    again = mem.ingest(long, source="lighthouses", chunk_size=200, overlap=20)
    assert first == again and mem.count("kind = 'document'") == len(first)
    short = mem.ingest("Only one lighthouse now.", source="lighthouses")
    assert len(short) == 1 and mem.count("kind = 'document'") == 1
    other = mem.ingest("A text with no source given.")
    assert mem.get(other[0]).metadata["source"].startswith("text:")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "text",
    [
        "x" * 300,  # one word longer than a file name may be: ENAMETOOLONG
        "a line that holds a NUL \x00 character",
        "~/notes/" + "z" * 300 + ".md",  # a path with a too-long name in it
    ],
    ids=["long-word", "nul", "long-name-in-path"],
)
def test_ingesting_one_line_of_text_that_no_file_could_be_named(
    mem: Memory, text: str
) -> None:
    # A one-line text is first tried as a file name: Path.is_file raised
    # "File name too long" instead of answering no.
    (mid,) = mem.ingest(text)
    got = mem.get(mid)
    assert got is not None and got.text == text
    assert got.metadata["source"].startswith("text:")


def test_html_and_format_detection() -> None:
    html = (
        "<html><head><title>T</title><style>p{}</style></head><body>"
        "<p>One&nbsp;two</p><ul><li>a</li><li>b</li></ul><pre>x  y</pre></body></html>"
    )
    assert html_to_text(html) == "One two\n\na\nb\n\nx  y"
    assert detect_format(html) == "html"
    assert detect_format("# Title\n\ntext") == "markdown"
    assert detect_format("plain words") == "text"
    assert detect_format("<p>x</p>", "notes.txt") == "text"


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("ab .\n\t#é"), max_size=600),
    size=st.integers(1, 120),
    markdown=st.booleans(),
    data=st.data(),
)
def test_chunks_cover_the_text_with_exact_offsets(
    text: str, size: int, markdown: bool, data: st.DataObject
) -> None:
    overlap = data.draw(st.integers(0, size - 1))
    chunks = chunk_text(text, chunk_size=size, overlap=overlap, markdown=markdown)
    covered = set()
    for c in chunks:
        assert text[c.start : c.end] == c.text
        assert 0 < len(c.text) <= size
        covered.update(range(c.start, c.end))
    assert all(text[i].isspace() for i in range(len(text)) if i not in covered)
    starts = [c.start for c in chunks]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)


def test_chunks_overlap_and_prefer_paragraph_breaks() -> None:
    paras = [f"Paragraph {i} " + "word " * 30 for i in range(6)]
    text = "\n\n".join(p.strip() for p in paras)
    chunks = chunk_text(text, chunk_size=400, overlap=60)
    assert len(chunks) >= 3
    for a, b in itertools.pairwise(chunks):
        assert b.start < a.end  # they overlap
    assert chunks[0].text.endswith("word")  # ended at a paragraph break
    with pytest.raises(ValueError, match="overlap"):
        chunk_text("x", chunk_size=10, overlap=10)
    with pytest.raises(ValueError, match="chunk_size"):
        chunk_text("x", chunk_size=0)


# -- the tools ---------------------------------------------------------------


def _ctx(tmp_path: Path, key: str = "k1", session: str = "s1") -> ToolContext:
    return ToolContext(
        session_id=session,
        task_id="t",
        attempt=1,
        idempotency_key=key,
        workspace=tmp_path,
        workdir=tmp_path / "files",
    )


def test_memory_tools_add_and_search_idempotently(tmp_path: Path) -> None:
    assert {t.name for t in MEMORY_TOOLS} == {"memory_add", "memory_search"}
    out = memory_add("Reef the mainsail before the wind rises", ctx=_ctx(tmp_path))
    again = memory_add("Reef the mainsail before the wind rises", ctx=_ctx(tmp_path))
    assert out == again and out["kind"] == "note"
    memory_add("Another session's note on reefing", ctx=_ctx(tmp_path, "k2", "s2"))
    found = memory_search("reef mainsail", ctx=_ctx(tmp_path))
    assert found["hits"][0]["id"] == out["id"]
    # The default embedder is there: hybrid search, nothing to note.
    assert len(found["hits"]) == 2 and found["note"] is None
    mine = memory_search("reefing", this_session_only=True, ctx=_ctx(tmp_path))
    assert {h["session_id"] for h in mine["hits"]} == {"s1"}
    json.dumps(found)  # results are JSON, as tool results must be
    assert open_memory(tmp_path / "memory") is open_memory(tmp_path / "memory")
    assert memory_add.schema()["input_schema"]["required"] == ["text"]


def test_memory_tools_in_a_session(ws: al.Workspace) -> None:
    plan = {
        "goal": "remember and recall",
        "tasks": [
            {
                "id": "note",
                "tool": "memory_add",
                "args": {"text": "Gentoo penguins are the heaviest"},
            },
            {
                "id": "recall",
                "tool": "memory_search",
                "args": {"query": "heaviest penguins"},
                "deps": ["note"],
            },
        ],
    }
    s = ws.new_session(plan=plan, tools=MEMORY_TOOLS, name="mem-tools")
    try:
        assert s.run()
        hits = s.result("recall")["hits"]
        assert hits[0]["text"] == "Gentoo penguins are the heaviest"
        assert (hits[0]["session_id"], hits[0]["task_id"]) == (s.id, "note")
    finally:
        s.close()


def test_importing_argus_lab_and_these_modules_does_not_import_lancedb() -> None:
    code = (
        "import sys, argus_lab, argus_lab.store.memory, argus_lab.runtime.context,"
        " argus_lab.store.memory_tools;"
        "heavy = ('lancedb', 'pyarrow', 'numpy', 'wordllama', 'tokenizers',"
        " 'onnxruntime');"
        "print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_hits_are_pydantic_records(corpus: Memory) -> None:
    hit = corpus.search("Galilean moons", k=1)[0]
    assert isinstance(hit, MemoryHit)
    assert MemoryHit.model_validate_json(hit.model_dump_json()) == hit


def test_leading_space_never_gives_two_chunks_one_start() -> None:
    # Found by the property test above: " aa" at size 2 gave two chunks at 1.
    for overlap in (0, 1):
        chunks = chunk_text(" aa", chunk_size=2, overlap=overlap)
        assert [(c.start, c.text) for c in chunks] == [(1, "a"), (2, "a")]
