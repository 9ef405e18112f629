"""The LanceDB table of :class:`~argus_lab.store.memory.Memory` and its indexes.

``_MemoryIndex`` holds Memory's methods that open, create and widen the table,
convert records to Arrow, delete, and maintain the indexes: optimize, the
IVF_RQ vector index (vector backfill is in :mod:`argus_lab.store._memory_backfill`,
re-embedding in :mod:`argus_lab.store._memory_reembed`).

LanceDB and pyarrow are imported on first use, not with this module.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.errors import ArgusError
from argus_lab.store._memory_backfill import _MemoryBackfill
from argus_lab.store._memory_lance import SPACE_KEY, field_space
from argus_lab.store._memory_query import _COLUMNS, _canonical, _filter_errors
from argus_lab.store._memory_reembed import NEXT

if TYPE_CHECKING:
    from argus_lab.store._memory_records import MemoryRecord
    from argus_lab.store.embedding import _Embedding

TABLE = "memories"
_INDEX = "vector_rq4_idx"
_SMALL_INDEX = "vector_onepart_rq4_idx"
_BITS = 4
"""RaBitQ bits per dimension. One bit (LanceDB's default) finds 0.62 of the
exact top 10 at 100k memories and needed a re-ranking step reading 10x the
candidates' full vectors (~3-5 ms a query here); four find 0.94 from the codes
alone, which live in the index (4x its size: ~19 MB at 100k x 384), and the
labelled recall is the same (BENCHMARKS.md). Indexes named otherwise were
built with one bit by an earlier version: re-ranked, and rebuilt by optimize."""
_LEGACY_REFINE = 10
"""Candidates re-ranked per hit wanted on a 1-bit index (an earlier version's),
until optimize rebuilds it with ``_BITS``."""

log = logging.getLogger("argus_lab")

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while memories are (re-)embedded."""


def _pa() -> Any:
    # pyarrow ships no type stubs; it is used through Any.
    return importlib.import_module("pyarrow")


def _partition_rows() -> int:
    # Read at call time from argus_lab.store.memory, the constant's home (where
    # it is documented, and where tests patch it).
    from argus_lab.store import memory

    return memory._PARTITION_ROWS


class _MemoryIndex(_MemoryBackfill):
    """Memory's table and index methods (a mixin of
    :class:`~argus_lab.store.memory.Memory`)."""

    if TYPE_CHECKING:
        path: Path
        vector_index_min_rows: int
        on_mismatch: str
        progress: Progress | None
        _space_ok: bool
        _lock: threading.RLock
        _db: Any
        _table: Any
        _embedding: _Embedding | None
        _vectors_checked: bool
        _vector_index: list[str] | None
        refine_factor: int | None
        _pending_writes: int
        _pending_rows: int

        def _next_record(self) -> dict[str, Any] | None: ...
        def _ensure_space(self) -> None: ...

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

    def _schema(self, dim: int | None, *, space: bool = False) -> Any:
        pa = _pa()

        fields = [pa.field("id", pa.string(), nullable=False)]
        fields += [pa.field(c, pa.string()) for c in _COLUMNS[1:5]]
        fields += [
            pa.field("seq", pa.int64()),
            pa.field("metadata", pa.string()),
            pa.field("created_at", pa.float64()),
        ]
        if dim is not None:
            fields.append(self._vector_field(dim) if space else self._vector_type(dim))
        return pa.schema(fields)

    def _vector_type(self, dim: int, name: str = "vector") -> Any:
        pa = _pa()
        return pa.field(name, pa.list_(pa.float32(), dim))

    def _vector_field(self, dim: int) -> Any:
        """The vector column, its metadata naming the embedder that fills it."""
        field = self._vector_type(dim)
        if self._embedding is None:
            return field
        return field.with_metadata({SPACE_KEY: json.dumps(self._embedding.space())})

    def _dim(self, column: str = "vector") -> int | None:
        t = self._open()
        if t is None or column not in t.schema.names:
            return None
        return int(t.schema.field(column).type.list_size)

    def _create(self, dim: int | None) -> Any:
        from lancedb.index import FTS, BTree

        t = self._connect().create_table(
            TABLE, schema=self._schema(dim, space=True), exist_ok=True
        )
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
        """The table, created or given a vector column of size ``dim`` as needed.

        While a re-embedding runs, new vectors go to its column (``vector_next``).
        """
        # Another process may have created the table meanwhile, with or without
        # vectors: check the size either way.
        t = self._open() or self._create(dim)
        column = NEXT if NEXT in t.schema.names else "vector"
        have = self._dim(column)
        if dim is not None and have is None:
            t.add_columns(self._vector_field(dim))
            self._vectors_checked = False
        elif dim is not None and have != dim:
            raise ArgusError(
                f"memory at {self.path} holds {have}-dimensional vectors but the "
                f"embedder returns {dim}; use the embedder the memory was built "
                "with, or call memory.reembed() to recompute every vector"
            )
        return t

    def _arrow(self, recs: list[MemoryRecord], vectors: Any) -> Any:
        """Records as an Arrow table with the table's columns; ``vectors`` fill
        the column being written (``vector_next`` during a re-embedding, whose
        old-space ``vector`` is left null), or nulls when None."""
        pa = _pa()

        cols: dict[str, Any] = {
            c: [getattr(r, c) for r in recs] for c in _COLUMNS if c != "metadata"
        }
        cols["metadata"] = [_canonical(r.metadata) for r in recs]
        cols["created_at"] = [r.created_at for r in recs]
        schema = self._schema(None)
        t = self._open()
        names = [] if t is None else t.schema.names
        target = NEXT if NEXT in names else "vector"
        for column in ("vector", NEXT):
            dim = self._dim(column) if column in names else None
            if dim is None:
                continue
            vtype = pa.list_(pa.float32(), dim)
            schema = schema.append(pa.field(column, vtype))
            cols[column] = (
                pa.nulls(len(recs), vtype)
                if vectors is None or column != target
                else pa.FixedSizeListArray.from_arrays(
                    pa.array(vectors.ravel(), pa.float32()), dim
                )
            )
        return pa.table(cols, schema=schema)

    # -- which embedder made the vectors -------------------------------------

    def embedder_record(self) -> dict[str, Any] | None:
        """The name, version and dim of the embedder that made the stored vectors.

        None when there are no vectors yet (or they predate the record).
        """
        t = self._open()
        if t is None or "vector" not in t.schema.names:
            return None
        return field_space(t.schema, "vector")

    def delete(self, where: str) -> int:
        """Deletes the memories matching a SQL filter; returns how many."""
        with self._writing("delete memories"):
            t = self._open()
            if t is None:
                return 0
            with _filter_errors(where):
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
        # Before the lock: a mismatch may re-embed here and wait for the
        # worker, which takes the lock for each batch.
        self._ensure_space()
        with self._writing("optimize"):
            self._pending_writes = self._pending_rows = 0
            t = self._open()
            if t is None:
                return
            t.optimize(retrain=retrain, cleanup_older_than=keep_versions)
            if self._dim() is None or NEXT in t.schema.names:
                return  # no vectors, or a re-embedding will index its own
            rows = t.count_rows()
            names = self._vector_index_names()
            self._vector_index = names  # another process may have rebuilt it
            if (
                (not names and rows >= self.vector_index_min_rows)
                or (_SMALL_INDEX in names and rows >= _partition_rows())
                or (names and not {_INDEX, _SMALL_INDEX} & set(names))  # 1-bit
            ):
                self.create_vector_index()

    def create_vector_index(self) -> None:
        """Builds the IVF_RQ (RaBitQ) ANN index on the vectors, replacing any.

        Raises:
            ArgusError: there are no vectors (no embedder), or too few rows.
        """
        from lancedb.index import IvfRq

        # Rows written without a vector are embedded first, outside the lock
        # (minutes for many with MiniLM); the check under it finds none left.
        self.backfill_vectors()
        with self._writing("build the vector index"):
            t = self._open()
            if t is None or self._dim() is None:
                raise ArgusError(
                    f"memory at {self.path} has no vectors to index; configure an "
                    "embedder and add memories first"
                )
            if NEXT in t.schema.names:
                raise ArgusError(
                    f"memory at {self.path} is being re-embedded; its vector index "
                    "is built when that is done (memory.reembedding.wait())"
                )
            self.backfill_vectors()
            # Below _PARTITION_ROWS LanceDB's default would train 2-3 partitions,
            # which k-means often leaves empty (and logs about); one partition of
            # RaBitQ codes is as fast there. Its name marks it for a rebuild with
            # real partitions once the table has grown (see optimize).
            small = t.count_rows() < _partition_rows()
            config = IvfRq(
                distance_type="cosine",
                num_partitions=1 if small else None,
                num_bits=_BITS,
            )
            name = _SMALL_INDEX if small else _INDEX
            try:
                for old in self._vector_index_names():
                    t.drop_index(old)
                t.create_index("vector", config=config, name=name)
            except (RuntimeError, ValueError) as e:
                raise ArgusError(
                    f"could not build the vector index of memory at {self.path} "
                    f"({t.count_rows()} rows): {e}"
                ) from None
            self._vector_index = [name]

    def _vector_index_names(self) -> list[str]:
        t = self._open()
        if t is None:
            return []
        return [i.name for i in t.list_indices() if i.columns == ["vector"]]

    def _has_vector_index(self, *, refresh: bool = False) -> bool:
        if self._vector_index is None or refresh:
            self._vector_index = self._vector_index_names()
        return bool(self._vector_index)

    def _refine(self) -> int | None:
        """Candidates re-ranked on the full vectors per hit (None: none)."""
        if not self._has_vector_index():
            return None  # an exact search
        if self.refine_factor is not None:
            return self.refine_factor or None
        rq4 = {_INDEX, _SMALL_INDEX} & set(self._vector_index or ())
        return None if rq4 else _LEGACY_REFINE
