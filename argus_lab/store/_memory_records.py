"""The records of :mod:`argus_lab.store.memory`: a memory as stored, a search hit,
and the literal types of their fields and of search modes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "KINDS",
    "HitMode",
    "MemoryHit",
    "MemoryKind",
    "MemoryRecord",
    "OnMismatch",
    "SearchMode",
]

MemoryKind = Literal["result", "note", "document", "lesson"]
KINDS: tuple[str, ...] = ("result", "note", "document", "lesson")
SearchMode = Literal["auto", "hybrid", "fts", "vector"]
HitMode = Literal["hybrid", "fts", "vector"]
OnMismatch = Literal["error", "reembed", "background"]


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
    mode: HitMode
    """The search that produced the hit ("fts" when hybrid fell back)."""
    fts_score: float | None = None
    """BM25 score, when full-text search found it."""
    distance: float | None = None
    """Cosine distance to the query, when vector search found it."""
    fts_rank: int | None = None
    """1-based rank in the full-text results."""
    vector_rank: int | None = None
    """1-based rank in the vector results."""
    term_coverage: float | None = None
    """Hybrid only: the share of the query's terms this memory contains (crude
    stems, stop words left out); it scales the full-text part of the score."""
    note: str | None = None
    """Why the search was not what was asked for (e.g. hybrid without embedder)."""

    @property
    def provenance(self) -> dict[str, Any]:
        """Where the memory came from: session_id, task_id and event seq."""
        return {"session_id": self.session_id, "task_id": self.task_id, "seq": self.seq}
