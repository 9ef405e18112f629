"""Bulk changes to a thread: copy (fork), prune, delete the checkpoints of runs.

Each is one transaction on the thread it changes. A record that stays but whose
delta base goes is first rewritten whole, so what is kept still loads.
"""

from __future__ import annotations

from typing import Any

from argus_lab.langgraph._codec import decode
from argus_lab.langgraph._read import blob_key, ckpt_key, materialize, write_prefix
from argus_lab.langgraph._record import US
from argus_lab.langgraph._store import ThreadStore

__all__ = ["copy_records", "delete_runs", "prune"]

_DELTA_KEYS = ("base", "dcv", "ucv", "dvs", "uvs")


def _full(
    rec: dict[str, Any], cv: dict[str, Any], vs: dict[str, Any]
) -> dict[str, Any]:
    out = {k: v for k, v in rec.items() if k not in _DELTA_KEYS}
    out.update(cv=cv, vs=vs)
    return out


def _records(st: ThreadStore, ns: str) -> dict[str, dict[str, Any]]:
    return {key.split(US)[2]: data for key, data in st.scan(f"c{US}{ns}{US}")}


def _delete_prefix(
    st: ThreadStore, prefix: str, keep: set[str] | frozenset[str] = frozenset()
) -> None:
    for key, _ in st.scan_raw(prefix):
        if key not in keep:
            st.delete(key)


def copy_records(src: ThreadStore, dst: ThreadStore) -> None:
    """Copies every checkpoint, value and write of ``src`` into ``dst``.

    Records name no thread, so they are copied as stored (checksums and all).
    """
    rows = [row for p in ("c", "b", "w") for row in src.scan_raw(p + US)]
    with dst.transaction():
        for key, text in rows:
            dst.set_text(key, text)


def delete_runs(st: ThreadStore, run_ids: set[str]) -> bool:
    """Deletes the checkpoints whose metadata ``run_id`` is in ``run_ids``, with
    their writes. Returns whether anything was deleted."""
    changed = False
    for ns in st.namespaces():
        records = _records(st, ns)
        doomed = {
            cid
            for cid, rec in records.items()
            if decode(rec["meta"]).get("run_id") in run_ids
        }
        if not doomed:
            continue
        rewrites = {}
        for cid, rec in records.items():
            if cid not in doomed and rec.get("base") in doomed:
                cv, vs = materialize(st, ns, rec, records)
                rewrites[cid] = _full(rec, cv, vs)
        with st.transaction():
            for cid, rec in rewrites.items():
                st.set(ckpt_key(ns, cid), rec)
            for cid in doomed:
                st.delete(ckpt_key(ns, cid))
                st.delete_prefix(write_prefix(ns, cid))
        changed = True
    return changed


def _encoded_value(st: ThreadStore, key: str, rec: dict[str, Any]) -> Any:
    """A blob's whole value, still encoded (the JSON lists of a delta chain
    concatenate), so a rewrite needs no decoding."""
    chain = [rec]
    prefix = key.rsplit(US, 1)[0]
    while "base" in chain[-1]:
        prev = st.get(f"{prefix}{US}{chain[-1]['base']}")
        if prev is None:
            raise st.corrupt(key, "a base value of it is missing")
        chain.append(prev)
    items = list(chain[-1]["full"])
    for r in reversed(chain[:-1]):
        items.extend(r["add"])
    return items


def prune(st: ThreadStore, *, keep_latest: bool) -> None:
    """Keeps each namespace's latest checkpoint (whole) and its writes and
    values, or (``keep_latest=False``) deletes every checkpoint."""
    plans: list[tuple[str, str | None, dict[str, Any], dict[str, Any]]] = []
    for ns in st.namespaces():
        records = _records(st, ns)
        if not keep_latest or not records:
            plans.append((ns, None, {}, {}))
            continue
        latest = max(records)
        cv, vs = materialize(st, ns, records[latest], records)
        blobs: dict[str, Any] = {}
        for ch, ver in cv.items():
            key = blob_key(ns, ch, ver)
            rec = st.get(key)
            if rec is None:
                continue
            if "base" in rec:
                rec = {"full": _encoded_value(st, key, rec)}
            blobs[key] = rec
        plans.append((ns, latest, _full(records[latest], cv, vs), blobs))
    with st.transaction():
        for ns, cid, rec, blobs in plans:
            keep = set(blobs)
            if cid is not None:
                keep.add(ckpt_key(ns, cid))
                st.set(ckpt_key(ns, cid), rec)
                for key, data in blobs.items():
                    st.set(key, data)
            for p in (f"c{US}{ns}{US}", f"b{US}{ns}{US}"):
                _delete_prefix(st, p, keep)
            for key, _ in st.scan_raw(f"w{US}{ns}{US}"):
                if cid is None or key.split(US)[2] != cid:
                    st.delete(key)
