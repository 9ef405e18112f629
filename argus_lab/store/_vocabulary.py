"""The words a session's stored rows are made of, which a secret must not be.

A row holding a secret value is masked string by string (``_commit.scrubbed``),
keys and structural values included. A "secret" that is one of the rows' own
words, or part of one (``secrets=["succeeded"]``, ``["status"]``), masked a
status, a field name or an event kind: the session could not be opened again,
or silently lost a task's status and ran it again. ``row_words`` lists those
words; a redactor made with them refuses such a ``secrets=`` value and ignores
such an env value (``Redactor(reserved=...)``).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from argus_lab.redact import MASK, Redactor

__all__ = ["row_words", "session_redactor"]

_WRITTEN = (
    # Keys and values the runtime writes into fields typed as free dicts or
    # strings (not visible in the models' types): usage and budgets, an
    # approval's state, the approval policies as data, a context's items,
    # artifact markers, the head. tests/test_secret_holes.py checks a real session's
    # rows hold no other key.
    "steps cost_usd tokens wall_s",
    "state asked approved rejected by at args edited_args policy reason",
    "decision tools side_effect approve reject ask none read write when",
    "section dependency memory goal constraint task included truncated dropped",
    "purpose tokens full_tokens key estimator cost_note kept items",
    "$artifact type bytes name dataframe figure path",
    "lease holder expires last_seq version",
)


@functools.cache
def row_words() -> frozenset[str]:
    """Every field name, literal value and runtime-written key of the rows."""
    from argus_lab import events
    from argus_lab.llm.base import ModelRequest, ModelResponse
    from argus_lab.model import SessionInfo, TaskRecord
    from argus_lab.plan import Plan

    # MASK: a secret inside it ("REDACTED") masked the mask again at every
    # commit ("[[REDACTED]]", deeper each time).
    words = {MASK, *(w for line in _WRITTEN for w in line.split())}
    seen: set[type] = set()

    def annotation(a: Any) -> None:
        if typing.get_origin(a) is typing.Literal:
            words.update(x for x in typing.get_args(a) if isinstance(x, str))
        elif isinstance(a, type) and issubclass(a, BaseModel):
            model(a)
        else:
            for x in typing.get_args(a):
                annotation(x)

    def model(m: type[BaseModel]) -> None:
        if m in seen:
            return
        seen.add(m)
        for name, field in m.model_fields.items():
            words.update(w for w in (name, field.alias) if w)
            annotation(field.annotation)

    kinds = (getattr(events, n) for n in events.__all__)
    for m in (*kinds, TaskRecord, SessionInfo, Plan, ModelRequest, ModelResponse):
        if isinstance(m, type) and issubclass(m, BaseModel):
            model(m)  # ModelRequest/Response: the LLM recordings
    return frozenset(words)


def session_redactor(secrets: Iterable[str]) -> Redactor:
    """The redactor of a session's rows: ``secrets`` and the env's, never one
    of the rows' own words."""
    return Redactor(secrets, reserved=row_words)
