"""The records of a LangGraph thread: keys, the table, the checksummed envelope.

A thread's LangGraph records are in a table of their own, ``LangGraph`` (key, JSON
text), in the thread's diskcache database. Keys are joined with ``US``, the ASCII
unit separator, which no namespace or channel contains. Every value is
``"<schema_version>|<crc32>|<json>"`` text, upgraded on read by ``LG_MIGRATIONS``.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Callable
from typing import Any

from argus_lab.errors import CorruptCheckpointError, SchemaVersionError

__all__ = [
    "LG_MIGRATIONS",
    "LG_SCHEMA_VERSION",
    "REFS_VERSION",
    "TABLE_SCHEMA",
    "US",
    "lg_decode",
    "lg_encode",
    "thread_session_id",
]

US = "\x1f"
LG_SCHEMA_VERSION = 2
"""The newest version of the checkpoint, blob and write records this module
reads. Version 2 records may hold a secret's reference (``{"$": "secret"}``,
``_secrets.py``); only those are written as 2 (``REFS_VERSION``), the rest as
1, so an older argus-lab still reads a thread that holds none, and refuses
one that does with SchemaVersionError, not a KeyError."""
WRITE_VERSION = 1
REFS_VERSION = 2
LG_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: lambda data: data,  # 2 only adds a tag
}
"""from_version -> function upgrading a LangGraph record's JSON data one version."""


TABLE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS LangGraph ("
    " key TEXT PRIMARY KEY,"
    " value TEXT NOT NULL CHECK (typeof(value) = 'text')"
    ")"
)
"""LangGraph records live in their own table of the thread's diskcache database:
no triggers and no index beyond the key's, and a step's new rows share the
table's last page (a rowid table, not WITHOUT ROWID, whose records over ~1 KB
would overflow their pages). The CHECK makes "JSON text only" a property of the
table (nothing else, and so no pickle, can be stored)."""


def thread_session_id(thread_id: str) -> str:
    """The session id (and folder name) of a LangGraph thread: stable, path-safe."""
    slug = "-".join(re.findall(r"[a-z0-9]+", thread_id.lower()))[:32] or "thread"
    digest = hashlib.sha256(thread_id.encode()).hexdigest()[:10]
    return f"lg-{slug}-{digest}"


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
"""``json.dumps`` with these options, without making an encoder per record
(~9 records per step)."""


def lg_encode(data: Any, version: int = WRITE_VERSION) -> str:
    """Wraps JSON data in the versioned, checksummed envelope."""
    text = _dumps(data)
    return f"{version}|{zlib.crc32(text.encode()):08x}|{text}"


def lg_decode(
    key: str,
    raw: Any,
    *,
    thread_id: str,
    session_id: str,
    corrupt: Callable[[str, object], CorruptCheckpointError],
) -> Any:
    """Checks the envelope of a LangGraph record and returns its data, upgraded.

    Raises:
        CorruptCheckpointError: (made by ``corrupt``) no envelope, a checksum
            mismatch or invalid JSON.
        SchemaVersionError: a newer record, or one no migration can upgrade.
    """
    if not isinstance(raw, str):
        raise corrupt(key, f"unexpected {type(raw).__name__} value")
    try:
        sv_s, crc, body = raw.split("|", 2)
        sv = int(sv_s)
    except ValueError:
        raise corrupt(key, "no version/checksum envelope") from None
    if f"{zlib.crc32(body.encode()):08x}" != crc:
        raise corrupt(key, "checksum mismatch")
    if sv > LG_SCHEMA_VERSION:
        raise SchemaVersionError(
            f"LangGraph thread {thread_id!r}: record has schema_version "
            f"{sv}, newer than this argus-lab understands ({LG_SCHEMA_VERSION}); "
            "upgrade argus-lab to open it",
            session_id=session_id,
        )
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise corrupt(key, f"invalid JSON: {e}") from None
    for v in range(sv, LG_SCHEMA_VERSION):
        fn = LG_MIGRATIONS.get(v)
        if fn is None:
            raise SchemaVersionError(
                f"LangGraph thread {thread_id!r}: no migration for records "
                f"from schema_version {v}",
                session_id=session_id,
            )
        data = fn(data)
    return data
