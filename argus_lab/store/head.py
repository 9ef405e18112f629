"""The head of a checkpoint and the runner lease it carries (invariant 6).

The head is the record every commit rewrites: the version counter, the last event
seq, the budgets' running totals and the lease of the process that runs the
session. A lease held by a live process elsewhere refuses other writers; one whose
holder on this host is gone (or gave it up) protects nobody and is taken over.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import PydanticSerializationError
from pydantic_core import to_json as _to_json

from argus_lab.store.envelope import encode_bytes

__all__ = [
    "HOST",
    "Head",
    "abandon_lease",
    "lease_is_live",
    "lease_message",
    "make_lease",
    "refusal",
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
        """The head as JSON text (what ``json.loads`` reads back as these fields)."""
        return _json(self).decode()

    def row(self) -> str:
        """The head's stored text: its JSON in the checksummed envelope
        (``envelope.encode(self.to_json())``, the JSON encoded once)."""
        data = _json(self)
        return encode_bytes(data, data.decode())


def _json(head: Head) -> bytes:
    """The head's JSON as bytes, made in one call into pydantic-core: every
    commit writes the head, and formatting its numbers in Python (a float's
    ``repr`` alone is ~8k instructions, a ``:d`` ~1.5k) cost ~2% of a step.
    Floats are written shortest-round-trip (``1e-05`` as ``0.00001``), NaN
    and infinities as ``json`` writes them; a value pydantic-core cannot
    serialize (a numpy float) sends the head through ``json.dumps``."""
    data = {
        "version": head.version,
        "last_seq": head.last_seq,
        "lease": head.lease,
        "usage": head.usage,
    }
    try:
        return _to_json(data)
    except PydanticSerializationError:
        return json.dumps(data).encode()


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


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, Linux's
    ``/proc/<pid>/stat``), or None where that cannot be read: with the pid
    it names one process, which a reused pid does not."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        # Fields after the command name, which may hold spaces and ")".
        return int(data[data.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


PAST_EXPIRY_S = 600.0
"""How long past its expiry a live local run's lease still holds: a call
blocking its event loop longer than this is taken for a hung process."""

_STARTED: list[int | None] = []
"""This process's start time, once read (``make_lease`` writes it)."""


def _own_start() -> int | None:
    if not _STARTED:
        _STARTED.append(_start_time(os.getpid()))
    return _STARTED[0]


def lease_is_live(
    lease: dict[str, Any] | None, now: float, *, past_expiry: bool = True
) -> bool:
    """Whether a lease still protects its holder: not expired and (here) alive.

    ``past_expiry``: an expired run's lease (``renewed``: a heartbeat renews
    it while the run goes on) of another process on this host that still
    runs (the same process: its start time) is live too, for
    ``PAST_EXPIRY_S`` more. Its heartbeat could not renew it while its event
    loop was blocked (a long call run on the loop), and it may still make
    that call's effect and commit: a second runner would repeat the call (an
    outside check paid twice that way). Leases nothing renews (a LangGraph
    thread's, held between invocations) keep the expiry rule, and so does a
    holder on another host. A run whose release failed (a full disk) frees
    its session ``PAST_EXPIRY_S`` after its lease ran out.
    """
    if not lease:
        return False
    here = lease.get("host") == HOST
    pid = int(lease.get("pid", 0))
    if (expires := lease.get("expires", 0)) <= now:
        started = lease.get("started")
        return (
            past_expiry
            and lease.get("renewed") is True
            and now - expires < PAST_EXPIRY_S
            and here
            and pid != os.getpid()
            and started is not None
            and _start_time(pid) == started
        )
    if here and pid == os.getpid() and lease.get("holder") in _ABANDONED:
        return False
    # A holder on this host whose process is gone cannot renew: take over now
    # rather than making the user wait out the lease.
    return not (here and not _pid_alive(pid))


def abandon_lease(holder: str) -> None:
    """Marks ``holder``'s lease as given up until its release is committed."""
    _ABANDONED.add(holder)


def release_abandoned(holder: str) -> None:
    """``holder`` committed (a release, or a lease it holds again)."""
    _ABANDONED.discard(holder)


def make_lease(
    holder: str,
    ttl: float,
    where: dict[str, Any] | None = None,
    *,
    renewed: bool = False,
) -> dict[str, Any]:
    """A lease for this process, valid for ``ttl`` seconds; ``where``: the
    files it is written to (``copies.where``); ``renewed``: a run's lease,
    which its heartbeat renews while it runs (``lease_is_live``)."""
    lease = {
        "holder": holder,
        "pid": os.getpid(),
        "host": HOST,
        "expires": time.time() + ttl,
    }
    if (started := _own_start()) is not None:
        lease["started"] = started
    if renewed:
        lease["renewed"] = True
    if where:
        lease.update(where)
    return lease


_SESSION_ADVICE = "wait for that run to end, pause it there, or open a fork instead"


def refusal(
    lease: dict[str, Any] | None,
    holder: str,
    label: str,
    *,
    subject: str = "session",
    doing: str = "is being run",
    advice: str = _SESSION_ADVICE,
) -> str | None:
    """Why ``holder`` may not take the runner lease of ``subject`` ``label``
    now (a live holder elsewhere keeps it), or None."""
    if lease and lease.get("holder") != holder and lease_is_live(lease, time.time()):
        return lease_message(label, lease, subject=subject, doing=doing, advice=advice)
    return None


def lease_message(
    label: str,
    lease: dict[str, Any],
    *,
    subject: str = "session",
    doing: str = "is being run",
    advice: str = _SESSION_ADVICE,
) -> str:
    """Why ``subject`` ``label`` cannot be written now, and what to do instead."""
    left = lease.get("expires", 0) - time.time()
    valid = (
        f"lease valid {left:.0f}s more"
        if left > 0
        else f"its lease expired {-left:.0f}s ago, but the process still runs: "
        "a long call may keep it from renewing; kill it if it hangs"
    )
    return (
        f"{subject} {label} {doing} by process {lease.get('pid')} on "
        f"{lease.get('host')} ({valid}){this_process(lease)}; {advice}"
    )


def this_process(lease: dict[str, Any]) -> str:
    """What a refusal adds when the lease is this very process's (another
    object of it holds it: a notebook cell run again without closing)."""
    if lease.get("host") == HOST and lease.get("pid") == os.getpid():
        return (
            ": this process, through another object opened on it (a Session or "
            "an ArgusSaver not closed: a cell run again?); close() that one"
        )
    return ""
