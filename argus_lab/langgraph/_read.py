"""Reading a thread's records back into LangGraph's CheckpointTuples."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple, writes_sort_key

from argus_lab.langgraph._codec import decode
from argus_lab.langgraph._delta import apply_record, rebuild_blob, undo_record
from argus_lab.langgraph._record import US
from argus_lab.langgraph._secrets import revealing
from argus_lab.langgraph._store import ThreadStore

__all__ = [
    "blob_key",
    "ckpt_key",
    "iter_tuples",
    "load_tuple",
    "materialize",
    "write_prefix",
]


def ckpt_key(ns: str, cid: str) -> str:
    return f"c{US}{ns}{US}{cid}"


def blob_key(ns: str, channel: str, version: Any) -> str:
    return f"b{US}{ns}{US}{channel}{US}{version}"


def write_prefix(ns: str, cid: str) -> str:
    return f"w{US}{ns}{US}{cid}{US}"


def _get_record(st: ThreadStore, ns: str, cid: str, cache: dict[str, Any]) -> Any:
    rec = cache.get(cid)
    if rec is None:
        rec = st.get(ckpt_key(ns, cid))
    return rec


def materialize(
    st: ThreadStore, ns: str, rec: dict[str, Any], cache: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(channel_versions, versions_seen) of a checkpoint record: its delta chain
    is walked back to a full record, then applied forward."""
    cache = cache or {}
    chain = [rec]
    while "base" in chain[-1]:
        base = chain[-1]["base"]
        prev = _get_record(st, ns, base, cache)
        if prev is None:
            raise st.corrupt(
                ckpt_key(ns, chain[-1]["id"]),
                f"its base checkpoint {base} is missing",
            )
        chain.append(prev)
    full = chain[-1]
    cv = dict(full["cv"])
    vs = {k: dict(v) for k, v in full["vs"].items()}
    for r in reversed(chain[:-1]):
        apply_record(r, cv, vs)
    return cv, vs


def load_values(st: ThreadStore, ns: str, cv: dict[str, Any]) -> dict[str, Any]:
    """The channel values a checkpoint's versions point at (delta chains rebuilt)."""
    keys = {blob_key(ns, ch, ver): ch for ch, ver in cv.items()}
    got = st.get_many(list(keys))
    out: dict[str, Any] = {}
    for key, ch in keys.items():
        rec = got.get(key)
        if rec is None or "empty" in rec:
            continue
        chain = [rec]
        while "base" in chain[-1]:
            bkey = blob_key(ns, ch, chain[-1]["base"])
            prev = st.get(bkey)
            if prev is None:
                raise st.corrupt(key, f"its base value {bkey!r} is missing")
            chain.append(prev)
        out[ch] = rebuild_blob(chain)
    return out


def load_writes(st: ThreadStore, ns: str, cid: str) -> list[tuple[str, str, Any]]:
    """A checkpoint's pending writes, in LangGraph's ``writes_sort_key`` order."""
    rows = [data for _, data in st.scan(write_prefix(ns, cid))]
    rows.sort(key=lambda w: writes_sort_key(w["path"], w["task"], w["idx"]))
    return [(w["task"], w["ch"], decode(w["v"])) for w in rows]


def _tuple(
    st: ThreadStore,
    ns: str,
    rec: dict[str, Any],
    cv: dict[str, Any],
    vs: dict[str, Any],
) -> CheckpointTuple:
    tid = st.thread_id
    # For the graph: secret env values put back (_secrets.py).
    with revealing(f"LangGraph thread {tid!r}"):
        checkpoint: dict[str, Any] = {
            "v": rec["v"],
            "id": rec["id"],
            "ts": rec["ts"],
            "channel_values": load_values(st, ns, cv),
            "channel_versions": dict(cv),
            "versions_seen": {k: dict(v) for k, v in vs.items()},
        }
        checkpoint.update(decode(rec.get("extra") or {}))
        parent = rec.get("parent")
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": tid,
                    "checkpoint_ns": ns,
                    "checkpoint_id": rec["id"],
                }
            },
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=decode(rec["meta"]),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": tid,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=load_writes(st, ns, rec["id"]),
        )


def load_tuple(st: ThreadStore, ns: str, cid: str | None) -> CheckpointTuple | None:
    """One checkpoint (the latest of ``ns`` when ``cid`` is None), or None."""
    if cid is None:
        key = st.last_key(f"c{US}{ns}{US}")
        if key is None:
            return None
        cid = key.split(US)[2]
    rec = st.get(ckpt_key(ns, cid))
    if rec is None:
        return None
    cv, vs = materialize(st, ns, rec)
    return _tuple(st, ns, rec, cv, vs)


def iter_tuples(
    st: ThreadStore,
    ns: str,
    *,
    cid: str | None,
    before: str | None,
    filter: dict[str, Any] | None,
) -> Iterator[CheckpointTuple]:
    """The checkpoints of one namespace, newest first.

    A delta record knows the entries it changed and their old values, so walking
    back from a checkpoint to its parent undoes one record instead of rebuilding
    the parent from its full ancestor: listing a history is linear in its length.
    """
    records = {key.split(US)[2]: data for key, data in st.scan(f"c{US}{ns}{US}")}
    state: tuple[str, dict[str, Any], dict[str, Any]] | None = None
    for rid in sorted(records, reverse=True):
        rec = records[rid]
        if cid is not None and rid != cid:
            continue
        if before is not None and rid >= before:
            continue
        if filter:
            with revealing(f"LangGraph thread {st.thread_id!r}"):
                meta = decode(rec["meta"])
            if not all(meta.get(k) == v for k, v in filter.items()):
                continue
        if state is not None and records[state[0]].get("base") == rid:
            _, cv, vs = state
            undo_record(records[state[0]], cv, vs)
        else:
            cv, vs = materialize(st, ns, rec, records)
        state = (rid, cv, vs)
        yield _tuple(st, ns, rec, cv, vs)
