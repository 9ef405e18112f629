"""The version log of one typed state: JSON Patch deltas on diskcache.

Keys in a state's cache (``<workspace>/states/<name>/``):

- ``head``: version, the latest snapshot's version, bytes of patches since it,
  the model's schema version, the size-watch counters and the writer lease;
  rewritten by every commit.
- ``v:<version>``: one record per version: either a full ``snapshot`` or a JSON
  Patch (RFC 6902) against the version before, plus time, size, changed fields,
  caller and the model's schema version; ``"refs": true`` (and envelope format
  3, which older readers refuse) when the version's document is a stored form
  holding secrets' references (state_secrets.py).
- ``e:<seq>``: state events (size warnings, compactions, migrations, forks).

Values use the checkpoint envelope (``"<format>|<crc32>|<json>"``, no pickle;
the record types and their decoding are in state_records.py).
A commit writes its record, events and head in ONE SQLite transaction, after
checking the version it started from and the lease, so a crash leaves each
version whole or absent. Reading a version costs a snapshot + < K patches.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import diskcache
import jsonpatch

from argus_lab.errors import ConflictError, CorruptCheckpointError, StorageFullError
from argus_lab.store.envelope import Durability, encode, open_cache
from argus_lab.store.folders import fsync_dir
from argus_lab.store.space import full_error, is_damaged, is_disk_full
from argus_lab.store.state_lost import check_lost_versions
from argus_lab.store.state_records import (
    DEFAULT_SNAPSHOT_EVERY,
    REFS_FORMAT,
    Commit,
    StateHead,
    corrupt,
    decode,
    dumps,
    head_from,
    held,
    vkey,
)
from argus_lab.store.witness import Witness

# The record types and ``dumps`` keep their old import path here.
__all__ = ["DEFAULT_SNAPSHOT_EVERY", "Commit", "StateHead", "StateLog", "dumps"]


class StateLog:
    """The store of one state: a diskcache folder of versioned records."""

    def __init__(
        self,
        directory: Path,
        name: str,
        *,
        durability: Durability = "normal",
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        accept_lost_commits: bool = False,
    ) -> None:
        if snapshot_every < 1:
            raise ValueError(f"snapshot_every must be >= 1, got {snapshot_every}")
        self.directory = Path(directory)
        self.name = name
        self.snapshot_every = snapshot_every
        wal = self.directory / "cache.db-wal"
        settled = not wal.exists() or wal.stat().st_size == 0
        try:
            self.cache = open_cache(self.directory, durability)
        except sqlite3.DatabaseError as e:
            raise self._failed("cache.db", e) from None
        self.witness = Witness(self.directory, fsync=durability == "full")
        """The latest committed version, outside SQLite (state_lost.py)."""
        try:
            check_lost_versions(self, settled=settled, accept=accept_lost_commits)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Closes the SQLite connections (the data stays on disk)."""
        self.cache.close()
        self.witness.close()

    # -- the envelope ----------------------------------------------------------

    def _corrupt(self, key: str, why: object) -> CorruptCheckpointError:
        return corrupt(self.name, key, why)

    def _failed(self, key: str, e: Exception) -> Exception:
        """A full disk (nothing damaged, nothing committed), a damaged file, or
        another failure to read or write (not known to damage anything)."""
        if is_disk_full(e, self.directory):
            err = full_error(self.directory / "cache.db", e, what="committing to")
            err.message = f"state {self.name}: {err.message}"
            return err
        if isinstance(e, sqlite3.DatabaseError) and not is_damaged(e):
            return CorruptCheckpointError(
                f"state {self.name}: could not read or write {key!r} in "
                f"{self.directory} ({e}). Nothing is known to be damaged: check "
                "the disk, its free space and the folder's permissions, then "
                "try again.",
                key=key,
            )
        if isinstance(e, sqlite3.DatabaseError):
            # SQLite cannot read the file itself: no version of it can be
            # forked from (the advice for a damaged record).
            db = self.directory / "cache.db"
            return CorruptCheckpointError(
                f"state {self.name}: its database {db} is damaged ({e}), found "
                f"reading {key!r}: it can be neither read nor forked. Other "
                "states and sessions are unaffected. Restore its folder from a "
                f"backup, or delete {self.directory} to start it over; `sqlite3 "
                f"{db} .recover` may save the versions that can still be read.",
                key=key,
            )
        return self._corrupt(key, e)

    def _decode(self, key: str, raw: Any) -> Any:
        return decode(self.name, key, raw)

    def _get(self, key: str) -> Any:
        try:
            raw = self.cache.get(key)
        except sqlite3.DatabaseError as e:
            raise self._failed(key, e) from None
        return None if raw is None else self._decode(key, raw)

    def _scan(
        self, lo: str, hi: str, limit: int | None = None
    ) -> Iterator[tuple[str, Any]]:
        # One range query (diskcache has no range read; checkpoints do the same).
        # LIMIT in SQL: a page of history never reads the snapshots past it.
        try:
            rows = self.cache._sql(
                "SELECT key, mode, filename, value FROM Cache "
                "WHERE key >= ? AND key < ? AND raw = 1 ORDER BY key LIMIT ?",
                (lo, hi, -1 if limit is None else limit),
            ).fetchall()
        except sqlite3.DatabaseError as e:
            raise self._failed(f"{lo}*", e) from None
        for key, mode, filename, value in rows:
            if mode != diskcache.core.MODE_RAW:
                value = self.cache.disk.fetch(mode, filename, value, False)
            yield key, self._decode(key, value)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        try:
            with self.cache.transact(retry=True):
                yield
        except StorageFullError:
            raise
        except (sqlite3.DatabaseError, OSError) as e:
            # OSError: a record over 4 MB is written as a file (ENOSPC there).
            if isinstance(e, OSError) and not is_disk_full(e):
                raise
            raise self._failed("cache.db", e) from None

    # -- reading ---------------------------------------------------------------

    def head(self) -> StateHead | None:
        """The current head, or None when no state was created here."""
        d = self._get("head")
        return None if d is None else head_from(self.name, d)

    def record(self, version: int) -> dict[str, Any]:
        """The stored record of one version (KeyError when there is none)."""
        rec = self._get(vkey(version))
        if rec is None:
            first = next(self.records(limit=1), None)
            if first is not None and 0 < version < int(first["v"]):
                raise KeyError(
                    f"state {self.name}: version {version} was dropped by "
                    f"compact(keep_history=False); the oldest version kept is "
                    f"{first['v']}"
                )
            raise KeyError(f"state {self.name} has no version {version}")
        return dict(rec)

    def records(
        self, lo: int = 1, hi: int | None = None, *, limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Records of versions lo..hi (inclusive), oldest first; at most
        ``limit`` of them."""
        top = vkey(hi + 1) if hi is not None else "v;"
        for _, rec in self._scan(vkey(lo), top, limit):
            yield rec

    def replay(
        self, version: int, start: tuple[int, Any] | None = None
    ) -> tuple[Any, int, bool]:
        """The document at ``version`` as stored, its schema, and whether it is
        a stored form holding secrets' references (state_secrets.py), from its
        snapshot and patches; ``start`` (version, document, not mutated by the
        caller after) skips what is already known when no snapshot intervenes."""
        rec = self.record(version)
        base = int(rec["base"])
        if start is not None and start[0] >= base and start[0] <= version:
            lo, doc = start[0] + 1, start[1]
        else:
            lo, doc = base, None
        schema = int(rec["schema"])
        n = lo
        for r in self.records(lo, version):
            if int(r["v"]) != n:
                raise self._corrupt(vkey(n), "missing from the version log")
            n += 1
            if "snapshot" in r:
                doc = r["snapshot"]
            else:
                if doc is None:
                    raise self._corrupt(vkey(int(r["v"])), "patch with no snapshot")
                try:
                    doc = jsonpatch.apply_patch(doc, r["patch"], in_place=True)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
                    raise self._corrupt(
                        vkey(int(r["v"])), "patch does not apply"
                    ) from None
        if n != version + 1:
            raise self._corrupt(vkey(n), "missing from the version log")
        return doc, schema, bool(rec.get("refs"))

    def events(self, since: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
        """State events with seq > since (at most ``limit``)."""
        return [ev for _, ev in self._scan(f"e:{since + 1:012d}", "e;", limit)]

    # -- writing ---------------------------------------------------------------

    def create(self, c: Commit, head: StateHead) -> StateHead:
        """Writes version 1 (a snapshot); ConflictError when one exists."""
        with self._transaction():
            if self.cache.get("head") is not None:
                raise ConflictError(
                    f"state {self.name} already exists", state=self.name, version=1
                )
            head.version = 0
            head.created = head.created or time.time()
            self._write(head, c, snapshot=True)
        if self.witness.fsync:  # "full": the new folder's name too (folders.py)
            fsync_dir(self.directory.parent)
        self.witness.record(head.version, [], last_seq=head.last_seq)
        return head

    def commit(
        self,
        c: Commit,
        expected: int,
        holder: str | None = None,
        *,
        release: bool = False,
        prune: bool = False,
        max_size: int | None = None,
        growth_window: int = 0,
    ) -> StateHead:
        """Writes one version atomically, after checking nobody else committed
        since ``expected`` and no live lease other than ``holder``'s is held.

        Size watch: a ``state_size_warning`` event joins ``c.events`` when the
        document grows past ``max_size``, or has grown at each of the last
        ``growth_window`` commits."""
        with self._transaction():
            head = self._check(expected, holder)
            if release:
                head.lease = None
            self._watch(head, c, max_size, growth_window)
            patch_len = len(dumps(c.patch)) if c.patch is not None else 0
            snapshot = (
                c.patch is None
                or c.schema != head.schema
                or head.version + 1 - head.base >= self.snapshot_every
                # Patches outweighing the document: a snapshot is cheaper to read.
                or head.patch_bytes + patch_len > len(c.text)
            )
            if prune:
                self.cache._sql(
                    "DELETE FROM Cache WHERE key >= ? AND key < ?",
                    ("v:", vkey(head.version + 1)),
                )
            self._write(head, c, snapshot=snapshot, patch_len=patch_len)
        # The seq too: after a loss, events are numbered past the lost ones.
        self.witness.record(head.version, [], last_seq=head.last_seq)
        return head

    def _watch(
        self, head: StateHead, c: Commit, max_size: int | None, window: int
    ) -> None:
        size = len(c.text)
        head.growth = head.growth + 1 if size > head.size else 0
        why = None
        if max_size is not None and size > max_size >= head.size:
            why = f"grew past {max_size} bytes"
        elif window > 0 and head.growth > 0 and head.growth % window == 0:
            why = f"grew at each of the last {window} commits"
        if why is not None:
            c.events.append(
                {
                    "kind": "state_size_warning",
                    "state": self.name,
                    "ts": time.time(),
                    "payload": {"size": size, "before": head.size, "reason": why},
                }
            )

    def _check(self, expected: int, holder: str | None) -> StateHead:
        head = self.head()
        if head is None:
            raise self._corrupt("head", "missing: this folder holds no state")
        lease = head.lease
        if lease and held(lease, holder):
            raise ConflictError(
                f"state {self.name} is locked by process {lease.get('pid')} on "
                f"{lease.get('host')} (st.transaction(lock=True)); nothing was "
                "written. Retry, or use st.update(fn, retries=n) which retries.",
                state=self.name,
                version=head.version,
            )
        if head.version != expected:
            raise ConflictError(
                f"state {self.name} was changed by another writer (version "
                f"{head.version}, this transaction started at {expected}); nothing "
                "was written. Use st.update(fn, retries=n) to re-run on the latest.",
                state=self.name,
                version=head.version,
            )
        return head

    def _write(
        self, head: StateHead, c: Commit, *, snapshot: bool, patch_len: int = 0
    ) -> None:
        head.version += 1
        rec: dict[str, Any] = {
            "v": head.version,
            "ts": time.time(),
            "kind": c.kind,
            "caller": c.caller,
            "schema": c.schema,
            "size": len(c.text),
            "changed": c.changed,
        }
        if c.refs:
            rec["refs"] = True
        if snapshot:
            head.base, head.patch_bytes = head.version, 0
            rec["base"] = head.version
            # The document's own text: no second serialization of 1 MB.
            body = dumps(rec)[:-1] + ',"snapshot":' + c.text + "}"
        else:
            head.patch_bytes += patch_len
            rec["base"] = head.base
            rec["patch"] = c.patch
            body = dumps(rec)
        head.schema = c.schema
        if c.json_schema is not None:
            head.json_schema = c.json_schema
        head.size = len(c.text)
        # A stored form with references: a format older readers refuse.
        body = encode(body, REFS_FORMAT) if c.refs else encode(body)
        self.cache.set(vkey(head.version), body)
        for ev in c.events:
            head.last_seq += 1
            ev = {**ev, "seq": head.last_seq, "version": head.version}
            self.cache.set(f"e:{head.last_seq:012d}", encode(dumps(ev)))
        self.cache.set("head", encode(dumps(asdict(head))))

    def set_lease(self, holder: str, lease: dict[str, Any] | None) -> StateHead | None:
        """Takes (or, with ``lease=None``, releases) the writer lease. Returns
        None, writing nothing, while another live holder keeps it."""
        with self._transaction():
            head = self.head()
            if head is None:
                raise self._corrupt("head", "missing: this folder holds no state")
            cur = head.lease
            if held(cur, holder):
                return None
            if lease is None and cur and cur.get("holder") != holder:
                return head  # not ours to release
            head.lease = lease
            self.cache.set("head", encode(dumps(asdict(head))))
        return head
