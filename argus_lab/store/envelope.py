"""The checkpoint record format: a versioned, checksummed JSON envelope.

Every value in a checkpoint cache is ``"<schema_version>|<crc32>|<json>"`` text: no
pickle anywhere (``JsonOnlyDisk`` refuses to write or read one), a checksum to
catch damage, and a version for migrations (``MIGRATIONS``, one function per record
kind and version step). Session checkpoints, typed states and LangGraph threads
share this format; ``open_cache`` opens a diskcache folder configured for it.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from operator import itemgetter
from pathlib import Path
from typing import Any, Literal

import diskcache

from argus_lab.errors import CorruptCheckpointError
from argus_lab.events import COMMON_FIELDS, EVENT_KINDS, payload_to_fields
from argus_lab.store._opening import PAGE_SIZE, OneCommitOpenCache, prepare_database

__all__ = [
    "EVENTS_PER_ROW",
    "EVENT_VERSION",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Durability",
    "JsonOnlyDisk",
    "RecordKind",
    "encode",
    "encode_bytes",
    "intact_bodies",
    "intact_event_bodies",
    "migration",
    "open_cache",
]

SCHEMA_VERSION = 2
"""1 -> 2: events carry their kind's typed fields instead of a ``payload`` dict."""
EVENT_VERSION = 3
"""The version of event rows, one ahead of the other kinds. 2 -> 3: a row holds
the events of one commit (up to ``EVENTS_PER_ROW``, in seq order), one JSON
text per line, keyed by the first one's seq; a v2 row holds one event. Each
event's JSON is a v2 event's (no migration): only the row changed, so a row of
either version is read without one, and an older argus-lab refuses a v3 row
as newer than it understands instead of calling it damaged."""
EVENTS_PER_ROW = 64
"""At most this many events in one row: a commit of thousands (a failure that
blocks its dependents) stays rows of a few KB, so pages of rows stay pages."""
Durability = Literal["normal", "full"]
"""SQLite ``synchronous`` in WAL mode. "normal": a commit survives a process crash
(SIGKILL, kernel restart) but the last ones may roll back on power loss. "full":
each commit is fsynced and survives power loss too, at a cost (see BENCHMARKS.md)."""

RecordKind = Literal["head", "meta", "plan", "task", "event", "replay"]
MIGRATIONS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}
"""(record kind, from_version) -> function upgrading the JSON data one version."""


