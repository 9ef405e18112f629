"""The runner lease: who may write a session now (invariant 6).

A lease names its holder and expires unless renewed; while a public call of
the Session runs, the lease is renewed by every commit past half its life and
by a heartbeat every third of it. The store checks the lease and the version
counter on every commit, so a second writer gets ConcurrentSessionError, never
a lost update. This object is the bookkeeping; the commits that carry a lease
go through the state (state.py), the only writer.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from argus_lab.errors import ArgusError
from argus_lab.runtime.options import log
from argus_lab.store.checkpoints import make_lease
from argus_lab.store.head import refusal

__all__ = ["Lease", "pause_refusal"]


def pause_refusal(lease: dict[str, Any] | None, holder: str, label: str) -> str | None:
    """Why ``pause()`` on a Session object that does not run the session
    cannot pause it: a live process other than ``holder`` runs it (where it
    runs, and how to pause it there); None if nobody else does."""
    pid = lease.get("pid") if lease else None
    return refusal(
        lease,
        holder,
        label,
        advice=(
            "pause() on this Session object, which does not run it, cannot "
            "stop that run. Pause it there: Ctrl-C in that process (SIGINT: "
            f"`kill -INT {pid}` on its host) pauses the session, as does the "
            "Pause button of its widget or pause() on the Session object that "
            "runs it"
        ),
    )


class Lease:
    """This Session object's runner lease.

    Args:
        ttl: Seconds the lease lasts without renewal.
        where: The files every lease written names (``SessionStore.where``),
            so that a copy of them is told apart (store/copies.py).
    """

    def __init__(self, ttl: float, where: dict[str, Any] | None = None) -> None:
        self.holder = uuid.uuid4().hex
        """Names this Session object in the stored lease."""
        self.ttl = ttl
        self.where = where
        self.expires = 0.0
        """When the lease we last wrote runs out (0: we hold none)."""
        self.active = 0
        """Public calls in progress that hold the lease (re-entrant)."""
        self.pending = False
        """Taken but not written yet: the next commit writes it (and checks,
        in its own transaction, that nobody else wrote or holds it since)."""
        self._heartbeat: asyncio.TimerHandle | None = None

    @property
    def held(self) -> bool:
        """Whether a public call holds the lease now."""
        return self.active > 0

    def fresh(self) -> dict[str, Any]:
        """A new lease for this holder, valid for ``ttl`` seconds from now."""
        return make_lease(self.holder, self.ttl, self.where, renewed=True)

    def renewal(self, now: float) -> dict[str, Any] | None:
        """A fresh lease if one is taken but not written yet, or held and past
        half its life; else None."""
        if self.pending or (self.active and now > self.expires - self.ttl / 2):
            return self.fresh()
        return None

    def start_heartbeat(
        self, renew: Callable[[dict[str, Any]], None], label: str
    ) -> None:
        """Renews the lease every ttl/3 while held, by calling ``renew(lease)``
        (a commit); stops when the lease is released or a renewal is refused."""
        loop = asyncio.get_running_loop()

        def beat() -> None:
            if not self.active:
                return
            try:
                renew(self.fresh())
            except ArgusError as e:
                # Our lease was taken over (we stalled past it): the next commit
                # of the run raises the same error to the caller; stop beating.
                log.warning("session %s: lease renewal refused: %s", label, e.message)
                return
            self._heartbeat = loop.call_later(self.ttl / 3, beat)

        self._heartbeat = loop.call_later(self.ttl / 3, beat)

    def stop_heartbeat(self) -> None:
        """Stops renewing (the lease is being released)."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
