"""Two processes writing one memory at once (two notebooks, or a notebook and
``argus serve``): both succeed, nothing written is lost, readers keep reading.

Each test starts real processes (multiprocessing, spawn: fresh interpreters with
their own LanceDB connections) on a real LanceDB table, released together by a
barrier. Without the memory's write lock, LanceDB refused one of the two with
"Retryable commit conflict ... preempted by concurrent transaction" (optimize,
compaction vs delete, the first write's full-text index, the vector column, the
vector index) or "Column vector_next already exists" (re-embedding), and a
backfill wrote its stale copy of rows rewritten while it embedded.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from argus_lab.store.memory import HashEmbedder, Memory
from tests import memory_writers_worker as worker
from tests.memory_writers_worker import ROUNDS, ROWS, SEED, Renamed

pytestmark = pytest.mark.slow  # each starts 2-3 interpreters (~2 s of imports)

CTX = multiprocessing.get_context("spawn")
WAIT = 90.0
"""Seconds to wait for a process's report (a hang fails instead of blocking)."""


@pytest.fixture
def procs() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for p in started:
        p.join(30)
        if p.is_alive():  # pragma: no cover - only when a test already failed
            p.kill()
            p.join()


def _seeded(path: Path, embedder: Any = "hash") -> Memory:
    m = Memory(path, embedder=HashEmbedder() if embedder == "hash" else embedder)
    m.add_many(worker.seed_rows())
    return m


def _run(path: Path, roles: list[str], procs: list[Any]) -> dict[int, Any]:
    """Runs one process per role, started together; readers (and the roles of
    worker.UNTIL_STOPPED) are stopped once every other role has reported.
    Returns each one's detail; fails on an error."""
    start, out, stop = CTX.Barrier(len(roles)), CTX.Queue(), CTX.Event()
    for who, name in enumerate(roles):
        p = CTX.Process(
            target=worker.role, args=(str(path), name, who, start, out, stop)
        )
        p.start()
        procs.append(p)
    writers = {w for w, name in enumerate(roles) if name not in worker.UNTIL_STOPPED}
    got: dict[int, tuple[str, Any]] = {}
    try:
        while not writers <= got.keys():
            who, status, detail = out.get(timeout=WAIT)
            got[who] = (status, detail)
    finally:
        stop.set()
    while len(got) < len(roles):
        who, status, detail = out.get(timeout=WAIT)
        got[who] = (status, detail)
    errors = {f"{roles[w]} #{w}": d for w, (s, d) in got.items() if s != "ok"}
    assert not errors, "\n".join(f"{k}: {v}" for k, v in errors.items())
    return {who: detail for who, (_, detail) in got.items()}


def _written(m: Memory, who: int) -> int:
    return m.count(f"id LIKE 'w{who}-%'")


def test_two_processes_adding_and_optimizing_at_once_both_succeed(
    tmp_path: Path, procs: list[Any]
) -> None:
    m = _seeded(tmp_path / "memory")
    got = _run(tmp_path / "memory", ["add_optimize", "add_optimize", "read"], procs)
    assert got[2] >= 1  # the reader read while they wrote, without an error
    assert (_written(m, 0), _written(m, 1)) == (ROUNDS * ROWS, ROUNDS * ROWS)
    assert len(m) == SEED + 2 * ROUNDS * ROWS
    hits = m.search("w1x3x07 by writer 1", mode="fts", k=1)
    assert hits[0].id == "w1-3-07"


def test_a_process_writing_and_deleting_while_another_optimizes(
    tmp_path: Path, procs: list[Any]
) -> None:
    m = _seeded(tmp_path / "memory")
    got = _run(tmp_path / "memory", ["delete_add", "optimize", "read"], procs)
    assert got[1] >= 1 and got[2] >= 1
    assert _written(m, 0) == 2 * ROUNDS * ROWS
    deleted = [worker.deleted(r) for r in range(2 * ROUNDS)]
    assert [m.get(i) for i in deleted] == [None] * len(deleted)
    assert len(m) == SEED + 2 * ROUNDS * (ROWS - 1)


def test_two_processes_writing_first_to_a_memory_at_once(
    tmp_path: Path, procs: list[Any]
) -> None:
    # Both find no table: one creates it and its full-text and id indexes, the
    # other must find them made rather than build them again. Memories 0-4,
    # each written first by both at once.
    _run(tmp_path / "memory", ["write", "write"], procs)
    for k in range(worker.EACH_N):
        m = Memory(tmp_path / "memory" / str(k), embedder=HashEmbedder())
        assert (_written(m, 0), _written(m, 1)) == (ROWS, ROWS)
        text = f"{worker.tag(1, k, 5)} by writer 1"
        assert m.search(text, mode="fts", k=1)[0].id == f"w1-{k}-05"
        assert m.search(text, mode="vector", k=1)[0].id == f"w1-{k}-05"


