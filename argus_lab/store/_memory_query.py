"""Search for :class:`~argus_lab.store.memory.Memory`: SQL filters and rankings.

The helpers build LanceDB filter expressions (``_sql``, ``_in``, ``_like_meta``)
and fuse rankings (``_fuse``); ``_MemoryQuery`` holds Memory's search methods
(full-text, vector and hybrid).
"""

from __future__ import annotations

import contextlib
import json
import logging
import operator
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime
from numbers import Real
from typing import TYPE_CHECKING, Any

from argus_lab.errors import ArgusError
from argus_lab.store import _memory_lance as _lance
from argus_lab.store._memory_records import KINDS, json_scalar
from argus_lab.store._memory_reembed import NEXT

if TYPE_CHECKING:
    from pathlib import Path

    from argus_lab.store._memory_records import HitMode, MemoryHit, SearchMode
    from argus_lab.store.embedding import _Embedding

log = logging.getLogger("argus_lab")


RRF_K = 10
"""The rank constant of hybrid's reciprocal rank fusion (see FTS_WEIGHT)."""
FTS_WEIGHT = 0.3
VECTOR_WEIGHT = 1.0
"""Hybrid's weights: ``score = FTS_WEIGHT / (RRF_K + fts_rank) + VECTOR_WEIGHT /
(RRF_K + vector_rank)``, a rank missing from one list adding nothing; each list
is fetched 20 deep (or k, if more).

Why not the textbook equal weights and k=60: when a query shares words with a
memory, both lists rank it high and it wins under any weights; when the query
is a paraphrase, full-text hits are memories that happen to share a word
(noise) and only the vector list knows. With k=60 the scores of ranks 1-10 are
within 15% of each other, so a vector rank-2 answer loses to anything ranked
by both lists; on datasets/memory_eval's paraphrases that halved vector's
MRR@10 (0.22 -> 0.10). k=10 makes a top rank count, and 0.3 makes a full-text
rank 1 worth a vector rank ~24: full text reorders what the vector side found
and adds exact-term matches, without outvoting it. The sweep over k and the
weight is in BENCHMARKS.md (benchmarks/bench_memory_eval.py)."""
_COLUMNS = ("id", "kind", "text", "session_id", "task_id", "seq", "metadata")
_SELECT = [*_COLUMNS, "created_at"]
_NO_EMBEDDER = (
    "hybrid search fell back to full-text: no embedding function is configured "
    "(pass embedder= to Memory, or set memory.embedder)"
)
_REEMBEDDING = (
    "{mode} search fell back to full-text: the memories are being re-embedded "
    "with another model, and vectors of two models are never compared "
    "(memory.reembedding.wait() waits for it)"
)


def _canonical(meta: Mapping[str, Any]) -> str:
    # numpy's 3 is stored and matched as 3, not "3"; anything else as text
    return json.dumps(
        meta, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
        default=lambda o: json_scalar(o, or_text=True),
    )  # fmt: skip


@contextlib.contextmanager
def _filter_errors(where: str | None) -> Iterator[None]:
    """Turns LanceDB's parse/schema error for a user's ``where`` into one that
    names the filter and the columns it may use."""
    try:
        yield
    except ValueError as e:
        if where is None or "Invalid input" not in str(e):
            raise
        raise ValueError(
            f"memory: where={where!r} is not a valid SQL filter over the "
            f"columns {', '.join(_SELECT)} ({str(e)[:300]}); match metadata "
            "with metadata={...}, not where"
        ) from None


