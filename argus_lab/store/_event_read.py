"""Reading a session's events in bulk: pages of rows, envelopes checked together.

A trajectory can hold 100,000+ events and the analysis frames read all of them, so
the per-row work of ``CheckpointReader.decode`` (split the envelope, parse the
version, format the checksum, compare) dominated the read. Here a page of events is
fetched with one query that selects only the stored texts (no key, mode or file
name objects), and its envelopes are checked with C-level maps and ONE list
comparison, no Python bytecode per row:

- (``envelope.intact_event_bodies``) ``body = text[11:]`` for every row, its
  CRC-32 computed (``zlib.crc32``); the envelope an intact row of its version
  would carry, ``f"{version}|{crc:08x}|"``, formatted for every row and compared
  with every row's first 11 characters; every version 2 (one event) or 3 (a
  commit's events, one a line, ``envelope.EVENT_VERSION``).

Equal lists mean every row is current and its checksum matches, so its body is
trusted exactly as ``decode`` would trust it; each row's body is split into lines
(one event each) in C. Anything else in a page (a damaged row, an older
schema to migrate, a value kept in a file, bytes) sends that page through the
row-by-row path, which names the damaged key in its error.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain, repeat
from typing import TYPE_CHECKING

from argus_lab.store.envelope import intact_event_bodies

if TYPE_CHECKING:
    from argus_lab.store._reader import CheckpointReader

__all__ = ["PAGE", "event_pages"]

PAGE = 8192
"""Seqs per query: big enough that per-query costs vanish, small enough that a
reader wanting the first few (the server's paged API) does not read them all."""

_LAST = "SELECT max(key) FROM Cache WHERE key >= ? AND key < 'e;' AND raw = 1"
_AT = "SELECT 1 FROM Cache WHERE key = ? AND raw = 1"
_BEFORE = "SELECT max(key) FROM Cache WHERE key >= 'e:' AND key < ? AND raw = 1"


def _key(seq: int) -> str:
    return f"e:{seq:012d}"


def _lines(bodies: list[str]) -> list[str]:
    """One text per event: a row of version 3 holds a commit's events, one a
    line (envelope.EVENT_VERSION). Each row split by C-level maps: a row of one
    event comes back as the same string, so only the rows of several are
    copied (joining the page to split it once copied every row twice)."""
    return list(chain.from_iterable(map(str.split, bodies, repeat("\n"))))


def event_pages(read: CheckpointReader, since: int = 0) -> Iterator[list[str]]:
    """The JSON text of every event with seq > since, in seq order, a page at a
    time (each a list), every record's envelope and checksum checked.

    A row holds the events of one commit, keyed by the first one's seq: the
    event after ``since`` may sit in a row that starts before it (looked up
    only when no row starts at it, so a read never decodes a row it skips).

    Raises:
        CorruptCheckpointError: a damaged event record (named by its key).
        SchemaVersionError: a record newer than this argus-lab.
    """
    import sqlite3

    sql = read.cache._sql  # diskcache's per-thread connection (no range read API)
    lo = _key(since + 1)
    try:
        last = sql(_LAST, (lo,)).fetchone()[0]
        prev = (
            sql(_BEFORE, (lo,)).fetchone()[0]
            if since > 0 and sql(_AT, (lo,)).fetchone() is None
            else None
        )
    except sqlite3.DatabaseError as e:
        raise read.db_error(f"{lo}*", e) from None
    if prev is not None and prev[2:].isdigit():
        first = int(prev[2:])
        tail = list(read.decode_events(prev, _key(first + 1)))[since + 1 - first :]
        if tail:
            yield tail
    if last is None:
        return
    if not last[2:].isdigit():  # not an event key we wrote: read it all carefully
        yield list(read.decode_events(lo, "e;"))
        return
    end = int(last[2:]) + 1  # one past the last row's first seq
    start = since + 1
    while start < end:
        stop = min(start + PAGE, end)
        lo, hi = _key(start), _key(stop)
        bodies = intact_event_bodies(read.values(lo, hi))
        # Not all plain: the careful path, with the key named.
        bodies = list(read.decode_events(lo, hi)) if bodies is None else _lines(bodies)
        if bodies:  # a page's seqs may all sit in a row that began before it
            yield bodies
        start = stop


def event_texts(read: CheckpointReader, since: int = 0) -> list[str]:
    """Every event's JSON text with seq > since, in order (see ``event_pages``)."""
    out: list[str] = []
    for page in event_pages(read, since):
        out.extend(page)
    return out
