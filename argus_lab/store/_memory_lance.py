"""Memory's searches as LanceDB async queries, each one hop to LanceDB's loop.

LanceDB's sync API runs every call on its background event loop, and one sync
vector search makes ~7 such trips (the query, its schema checks, each batch),
~0.15-0.5 ms each on a 2-core machine: more than a third of a search at 100k
memories. Written against LanceDB's public async API and run on the same loop,
a search is one trip; a hybrid search starts its full-text query there before
it embeds the query on the caller's thread, so the two overlap.

LanceDB is imported on first use, not with this module.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from concurrent.futures import Future
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "SPACE_KEY",
    "SpaceChanged",
    "field_space",
    "fts_rows",
    "open_table",
    "run",
    "submit",
    "vector_rows",
    "wait",
]

SPACE_KEY = "argus.embedder"
"""Metadata key of a vector column: the record (name, version, dim) of the
embedder that made its vectors."""


def field_space(schema: Any, column: str) -> dict[str, Any] | None:
    """The embedder record kept in ``column``'s metadata (``SPACE_KEY``), or
    None when it has none."""
    raw = (schema.field(column).metadata or {}).get(SPACE_KEY.encode())
    return None if raw is None else dict(json.loads(raw))


class SpaceChanged(Exception):
    """The stored vectors are not of the embedder the query was embedded with:
    another process re-embedded the memory since this one last checked."""


T = TypeVar("T")


def submit(coro: Any) -> Future[Any]:
    """Starts ``coro`` on LanceDB's event loop; ``.result()`` waits for it."""
    from lancedb.background_loop import LOOP

    return asyncio.run_coroutine_threadsafe(coro, LOOP.loop)


def wait(future: Future[T]) -> T:
    """The result of a started query; an interrupt (Ctrl-C) or error while
    waiting cancels it on the loop (as LanceDB's sync API does)."""
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def run(coro: Any) -> Any:
    """Runs ``coro`` on LanceDB's event loop and waits for it (see wait)."""
    future = None
    try:  # from before submitting: an interrupt between the two still cancels
        future = submit(coro)
        return future.result()
    except BaseException:
        if future is not None:
            future.cancel()
        else:
            coro.close()  # never scheduled: no "was never awaited" warning
        raise


async def open_table(path: Path, name: str) -> Any:
    """The table, checked for other processes' commits on every read (as the
    sync handle: memory written by a CLI run is found by a notebook at once)."""
    import lancedb

    db = await lancedb.connect_async(str(path), read_consistency_interval=timedelta(0))
    return await db.open_table(name)


async def fts_rows(
    table: Any, query: str, n: int, where: str | None, select: list[str]
) -> list[dict[str, Any]]:
    """BM25 hits (``_score``), best first; [] while the full-text index is being
    built by the process that just created the table."""
    q = (await table.search(query, query_type="fts")).select(select).limit(n)
    if where:
        q = q.where(where)  # a prefilter, as in the sync API
    try:
        found: list[dict[str, Any]] = (await q.to_arrow()).to_pylist()
    except Exception as e:
        if "INVERTED index" not in str(e):
            raise
        return []
    return sorted(found, key=lambda r: (-r["_score"], r["id"]))


async def vector_rows(
    table: Any,
    vector: Any,
    n: int,
    where: str | None,
    select: list[str],
    *,
    refine: int | None,
    codes_only: bool,
    busy_column: str,
    space: dict[str, Any] | None = None,
) -> list[dict[str, Any]] | None:
    """Nearest by cosine (``_distance``), nearest first; None if the table has
    ``busy_column`` (a re-embedding is under way: its vectors are mid-swap).

    ``space``: the record of the embedder that made ``vector``; SpaceChanged
    if the column says another made its vectors (read with the schema this
    reads anyway: a query in one space against vectors of another ranks
    nonsense, without an error when the sizes agree).

    ``codes_only``: no re-ranking step. Where an ANN index answers, LanceDB
    then reports its codes' estimate of the squared L2 distance of the
    normalised vectors (~2x the cosine distance, off by up to ~4%), and
    whether one answers is not known here (another process may have built it
    a moment ago): the hits' own vectors are read with them and their exact
    cosine distances computed here, the hits re-ordered by them. A query with
    no direction (a zero vector) has no nearest: no hits.
    """
    schema = await table.schema()
    if busy_column in schema.names:
        return None
    if space is not None and "vector" in schema.names:
        stored = field_space(schema, "vector")
        if stored is not None and stored != space:
            raise SpaceChanged(stored)
    q = (
        table.vector_search(vector)
        .column("vector")
        .distance_type("cosine")
        .select([*select, "vector"] if codes_only else select)
        .limit(n)
    )
    if refine:
        q = q.refine_factor(refine)
    if where:
        q = q.where(where)
    got = await q.to_arrow()
    if codes_only and got.num_rows:
        got = _exact_distances(got, vector)
    found: list[dict[str, Any]] = got.to_pylist()
    return sorted(found, key=lambda r: (r["_distance"], r["id"]))


def _exact_distances(got: Any, vector: Any) -> Any:
    import numpy as np

    pa = importlib.import_module("pyarrow")  # no type stubs: used through Any
    m = got["vector"].combine_chunks().flatten().to_numpy().reshape(got.num_rows, -1)
    q = np.asarray(vector, dtype=np.float32)
    if not np.linalg.norm(q):
        return got.slice(0, 0).drop_columns(["vector"])  # no direction: no hits
    norms = np.linalg.norm(m, axis=1) * float(np.linalg.norm(q))
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(norms > 0, 1.0 - (m @ q) / norms, 1.0)
    got = got.drop_columns(["vector"])
    i = got.schema.get_field_index("_distance")
    return got.set_column(i, "_distance", pa.array(d, type=pa.float32()))
