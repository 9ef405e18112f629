"""Memory on LanceDB: full-text, vector and hybrid recall, every hit with provenance.

One LanceDB table, ``memories``, in ``<workspace>/memory/``. A row is a memory:
its stable ``id``, ``kind`` (result | note | document | lesson), ``text``, where it
came from (``session_id``, ``task_id``, ``seq`` of the event that wrote it),
``metadata`` (canonical JSON text), ``created_at`` (epoch seconds) and, when an
embedding function is configured, a ``vector``.

- **Upsert by id.** Writes are one ``merge_insert`` on ``id``, so writing the same
  memory twice (a retried or resumed task) leaves one row. Automatic memories get
  ids derived from (session, task, kind): see :func:`memory_id`.
- **Full-text** is BM25 on LanceDB's native FTS index over ``text`` (English
  stemming, stop words, ascii folding). New rows are searchable at once: LanceDB
  scans rows the index does not cover yet and merges them in. Every
  ``optimize_every`` writes (or ``optimize_rows`` rows) :meth:`Memory.optimize`
  folds them into the indexes, compacts small fragments and deletes table
  versions older than 10 minutes, so that scan stays short and the folder small;
  it takes ~0.5 s at 10k rows and ~2-5 s at 100k (see BENCHMARKS.md).
- **Vector** search uses an embedder: by default
  :class:`~argus_lab.store.memory_minilm.MiniLMEmbedder` (all-MiniLM-L6-v2,
  int8 ONNX from a wheel, sha256 pinned), loaded offline on first use (never at
  import); ``"wordllama"`` (static vectors: ~100x faster to write, weaker on
  paraphrase); or any callable ``list[str] -> list[list[float]]`` (see
  :class:`~argus_lab.store.embedding.Embedder`), a LanceDB embedding-registry
  function, :class:`HashEmbedder` (lexical, for tests), or None (full-text
  only). The vector column records which embedder (name, version, dim) made it
  (kept under "default" if bundled); another is refused naming both, or re-embeds
  everything with ``on_mismatch="reembed"`` (at once) or ``"background"`` (on a
  worker thread, searching by full text meanwhile; resumable after a kill: see
  :mod:`argus_lab.store._memory_reembed`): spaces are never mixed. Distances
  are cosine. From ``vector_index_min_rows`` rows a 4-bit IVF_RQ (RaBitQ)
  index is built (~3 s at 100k x 384), queried with no re-ranking step (see
  :data:`~argus_lab.store._memory_index._BITS`).
- **Hybrid** fuses the full-text and vector rankings by weighted reciprocal
  rank: ``score = FTS_WEIGHT / (RRF_K + fts_rank) + VECTOR_WEIGHT / (RRF_K +
  vector_rank)`` (see :mod:`argus_lab.store._memory_query` for the weights and
  why). ``mode="auto"``, the default, is hybrid when there is an embedder and
  full-text otherwise; an explicit ``"hybrid"`` with no embedder falls back to
  full-text and says so in each hit's ``note``.

LanceDB, pyarrow and numpy are imported on first use, not with this module.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from argus_lab.store._memory_index import Progress, _MemoryIndex
from argus_lab.store._memory_ingest import _MemoryIngest
from argus_lab.store._memory_lock import WriteLock
from argus_lab.store._memory_query import _SELECT, _filter_errors, _MemoryQuery, _sql
from argus_lab.store._memory_records import (
    KINDS,
    HitMode,
    MemoryHit,
    MemoryKind,
    MemoryRecord,
    OnMismatch,
    SearchMode,
    check_record,
    masked_record,
)
from argus_lab.store._memory_reembed import ReembedJob, _MemoryReembed
from argus_lab.store.embedding import (
    Embedder,
    EmbedderMismatchError,
    HashEmbedder,
    _Embedding,
)
from argus_lab.store.memory_embedders import (
    LanceDBEmbedder,
    WordLlamaEmbedder,
    default_embedder,
)
from argus_lab.store.memory_minilm import MiniLMEmbedder
from argus_lab.store.memory_provenance import (
    memory_id,
    remember_lesson,
    remember_result,
)
from argus_lab.store.space import full_error, is_disk_full

__all__ = [
    "KINDS",
    "Embedder",
    "EmbedderMismatchError",
    "HashEmbedder",
    "LanceDBEmbedder",
    "Memory",
    "MemoryHit",
    "MemoryKind",
    "MemoryRecord",
    "MiniLMEmbedder",
    "ReembedJob",
    "SearchMode",
    "WordLlamaEmbedder",
    "default_embedder",
    "memory_id",
    "open_memory",
    "remember_lesson",
    "remember_result",
]

log = logging.getLogger("argus_lab")

_PARTITION_ROWS = 32_768
"""From this many rows the ANN index gets real IVF partitions (LanceDB's default)."""


class Memory(_MemoryQuery, _MemoryIndex, _MemoryReembed, _MemoryIngest):
    """Long-term memory of a workspace (or any folder), on LanceDB.

    Most code gets one with ``ws.memory`` (or :func:`open_memory`), which shares
    one instance per folder in a process. Writes take turns, across processes
    too (:mod:`~argus_lab.store._memory_lock`); searches run concurrently.

    Args:
        path: The folder holding the LanceDB database (created if missing).
        embedder: For vector and hybrid search: "default" (MiniLM, loaded on
            first use; a memory built by WordLlama keeps it), "minilm",
            "wordllama", any :class:`Embedder`, a LanceDB function, or None.
        on_mismatch: When the stored vectors were made by another embedder:
            "error" (refuse, naming both), "reembed" (recompute them all at the
            first use, which waits for it) or "background" (recompute them on a
            worker thread, :attr:`reembedding`; searches fall back to full text
            until it is done). Either resumes an interrupted re-embedding.
        progress: Called as ``progress(done, total)`` while re-embedding (from
            the worker thread in the background).
        optimize_every: Writes after which :meth:`optimize` runs by itself.
        optimize_rows: Rows written after which :meth:`optimize` runs by itself.
        vector_index_min_rows: Build the ANN index once this many rows exist.
        refine_factor: ANN candidates re-ranked on the full vectors, per hit
            wanted (0: none): higher is more accurate and slower. Default: none
            on the 4-bit index, 10 on a 1-bit one (see BENCHMARKS.md).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        embedder: Embedder | Literal["default"] | Any | None = "default",
        on_mismatch: OnMismatch = "error",
        progress: Progress | None = None,
        optimize_every: int = 64,
        optimize_rows: int = 4096,
        vector_index_min_rows: int = 4096,
        refine_factor: int | None = None,
    ) -> None:
        if on_mismatch not in ("error", "reembed", "background"):
            raise ValueError(
                "on_mismatch must be 'error', 'reembed' or 'background', got "
                f"{on_mismatch!r}"
            )
        if refine_factor is not None and (
            isinstance(refine_factor, bool)
            or not isinstance(refine_factor, int)
            or refine_factor < 0
        ):
            raise ValueError(
                f"refine_factor must be an int >= 0 or None, got {refine_factor!r}"
            )
        self.path = Path(path).expanduser().resolve()
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(
                f"memory path {self.path} is a file, not a folder; give a folder "
                "(a workspace keeps its memory in <workspace>/memory)"
            )
        self.on_mismatch: OnMismatch = on_mismatch
        self.progress = progress
        self.optimize_every = optimize_every
        self.optimize_rows = optimize_rows
        self.vector_index_min_rows = vector_index_min_rows
        self.refine_factor = refine_factor
        self._lock = threading.RLock()
        self._writer = WriteLock(self.path, self._lock)  # and other processes
        self._db: Any = None
        self._table: Any = None
        self._async_table: Any = None  # the same table on LanceDB's async API
        self._embedding: _Embedding | None = None
        self._vectors_checked = False
        self._space_ok = False
        self._vector_index: list[str] | None = None  # names, once read
        self._pending_writes = 0
        self._pending_rows = 0
        self._job: ReembedJob | None = None
        self._fallback_warned = False
        self.embedder = embedder

    def __repr__(self) -> str:
        return f"Memory({str(self.path)!r}, embedder={self.embedder!r})"

    @property
    def embedder(self) -> Embedder | Any | None:
        """The embedding function; setting it enables vector and hybrid search."""
        return self._embedding.fn if self._embedding else None

    @embedder.setter
    def embedder(self, fn: Embedder | Literal["default"] | Any | None) -> None:
        self._embedding = None if fn is None else _Embedding(fn)
        self._vectors_checked = self._space_ok = False

    # -- writing -------------------------------------------------------------

    def add(
        self,
        text: str,
        *,
        id: str | None = None,
        kind: MemoryKind = "note",
        session_id: str | None = None,
        task_id: str | None = None,
        seq: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Writes one memory, replacing any with the same id; returns its id.

        Args:
            text: What to remember.
            id: Stable id; default from :func:`memory_id`.
            kind: result, note, document or lesson.
            session_id: Provenance: the session that wrote it.
            task_id: Provenance: the task that wrote it.
            seq: Provenance: the seq of the event that wrote it.
            metadata: JSON-able details, filterable in :meth:`search`.
        """
        if not isinstance(text, str | bytes):
            raise TypeError(f"memory.add takes text, got {type(text).__name__}")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise TypeError(
                f"metadata must be a dict of JSON values, got {type(metadata).__name__}"
            )
        rec: dict[str, Any] = {"text": text, "id": id, "kind": kind, "seq": seq}
        rec |= {"session_id": session_id, "task_id": task_id}
        rec["metadata"] = dict(metadata or {})
        return self.add_many([rec])[0]

    def add_many(
        self, records: Iterable[Mapping[str, Any] | MemoryRecord]
    ) -> list[str]:
        """Writes memories in one transaction (upsert by id); returns their ids.

        Args:
            records: Dicts with the keys of :meth:`add` (``text`` required) or
                MemoryRecords. Within one call the last record of an id wins.

        Raises:
            TypeError: ``records`` is not a list of dicts (or MemoryRecords).
            ValueError: a record has an unknown key or a bad value, text over
                ``MAX_TEXT`` characters (use :meth:`ingest`), or metadata that
                is not JSON (NaN included); nothing is written.
        """
        recs, vectors = self._prepare(records)
        if recs:
            self._put(recs, vectors)
        return [r.id for r in recs]

    def _prepare(
        self, records: Iterable[Mapping[str, Any] | MemoryRecord]
    ) -> tuple[list[MemoryRecord], Any]:
        """Validated records with their ids, and their vectors (embedded now,
        outside the write lock; a mismatch is settled first)."""
        from argus_lab.redact import Redactor, known_secrets

        now = time.time()
        by_id: dict[str, MemoryRecord] = {}
        if isinstance(records, str | bytes | Mapping | MemoryRecord):
            raise TypeError(
                f"add_many takes a list of records (dicts with 'text'), got a "
                f"{type(records).__name__}; for one text, use memory.add(text)"
            )
        # Memory lies in the workspace (invariant 7): what a user adds or
        # ingests directly is masked like what the memory tool writes, against
        # the env's secrets and every secret a session of this process knows.
        red = Redactor(known_secrets())
        for i, r in enumerate(records):
            rec = masked_record(check_record(r, i), red)
            rid = rec.id or memory_id(
                rec.kind, session_id=rec.session_id, task_id=rec.task_id, text=rec.text
            )
            by_id[rid] = rec.model_copy(
                update={"id": rid, "created_at": rec.created_at or now}
            )
        recs = list(by_id.values())
        if not recs:
            return [], None
        self._ensure_space()
        vectors = (
            self._embedding.docs([r.text for r in recs]) if self._embedding else None
        )
        return recs, vectors

    def _put(self, recs: list[MemoryRecord], vectors: Any) -> None:
        """Writes prepared memories (``_prepare``), holding the write lock only
        for the commit: embedding (minutes for a big document) is done."""
        with self._writing(f"write {len(recs)} memories"):
            t = self._table_for(None if vectors is None else int(vectors.shape[1]))
            data = self._arrow(recs, vectors)
            merge = t.merge_insert("id").when_matched_update_all()
            # Rows of an instance without embedder carry null vectors on purpose
            # (backfilled later); sizes were checked above.
            try:
                merge.when_not_matched_insert_all().execute(data, on_bad_vectors="null")
            except Exception as e:
                if not is_disk_full(e):
                    raise
                raise full_error(
                    Path(self.path),
                    e,
                    session_id=recs[0].session_id,
                    task_id=recs[0].task_id,
                    what=f"writing {len(recs)} memory record(s) to",
                ) from None
            self._pending_writes += 1
            self._pending_rows += len(recs)
            if (
                self._pending_writes >= self.optimize_every
                or self._pending_rows >= self.optimize_rows
            ):
                self.optimize()

    # -- reading -------------------------------------------------------------

    def __len__(self) -> int:
        return self.count()

    def count(self, where: str | None = None) -> int:
        """How many memories there are (matching a SQL filter, if given)."""
        t = self._open()
        with _filter_errors(where):
            return 0 if t is None else int(t.count_rows(where))

    def _ids(self, where: str) -> set[str]:
        """The ids of the memories matching a SQL filter."""
        t = self._open()
        if t is None:
            return set()
        n = int(t.count_rows(where))
        if not n:
            return set()
        rows = t.search().where(where).select(["id"]).limit(n).to_arrow()
        return set(rows.column("id").to_pylist())

    def get(self, id: str) -> MemoryRecord | None:
        """The memory with this id, or None."""
        t = self._open()
        if t is None:
            return None
        rows = t.search().where(f"id = {_sql(id)}").select(_SELECT).limit(1).to_list()
        return self._record(rows[0]) if rows else None

    @staticmethod
    def _record(row: Mapping[str, Any]) -> MemoryRecord:
        d = {k: row.get(k) for k in _SELECT}
        d["metadata"] = json.loads(d["metadata"] or "{}")
        return MemoryRecord.model_validate(d)

    def _hits(self, rows: list[dict[str, Any]], mode: HitMode) -> list[MemoryHit]:
        out = []
        for rank, row in enumerate(rows, 1):
            d = {k: row[k] for k in _SELECT}
            d["metadata"] = json.loads(d["metadata"] or "{}")
            if mode == "fts":
                d["score"] = d["fts_score"] = float(row["_score"])
                d["fts_rank"] = rank
            else:
                d["distance"] = float(row["_distance"])
                d["score"] = 1.0 - d["distance"]
                d["vector_rank"] = rank
            out.append(MemoryHit.model_validate(d | {"mode": mode}))
        return out


_OPEN: dict[Path, Memory] = {}
_OPEN_LOCK = threading.Lock()


def open_memory(path: str | Path, *, embedder: Embedder | Any | None = None) -> Memory:
    """The process-wide Memory of a folder (one instance, one write lock, per path).

    Args:
        path: The memory folder (``<workspace>/memory``).
        embedder: If given, set as the instance's embedder; else a new instance
            gets the default one (set ``memory.embedder = None`` for full text).
    """
    key = Path(path).expanduser().resolve()
    with _OPEN_LOCK:
        mem = _OPEN.get(key)
        if mem is None:
            mem = _OPEN[key] = Memory(key)
    if embedder is not None and mem.embedder is not embedder:
        mem.embedder = embedder
    return mem
