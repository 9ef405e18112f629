"""The head of a checkpoint and the runner lease it carries (invariant 6).

The head is the record every commit rewrites: the version counter, the last event
seq, the budgets' running totals and the lease of the process that runs the
session. A lease held by a live process elsewhere refuses other writers; one whose
holder on this host is gone (or gave it up) protects nobody and is taken over.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HOST",
    "Head",
    "abandon_lease",
    "lease_is_live",
    "lease_message",
    "make_lease",
    "release_abandoned",
]

HOST = socket.gethostname()


@dataclass
class Head:
    """The session's version counter, last event seq and runner lease."""

    version: int = 0
    last_seq: int = 0
    lease: dict[str, Any] | None = None
    usage: dict[str, float] = field(default_factory=dict)
    """Running totals the budgets are checked against: steps, cost_usd,
    tokens, wall_s. Kept here because the head is rewritten by every commit."""

    def to_json(self) -> str:
        # Every commit writes the head, and its lease changes a few times a
        # run at most: the lease's JSON is kept from the last call. The text
        # is what json.dumps of the whole dict makes.
        lease, usage = _lease_json(self.lease), _usage_json(self.usage)
        return (
            f'{{"version": {self.version:d}, "last_seq": {self.last_seq:d}, '
            f'"lease": {lease}, "usage": {usage}}}'
        )


_last_lease: tuple[dict[str, Any] | None, str] = (None, "null")
_KEYS: dict[str, str] = {}  # a usage counter's name -> its JSON


def _usage_json(usage: dict[str, float]) -> str:
    """``json.dumps(usage)``, the same text, without building an encoder on
    every commit: the counters are a few str keys with int or float values
    (anything else goes to json.dumps)."""
    parts = []
    for k, v in usage.items():
        key = _KEYS.get(k)
        if key is None:
            if type(k) is not str or len(_KEYS) > 64:
                return json.dumps(usage)
            key = _KEYS[k] = json.dumps(k)
        t = type(v)
        if t is float and math.isfinite(v):
            parts.append(f"{key}: {v!r}")
        elif t is int:
            parts.append(f"{key}: {v:d}")
        else:  # NaN, infinities, bools, anything else: as json writes them
            return json.dumps(usage)
    return "{" + ", ".join(parts) + "}"


def _lease_json(lease: dict[str, Any] | None) -> str:
    global _last_lease
    seen, text = _last_lease
    if lease != seen:
        text = json.dumps(lease)
        _last_lease = (None if lease is None else dict(lease), text)
    return text


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_ABANDONED: set[str] = set()
"""Lease holders of this process whose release failed (e.g. on a full disk):
their Session gave the lease up, nobody renews it, so it protects no one and a
reopen in this process need not wait for it to expire."""


def lease_is_live(lease: dict[str, Any] | None, now: float) -> bool:
    """Whether a lease still protects its holder: not expired and (here) alive."""
    if not lease or lease.get("expires", 0) <= now:
        return False
    if (
        lease.get("host") == HOST
        and lease.get("pid") == os.getpid()
        and lease.get("holder") in _ABANDONED
    ):
        return False
    # A holder on this host whose process is gone cannot renew: take over now
    # rather than making the user wait out the lease.
    return not (lease.get("host") == HOST and not _pid_alive(int(lease.get("pid", 0))))


def abandon_lease(holder: str) -> None:
    """Marks ``holder``'s lease as given up until its release is committed."""
    _ABANDONED.add(holder)


def release_abandoned(holder: str) -> None:
    """``holder`` committed (a release, or a lease it holds again)."""
    _ABANDONED.discard(holder)


def make_lease(holder: str, ttl: float) -> dict[str, Any]:
    """A lease for this process, valid for ``ttl`` seconds."""
    return {
        "holder": holder,
        "pid": os.getpid(),
        "host": HOST,
        "expires": time.time() + ttl,
    }


def lease_message(label: str, lease: dict[str, Any]) -> str:
    """Why session ``label`` cannot be written now, and what to do instead."""
    left = max(0.0, lease.get("expires", 0) - time.time())
    return (
        f"session {label} is being run by process {lease.get('pid')} on "
        f"{lease.get('host')} (lease valid {left:.0f}s more); wait for that run to "
        "end, pause it there, or open a fork instead"
    )
