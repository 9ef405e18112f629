"""The lease of a locked state transaction while its block runs.

``_Renewer`` renews it every third of its lifetime, so a block may take as long
as it needs; only a dead (or stalled past the lifetime) process lets it lapse.
``_HOLDING`` records, per thread, which states' locks the thread holds, so a
nested ``transaction(lock=True)`` fails at once instead of waiting for itself.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from argus_lab.store.head import make_lease

if TYPE_CHECKING:
    from argus_lab.store.state_log import StateLog

__all__ = ["_HOLDING", "_Renewer"]

log = logging.getLogger("argus_lab.state")


class _Renewer:
    """Keeps a held lease alive (every third of its lifetime) while a locked
    transaction runs, however long its body takes; a lease stops being renewed
    only when its process dies, which is when it should expire."""

    def __init__(self, log: StateLog, holder: str, ttl: float) -> None:
        self.lost = False
        self._stop = threading.Event()
        self._log, self._holder, self._ttl = log, holder, ttl
        self._thread = threading.Thread(
            target=self._run, name=f"argus-state-lease-{log.name}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(max(self._ttl / 3, 0.01)):
            try:
                lease = make_lease(self._holder, self._ttl)
                if self._log.set_lease(self._holder, lease) is None:
                    self.lost = True  # e.g. this process was stopped past the ttl
                    return
            except Exception:  # the commit will meet the same store error
                log.exception("state %s: renewing the lease failed", self._log.name)
                return

    def stop(self) -> None:
        """Stops renewing, and waits so that no renewal lands after a release."""
        self._stop.set()
        self._thread.join()


_HOLDING = threading.local()
"""Per thread: the state folders whose lock this thread holds (nesting check)."""