def test_two_processes_giving_a_memory_vectors_at_once(
    tmp_path: Path, procs: list[Any]
) -> None:
    # Written without an embedder: each writer adds the vector column, unless
    # the other has. Memories 0-4, each given vectors by both at once.
    for k in range(worker.EACH_N):
        _seeded(tmp_path / "memory" / str(k), embedder=None)
    _run(tmp_path / "memory", ["write", "write"], procs)
    for k in range(worker.EACH_N):
        m = Memory(tmp_path / "memory" / str(k), embedder=HashEmbedder())
        assert len(m) == SEED + 2 * ROWS
        text = f"{worker.tag(0, k, 9)} by writer 0"
        assert m.search(text, mode="vector", k=1)[0].id == f"w0-{k}-09"
        assert m.search("seed memory number 42", mode="vector", k=1)[0].id == (
            "seed-042"
        )
        assert m.count("vector IS NULL") == 0


def test_two_processes_building_the_vector_index_at_once(
    tmp_path: Path, procs: list[Any]
) -> None:
    # Each drops the index it finds and builds its own: one at a time, they
    # leave one. Memories 0-4, each indexed by both at once.
    built = [_seeded(tmp_path / "memory" / str(k)) for k in range(worker.EACH_N)]
    _run(tmp_path / "memory", ["index", "index"], procs)
    for m in built:
        assert m._vector_index_names() == ["vector_onepart_rq4_idx"]
        hits = m.search("seed memory number 17", mode="vector", k=1)
        assert hits[0].id == "seed-017"


def test_two_processes_reembedding_at_once(tmp_path: Path, procs: list[Any]) -> None:
    # Each adds the new vectors' column unless the other has, fills it, and
    # swaps it in unless the other has. Memories 0-4, each by both at once.
    for k in range(worker.EACH_N):
        _seeded(tmp_path / "memory" / str(k))
    got = _run(tmp_path / "memory", ["reembed", "reembed"], procs)
    # Each found the memory by its new vectors once done.
    assert got == {w: [["seed-007"]] * worker.EACH_N for w in (0, 1)}
    for k in range(worker.EACH_N):
        m = Memory(tmp_path / "memory" / str(k), embedder=Renamed())
        record = m.embedder_record()
        assert record is not None and record["name"] == Renamed.name
        assert m.count("vector IS NULL") == 0 and len(m) == SEED
        assert "vector_next" not in m._open().schema.names


def test_a_backfill_keeps_what_another_process_wrote_while_it_embedded(
    tmp_path: Path, procs: list[Any]
) -> None:
    plain = _seeded(tmp_path / "memory", embedder=None)
    embedding, go, out = CTX.Event(), CTX.Event(), CTX.Queue()
    p = CTX.Process(
        target=worker.backfill, args=(str(tmp_path / "memory"), embedding, go, out)
    )
    p.start()
    procs.append(p)
    try:
        assert embedding.wait(WAIT), "the backfill never started embedding"
        # Rewritten while the backfill holds their old copies: a new text, and
        # the same text with new metadata. Neither waits for the backfill.
        plain.add("seed memory number 5, revised", id="seed-005")
        plain.add("seed memory number 6", id="seed-006", metadata={"v": 2})
    finally:
        go.set()
    _, status, detail = out.get(timeout=WAIT)
    assert status == "ok", detail
    assert detail >= SEED
    new, kept = plain.get("seed-005"), plain.get("seed-006")
    assert new is not None and new.text == "seed memory number 5, revised"
    assert kept is not None and kept.metadata == {"v": 2}
    m = Memory(tmp_path / "memory", embedder=HashEmbedder())
    assert m.count("vector IS NULL") == 0
    hit = m.search("seed memory number 5, revised", mode="vector", k=1)[0]
    assert hit.id == "seed-005" and hit.distance == pytest.approx(0.0, abs=1e-5)


def test_a_writer_that_waits_too_long_gets_a_clear_error_and_writes_nothing(
    tmp_path: Path, procs: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from argus_lab.store import _memory_lock

    m = _seeded(tmp_path / "memory")
    told, tell = CTX.Pipe(duplex=False)
    release = CTX.Event()
    p = CTX.Process(target=worker.hold, args=(str(tmp_path / "memory"), tell, release))
    p.start()
    procs.append(p)
    try:
        # Until it says so, or dies trying.
        ready = multiprocessing.connection.wait([told, p.sentinel], WAIT)
        assert told in ready and told.recv() == "holding", "it never took the lock"
        monkeypatch.setattr(_memory_lock, "TIMEOUT", 0.2)
        with pytest.raises(_memory_lock.MemoryBusyError) as err:
            m.add("written while another process optimizes", id="late")
        assert m.count() == SEED  # readers are not held up by the lock
        assert [h.id for h in m.search("seed memory number 3", mode="fts", k=1)] == [
            "seed-003"
        ]
    finally:
        release.set()
    msg = str(err.value)
    assert f"process {p.pid} (optimize" in msg and "nothing was written" in msg
    assert m.get("late") is None
    p.join(WAIT)
    m.add("written once it was free", id="late")  # its lock went with it
    assert m.get("late") is not None
