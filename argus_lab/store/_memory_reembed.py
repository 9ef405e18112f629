"""Re-embedding a :class:`~argus_lab.store.memory.Memory` with another embedder.

The new vectors go to a second column, ``vector_next``, whose field metadata
names the embedder that fills it; ``vector`` keeps the old embedder's vectors
(and its record) until the swap. Each batch is one LanceDB commit, written only
where the text is still the one that was embedded, so a memory rewritten
meanwhile is not given a stale vector. When every row has one, the swap drops
the vector index and the old column and renames ``vector_next`` to ``vector``.

So the table is consistent after a kill at any point, and the state is in the
table itself: a ``vector_next`` column means a re-embedding toward its recorded
embedder is under way. Opening the memory again with that embedder resumes it
(rows already done are kept); with the old one, the half-made column is
dropped; with a third, it is dropped too and the usual mismatch rule applies.

While it runs, spaces are never mixed: vector and hybrid searches fall back to
full text, each hit's ``note`` saying why (the old vectors could only be
searched with the old embedder, which the memory may not have); writes put
their new vectors in ``vector_next`` (new space) and leave ``vector`` null.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from argus_lab.errors import ArgusError
from argus_lab.store._memory_lance import SPACE_KEY, field_space
from argus_lab.store._memory_lock import _Writing
from argus_lab.store.embedding import EmbedderMismatchError, _Embedding, describe
from argus_lab.store.memory_embedders import BUNDLED

if TYPE_CHECKING:
    from pathlib import Path


NEXT = "vector_next"
"""The column a re-embedding fills (see the module docstring)."""
BATCH = 1024
"""Memories embedded and written per step of a re-embedding."""

log = logging.getLogger("argus_lab")

Progress = Callable[[int, int], None]


class ReembedJob:
    """A re-embedding running on a worker thread (see :meth:`Memory.reembed`).

    Attributes:
        total: Memories to embed when it started (rows written meanwhile are
            embedded by their writes).
        done: Memories embedded so far.
        error: What stopped it, if it failed.
    """

    def __init__(self, path: Path, total: int, target: dict[str, Any]) -> None:
        self.path = path
        self.total = total
        self.done = 0
        self.target = target
        self.error: BaseException | None = None
        self._finished = threading.Event()
        self.thread: threading.Thread | None = None

    @property
    def finished(self) -> bool:
        """True once it has swapped the new vectors in (or failed)."""
        return self._finished.is_set()

    @property
    def fraction(self) -> float:
        """Share done, 0.0-1.0."""
        return 1.0 if self.total == 0 else min(1.0, self.done / self.total)

    def wait(self, timeout: float | None = None) -> bool:
        """Waits until it has finished; returns False on timeout.

        Raises:
            ArgusError: it failed (the cause is chained).
        """
        if not self._finished.wait(timeout):
            return False
        if self.error is not None:
            raise ArgusError(
                f"re-embedding memory at {self.path} failed: {self.error}; the old "
                "vectors and the rows done so far are kept, and opening the memory "
                "again with the same embedder resumes it"
            ) from self.error
        return True

    def __repr__(self) -> str:
        state = "failed" if self.error else "done" if self.finished else "running"
        return (
            f"<ReembedJob {self.done}/{self.total} {state} -> {describe(self.target)}>"
        )

    def _repr_html_(self) -> str:
        state = "failed" if self.error else "done" if self.finished else "running"
        return (
            f"<div>re-embedding with {describe(self.target)}: "
            f'<progress value="{self.done}" max="{max(self.total, 1)}"></progress> '
            f"{self.done:,}/{self.total:,} ({state})</div>"
        )


class _MemoryReembed(_Writing):
    """Memory's re-embedding methods (a mixin of
    :class:`~argus_lab.store.memory.Memory`)."""

    if TYPE_CHECKING:
        path: Path
        vector_index_min_rows: int
        on_mismatch: str
        progress: Progress | None
        _lock: threading.RLock
        _embedding: _Embedding | None
        _space_ok: bool
        _vectors_checked: bool
        _vector_index: list[str] | None
        _job: ReembedJob | None
        _fallback_warned: bool

        def _open(self) -> Any | None: ...
        def _dim(self, column: str = "vector") -> int | None: ...
        def embedder_record(self) -> dict[str, Any] | None: ...
        def _vector_index_names(self) -> list[str]: ...
        def _vector_type(self, dim: int, name: str = "vector") -> Any: ...
        def backfill_vectors(
            self, *, batch: int = 1024, progress: Progress | None = None
        ) -> int: ...
        def create_vector_index(self) -> None: ...

    @property
    def reembedding(self) -> ReembedJob | None:
        """The background re-embedding of this instance, if one was started."""
        return self._job

    def _next_record(self) -> dict[str, Any] | None:
        """The embedder ``vector_next`` is being filled with, or None if no
        re-embedding is under way."""
        t = self._open()
        if t is None or NEXT not in t.schema.names:
            return None
        return field_space(t.schema, NEXT) or {}

    def _ensure_space(self) -> None:
        """Refuses, or re-embeds, when the vectors came from another embedder."""
        if self._embedding is None or self._space_ok:
            return
        with self._lock:
            if self._space_ok:
                return
            t = self._open()
            nxt = self._next_record()
            if t is None or (self._dim() is None and nxt is None):
                return  # the vector column is made with this embedder's record
            want = self._embedding.space()
            if nxt is not None and nxt != want:
                # A re-embedding toward another embedder was left unfinished.
                nxt = self._drop_next(t, nxt)
                if self._dim() is None and nxt is None:
                    return
            have = nxt if nxt == want else self.embedder_record()
            if have is None and t.count_rows("vector IS NOT NULL") == 0:
                with self._writing("record the embedder of the vectors"):
                    have = self.embedder_record()  # another process's, if any
                    if have is None and t.count_rows("vector IS NOT NULL") == 0:
                        meta = {SPACE_KEY: json.dumps(want)}
                        t.replace_field_metadata("vector", meta)
                        have = want
            if nxt != want and have == want:
                self._space_ok = True
                return
            if self.on_mismatch == "error" and self._keep_bundled(have, nxt):
                return
            if self.on_mismatch == "error":
                raise EmbedderMismatchError(self._mismatch(t, have, want, nxt))
            log.warning(
                "memory at %s: re-embedding %d memories made by %s with %s%s",
                self.path,
                t.count_rows(),
                describe(self.embedder_record()),
                describe(want),
                " (resuming)" if nxt == want else "",
            )
        # Outside the lock: the worker takes it for each batch it writes.
        self.reembed(
            progress=self.progress, background=self.on_mismatch == "background"
        )

    def _drop_next(self, t: Any, nxt: dict[str, Any]) -> dict[str, Any] | None:
        """Drops a re-embedding toward ``nxt`` left unfinished (unless another
        process did first); returns the record of ``vector_next`` after."""
        with self._writing("drop an unfinished re-embedding"):
            if self._next_record() == nxt:
                log.warning(
                    "memory at %s: dropping an unfinished re-embedding toward %s",
                    self.path,
                    describe(nxt or None),
                )
                t.drop_columns([NEXT])
            return self._next_record()

    def _keep_bundled(self, have: Any, nxt: Any) -> bool:
        """Keeps the bundled embedder a memory was built with, when this one was
        left at "default" (so a memory built before the default changed keeps
        working, unchanged); ``on_mismatch="reembed"`` or ``"background"``
        moves it to the default instead."""
        emb = self._embedding
        if emb is None or not emb.default or nxt is not None or not have:
            return False
        short = next((k for k, v in BUNDLED.items() if v == have.get("name")), None)
        if short is None:
            return False
        kept = _Embedding(short)
        if kept.space() != have:  # another version of it: refused as before
            return False
        self._embedding, self._space_ok = kept, True
        log.info(
            "memory at %s keeps %s, the embedder it was built with; to move it "
            "to the default, open it with on_mismatch='background' (or set "
            "memory.embedder = 'minilm' and call memory.reembed())",
            self.path,
            describe(have),
        )
        return True

    def _mismatch(self, t: Any, have: Any, want: dict[str, Any], nxt: Any) -> str:
        n = t.count_rows()
        if nxt == want:
            return (
                f"memory at {self.path} is being re-embedded with {describe(want)} "
                f"(or was, and was interrupted): {t.count_rows(f'{NEXT} IS NULL')} "
                f"of its {n} memories are still to do. Resume with "
                "memory.reembed() (or Memory(..., on_mismatch='background' or "
                "'reembed')); until then nothing was searched or written"
            )
        return (
            f"memory at {self.path} holds vectors made by {describe(have)}, but "
            f"its embedder is {describe(want)}: vectors of different models are "
            "not comparable, so nothing was searched or written. Use the embedder "
            f"the memory was built with, or re-embed its {n} memories with this "
            "one: memory.reembed() (or Memory(..., on_mismatch='reembed'), or "
            "'background' to re-embed on a worker thread meanwhile searching by "
            "full text)"
        )

    def reembed(
        self, *, progress: Progress | None = None, background: bool = False
    ) -> int:
        """Recomputes every vector with the current embedder (e.g. a new model).

        The new vectors are written beside the old ones and swapped in at the
        end, so a crash or kill leaves the memory consistent, and calling this
        again (or opening the memory with ``on_mismatch="reembed"`` or
        ``"background"``) resumes where it stopped.

        Args:
            progress: Called as ``progress(done, total)`` after each batch.
            background: Return at once and embed on a worker thread; follow it
                with :attr:`reembedding` (a :class:`ReembedJob`). Until it is
                done, vector and hybrid searches fall back to full text.

        Returns:
            How many memories were embedded (0 when in the background: see
            ``memory.reembedding.done``).
        """
        if self._embedding is None:
            raise ArgusError("reembed() needs an embedder: set memory.embedder first")
        job = self._start_reembed(progress)
        if job is None:
            return self.backfill_vectors(progress=progress)
        if background:
            return 0
        job.wait()
        return job.done

    def _start_reembed(self, progress: Progress | None) -> ReembedJob | None:
        """Starts (or resumes) re-embedding on a worker thread; None when the
        memory has no vectors to redo (a backfill does)."""
        assert self._embedding is not None
        with self._writing("start a re-embedding"):
            if self._job is not None and not self._job.finished:
                return self._job
            t = self._open()
            want = self._embedding.space()
            nxt = self._next_record()
            if t is None or (self._dim() is None and nxt is None):
                return None
            if nxt is not None and nxt != want:
                nxt = self._drop_next(t, nxt)
            if nxt is None:
                meta = {SPACE_KEY: json.dumps(want)}
                t.add_columns(
                    self._vector_type(int(want["dim"]), NEXT).with_metadata(meta)
                )
            total = int(t.count_rows(f"{NEXT} IS NULL"))
            job = self._job = ReembedJob(self.path, total, want)
            self._fallback_warned = False
            self._space_ok = True  # spaces are kept apart by the column now
            job.thread = threading.Thread(
                target=self._run_reembed,
                args=(job, self._embedding, progress),
                name=f"argus-reembed-{self.path.name}",
                daemon=True,  # a killed process resumes at the next open
            )
            job.thread.start()
            return job

    def _run_reembed(
        self, job: ReembedJob, emb: _Embedding, progress: Progress | None
    ) -> None:
        # The job keeps the embedder it started with: setting memory.embedder
        # meanwhile must not put a third model's vectors in the new column.
        try:
            while True:
                n = self._reembed_step(emb)
                if n == 0:
                    break
                job.done += n
                if progress is not None:
                    progress(job.done, job.total)
                if job.total > 10 * BATCH:
                    log.info(
                        "memory at %s: re-embedded %d of %d",
                        self.path,
                        job.done,
                        job.total,
                    )
            self._finish_reembed(emb, job.target)
        except BaseException as e:  # reported through job.wait()
            job.error = e
            log.error("memory at %s: re-embedding failed: %s", self.path, e)
        finally:
            job._finished.set()

    def _reembed_step(self, emb: _Embedding) -> int:
        """Embeds and writes one batch of rows still lacking a new vector."""
        t = self._open()
        assert t is not None
        if NEXT not in t.schema.names:
            return 0  # swapped (or dropped) by another process: see the finish
        rows = (
            t.search()
            .where(f"{NEXT} IS NULL")
            .select(["id", "text"])
            .limit(BATCH)
            .to_arrow()
        )
        if rows.num_rows == 0:
            return 0
        # Embedding happens outside the lock so writes and searches go on; the
        # write below skips rows whose text changed meanwhile (their writer gave
        # them a new vector already).
        vectors = emb.docs(rows.column("text").to_pylist())
        from argus_lab.store._memory_backfill import with_vectors

        data = with_vectors(rows, vectors, NEXT)
        with self._writing("re-embed a batch of memories"):
            if NEXT not in t.schema.names:
                return 0  # swapped by another process meanwhile
            merge = t.merge_insert("id").when_matched_update_all(
                where="target.text = source.text"
            )
            merge.execute(data)
        return int(rows.num_rows)

    def _finish_reembed(self, emb: _Embedding, target: dict[str, Any]) -> None:
        """Swaps the new vectors in: old index and column out, ``vector_next``
        renamed to ``vector`` (its record goes with it)."""
        with self._writing("swap in re-embedded vectors"):
            t = self._open()
            assert t is not None
            nxt = self._next_record()
            if nxt is None and self.embedder_record() == target:
                return  # another process finished the same re-embedding first
            if nxt != target:
                raise ArgusError(
                    "its column was dropped or taken over meanwhile (the memory "
                    "was opened with another embedder); nothing was swapped"
                )
            if t.count_rows(f"{NEXT} IS NULL"):  # written meanwhile, not embedded
                while self._reembed_step(emb):
                    pass
            for name in self._vector_index_names():
                t.drop_index(name)
            if "vector" in t.schema.names:
                t.drop_columns(["vector"])
            t.alter_columns({"path": NEXT, "rename": "vector"})
            self._vector_index = []
            # Unless memory.embedder was changed meanwhile (then it is checked
            # against the new record at its first use).
            self._space_ok = self._vectors_checked = self._embedding is emb
            if t.count_rows() >= self.vector_index_min_rows:
                self.create_vector_index()
