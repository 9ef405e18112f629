"""The records of :mod:`argus_lab.store.memory`: a memory as stored, a search hit,
and the literal types of their fields and of search modes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from argus_lab.redact import Redactor

__all__ = [
    "KINDS",
    "MAX_TEXT",
    "HitMode",
    "MemoryHit",
    "MemoryKind",
    "MemoryRecord",
    "OnMismatch",
    "SearchMode",
    "check_record",
    "json_scalar",
    "masked_record",
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


MAX_TEXT = 1_000_000
"""Characters one memory may hold. A memory is returned whole by every search
that finds it and its vector covers only its start: a longer text is a document
for ``memory.ingest``, which splits it into searchable chunks with offsets."""

_KEYS = "text (required), id, kind, session_id, task_id, seq, metadata"


def check_record(r: object, i: int) -> MemoryRecord:
    """One record of ``add``/``add_many`` validated, or a ValueError/TypeError
    that names the record, the field and what to pass instead."""
    import json

    from pydantic import ValidationError

    if isinstance(r, MemoryRecord):
        rec = r
    elif not isinstance(r, Mapping):
        raise TypeError(
            f"memory record {i} is a {type(r).__name__}, not a dict with the keys "
            f"{_KEYS} (for one text, use memory.add(text))"
        )
    else:
        try:
            rec = MemoryRecord.model_validate(
                {k: v for k, v in r.items() if v is not None}
            )
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(map(str, err['loc'])) or 'record'}: {err['msg']}"
                + (f" (got {err['input']!r:.60})" if err["type"] != "missing" else "")
                for err in e.errors()
            )
            raise ValueError(
                f"memory record {i}: {problems}. A record has the keys {_KEYS}; "
                f"kind is one of {', '.join(KINDS)}"
            ) from None
    where = f"memory record {i}"
    if len(rec.text) > MAX_TEXT:
        raise ValueError(
            f"{where}: text is {len(rec.text):,} characters, over the {MAX_TEXT:,} "
            "one memory holds (search returns it whole): store a long text with "
            "memory.ingest(text), which splits it into chunks with offsets"
        )
    for name, value in (("text", rec.text), ("id", rec.id)):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"{where}: {name} holds a lone surrogate {value[e.start]!r} at "
                f"position {e.start}, which UTF-8 cannot store (text decoded with "
                "errors='surrogateescape'?); clean it, e.g. "
                "s.encode('utf-8', 'replace').decode()"
            ) from None
    try:
        json.dumps(rec.metadata, allow_nan=False, default=json_scalar).encode("utf-8")
    except (TypeError, ValueError) as e:
        why = "NaN and infinity are not JSON" if isinstance(e, ValueError) else e
        raise ValueError(
            f"{where}: metadata must be JSON ({why}), to be stored and matched "
            "by a filter: use text, numbers, bools, None, lists and dicts (e.g. "
            "value.isoformat() for a datetime, None for a missing number)"
        ) from None
    return rec


def masked_record(rec: MemoryRecord, red: Redactor) -> MemoryRecord:
    """``rec`` with secrets masked in its text and metadata (``rec`` itself
    when it holds none): memory lies in the workspace (invariant 7)."""
    from argus_lab.redact import refuse_secret_key

    for field in ("id", "session_id", "task_id"):
        # What a memory is found and linked by (masked, two could share one id).
        refuse_secret_key(
            red,
            getattr(rec, field) or "",
            f"the memory's {field}",
            "ids and links are stored as they are",
            "Choose another",
        )
    update: dict[str, Any] = {}
    if red.needed(rec.text):
        update["text"] = red.text(rec.text)
    if rec.metadata:
        metadata = red.value(rec.metadata)
        if metadata != rec.metadata:
            update["metadata"] = metadata
    return rec.model_copy(update=update) if update else rec


def json_scalar(o: object, *, or_text: bool = False) -> Any:
    """``json.dumps``'s ``default``: a numpy number or bool (what a DataFrame's
    row holds) as the Python one it stands for; anything else is not JSON
    (TypeError), or, with ``or_text``, its ``str``."""
    item = getattr(o, "item", None)
    if type(o).__module__ == "numpy" and getattr(o, "ndim", None) == 0 and item:
        return item()
    if or_text:
        return str(o)
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")
