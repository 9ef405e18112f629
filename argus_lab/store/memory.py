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
- **Vector** search needs an embedding function: any callable
  ``list[str] -> list[list[float]]`` or a LanceDB embedding-registry function.
  None by default; :class:`HashEmbedder` is a small deterministic offline one.
  Distances are cosine. From ``vector_index_min_rows`` rows an IVF_RQ (RaBitQ)
  ANN index is built (about 2 s at 100k x 384) and queried with a refine step
  that re-ranks 10x the candidates on the full vectors (recall@10 ~0.9).
- **Hybrid** fuses the full-text and vector rankings by reciprocal rank
  (``sum 1 / (60 + rank)``). With no embedding function it falls back to
  full-text and says so in each hit's ``note``.

LanceDB, pyarrow and numpy are imported on first use, not with this module.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from argus_lab.errors import ArgusError
from argus_lab.store.chunking import Format, document_records

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "KINDS",
    "Embedder",
    "HashEmbedder",
    "Memory",
    "MemoryHit",
    "MemoryKind",
    "MemoryRecord",
    "SearchMode",
    "memory_id",
    "open_memory",
    "remember_lesson",
    "remember_result",
]

log = logging.getLogger("argus_lab")

MemoryKind = Literal["result", "note", "document", "lesson"]
KINDS: tuple[str, ...] = ("result", "note", "document", "lesson")
SearchMode = Literal["hybrid", "fts", "vector"]
Embedder = Callable[[list[str]], "Sequence[Sequence[float]] | npt.NDArray[Any]"]
"""A function embedding a batch of texts: one vector per text, all one size
(a list of lists or a 2-d numpy array)."""

TABLE = "memories"
RRF_K = 60
"""The constant of reciprocal rank fusion (the usual 60 of Cormack et al.)."""
_COLUMNS = ("id", "kind", "text", "session_id", "task_id", "seq", "metadata")
_SELECT = [*_COLUMNS, "created_at"]
_PARTITION_ROWS = 32_768
"""From this many rows the ANN index gets real IVF partitions (LanceDB's default)."""
_SMALL_INDEX = "vector_onepart_idx"
_NO_EMBEDDER = (
    "hybrid search fell back to full-text: no embedding function is configured "
    "(pass embedder= to Memory, or set memory.embedder)"
)


class MemoryRecord(BaseModel):
    """One memory as stored."""

    model_config = ConfigDict(extra="forbid")

    id: str = ""
    """Stable id; writing the same id again replaces the memory (upsert)."""
    kind: MemoryKind = "note"
    """result (a task's output), note, document (an ingested chunk) or lesson
    (what a failed task taught)."""
    text: str
    """What is remembered; what full-text and vector search look at."""
    session_id: str | None = None
    """Provenance: the session that wrote it."""
    task_id: str | None = None
    """Provenance: the task that wrote it."""
    seq: int | None = None
    """Provenance: the seq of the event that wrote it (``session.events()``)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free JSON; filterable with ``search(metadata={...})``."""
    created_at: float = 0.0
    """When it was (last) written, epoch seconds."""


class MemoryHit(MemoryRecord):
    """A memory found by :meth:`Memory.search`, with its scores."""

    score: float
    """Higher is better: BM25 (fts), cosine similarity (vector) or the reciprocal
    rank fusion score (hybrid)."""
    mode: SearchMode
    """The search that produced the hit ("fts" when hybrid fell back)."""
    fts_score: float | None = None
    """BM25 score, when full-text search found it."""
    distance: float | None = None
    """Cosine distance to the query, when vector search found it."""
    fts_rank: int | None = None
    """1-based rank in the full-text results."""
    vector_rank: int | None = None
    """1-based rank in the vector results."""
    note: str | None = None
    """Why the search was not what was asked for (e.g. hybrid without embedder)."""

    @property
    def provenance(self) -> dict[str, Any]:
        """Where the memory came from: session_id, task_id and event seq."""
        return {"session_id": self.session_id, "task_id": self.task_id, "seq": self.seq}


def memory_id(
    kind: str,
    *,
    session_id: str | None = None,
    task_id: str | None = None,
    text: str | None = None,
) -> str:
    """A stable id: ``<kind>-<hash>``.

    A result or lesson of a task is keyed by (session, task, kind) alone, so a
    retried or resumed task overwrites its memory instead of adding one. Any
    other memory is keyed by its text as well: the same note written twice is
    one memory, two different notes are two.
    """
    parts = [kind, session_id or "", task_id or ""]
    if not (kind in ("result", "lesson") and session_id and task_id):
        parts.append(text or "")
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:24]
    return f"{kind}-{digest}"


