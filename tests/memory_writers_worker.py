"""Processes that write (or read) one memory at the same time, for
test_memory_writers. Started with multiprocessing's spawn context, so each is a
fresh interpreter with its own LanceDB connection, as two notebooks are.

A role in :data:`ROLES` opens the memory, waits on a barrier shared by all the
processes of a test (so their writes start together), then writes (or reads).
A role in :data:`EACH` does one operation that races in a commit or two (the
first write, an index build, a re-embedding) to each of the memories
``<path>/0`` ... ``<path>/{EACH_N - 1}``, all processes together each time, so
the race is run several times. Each reports ``(who, "ok", detail)`` or ``(who,
"error", "<type>: <message>")`` on a queue. The roles in :data:`UNTIL_STOPPED`
(reading, optimizing) go on until the others are done.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from typing import Any

from argus_lab.store.embedding import HashEmbedder

ROUNDS = 4
ROWS = 20
SEED = 200
"""Memories written before the processes start (ids ``seed-000``...)."""
EACH_N = 5
NEVER = 10**9  # optimize_every / vector_index_min_rows: only explicit calls


class Renamed(HashEmbedder):
    """HashEmbedder's vectors under another name: a 'new model' to re-embed with."""

    name = "tests/renamed-hash"


class Gated(HashEmbedder):
    """Signals ``embedding`` at its first batch (not a one-text probe), then
    waits for ``go``."""

    def __init__(self, embedding: Any, go: Any) -> None:
        super().__init__()
        self.embedding, self.go = embedding, go

    def __call__(self, texts: Sequence[str]) -> Any:
        if len(texts) > 1 and not self.go.is_set():
            self.embedding.set()
            if not self.go.wait(60):
                raise TimeoutError("the test never let the backfill go on")
        return super().__call__(texts)


def seed_rows(n: int = SEED) -> list[dict[str, Any]]:
    return [
        {"id": f"seed-{j:03d}", "text": f"seed memory number {j}"} for j in range(n)
    ]


def tag(who: int, r: int, j: int) -> str:
    """A word only the memory ``w{who}-{r}-{j}`` holds (numbers alone would
    be the same bag of words in another order, for full text and HashEmbedder)."""
    return f"w{who}x{r}x{j:02d}"


def rows(who: int, r: int) -> list[dict[str, Any]]:
    return [
        {"id": f"w{who}-{r}-{j:02d}", "text": f"{tag(who, r, j)} by writer {who}"}
        for j in range(ROWS)
    ]


def deleted(r: int) -> str:
    """The seed memory ``delete_add`` deletes in its round ``r``."""
    return f"seed-{r:03d}"


def _memory(folder: str, name: str) -> Any:
    from argus_lab.store.memory import Memory

    m = Memory(
        folder,
        embedder=Renamed() if name == "reembed" else HashEmbedder(),
        on_mismatch="reembed" if name == "reembed" else "error",
        optimize_every=NEVER,
        optimize_rows=NEVER,
        vector_index_min_rows=NEVER,
    )
    m.count()  # connected before the start: the writes start together
    return m


def role(path: str, name: str, who: int, start: Any, out: Any, stop: Any) -> None:
    """Runs role ``name`` as process ``who`` (see the module docstring)."""
    try:
        if name in EACH:
            detail = []
            for k in range(EACH_N):
                m = _memory(f"{path}/{k}", name)
                start.wait(60)
                detail.append(EACH[name](m, who, k))
        else:
            m = _memory(path, name)
            start.wait(60)
            detail = ROLES[name](m, who, stop)
        out.put((who, "ok", detail))
    except BaseException as e:
        start.abort()  # the others stop waiting for this one at once
        out.put((who, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def _add_and_optimize(m: Any, who: int, stop: Any) -> Any:
    for r in range(ROUNDS):
        m.add_many(rows(who, r))
        m.optimize()


def _delete_and_add(m: Any, who: int, stop: Any) -> Any:
    for r in range(2 * ROUNDS):
        m.add_many(rows(who, r))
        m.delete(f"id = {deleted(r)!r}")


def _optimize_until_stopped(m: Any, who: int, stop: Any) -> Any:
    done = 0
    while not stop.is_set() or done == 0:
        m.optimize()
        done += 1
    return done


def _read(m: Any, who: int, stop: Any) -> Any:
    """Reads until the writers are done: counts never below what delete_add
    leaves, a seed memory always found by id and by full text; returns how
    many rounds of reads it made."""
    reads = 0
    while not stop.is_set() or reads == 0:
        n = m.count()
        assert n >= SEED - 2 * ROUNDS, f"count fell to {n}"
        got = m.get("seed-199")
        assert got is not None and got.text == "seed memory number 199"
        hits = m.search("seed memory number 199", mode="fts", k=1)
        assert [h.id for h in hits] == ["seed-199"]
        reads += 1
    return reads


def _reembed(m: Any, who: int, k: int) -> Any:
    # The first vector search finds the Renamed mismatch and re-embeds.
    return [h.id for h in m.search("seed memory number 7", mode="vector", k=1)]


ROLES: dict[str, Callable[[Any, int, Any], Any]] = {
    "add_optimize": _add_and_optimize,
    "delete_add": _delete_and_add,
    "optimize": _optimize_until_stopped,
    "read": _read,
}
EACH: dict[str, Callable[[Any, int, int], Any]] = {
    "write": lambda m, who, k: len(m.add_many(rows(who, k))),
    "index": lambda m, who, k: m.create_vector_index(),
    "reembed": _reembed,
}
UNTIL_STOPPED = frozenset({"read", "optimize"})


def backfill(path: str, embedding: Any, go: Any, out: Any) -> None:
    """Backfills the vectors of a memory written without an embedder, pausing
    in its first embedding until the test has rewritten some of its rows."""
    from argus_lab.store.memory import Memory

    try:
        m = Memory(path, embedder=Gated(embedding, go), optimize_every=NEVER)
        out.put((0, "ok", m.backfill_vectors(batch=64)))
    except BaseException as e:
        out.put((0, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def hold(path: str, conn: Any, release: Any) -> None:
    """Holds the memory's write lock (as a long optimize would) until released;
    says "holding" on ``conn`` once it has it."""
    from argus_lab.store.memory import Memory

    m = Memory(path, embedder=None)
    with m._writing("optimize"):
        conn.send("holding")
        release.wait(60)
