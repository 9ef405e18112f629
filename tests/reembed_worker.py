"""A process that re-embeds a memory in the background and is killed mid-way.

Run as ``python tests/reembed_worker.py MEMORY STALL``: it opens MEMORY with
:class:`Stalling` and ``on_mismatch="background"``, so its first search starts a
re-embedding (batches of 5) on a worker thread; after STALL batches have been
embedded, the next embedding prints ``stalled`` and blocks for good, for the
test to SIGKILL the process at a known point (STALL batches committed).

test_memory_reembed imports :class:`Renamed` from here to reopen the memory with
the same embedder in its own process.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

from argus_lab.store.embedding import HashEmbedder


class Renamed(HashEmbedder):
    """HashEmbedder's vectors under another model name: a 'new model' of the
    same size, so only the recorded name tells the two spaces apart."""

    name = "tests/renamed-hash"

    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim)
        self.embedded = 0
        """Texts embedded off the main thread (by a re-embedding worker)."""

    def __call__(self, texts: Sequence[str]) -> Any:
        if threading.current_thread() is not threading.main_thread():
            self.embedded += len(texts)
        return super().__call__(texts)


class Stalling(Renamed):
    """Blocks forever in the worker's embedding after ``stall`` batches."""

    def __init__(self, stall: int) -> None:
        super().__init__()
        self.stall = stall
        self.batches = 0

    def __call__(self, texts: Sequence[str]) -> Any:
        if threading.current_thread() is not threading.main_thread():
            self.batches += 1
            if self.batches > self.stall:
                print("stalled", flush=True)
                threading.Event().wait()
        return super().__call__(texts)


def main() -> None:
    from argus_lab.store import _memory_reembed
    from argus_lab.store.memory import Memory

    path, stall = sys.argv[1], int(sys.argv[2])
    _memory_reembed.BATCH = 5
    m = Memory(path, embedder=Stalling(stall), on_mismatch="background")
    hits = m.search("anything at all", mode="vector")
    assert all(h.mode == "fts" for h in hits)
    job = m.reembedding
    assert job is not None
    job.wait()  # never returns: the test kills this process


if __name__ == "__main__":
    main()