def _pa() -> Any:
    # pyarrow ships no type stubs; it is used through Any.
    return importlib.import_module("pyarrow")


def _canonical(meta: Mapping[str, Any]) -> str:
    return json.dumps(
        meta, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )


def _sql(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _in(column: str, values: str | Sequence[str]) -> str:
    vals = [values] if isinstance(values, str) else list(values)
    return f"{column} IN ({', '.join(_sql(v) for v in vals)})"


def _like_meta(key: str, value: Any) -> str:
    # A superset prefilter on the canonical JSON; exact matching happens after.
    frag = _canonical({key: value})[1:-1]
    pattern = "%".join(frag.split("\\")).replace("'", "''")
    return f"metadata LIKE '%{pattern}%'"


class HashEmbedder:
    """A deterministic, offline embedder: hashed character trigrams and words.

    Each trigram of ``<word>`` adds +/-1 and each whole word +/-0.5 to a slot
    chosen by blake2b (stable across processes, unlike ``hash``); the vector is
    L2-normalised. Trigrams dominate so that a misspelt word still lands near
    the right one. It is lexical, not semantic — it matches spelling variants,
    inflections and typos, not synonyms — but needs no model download, which
    makes it right for tests, benchmarks and offline demos.

    Args:
        dim: Vector size (fewer slots, more collisions: keep it >= 256).
    """

    def __init__(self, dim: int = 512) -> None:
        if dim < 8:
            raise ValueError(f"dim must be >= 8, got {dim}")
        self.dim = dim
        self._slots: dict[str, tuple[int, float]] = {}

    def __repr__(self) -> str:
        return f"HashEmbedder(dim={self.dim})"

    def _slot(self, feature: str) -> tuple[int, float]:
        s = self._slots.get(feature)
        if s is None:
            h = int.from_bytes(hashlib.blake2b(feature.encode()).digest()[:8], "little")
            s = (h % self.dim, 1.0 if (h >> 40) & 1 else -1.0)
            if len(self._slots) < 1_000_000:
                self._slots[feature] = s
        return s

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        for row, text in enumerate(texts):
            idx: list[int] = []
            weights: list[float] = []
            for word in re.findall(r"\w+", text.lower()):
                j, sign = self._slot("w:" + word)
                idx.append(j)
                weights.append(0.5 * sign)
                padded = f"<{word}>"
                for k in range(len(padded) - 2):
                    j, sign = self._slot(padded[k : k + 3])
                    idx.append(j)
                    weights.append(sign)
            if idx:
                out[row] = np.bincount(idx, weights=weights, minlength=self.dim)
            if not out[row].any():
                out[row, 0] = 1.0  # cosine needs a non-zero vector
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out.astype(np.float32)


class _Embedding:
    """Adapts a callable or a LanceDB embedding function to docs/query calls."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.registry = hasattr(fn, "compute_source_embeddings")
        if not (self.registry or callable(fn)):
            raise TypeError(
                "embedder must be a callable list[str] -> list[list[float]] or a "
                f"LanceDB embedding function, got {type(fn).__name__}"
            )

    def docs(self, texts: list[str]) -> Any:
        out = (
            self.fn.compute_source_embeddings(texts)
            if self.registry
            else self.fn(texts)
        )
        return self._matrix(out, len(texts))

    def query(self, text: str) -> Any:
        if self.registry:
            out = self.fn.compute_query_embeddings(text)
        else:
            out = self.fn([text])
        return self._matrix(out, 1)[0]

    def _matrix(self, out: Any, n: int) -> Any:
        import numpy as np

        try:
            m = np.asarray(out, dtype=np.float32)
        except ValueError as e:
            raise ArgusError(
                f"embedder returned vectors of different sizes: {e}"
            ) from None
        if m.ndim != 2 or m.shape[0] != n or m.shape[1] == 0:
            raise ArgusError(
                f"embedder returned {m.shape[0] if m.ndim else 0} vector(s) of shape "
                f"{m.shape[1:]} for {n} text(s); it must return one vector per text"
            )
        if not np.isfinite(m).all():
            raise ArgusError("embedder returned NaN or infinite values")
        return m


class Memory:
    """Long-term memory of a workspace (or any folder), on LanceDB.

    Most code gets one with ``ws.memory`` (or :func:`open_memory`), which shares
    one instance per folder in a process. Writes are serialised by a lock;
    searches run concurrently. Other processes' writes are seen at the next call.

    Args:
        path: The folder holding the LanceDB database (created if missing).
        embedder: Embedding function for vector and hybrid search (see module
            docstring); None: full-text only.
        optimize_every: Writes after which :meth:`optimize` runs by itself.
        optimize_rows: Rows written after which :meth:`optimize` runs by itself.
        vector_index_min_rows: Build the ANN index once this many rows exist.
        refine_factor: ANN candidates re-ranked on the full vectors, per hit
            wanted: higher is more accurate and slower (see BENCHMARKS.md).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        embedder: Embedder | Any | None = None,
        optimize_every: int = 64,
        optimize_rows: int = 4096,
        vector_index_min_rows: int = 4096,
        refine_factor: int = 10,
    ) -> None:
        self.path = Path(path).expanduser().resolve()
        self.optimize_every = optimize_every
        self.optimize_rows = optimize_rows
        self.vector_index_min_rows = vector_index_min_rows
        self.refine_factor = refine_factor
        self._lock = threading.RLock()
        self._db: Any = None
        self._table: Any = None
        self._embedding: _Embedding | None = None
        self._vectors_checked = False
        self._vector_index: bool | None = None
        self._pending_writes = 0
        self._pending_rows = 0
        self.embedder = embedder

    def __repr__(self) -> str:
        return f"Memory({str(self.path)!r}, embedder={self.embedder!r})"

    @property
    def embedder(self) -> Embedder | Any | None:
        """The embedding function; setting it enables vector and hybrid search."""
        return self._embedding.fn if self._embedding else None

    @embedder.setter
    def embedder(self, fn: Embedder | Any | None) -> None:
        self._embedding = None if fn is None else _Embedding(fn)
        self._vectors_checked = False

    # -- the table -----------------------------------------------------------

    def _connect(self) -> Any:
        if self._db is None:
            import lancedb

            self.path.mkdir(parents=True, exist_ok=True)
            # Check for other processes' commits on every read: memory written by
            # a CLI run must be found by the notebook at once.
            self._db = lancedb.connect(
                str(self.path), read_consistency_interval=timedelta(0)
            )
        return self._db

    def _open(self) -> Any | None:
        if self._table is None:
            try:
                self._table = self._connect().open_table(TABLE)
            except ValueError:  # "Table 'memories' was not found"
                return None
        return self._table

    def _schema(self, dim: int | None) -> Any:
        pa = _pa()

        fields = [pa.field("id", pa.string(), nullable=False)]
        fields += [pa.field(c, pa.string()) for c in _COLUMNS[1:5]]
        fields += [
            pa.field("seq", pa.int64()),
            pa.field("metadata", pa.string()),
            pa.field("created_at", pa.float64()),
        ]
        if dim is not None:
            fields.append(pa.field("vector", pa.list_(pa.float32(), dim)))
        return pa.schema(fields)

    def _dim(self) -> int | None:
        t = self._open()
        if t is None or "vector" not in t.schema.names:
            return None
        return int(t.schema.field("vector").type.list_size)

    def _create(self, dim: int | None) -> Any:
        from lancedb.index import FTS, BTree

        t = self._connect().create_table(TABLE, schema=self._schema(dim), exist_ok=True)
        names = {i.name for i in t.list_indices()}
        for column, config in (("text", FTS()), ("id", BTree())):
            if f"{column}_idx" not in names:
                try:
                    t.create_index(column, config=config, replace=False)
                except RuntimeError as e:  # another process made it first
                    if "already exists" not in str(e):
                        raise
        self._table = t
        return t

    def _table_for(self, dim: int | None) -> Any:
        """The table, created or given a vector column of size ``dim`` as needed."""
        # Another process may have created the table meanwhile, with or without
        # vectors: check the size either way.
        t = self._open() or self._create(dim)
        have = self._dim()
        if dim is not None and have is None:
            pa = _pa()

            t.add_columns(pa.field("vector", pa.list_(pa.float32(), dim)))
            self._vectors_checked = False
        elif dim is not None and have != dim:
            raise ArgusError(
                f"memory at {self.path} holds {have}-dimensional vectors but the "
                f"embedder returns {dim}; use the embedder the memory was built "
                "with, or call memory.reembed() to recompute every vector"
            )
        return t

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
            pydantic.ValidationError: a record has an unknown key or bad value.
        """
        now = time.time()
        by_id: dict[str, MemoryRecord] = {}
        for r in records:
            rec = (
                r
                if isinstance(r, MemoryRecord)
                else MemoryRecord.model_validate(
                    {k: v for k, v in r.items() if v is not None}
                )
            )
            rid = rec.id or memory_id(
                rec.kind, session_id=rec.session_id, task_id=rec.task_id, text=rec.text
            )
            by_id[rid] = rec.model_copy(
                update={"id": rid, "created_at": rec.created_at or now}
            )
        if not by_id:
            return []
        recs = list(by_id.values())
        vectors = (
            self._embedding.docs([r.text for r in recs]) if self._embedding else None
        )
        with self._lock:
            t = self._table_for(None if vectors is None else int(vectors.shape[1]))
            data = self._arrow(recs, vectors, self._dim())
            merge = t.merge_insert("id").when_matched_update_all()
            # Rows of an instance without embedder carry null vectors on purpose
            # (backfilled later); sizes were checked above.
            merge.when_not_matched_insert_all().execute(data, on_bad_vectors="null")
            self._pending_writes += 1
            self._pending_rows += len(recs)
            if (
                self._pending_writes >= self.optimize_every
                or self._pending_rows >= self.optimize_rows
            ):
                self.optimize()
        return list(by_id)

    def _arrow(self, recs: list[MemoryRecord], vectors: Any, dim: int | None) -> Any:
        pa = _pa()

        cols: dict[str, Any] = {
            c: [getattr(r, c) for r in recs] for c in _COLUMNS if c != "metadata"
        }
        cols["metadata"] = [_canonical(r.metadata) for r in recs]
        cols["created_at"] = [r.created_at for r in recs]
        if dim is not None:
            vtype = pa.list_(pa.float32(), dim)
            cols["vector"] = (
                pa.nulls(len(recs), vtype)
                if vectors is None
                else pa.FixedSizeListArray.from_arrays(
                    pa.array(vectors.ravel(), pa.float32()), dim
                )
            )
        return pa.table(cols, schema=self._schema(dim))

    def delete(self, where: str) -> int:
        """Deletes the memories matching a SQL filter; returns how many."""
        with self._lock:
            t = self._open()
            if t is None:
                return 0
            n = int(t.count_rows(where))
            if n:
                t.delete(where)
            return n

    # -- maintenance ---------------------------------------------------------

    def optimize(
        self,
        *,
        retrain: bool = False,
        keep_versions: timedelta = timedelta(minutes=10),
    ) -> None:
        """Folds new rows into the indexes, compacts files, builds the ANN index.

        Runs by itself every ``optimize_every`` writes; call it after a bulk
        load.

        Args:
            retrain: Rebuild the indexes from scratch (e.g. after the table grew
                tenfold, so the vector index's partitions fit the data again).
            keep_versions: Table versions older than this are deleted from disk
                (LanceDB keeps every version otherwise; a few minutes protect
                readers in other processes).
        """
        with self._lock:
            self._pending_writes = self._pending_rows = 0
            t = self._open()
            if t is None:
                return
            t.optimize(retrain=retrain, cleanup_older_than=keep_versions)
            if self._dim() is None:
                return
            rows = t.count_rows()
            names = self._vector_index_names()
            if (not names and rows >= self.vector_index_min_rows) or (
                _SMALL_INDEX in names and rows >= _PARTITION_ROWS
            ):
                self.create_vector_index()

    def create_vector_index(self) -> None:
        """Builds the IVF_RQ (RaBitQ) ANN index on the vectors, replacing any.

        Raises:
            ArgusError: there are no vectors (no embedder), or too few rows.
        """
        from lancedb.index import IvfRq

        with self._lock:
            t = self._open()
            if t is None or self._dim() is None:
                raise ArgusError(
                    f"memory at {self.path} has no vectors to index; configure an "
                    "embedder and add memories first"
                )
            self.backfill_vectors()
            # Below _PARTITION_ROWS LanceDB's default would train 2-3 partitions,
            # which k-means often leaves empty (and logs about); one partition of
            # RaBitQ codes is as fast there. Its name marks it for a rebuild with
            # real partitions once the table has grown (see optimize).
            small = t.count_rows() < _PARTITION_ROWS
            config = IvfRq(distance_type="cosine", num_partitions=1 if small else None)
            try:
                for name in self._vector_index_names():
                    t.drop_index(name)
                t.create_index(
                    "vector",
                    config=config,
                    name=_SMALL_INDEX if small else "vector_idx",
                )
            except (RuntimeError, ValueError) as e:
                raise ArgusError(
                    f"could not build the vector index of memory at {self.path} "
                    f"({t.count_rows()} rows): {e}"
                ) from None
            self._vector_index = True

    def _vector_index_names(self) -> list[str]:
        t = self._open()
        if t is None:
            return []
        return [i.name for i in t.list_indices() if i.columns == ["vector"]]

    def _has_vector_index(self, *, refresh: bool = False) -> bool:
        if self._vector_index is None or refresh:
            self._vector_index = bool(self._vector_index_names())
        return self._vector_index

    def backfill_vectors(self, *, batch: int = 1024) -> int:
        """Embeds the memories written without a vector; returns how many.

        Search does this by itself the first time it needs vectors.
        """
        if self._embedding is None:
            return 0
        done = 0
        with self._lock:
            if self._open() is None:
                return 0
            dim = self._dim()
            if dim is None:
                dim = int(self._embedding.query("dimension probe").shape[0])
            t = self._table_for(dim)
            total = t.count_rows()
            while done <= total:
                rows = (
                    t.search()
                    .where("vector IS NULL")
                    .select(_SELECT)
                    .limit(batch)
                    .to_arrow()
                    .to_pylist()
                )
                if not rows:
                    break
                recs = [self._record(r) for r in rows]
                vectors = self._embedding.docs([r.text for r in recs])
                t.merge_insert("id").when_matched_update_all().execute(
                    self._arrow(recs, vectors, self._dim())
                )
                done += len(recs)
            self._vectors_checked = True
        return done

    def reembed(self) -> int:
        """Recomputes every vector with the current embedder (e.g. a new model)."""
        if self._embedding is None:
            raise ArgusError("reembed() needs an embedder: set memory.embedder first")
        with self._lock:
            t = self._open()
            if t is None:
                return 0
            if self._dim() is not None:
                for name in self._vector_index_names():
                    t.drop_index(name)
                t.drop_columns(["vector"])
                self._vector_index = False
            return self.backfill_vectors()

    # -- reading -------------------------------------------------------------

    def __len__(self) -> int:
        return self.count()

    def count(self, where: str | None = None) -> int:
        """How many memories there are (matching a SQL filter, if given)."""
        t = self._open()
        return 0 if t is None else int(t.count_rows(where))

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

    def search(
        self,
        query: str,
        k: int = 5,
        mode: SearchMode = "hybrid",
        where: str | None = None,
        *,
        session_id: str | Sequence[str] | None = None,
        kind: str | Sequence[str] | None = None,
        since: float | datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[MemoryHit]:
        """Finds the memories best matching ``query``, best first.

        Args:
            query: Words to look for (a question or a task description).
            k: How many hits at most.
            mode: "hybrid" (default), "fts" (BM25) or "vector".
            where: A SQL filter over the columns (``"seq > 10"``).
            session_id: Only from this session (or these); default: all sessions.
            kind: Only of this kind (or these).
            since: Only written at or after this time (epoch seconds or datetime).
            metadata: Only memories whose metadata has these top-level values.

        Raises:
            ArgusError: mode "vector" without an embedder.
            ValueError: an unknown mode, or k < 1.
        """
        if mode not in ("hybrid", "fts", "vector"):
            raise ValueError(f"mode must be 'hybrid', 'fts' or 'vector', got {mode!r}")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if mode == "vector" and self._embedding is None:
            raise ArgusError(
                "vector search needs an embedding function: pass embedder= to "
                "Memory or set memory.embedder (or use mode='fts')"
            )
        t = self._open()
        if t is None or not query.strip():
            return []
        filt = self._filter(where, session_id, kind, since, metadata)
        # A metadata prefilter may keep a few false matches; fetch spares.
        want = k if not metadata else 2 * k + 10
        if mode == "hybrid" and self._embedding is None:
            hits = self._fts(t, query, want, filt, note=_NO_EMBEDDER)
        elif mode == "fts":
            hits = self._fts(t, query, want, filt)
        elif mode == "vector":
            hits = self._vector(t, query, want, filt)
        else:
            depth = max(want, 2 * k, 20)
            hits = _fuse(
                self._fts(t, query, depth, filt), self._vector(t, query, depth, filt)
            )
        if metadata:
            hits = [
                h
                for h in hits
                if all(h.metadata.get(a) == b for a, b in metadata.items())
            ]
        return hits[:k]

    def _filter(
        self,
        where: str | None,
        session_id: str | Sequence[str] | None,
        kind: str | Sequence[str] | None,
        since: float | datetime | None,
        metadata: Mapping[str, Any] | None,
    ) -> str | None:
        parts = [f"({where})"] if where else []
        if session_id is not None:
            parts.append(_in("session_id", session_id))
        if kind is not None:
            parts.append(_in("kind", kind))
        if since is not None:
            ts = since.timestamp() if isinstance(since, datetime) else float(since)
            parts.append(f"created_at >= {ts!r}")
        parts += [_like_meta(a, b) for a, b in (metadata or {}).items()]
        return " AND ".join(parts) or None

    def _hits(self, rows: list[dict[str, Any]], mode: SearchMode) -> list[MemoryHit]:
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

    def _fts(
        self, t: Any, query: str, n: int, filt: str | None, note: str | None = None
    ) -> list[MemoryHit]:
        q = t.search(query, query_type="fts").select([*_SELECT, "_score"]).limit(n)
        if filt:
            q = q.where(filt, prefilter=True)
        try:
            found = q.to_list()
        except Exception as e:
            # The table was just created by another thread or process, which is
            # still building its full-text index: nothing is searchable yet.
            if "INVERTED index" not in str(e):
                raise
            found = []
        rows = sorted(found, key=lambda r: (-r["_score"], r["id"]))
        hits = self._hits(rows, "fts")
        if note:
            for h in hits:
                h.note = note
        return hits

    def _vector(self, t: Any, query: str, n: int, filt: str | None) -> list[MemoryHit]:
        assert self._embedding is not None
        if not self._vectors_checked:
            self.backfill_vectors()
            t = self._open()
        vec = self._embedding.query(query)
        q = (
            t.search(vec, query_type="vector", vector_column_name="vector")
            .distance_type("cosine")
            .select([*_SELECT, "_distance"])
            .limit(n)
        )
        if self._has_vector_index():
            # RaBitQ codes are coarse: re-rank more candidates on full vectors.
            q = q.refine_factor(self.refine_factor)
        if filt:
            q = q.where(filt, prefilter=True)
        rows = sorted(q.to_list(), key=lambda r: (r["_distance"], r["id"]))
        return self._hits(rows, "vector")

    # -- documents -----------------------------------------------------------

    def ingest(
        self,
        path_or_text: str | Path,
        *,
        source: str | None = None,
        chunk_size: int = 1200,
        overlap: int = 200,
        format: Format | Literal["auto"] = "auto",
        metadata: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """Chunks a document (text, markdown or html) into ``document`` memories.

        Each chunk's metadata holds ``source``, ``start``/``end`` (character
        offsets in the extracted text: for html, the text after tags are
        stripped), ``chunk``, ``n_chunks``, ``format`` and, for markdown, the
        ``heading`` above it. Ingesting the same source again replaces its
        chunks (ids derive from the source), dropping any left over.

        Args:
            path_or_text: A file path (``Path``, or a ``str`` naming an existing
                file), else the document's text.
            source: Where it came from; default: the resolved file path, or
                ``text:<hash>`` for text.
            chunk_size: Largest chunk, in characters.
            overlap: Characters shared by consecutive chunks.
            format: "text", "markdown", "html", or "auto" (from the file suffix,
                else sniffed from the content).
            metadata: Extra metadata for every chunk.

        Returns:
            The chunks' memory ids, in order.
        """
        prefix, recs = document_records(
            path_or_text,
            source=source,
            chunk_size=chunk_size,
            overlap=overlap,
            format=format,
            metadata=metadata,
        )
        with self._lock:
            ids = self.add_many(recs)
            # Chunks left over from a longer earlier version of this source.
            first_stale = f"{prefix}-{len(recs):06d}"
            self.delete(f"id LIKE {_sql(prefix + '-%')} AND id >= {_sql(first_stale)}")
        return ids


def _fuse(fts: list[MemoryHit], vec: list[MemoryHit]) -> list[MemoryHit]:
    """Reciprocal rank fusion of two rankings into hybrid hits, best first."""
    merged: dict[str, MemoryHit] = {}
    for h in fts:
        merged[h.id] = h.model_copy(update={"mode": "hybrid", "score": 0.0})
    for h in vec:
        if h.id in merged:
            merged[h.id].distance, merged[h.id].vector_rank = h.distance, h.vector_rank
        else:
            merged[h.id] = h.model_copy(update={"mode": "hybrid", "score": 0.0})
    for h in merged.values():
        h.score = sum(1.0 / (RRF_K + r) for r in (h.fts_rank, h.vector_rank) if r)
    big = 1 << 30
    return sorted(
        merged.values(),
        key=lambda h: (-h.score, min(h.fts_rank or big, h.vector_rank or big), h.id),
    )


_OPEN: dict[Path, Memory] = {}
_OPEN_LOCK = threading.Lock()


def open_memory(path: str | Path, *, embedder: Embedder | Any | None = None) -> Memory:
    """The process-wide Memory of a folder (one instance, one write lock, per path).

    Args:
        path: The memory folder (``<workspace>/memory``).
        embedder: If given, set as the instance's embedder.
    """
    key = Path(path).expanduser().resolve()
    with _OPEN_LOCK:
        mem = _OPEN.get(key)
        if mem is None:
            mem = _OPEN[key] = Memory(key)
    if embedder is not None:
        mem.embedder = embedder
    return mem


def _clip(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit] + f" … [truncated, {len(text)} chars in all]", True


def remember_result(
    memory: Memory,
    *,
    session_id: str,
    task_id: str,
    seq: int,
    result: Any,
    title: str,
    max_chars: int = 2000,
    summarize: Callable[[str], str] | None = None,
) -> str:
    """Stores a succeeded task's result as a ``result`` memory; returns its id.

    Idempotent: the id derives from (session, task), so committing the same task
    twice (crash-retry, resume, a rerun) leaves one memory, the latest.

    Args:
        memory: Where to store it.
        session_id: The session the task ran in.
        task_id: The task.
        seq: The seq of the task's ``task_succeeded`` event.
        result: The (redacted) result: text as is, anything else as JSON.
        title: What the task was (its title, or its id); prefixes the text.
        max_chars: Longer results are cut (or summarised) to this size.
        summarize: Optional text -> summary function (e.g. an LLM call) used
            instead of cutting when the result is longer than max_chars.
    """
    body = (
        result
        if isinstance(result, str)
        else json.dumps(result, ensure_ascii=False, default=str)
    )
    full = len(body)
    if summarize is not None and full > max_chars:
        body, summarized = summarize(body), True
    else:
        summarized = False
    body, cut = _clip(body, max_chars)
    meta = {"title": title, "chars": full, "truncated": cut, "summarized": summarized}
    return memory.add(
        f"{title}: {body}",
        id=memory_id("result", session_id=session_id, task_id=task_id),
        kind="result",
        session_id=session_id,
        task_id=task_id,
        seq=seq,
        metadata=meta,
    )


def remember_lesson(
    memory: Memory,
    *,
    session_id: str,
    task_id: str,
    seq: int,
    error: str,
    attempts: int,
    tool: str | None,
    title: str | None = None,
    args: Any = None,
    max_chars: int = 2000,
) -> str:
    """Stores what a task that failed for good tried, as a ``lesson``; returns its id.

    Idempotent by (session, task), like :func:`remember_result`. Search lessons
    across sessions before a similar task: ``search(desc, kind="lesson")``.

    Args:
        memory: Where to store it.
        session_id: The session the task ran in.
        task_id: The task.
        seq: The seq of the task's ``task_failed`` event.
        error: The final error message.
        attempts: How many attempts were made.
        tool: The tool the task called.
        title: What the task was; default its id.
        args: The (redacted) arguments it was called with.
        max_chars: The text is cut to this size.
    """
    what = f"task {title or task_id}" + (f" (tool {tool})" if tool else "")
    text = f"Lesson: {what} failed for good after {attempts} attempt(s). Error: {error}"
    if args is not None:
        text += " Tried with arguments: " + json.dumps(
            args, ensure_ascii=False, default=str
        )
    text, _ = _clip(text, max_chars)
    meta = {"tool": tool, "attempts": attempts, "error": _clip(error, 500)[0]}
    return memory.add(
        text,
        id=memory_id("lesson", session_id=session_id, task_id=task_id),
        kind="lesson",
        session_id=session_id,
        task_id=task_id,
        seq=seq,
        metadata=meta,
    )