def migration(
    kind: RecordKind, from_version: int
) -> Callable[[Callable[[dict[str, Any]], dict[str, Any]]], Callable[..., Any]]:
    """Registers a function that upgrades ``kind`` records from ``from_version``."""

    def register(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[..., Any]:
        MIGRATIONS[(kind, from_version)] = fn
        return fn

    return register


@migration("task", 0)
def _task_v0(d: dict[str, Any]) -> dict[str, Any]:
    # v0 called status "state" and attempts "tries", and had no generation.
    d = dict(d)
    if "state" in d:
        d["status"] = d.pop("state")
    if "tries" in d:
        d["attempts"] = d.pop("tries")
    return d


@migration("meta", 0)
def _meta_v0(d: dict[str, Any]) -> dict[str, Any]:
    # v0 stored the goal as "title" and timestamps as "created_at".
    d = dict(d)
    if "title" in d:
        d["goal"] = d.pop("title")
    if "created_at" in d:
        d["created"] = d.pop("created_at")
        d.setdefault("updated", d["created"])
    return d


for _kind in ("head", "plan", "event", "replay"):
    MIGRATIONS[(_kind, 0)] = dict
for _kind in ("head", "meta", "plan", "task", "replay"):
    MIGRATIONS[(_kind, 1)] = dict


@migration("event", 1)
def _event_v1(d: dict[str, Any]) -> dict[str, Any]:
    # v1 kept each kind's own fields in a "payload" dict; v2 types them as fields
    # of the kind's model (argus_lab.events), a few under new names.
    d = dict(d)
    payload = d.pop("payload", None)
    kind = d.get("kind")
    if not isinstance(payload, dict) or kind not in EVENT_KINDS:
        return d
    for k, v in payload_to_fields(str(kind), payload).items():
        if k not in COMMON_FIELDS or d.get(k) is None:
            d[k] = v
    return d


class JsonOnlyDisk(diskcache.Disk):  # type: ignore[misc]
    """A diskcache Disk that stores str keys and str/bytes values, and never pickles.

    diskcache pickles anything that is not str/bytes/int/float; refusing here makes
    "no pickle" a property of the store, not a habit of its callers.
    """

    def put(self, key: Any) -> tuple[Any, bool]:
        if not isinstance(key, str):
            raise TypeError(f"checkpoint keys are str, got {type(key).__name__}")
        return super().put(key)  # type: ignore[no-any-return]

    def get(self, key: Any, raw: bool) -> Any:
        if not raw:
            raise CorruptCheckpointError(
                "a pickled key was found in a checkpoint; refusing to unpickle it"
            )
        return super().get(key, raw)

    def store(self, value: Any, read: bool, key: Any = diskcache.core.UNKNOWN) -> Any:
        if read or not isinstance(value, str | bytes):
            raise TypeError(
                f"checkpoints store JSON text only, got {type(value).__name__}"
            )
        return super().store(value, read, key=key)

    def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> Any:
        if mode == diskcache.core.MODE_PICKLE:
            raise CorruptCheckpointError(
                "a pickled value was found in a checkpoint; refusing to unpickle it"
            )
        return super().fetch(mode, filename, value, read)


WAL_AUTOCHECKPOINT: dict[str, int] = {"normal": 4000, "full": 300}
"""WAL frames after which a commit also checkpoints the WAL into the database.

SQLite's default is 1,000 (with 512-byte pages, every ~95 steps).

- "normal": a commit does not fsync, and a checkpoint (which does) copies each
  page once however often the WAL changed it since the last one. 4,000 frames
  (a WAL of ~2 MB) checkpoint every ~380 steps, not ~95 at ~1.2 ms each: a run
  is 5-10% less CPU (BENCHMARKS.md, issue 18, eighth session). What "normal"
  promises is unchanged: a crashed process or kernel loses nothing committed;
  a power cut, which "normal" never promised to survive, can take back up to
  ~380 steps instead of ~95 (the witness reports the loss on opening).
- "full": each commit fdatasyncs the WAL, and while the WAL grows into blocks
  the file never held, each of those also commits the file system's journal
  (a new size): a 100-step run spent most of its commits growing a ~540 KB
  WAL. 300 frames (~160 KB) reuse it from the start after ~28 commits: a
  100-step run 18% less CPU, 22% less wall time; at 1,000-5,000 steps 1-3%
  more CPU and ~1.3 KB more written a step (more checkpoints, each fsynced),
  still under 15 KB.
"""


def open_cache(
    directory: Path, durability: Durability = "normal", *, page_size: int = PAGE_SIZE
) -> diskcache.Cache:
    """Opens a diskcache Cache configured for checkpoints (never evicts, no pickle).

    ``page_size`` applies only to a database created here (``_opening.py``).
    """
    # Small pages: a WAL commit writes each page it touched whole.
    prepare_database(str(directory), page_size)
    return OneCommitOpenCache(
        str(directory),
        disk=JsonOnlyDisk,
        eviction_policy="none",
        size_limit=2**62,
        cull_limit=0,
        statistics=0,
        tag_index=0,
        sqlite_synchronous=2 if durability == "full" else 1,
        # Keep records inside SQLite (one transaction) unless they are huge;
        # large results go to artifacts before they get here.
        disk_min_file_size=1 << 22,
        sqlite_wal_autocheckpoint=WAL_AUTOCHECKPOINT[durability],
    )


def encode(data_json: str, version: int = SCHEMA_VERSION) -> str:
    """Wraps JSON text in the versioned, checksummed envelope."""
    # The CRC as 8 hex digits by ``to_bytes(4).hex()``, the version's prefix
    # made once: ``{crc:08x}`` and ``{version}`` go through Python's format
    # machinery, ~2k instructions of every row a step writes (three a step).
    prefix = _PREFIXES.get(version) or f"{version}|"
    return f"{prefix}{zlib.crc32(data_json.encode()).to_bytes(4).hex()}|{data_json}"


def encode_bytes(data: bytes, data_json: str, version: int = SCHEMA_VERSION) -> str:
    """``encode(data_json, version)`` where ``data`` is its UTF-8 already."""
    prefix = _PREFIXES.get(version) or f"{version}|"
    return f"{prefix}{zlib.crc32(data).to_bytes(4).hex()}|{data_json}"


_PREFIXES = {v: f"{v}|" for v in range(max(SCHEMA_VERSION, EVENT_VERSION) + 1)}


_CURRENT = f"{SCHEMA_VERSION}|%08x|"  # what a current, intact record starts with
_WIDTH = len(_CURRENT % 0)  # 11: "2|" + 8 hex digits + "|"
_BODY, _HEAD = itemgetter(slice(_WIDTH, None)), itemgetter(slice(0, _WIDTH))
_VERSION = itemgetter(slice(0, 2))  # "2|": one digit and the bar
_EVENT_ROWS = frozenset({f"{SCHEMA_VERSION}|", f"{EVENT_VERSION}|"})


def intact_bodies(texts: list[Any]) -> list[str] | None:
    """The JSON bodies of many stored values, checked together, or None.

    Every body's CRC-32 is computed and the envelope a current record would
    carry formatted for it, with C-level maps and ONE list comparison (no
    Python bytecode per row). Equal lists mean every value is current-schema
    text with its checksum right, trusted exactly as a row-by-row decode would
    trust it. None if any is otherwise (damaged, an older schema to migrate, a
    value kept in a file, bytes): the caller decodes row by row, which names
    a damaged key.
    """
    try:
        bodies = list(map(_BODY, texts))
        crcs = map(zlib.crc32, map(str.encode, bodies))
        ok = list(map(_CURRENT.__mod__, crcs)) == list(map(_HEAD, texts))
    except TypeError:  # a value that is not text: kept in a file, bytes, a pickle
        return None
    return bodies if ok else None


def intact_event_bodies(texts: list[Any]) -> list[str] | None:
    """``intact_bodies`` for event rows, which may be of version 2 (one event)
    or 3 (a commit's events, one per line): the bodies, or None.

    The same C-level check, the expected envelope formatted with each row's
    own version, and every version one of those two.
    """
    try:
        bodies = list(map(_BODY, texts))
        heads = list(map(_HEAD, texts))
        versions = list(map(_VERSION, heads))
        crcs = map("%08x|".__mod__, map(zlib.crc32, map(str.encode, bodies)))
        ok = list(map(str.__add__, versions, crcs)) == heads
    except TypeError:  # a value that is not text: kept in a file, bytes, a pickle
        return None
    return bodies if ok and _EVENT_ROWS.issuperset(versions) else None