def _sql(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _in(column: str, values: str | Sequence[str]) -> str:
    vals = [values] if isinstance(values, str) else list(values)
    if not vals:  # an empty list allows nothing (SQL has no empty IN list)
        return "FALSE"
    return f"{column} IN ({', '.join(_sql(v) for v in vals)})"


def _like_meta(key: str, value: Any) -> str:
    # A superset prefilter on the canonical JSON; exact matching happens after.
    frag = _canonical({key: value})[1:-1]
    pattern = "%".join(frag.split("\\")).replace("'", "''")
    return f"metadata LIKE '%{pattern}%'"


# English stop words, as LanceDB's full-text index leaves them out.
_STOP_TEXT = (
    "a an and are as at be by can do does for from has have how i in into is it "
    "its me my no not of on or our so such that the their then there these they "
    "this to was we were what when where which who why will with you your"
)
_STOPWORDS = frozenset(_STOP_TEXT.split())
_SUFFIXES = ("ingly", "edly", "ing", "ies", "ied", "ed", "es", "ly", "s")


def _terms(text: str) -> set[str]:
    """Crude stems of a text's content words (close to what BM25 indexes)."""
    out = set()
    for w in re.findall(r"\w+", text.lower()):
        if w in _STOPWORDS:
            continue
        for suf in _SUFFIXES:
            if w.endswith(suf) and len(w) - len(suf) >= 3:
                w = w[: -len(suf)]
                break
        if len(w) > 3 and w[-1] == w[-2]:  # running -> runn -> run
            w = w[:-1]
        out.add(w)
    return out


def _fuse(query: str, fts: list[MemoryHit], vec: list[MemoryHit]) -> list[MemoryHit]:
    """Weighted reciprocal rank fusion of two rankings into hybrid hits, best first.

    A full-text hit's part is scaled by its ``term_coverage``, the share of the
    query's terms it contains: a memory matching one word of a five-word
    paraphrase is what BM25 returns when nothing matches, not evidence.
    """
    merged: dict[str, MemoryHit] = {}
    for h in fts:
        merged[h.id] = h.model_copy(update={"mode": "hybrid", "score": 0.0})
    for h in vec:
        if h.id in merged:
            merged[h.id].distance, merged[h.id].vector_rank = h.distance, h.vector_rank
        else:
            merged[h.id] = h.model_copy(update={"mode": "hybrid", "score": 0.0})
    want = _terms(query)
    for h in merged.values():
        if h.fts_rank and want:
            h.term_coverage = len(want & _terms(h.text)) / len(want)
        h.score = (
            FTS_WEIGHT * (h.term_coverage or 0.0) / (RRF_K + h.fts_rank)
            if h.fts_rank
            else 0.0
        ) + (VECTOR_WEIGHT / (RRF_K + h.vector_rank) if h.vector_rank else 0.0)
    big = 1 << 30
    return sorted(
        merged.values(),
        key=lambda h: (-h.score, min(h.fts_rank or big, h.vector_rank or big), h.id),
    )


class _MemoryQuery:
    """Memory's search methods (a mixin of :class:`~argus_lab.store.memory.Memory`)."""

    if TYPE_CHECKING:
        _embedding: _Embedding | None
        _vectors_checked: bool
        _space_ok: bool
        _vector_index: list[str] | None
        _fallback_warned: bool
        path: Path
        _lock: threading.RLock
        _table: Any
        _async_table: Any

        def _open(self) -> Any | None: ...
        def _ensure_space(self) -> None: ...
        def _refine(self) -> int | None: ...
        def backfill_vectors(
            self,
            *,
            batch: int = 1024,
            progress: Callable[[int, int], None] | None = None,
        ) -> int: ...
        def _hits(
            self, rows: list[dict[str, Any]], mode: HitMode
        ) -> list[MemoryHit]: ...

    def search(
        self,
        query: str,
        k: int = 5,
        mode: SearchMode = "auto",
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
            mode: "auto" (default: "hybrid" with an embedder, else "fts"),
                "hybrid" (weighted reciprocal rank fusion of the two), "fts"
                (BM25) or "vector" (cosine).
            where: A SQL filter over the columns (``"seq > 10"``).
            session_id: Only from this session (or these); default: all sessions.
            kind: Only of this kind (or these).
            since: Only written at or after this time (epoch seconds or datetime).
            metadata: Only memories whose metadata has these top-level values.

        Raises:
            ArgusError: mode "vector" without an embedder.
            ValueError: an unknown mode, or k < 1.
        """
        if mode not in ("auto", "hybrid", "fts", "vector"):
            raise ValueError(
                f"mode must be 'auto', 'hybrid', 'fts' or 'vector', got {mode!r}"
            )
        if mode == "auto":
            mode = "fts" if self._embedding is None else "hybrid"
        if not isinstance(query, str):
            raise TypeError(
                f"search takes the query as text, got {type(query).__name__}"
            )
        try:  # an int, or numpy's; not 2.5, "5" or True
            if isinstance(k, bool):
                raise TypeError
            k = operator.index(k)
        except TypeError:
            raise TypeError(f"k must be a whole number >= 1, got {k!r}") from None
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
        with _filter_errors(where):
            filt = self._filter(where, session_id, kind, since, metadata)
            # A metadata prefilter may keep a few false matches; fetch spares.
            want = k if not metadata else 2 * k + 10
            depth = want if mode == "vector" else max(want, 2 * k, 20)
            both = mode == "hybrid" and self._embedding is not None
            # Hybrid starts its full-text leg on LanceDB's loop, then embeds the
            # query here (onnxruntime and LanceDB both release the GIL): the slower
            # leg, not the sum of the two, is what a hybrid search waits for.
            side = self._fts_start(query, depth, filt) if both else None
            try:
                vec = None if mode == "fts" else self._vector(query, depth, filt)
            except BaseException:
                if side is not None:
                    side.cancel()  # read-only: left to finish if it started
                raise
            if mode == "hybrid" and self._embedding is None:
                hits = self._fts(query, want, filt, note=_NO_EMBEDDER)
            elif mode == "fts":
                hits = self._fts(query, want, filt)
            elif vec is None:
                note = _REEMBEDDING.format(mode=mode)
                if not self._fallback_warned:  # once; every hit carries the note
                    log.warning("memory at %s: %s", self.path, note)
                    self._fallback_warned = True
                # A hybrid search's full-text leg is already under way: use it.
                hits = (
                    self._fts_hits(_lance.wait(side))
                    if side is not None
                    else self._fts(query, want, filt)
                )
                for h in hits:
                    h.note = note
            elif mode == "vector":
                hits = vec
            else:
                assert side is not None
                hits = _fuse(query, self._fts_hits(_lance.wait(side)), vec)
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
            kinds = [kind] if isinstance(kind, str) else list(kind)
            if unknown := [k for k in kinds if k not in KINDS]:
                raise ValueError(  # a typo would match nothing, silently
                    f"kind {unknown[0]!r} is not a memory kind; use one or more "
                    f"of {', '.join(KINDS)}"
                )
            parts.append(_in("kind", kind))
        if since is not None:
            if isinstance(since, bool) or not isinstance(since, datetime | Real):
                raise TypeError(
                    "since must be epoch seconds or a datetime, got "
                    f"{type(since).__name__} {since!r} (for a date in text: "
                    "datetime.fromisoformat(text))"
                )
            ts = since.timestamp() if isinstance(since, datetime) else float(since)
            parts.append(f"created_at >= {ts!r}")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise TypeError(
                f"metadata must be a dict to match, got {type(metadata).__name__}"
            )
        parts += [_like_meta(a, b) for a, b in (metadata or {}).items()]
        return " AND ".join(parts) or None

    def _lance(self) -> Any:
        """This memory's table on LanceDB's async API (opened once)."""
        if self._async_table is None:
            with self._lock:
                if self._async_table is None:
                    opening = _lance.open_table(self.path, self._table.name)
                    self._async_table = _lance.run(opening)
        return self._async_table

    def _fts_rows(self, query: str, n: int, filt: str | None) -> Any:
        return _lance.fts_rows(self._lance(), query, n, filt, [*_SELECT, "_score"])

    def _fts_start(
        self, query: str, n: int, filt: str | None
    ) -> Future[list[dict[str, Any]]]:
        return _lance.submit(self._fts_rows(query, n, filt))

    def _fts(
        self, query: str, n: int, filt: str | None, note: str | None = None
    ) -> list[MemoryHit]:
        return self._fts_hits(_lance.run(self._fts_rows(query, n, filt)), note)

    def _fts_hits(
        self, rows: list[dict[str, Any]], note: str | None = None
    ) -> list[MemoryHit]:
        hits = self._hits(rows, "fts")
        if note:
            for h in hits:
                h.note = note
        return hits

    def _vector(
        self, query: str, n: int, filt: str | None, *, again: bool = True
    ) -> list[MemoryHit] | None:
        """Vector hits; None while a re-embedding is under way (see search)."""
        if self._embedding is None:
            return None
        self._ensure_space()
        if not self._vectors_checked:
            self.backfill_vectors()
        emb = self._embedding
        vec = emb.query(query)
        refine = self._refine()
        rows = _lance.vector_rows(
            self._lance(),
            vec,
            n,
            filt,
            [*_SELECT, "_distance"],
            refine=refine,
            # Not keyed on the cached index list: another process may have
            # built the index since; exact distances are cheap either way.
            codes_only=refine is None,
            busy_column=NEXT,
            space=emb.space(),
        )
        try:
            found = _lance.run(rows)
        except _lance.SpaceChanged as e:
            if not again:
                raise ArgusError(
                    f"memory at {self.path}: its vectors changed embedder (now "
                    f"{e.args[0]}) again while searching; search again"
                ) from None
            # Another process re-embedded this memory since this instance
            # checked: check again, as when it was opened (on_mismatch says:
            # refuse, re-embed, or keep the bundled embedder it was built with).
            self._space_ok = self._vectors_checked = False
            self._vector_index = None
            return self._vector(query, n, filt, again=False)
        return None if found is None else self._hits(found, "vector")
