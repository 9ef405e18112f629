"""Forks as a family: a fork's parent, the forks made from a session, and which
tasks of a fork differ from its parent's (status or committed result)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argus_lab.runtime.session import Session

__all__ = ["differing_tasks", "family_of"]


def family_of(s: Session, known: Mapping[str, Session]) -> dict[str, Any]:
    """The breadcrumb's data: the parent's name (or ""), the task the fork
    started again from, and the forks of ``s`` among the ``known`` sessions."""
    info = s.info
    parent = ""
    if info.parent:
        parent = next(
            (i.name for i in s.workspace.sessions() if i.id == info.parent),
            info.parent,
        )
    forks = [n for n, o in known.items() if o.info.parent == info.id]
    return {"parent": parent, "forked_at": info.forked_at or "", "forks": forks}


def differing_tasks(mine: Session, theirs: Session, tasks: Iterable[str]) -> list[str]:
    """Tasks whose status differs between two sessions, or that both finished
    with different results."""
    a, b = mine.records, theirs.records
    out = []
    for t in tasks:
        ra, rb = a.get(t), b.get(t)
        same = ra is not None and rb is not None and ra.status == rb.status
        if same and ra is not None and ra.status == "succeeded":
            same = mine.result(t) == theirs.result(t)
        if not same:
            out.append(t)
    return out
