"""Documents into memory: ``Memory.ingest`` (a mixin of
:class:`~argus_lab.store.memory.Memory`).

The chunks are embedded before the write lock is taken (a big document takes
minutes with MiniLM), then written and their leftovers dropped holding it, so
other processes' writes wait for the commit only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from argus_lab.store._memory_query import _sql
from argus_lab.store.chunking import Format, document_records

if TYPE_CHECKING:
    from argus_lab.store._memory_records import MemoryRecord

__all__: list[str] = []


class _MemoryIngest:
    """Memory's document ingestion (see the module docstring)."""

    if TYPE_CHECKING:

        def _prepare(
            self, records: Iterable[Mapping[str, Any] | MemoryRecord]
        ) -> tuple[list[MemoryRecord], Any]: ...
        def _put(self, recs: list[MemoryRecord], vectors: Any) -> None: ...
        def _writing(self, what: str) -> AbstractContextManager[None]: ...
        def delete(self, where: str) -> int: ...

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
        stripped; secrets unmasked, so they hold for the document as it is),
        ``chunk``, ``n_chunks``, ``format`` and, for markdown, the ``heading``
        above it. No chunk edge cuts a secret: each chunk holds one whole, and
        masked, or none of it (a chunk grows past ``chunk_size`` to hold a
        long one, a PEM block, whole). Ingesting the same source again replaces its
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
        from argus_lab.redact import Redactor, known_secrets

        # Each chunk is masked on its own (``_prepare``): an edge through a
        # secret left two halves no mask recognised, so none cuts one.
        prefix, recs = document_records(
            path_or_text,
            source=source,
            chunk_size=chunk_size,
            overlap=overlap,
            format=format,
            metadata=metadata,
            whole=Redactor(known_secrets()).spans,
        )
        ready, vectors = self._prepare(recs)  # embedded before the lock
        with self._writing(f"ingest {len(recs)} chunks"):
            if ready:
                self._put(ready, vectors)
            # Chunks left over from a longer earlier version of this source.
            first_stale = f"{prefix}-{len(recs):06d}"
            self.delete(f"id LIKE {_sql(prefix + '-%')} AND id >= {_sql(first_stale)}")
        return [r.id for r in ready]
