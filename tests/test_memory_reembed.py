"""Re-embedding memory with another model in the background: searches never mix
the two models' spaces, progress is reported, completion swaps the vectors in,
and a process killed mid-way leaves a memory that resumes where it stopped."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from argus_lab.errors import ArgusError
from argus_lab.store import _memory_reembed
from argus_lab.store.memory import EmbedderMismatchError, HashEmbedder, Memory
from tests.reembed_worker import Renamed

ROOT = Path(__file__).resolve().parent.parent
TOPICS = (
    "pause the session so no new task starts",
    "the invoices API throttles at 100 requests per minute",
    "flight bookings time out at the airline gateway after 30 seconds",
    "the CSV export uses semicolons as separators",
    "checkpoints older than thirty days can be deleted",
)
DOCS = [
    {"id": f"d{i:02d}", "text": f"{TOPICS[i % len(TOPICS)]} (note {i})"}
    for i in range(40)
]


class Gated(Renamed):
    """Renamed, whose worker-thread embedding waits for ``go`` from its 2nd batch."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.waiting = threading.Event()
        self.batches = 0

    def __call__(self, texts: Sequence[str]) -> Any:
        if threading.current_thread() is not threading.main_thread():
            self.batches += 1
            if self.batches == 2:
                self.waiting.set()
                assert self.go.wait(60), "the test never opened the gate"
        return super().__call__(texts)


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_memory_reembed, "BATCH", 5)


def _built(path: Path) -> Memory:
    m = Memory(path, embedder=HashEmbedder(64))
    m.add_many(DOCS)
    return m


@pytest.mark.slow  # ~2 s: 40 memories re-embedded 5 at a time, 8 commits
def test_background_reembedding_never_mixes_spaces_and_swaps_at_the_end(
    tmp_path: Path, small_batches: None
) -> None:
    old = _built(tmp_path / "memory").embedder_record()
    gate = Gated()
    seen: list[tuple[int, int]] = []
    m = Memory(
        tmp_path / "memory",
        embedder=gate,
        on_mismatch="background",
        progress=lambda done, total: seen.append((done, total)),
    )
    # The first search starts the job and answers by full text, saying why.
    hits = m.search("invoices API throttles", k=3, mode="vector")
    assert hits and {h.mode for h in hits} == {"fts"}
    assert all(h.note and "re-embedded" in h.note for h in hits)
    assert gate.waiting.wait(60)
    job = m.reembedding
    assert job is not None and not job.finished and job.total == 40
    assert (job.done, seen) == (5, [(5, 40)]) and job.fraction == 0.125
    assert "5/40 running" in repr(job) and "<progress" in job._repr_html_()
    # Mid-way: the old vectors keep their record, the new ones are apart.
    assert m.embedder_record() == old
    assert m._next_record() == {"name": "tests/renamed-hash", "version": "1", "dim": 64}
    assert m.count("vector_next IS NOT NULL") == 5
    hybrid = m.search("CSV export semicolons", k=3)
    assert hybrid[0].mode == "fts" and "hybrid search fell back" in str(hybrid[0].note)
    # A write meanwhile is embedded by its writer, into the new column only.
    m.add("reboot the router when the VPN drops", id="new")
    assert m.count("id = 'new' AND vector_next IS NOT NULL AND vector IS NULL") == 1
    with pytest.raises(ArgusError, match="re-embedded"):
        m.create_vector_index()
    gate.go.set()
    assert job.wait(60) and job.finished and job.error is None
    assert job.done == 40 and seen[-1] == (40, 40)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    # Swapped: one vector column, recorded as the new embedder, all filled.
    assert m._next_record() is None and m.count("vector IS NULL") == 0
    assert m.embedder_record() == {
        "name": "tests/renamed-hash",
        "version": "1",
        "dim": 64,
    }
    top = m.search("reboot the router VPN", k=1, mode="vector")
    assert (top[0].id, top[0].mode, top[0].note) == ("new", "vector", None)
    assert gate.embedded == 40  # each memory once, by the worker
    # The old embedder is now the stranger.
    with pytest.raises(EmbedderMismatchError, match="argus_lab/hash"):
        Memory(tmp_path / "memory", embedder=HashEmbedder(64)).search(
            "x", mode="vector"
        )


def test_an_interrupted_swap_is_finished_and_a_stale_one_dropped(
    tmp_path: Path, small_batches: None
) -> None:
    _built(tmp_path / "a")
    m = Memory(tmp_path / "a", embedder=Renamed(), on_mismatch="background")
    m.reembed()  # foreground: the same job, waited for
    # Redo the state of a kill between the swap's two commits: the old column
    # dropped, the new one not yet renamed.
    t = m._open()
    assert t is not None
    t.alter_columns({"path": "vector", "rename": "vector_next"})
    again = Memory(tmp_path / "a", embedder=Renamed(), on_mismatch="reembed")
    assert again.search("CSV export semicolons", k=1, mode="vector")[0].mode == "vector"
    assert again.embedder_record() is not None and again._next_record() is None
    # A re-embedding toward a model nobody uses any more is dropped on open
    # with the model the vectors came from; nothing else changes.
    _built(tmp_path / "b")
    started = Memory(tmp_path / "b", embedder=Gated(), on_mismatch="background")
    gate = started.embedder
    assert isinstance(gate, Gated)
    started.search("anything", mode="vector")
    assert gate.waiting.wait(60)
    back = Memory(tmp_path / "b", embedder=HashEmbedder(64))
    top = back.search("CSV export semicolons", k=1, mode="vector")
    assert top[0].mode == "vector" and back._next_record() is None
    gate.go.set()
    job = started.reembedding
    assert job is not None
    with pytest.raises(ArgusError, match=r"re-embedding memory at .* failed"):
        job.wait(60)  # its column was taken away: it stops, and says so
    assert back.count("vector IS NULL") == 0 and len(back) == 40


