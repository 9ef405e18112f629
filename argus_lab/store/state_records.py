"""The records of a typed state's version log: their types and their envelope.

``StateLog`` (state_log.py) reads and commits these; this module holds what a
record *is*: the ``head`` (``StateHead``), what one commit writes (``Commit``),
the key of a version (``vkey``), the compact JSON sizes are measured on
(``dumps``), and the checked decoding of the checkpoint envelope
(``"<format>|<crc32>|<json>"``, no pickle) with the error naming what is damaged.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from argus_lab.errors import CorruptCheckpointError, SchemaVersionError
from argus_lab.store.envelope import SCHEMA_VERSION
from argus_lab.store.head import lease_is_live

__all__ = [
    "DEFAULT_SNAPSHOT_EVERY",
    "REFS_FORMAT",
    "STATE_FORMAT",
    "Commit",
    "StateHead",
    "corrupt",
    "decode",
    "dumps",
    "head_from",
    "held",
    "vkey",
]

DEFAULT_SNAPSHOT_EVERY = 64
"""A full snapshot every 64 commits: for a 1 MB state changing one field, the
snapshot's share is 1 MB / 64 = 16 KB per commit, plus the patch (~100 bytes),
under the 20 KB budget (BENCHMARKS.md); reading any version applies <= 63 patches."""


REFS_FORMAT = 3
"""The envelope format of a version record whose document is in stored form
with secrets' references (``"refs": true``, state_secrets.py): one past the
envelope's ``SCHEMA_VERSION`` (2) that every other record is written with, so
an argus-lab from before references refuses it (SchemaVersionError) instead
of handing a program ``{"$": "secret"}`` for its key, and still reads a state
that holds none."""
STATE_FORMAT = max(SCHEMA_VERSION, REFS_FORMAT)
"""The newest envelope format of a state's records this module reads."""


def dumps(doc: Any) -> str:  # compact, as stored: sizes are measured on it
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


@dataclass
class StateHead:
    """The state's current version and bookkeeping, rewritten by every commit."""

    version: int = 0
    base: int = 0
    """The version of the latest full snapshot."""
    patch_bytes: int = 0
    """Bytes of patches written since ``base``."""
    schema: int = 1
    """The model's schema version of the current document."""
    size: int = 0
    """Bytes of the current document's JSON."""
    growth: int = 0
    """Consecutive commits that made the document bigger."""
    last_seq: int = 0
    lease: dict[str, Any] | None = None
    created: float = 0.0
    parent: str | None = None
    forked_at: int | None = None
    json_schema: dict[str, Any] | None = None
    """The model's JSON schema, so other processes (``argus serve``) validate too."""


@dataclass
class Commit:
    """What one commit writes, prepared outside the store's lock."""

    doc: Any
    text: str
    schema: int
    caller: str
    kind: str = "commit"
    patch: list[dict[str, Any]] | None = None
    changed: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    json_schema: dict[str, Any] | None = None
    refs: bool = False
    """``doc`` and ``text`` are a stored form holding secrets' references."""


_HEAD = frozenset(StateHead.__dataclass_fields__)


def corrupt(name: str, key: str, why: object) -> CorruptCheckpointError:
    """The error for a damaged record ``key`` of state ``name``."""
    version = int(key[2:]) if key.startswith("v:") and key[2:].isdigit() else None
    what = f"version {version} (record {key!r})" if version else f"record {key!r}"
    err = CorruptCheckpointError(
        f"state {name}: {what} is damaged ({why}). Other states "
        "and sessions are unaffected; fork the state at an earlier version "
        "(st.fork(at=...)) to go on from there.",
        key=key,
    )
    err.state, err.version = name, version  # type: ignore[attr-defined]
    return err


def decode(name: str, key: str, raw: Any) -> Any:
    """The JSON value of a stored record, its envelope checked."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not isinstance(raw, str):
        raise corrupt(name, key, f"unexpected {type(raw).__name__} value")
    try:
        fmt_s, crc_s, body = raw.split("|", 2)
        fmt = int(fmt_s)
    except ValueError:
        raise corrupt(name, key, "no version/checksum envelope") from None
    if f"{zlib.crc32(body.encode()):08x}" != crc_s:
        raise corrupt(name, key, "checksum mismatch")
    if fmt > STATE_FORMAT:
        raise SchemaVersionError(
            f"state {name}: record {key!r} has format {fmt}, newer than "
            f"this argus-lab understands ({STATE_FORMAT}); upgrade argus-lab"
        )
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        raise corrupt(name, key, e) from None


def head_from(name: str, d: dict[str, Any]) -> StateHead:
    """A ``StateHead`` from its stored dict; fields a newer writer added are
    left out, not fatal."""
    try:
        return StateHead(**{k: v for k, v in d.items() if k in _HEAD})
    except TypeError as e:
        raise corrupt(name, "head", e) from None


def held(lease: dict[str, Any] | None, holder: str | None) -> bool:
    """Whether a live process other than ``holder`` holds ``lease``."""
    if not lease or lease.get("holder") == holder:
        return False
    # A state's lock is documented to expire, even with its holder alive.
    return lease_is_live(lease, time.time(), past_expiry=False)


def vkey(version: int) -> str:
    """The key of version ``version``'s record (sorts by version)."""
    return f"v:{version:012d}"
