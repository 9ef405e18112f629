"""Vectors for the memories written without one (by an instance with no embedder).

``_MemoryBackfill`` holds :meth:`Memory.backfill_vectors
<argus_lab.store.memory.Memory.backfill_vectors>` (a mixin of
:class:`~argus_lab.store.memory.Memory`), which a search runs by itself the
first time it needs vectors, and :func:`with_vectors`, which a re-embedding's
batches use too.

A batch of rows is read and embedded with no lock on the table, then written
holding the write lock (:mod:`argus_lab.store._memory_lock`): a backfill of 100k
memories takes minutes with MiniLM, and another process's writes (a notebook's,
``argus serve``'s) go on between its batches instead of waiting for all of it.
The write only fills rows whose text is still the one embedded and whose vector
is still null, so a row rewritten meanwhile keeps what its writer gave it (or
is embedded again by the next batch, with its new text).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.store._memory_lock import _Writing
from argus_lab.store._memory_reembed import NEXT, Progress

if TYPE_CHECKING:
    from argus_lab.store.embedding import _Embedding

__all__ = ["with_vectors"]

log = logging.getLogger("argus_lab")


def with_vectors(rows: Any, vectors: Any, column: str) -> Any:
    """The Arrow table ``rows`` with ``vectors`` (n x dim float32) appended as
    ``column``, fixed-size lists of the vectors' size."""
    from argus_lab.store._memory_index import _pa

    pa = _pa()
    dim = int(vectors.shape[1])
    col = pa.FixedSizeListArray.from_arrays(
        pa.array(vectors.ravel(), pa.float32()), dim
    )
    return rows.append_column(pa.field(column, pa.list_(pa.float32(), dim)), col)


class _MemoryBackfill(_Writing):
    """Memory's vector backfill (a mixin of :class:`~argus_lab.store.memory.Memory`)."""

    if TYPE_CHECKING:
        path: Path
        _lock: threading.RLock
        _embedding: _Embedding | None
        _vectors_checked: bool

        def _open(self) -> Any | None: ...
        def _dim(self, column: str = "vector") -> int | None: ...
        def _table_for(self, dim: int | None) -> Any: ...
        def _next_record(self) -> dict[str, Any] | None: ...
        def _ensure_space(self) -> None: ...

    def backfill_vectors(
        self, *, batch: int = 1024, progress: Progress | None = None
    ) -> int:
        """Embeds the memories written without a vector; returns how many.

        Search does this by itself the first time it needs vectors. A batch is
        embedded, then written holding the write lock (other processes write
        between batches) where the text is unchanged and the vector null.

        Args:
            batch: Memories embedded and written per step.
            progress: Called as ``progress(done, total)`` after each step.
        """
        emb = self._embedding
        if emb is None:
            return 0
        # Before the lock: a mismatch may re-embed here and wait for the
        # worker, which takes the lock for each batch.
        self._ensure_space()
        emb = self._embedding  # a bundled one kept may have replaced it
        if emb is None:
            return 0
        with self._lock:
            if self._open() is None:
                return 0
            if self._next_record() is not None:
                return 0  # the re-embedding fills its own column
            if self._dim() is None:
                with self._writing("add the vector column"):
                    self._table_for(int(emb.space()["dim"]))
            t: Any = self._open()
            total = t.count_rows("vector IS NULL")
            done = 0
            while done <= total:
                rows = (
                    t.search()
                    .where("vector IS NULL")
                    .select(["id", "text"])
                    .limit(batch)
                    .to_arrow()
                )
                if not rows.num_rows:
                    break
                if not self._backfill_batch(rows, emb):
                    return done  # a re-embedding started meanwhile
                done += rows.num_rows
                if progress is not None:
                    progress(done, total)
                if total > 10 * batch:
                    log.info("memory at %s: embedded %d of %d", self.path, done, total)
            self._vectors_checked = True
        return done

    def _backfill_batch(self, rows: Any, emb: _Embedding) -> bool:
        """Writes the vectors of ``rows`` (id, text); False if a re-embedding
        took the table over meanwhile (its own column gets them)."""
        vectors = emb.docs(rows.column("text").to_pylist())
        data = with_vectors(rows, vectors, "vector")
        with self._writing("embed memories written without a vector"):
            # A re-embedding started meanwhile (another process): its column
            # gets the vectors; checked before the size, which is its model's.
            t = self._open()
            if t is None or NEXT in t.schema.names:
                return False
            # Refuses another size than the column's, naming both.
            t = self._table_for(int(vectors.shape[1]))
            # Not over a row rewritten meanwhile: its writer gave it a vector,
            # or left it null for the next batch to embed its new text.
            t.merge_insert("id").when_matched_update_all(
                where="target.text = source.text AND target.vector IS NULL"
            ).execute(data)
        return True