@pytest.mark.slow  # a fresh interpreter imports lancedb, then is killed
def test_a_process_killed_mid_reembedding_leaves_a_memory_that_resumes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory"
    old = _built(path).embedder_record()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "reembed_worker.py"), str(path), "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        line = proc.stdout.readline() if ready else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=30)  # also closes the pipes
    assert line == "stalled\n", err[-3000:]
    assert proc.returncode == -signal.SIGKILL
    # Consistent: every memory there, old vectors intact and still recorded,
    # the three batches done kept apart in the new column.
    m = Memory(path, embedder=Renamed())
    assert len(m) == 40 and m.count("vector IS NULL") == 0
    assert m.embedder_record() == old
    assert m.count("vector_next IS NOT NULL") == 15
    with pytest.raises(EmbedderMismatchError, match="25 of its 40 memories"):
        m.search("anything", mode="vector")  # on_mismatch="error": no work
    # Resumed, not restarted: only the 25 left are embedded.
    emb = Renamed()
    again = Memory(path, embedder=emb, on_mismatch="reembed")
    top = again.search("flight bookings time out", k=1, mode="vector")
    assert top[0].mode == "vector" and "flight" in top[0].text
    assert emb.embedded == 25
    assert again.embedder_record() == {
        "name": "tests/renamed-hash",
        "version": "1",
        "dim": 64,
    }
    assert again._next_record() is None and again.count("vector IS NULL") == 0


def test_changing_the_embedder_mid_way_stops_the_job_without_mixing(
    tmp_path: Path, small_batches: None
) -> None:
    _built(tmp_path / "memory")
    gate = Gated()
    m = Memory(tmp_path / "memory", embedder=gate, on_mismatch="background")
    m.reembed(background=True)
    assert gate.waiting.wait(60)
    m.embedder = HashEmbedder(64)  # back to the model the vectors came from
    top = m.search("CSV export semicolons", k=1, mode="vector")
    assert (top[0].mode, top[0].note) == ("vector", None)  # old vectors, old model
    gate.go.set()
    job = m.reembedding
    assert job is not None
    with pytest.raises(ArgusError, match="failed"):
        job.wait(60)
    assert m._next_record() is None and m.embedder_record() == {
        "name": "argus_lab/hash",
        "version": "1",
        "dim": 64,
    }
    assert m.search("CSV export semicolons", k=1, mode="vector")[0].mode == "vector"


class Reversed(HashEmbedder):
    """Another model of the same size: HashEmbedder's vectors reversed."""

    name = "tests/reversed-hash"

    def __call__(self, texts: Sequence[str]) -> Any:
        return super().__call__(texts)[:, ::-1].copy()


def test_a_search_after_another_instance_reembedded_is_refused_not_nonsense(
    tmp_path: Path,
) -> None:
    # Instances hold what processes would: each checks the embedder once, at
    # its first search. When another re-embedded the memory, an instance went
    # on embedding queries with its own model against the other's vectors:
    # the same size, so no error, and the ranking was nonsense.
    a = _built(tmp_path / "memory")
    own = a.embedder_record()
    c = Memory(tmp_path / "memory", embedder=HashEmbedder(64), on_mismatch="reembed")
    query = "invoices throttle requests"
    before = {
        m: [h.id for h in a.search(query, k=3, mode=m)] for m in ("vector", "fts")
    }
    assert [h.id for h in c.search(query, k=3, mode="vector")] == before["vector"]
    b = Memory(tmp_path / "memory", embedder=Reversed(64), on_mismatch="reembed")
    assert len(b.search(query, k=3, mode="vector")) == 3  # re-embeds, swaps
    assert b.embedder_record() == {
        "name": "tests/reversed-hash",
        "version": "1",
        "dim": 64,
    }
    for mode in ("vector", "hybrid"):
        with pytest.raises(EmbedderMismatchError, match="tests/reversed-hash"):
            a.search(query, k=3, mode=mode)
    assert [h.id for h in a.search(query, k=3, mode="fts")] == before["fts"]
    # Told to follow (on_mismatch="reembed"), an instance re-embeds back to
    # its own model and answers in it, as before.
    assert [h.id for h in c.search(query, k=3, mode="vector")] == before["vector"]
    assert c.embedder_record() == own is not None
