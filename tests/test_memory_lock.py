"""The memory's write lock within one process: never kept after a failure,
never held while embedding, never waited on by the thread holding it.

``test_memory_writers.py`` races real processes; these are the cases a
reviewer found by reading the lock's callers (fifth session), each of which
failed before its fix: a disk-full holder record kept the lock for good, an
ingest or an index build held it for the whole embedding, a re-embedding
started under it waited for a worker that needs it (a hang), and a backfill
that met another writer's re-embedding to another size raised instead of
leaving the rows to it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from argus_lab.store import _memory_lock
from argus_lab.store.memory import HashEmbedder, Memory
from tests.reembed_worker import Renamed

WAIT = 60.0


def _lock_held(folder: Path) -> bool:
    """Whether anyone holds ``folder``'s write lock (asked as another process
    would: through an open file description of its own)."""
    path = folder / _memory_lock.LOCK_FILE
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # releases it if we took it
    return False


class Probe(HashEmbedder):
    """Notes, at each embedding, how many texts and whether the lock was held."""

    def __init__(self, folder: Path) -> None:
        super().__init__(64)
        self.folder = folder
        self.seen: list[tuple[int, bool]] = []

    def __call__(self, texts: Sequence[str]) -> Any:
        self.seen.append((len(texts), _lock_held(self.folder)))
        return super().__call__(texts)


def test_a_failed_holder_record_neither_fails_the_write_nor_keeps_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = Memory(tmp_path, embedder=None)
    m.add("first")

    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as mp:
        mp.setattr(_memory_lock.os, "pwrite", full)
        m.add("second: the disk was full for the lock's holder record")
    assert not _lock_held(tmp_path)
    monkeypatch.setattr(_memory_lock, "TIMEOUT", 0.5)  # a kept lock: fails fast
    Memory(tmp_path, embedder=None).add("third, from another instance")
    assert m.count() == 3


def test_ingest_and_index_builds_embed_before_taking_the_lock(tmp_path: Path) -> None:
    m = Memory(tmp_path / "a", embedder=Probe(tmp_path / "a"))
    m.add("a first memory")
    probe = m.embedder
    assert isinstance(probe, Probe)
    m.ingest("word " * 4000, source="big", chunk_size=200, overlap=0)
    assert probe.seen[-1][0] > 50 and not any(held for _, held in probe.seen)
    # Rows another instance wrote without vectors: embedded by the build.
    Memory(tmp_path / "a", embedder=None).add_many(
        [{"text": f"memory number {i}"} for i in range(300)]
    )
    probe.seen.clear()
    m.create_vector_index()
    assert sum(n for n, _ in probe.seen) == 300
    assert not any(held for _, held in probe.seen)


@pytest.mark.parametrize("call", ["ingest", "backfill_vectors", "optimize"])
def test_a_reembedding_started_by_a_write_does_not_wait_on_itself(
    tmp_path: Path, call: str
) -> None:
    Memory(tmp_path, embedder=HashEmbedder(64)).add_many(
        [{"text": f"note {i}"} for i in range(20)]
    )
    m = Memory(tmp_path, embedder=Renamed(64), on_mismatch="reembed")
    calls: dict[str, Callable[[], object]] = {
        "ingest": lambda: m.ingest("some document text\n" * 50, source="doc"),
        "backfill_vectors": m.backfill_vectors,
        "optimize": m.optimize,
    }
    errors: list[BaseException] = []

    def work() -> None:
        try:
            calls[call]()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=work, daemon=True)  # a hang fails, not blocks
    t.start()
    t.join(WAIT)
    assert not t.is_alive(), f"{call} waited on its own re-embedding"
    assert errors == []
    assert m.embedder_record() == {
        "name": "tests/renamed-hash",
        "version": "1",
        "dim": 64,
    }


class Gated(HashEmbedder):
    """Another model, of another size, whose worker-thread embedding waits."""

    name = "tests/other-model"

    def __init__(self) -> None:
        super().__init__(128)
        self.gate = threading.Event()

    def __call__(self, texts: Sequence[str]) -> Any:
        if threading.current_thread() is not threading.main_thread():
            assert self.gate.wait(WAIT)
        return super().__call__(texts)


def test_a_backfill_meeting_a_reembedding_to_another_size_leaves_the_rows_to_it(
    tmp_path: Path,
) -> None:
    m = Memory(tmp_path, embedder=HashEmbedder(64))
    m.add("has a vector")
    Memory(tmp_path, embedder=None).add_many(
        [{"text": f"no vector {i}"} for i in range(20)]
    )
    other = Gated()
    writer = Memory(tmp_path, embedder=other, on_mismatch="background")
    started: list[bool] = []

    def progress(done: int, total: int) -> None:
        if not started:  # after the first batch: another writer re-embeds
            writer.reembed(background=True)
            started.append(True)

    try:
        done = m.backfill_vectors(batch=5, progress=progress)
    finally:
        other.gate.set()
        job = writer.reembedding
        assert job is not None and job.wait(WAIT)
    assert done == 5  # then stopped: the re-embedding fills its own column
    assert writer.embedder_record() == {
        "name": "tests/other-model",
        "version": "1",
        "dim": 128,
    }
    assert writer.count("vector IS NULL") == 0
