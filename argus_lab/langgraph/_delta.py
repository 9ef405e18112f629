"""Delta records: what keeps the bytes a LangGraph step writes flat in history.

Two things grow with a LangGraph thread's history, and both are stored as deltas:

- **A checkpoint's bookkeeping.** ``channel_versions`` and ``versions_seen`` gain
  an entry for every node that has run, so in a chain of N nodes each checkpoint
  is O(N). A checkpoint record stores only the entries that changed since its
  parent (with their old values, so a history can be walked backwards without
  rebuilding every checkpoint from scratch).
- **A list that a reducer extends** (``Annotated[list, operator.add]``): LangGraph
  hands the saver the whole list each step. A value that starts with the list
  stored at the previous version is stored as ``{"base": version, "add": [...]}``.

A chain of deltas ends at a full record. A full one is written again once the
deltas since the last full one are as large as it was: the bytes per step stay
within ~2x of the delta, and rebuilding a value reads at most ~2x its size.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress
from operator import ne
from typing import Any

from argus_lab.langgraph._codec import decode, encode

__all__ = [
    "BlobMemo",
    "CkptMemo",
    "apply_record",
    "blob_record",
    "checkpoint_record",
    "next_memo",
    "rebuild_blob",
    "undo_record",
]

MIN_FULL = 2048
"""Deltas of small values are not worth it: below this, full records only."""


@dataclass
class CkptMemo:
    """The last checkpoint this process wrote in a namespace (the next delta's base)."""

    id: str
    cv: dict[str, Any]
    vs: dict[str, dict[str, Any]]
    chain: int
    full: int


@dataclass
class BlobMemo:
    """The last value this process wrote for a channel (a list, copied)."""

    version: str
    items: list[Any]
    chain: int
    full: int


def next_memo(memo: Any, new: Any, delta: bool, size: int) -> Any:
    """``new`` with its chain bookkeeping, once its record of ``size`` is written."""
    if delta:
        new.chain, new.full = memo.chain + size, memo.full
    else:
        new.chain, new.full = 0, max(size, MIN_FULL)
    return new


def _diff(
    new: dict[str, Any], old: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(changed, undo): what moves ``old`` to ``new``, and back (None: absent).

    Runs once per channel and once per node at every step (~1,000 each at
    N = 1,000), so the usual case is done in C: ``new`` has ``old``'s keys in
    the same order, any new ones after them, and the values are compared
    pairwise.
    """
    keys, old_keys = list(new), list(old)
    m = len(old_keys)
    if keys[:m] == old_keys:
        changed = {
            k: new[k] for k in compress(keys, map(ne, new.values(), old.values()))
        }
        for k in keys[m:]:
            changed[k] = new[k]
        return changed, {k: old.get(k) for k in changed}
    changed = {k: v for k, v in new.items() if old.get(k, _ABSENT) != v}
    undo = {k: old.get(k) for k in changed}
    for k in old.keys() - new.keys():
        changed[k], undo[k] = None, old[k]
    return changed, undo


_ABSENT = object()


def checkpoint_record(
    checkpoint: dict[str, Any],
    metadata: Any,
    parent: str | None,
    memo: CkptMemo | None,
) -> tuple[dict[str, Any], CkptMemo, bool]:
    """The record for ``checkpoint``: a delta against ``memo`` when it is the parent.

    Returns the record, the memo for the next one (finish it with ``next_memo``)
    and whether the record is a delta.
    """
    cv = dict(checkpoint["channel_versions"])
    # The inner dicts are kept as they are, not copied: LangGraph hands put() a
    # copy of its checkpoint (copy_checkpoint) and never changes it afterwards.
    vs = dict(checkpoint["versions_seen"])
    known = {"v", "id", "ts", "channel_values", "channel_versions", "versions_seen"}
    rec: dict[str, Any] = {
        "id": checkpoint["id"],
        "ts": checkpoint["ts"],
        "v": checkpoint["v"],
        "parent": parent,
        "meta": encode(metadata, "metadata"),
        "extra": encode(
            {k: v for k, v in checkpoint.items() if k not in known}, "checkpoint"
        ),
    }
    if memo is not None and memo.id == parent and memo.chain < memo.full:
        dcv, ucv = _diff(cv, memo.cv)
        dvs, uvs = _diff(vs, memo.vs)
        rec.update(base=parent, dcv=dcv, ucv=ucv, dvs=dvs, uvs=uvs)
        return rec, CkptMemo(checkpoint["id"], cv, vs, 0, 0), True
    rec.update(cv=cv, vs=vs)
    return rec, CkptMemo(checkpoint["id"], cv, vs, 0, 0), False


def apply_record(rec: dict[str, Any], cv: dict[str, Any], vs: dict[str, Any]) -> None:
    """Moves (cv, vs) from the base's state to ``rec``'s, in place."""
    for k, v in rec["dcv"].items():
        if v is None:
            cv.pop(k, None)
        else:
            cv[k] = v
    for k, v in rec["dvs"].items():
        if v is None:
            vs.pop(k, None)
        else:
            vs[k] = dict(v)


def undo_record(rec: dict[str, Any], cv: dict[str, Any], vs: dict[str, Any]) -> None:
    """Moves (cv, vs) from ``rec``'s state back to its base's, in place."""
    for k, v in rec["ucv"].items():
        if v is None:
            cv.pop(k, None)
        else:
            cv[k] = v
    for k, v in rec["uvs"].items():
        if v is None:
            vs.pop(k, None)
        else:
            vs[k] = dict(v)


def blob_record(
    channel: str, version: str, value: Any, memo: BlobMemo | None
) -> tuple[dict[str, Any], BlobMemo | None, bool]:
    """The record for a channel's value at ``version``; a delta when it extends.

    Returns the record, the memo for the next version (None: not a list) and
    whether the record is a delta.
    """
    if type(value) is list:
        if (
            memo is not None
            and memo.chain < memo.full
            and len(value) >= len(memo.items)
            # Items are compared by identity first (a reducer's ``a + b`` keeps
            # them), so this costs pointer compares, not a serialization.
            and value[: len(memo.items)] == memo.items
        ):
            rec = {
                "base": memo.version,
                "add": encode(value[len(memo.items) :], channel),
                "n": len(value),
            }
            return rec, BlobMemo(version, list(value), 0, 0), True
        rec = {"full": encode(value, channel)}
        return rec, BlobMemo(version, list(value), 0, 0), False
    return {"full": encode(value, channel)}, None, False


def rebuild_blob(chain: list[dict[str, Any]]) -> Any:
    """The value of the newest record of ``chain`` (newest first, ends full)."""
    value = decode(chain[-1]["full"])
    if len(chain) == 1:
        return value
    items = list(value)
    for rec in reversed(chain[:-1]):
        items.extend(decode(rec["add"]))
    return items
