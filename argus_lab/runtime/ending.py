"""How a run ends: succeeded, failed, or paused and why, committed once.

The run loop (engine.py) enters "running" through ``RunEnd.start`` and leaves
through ``finish``, which commits the session's new status (only when it
changed) and returns the RunResult the caller sees.
"""

from __future__ import annotations

from argus_lab.events import EventBase
from argus_lab.model import SessionStatus
from argus_lab.runtime.options import RunResult, failed_reason
from argus_lab.runtime.scheduler import DONE
from argus_lab.runtime.signals import Signals
from argus_lab.runtime.state import LeaseArg, SessionState

__all__ = ["RunEnd"]


class RunEnd:
    """Commits where a run stands (running, paused, failed, succeeded).

    Args:
        state: The session state (the only writer).
        signals: The pause request and why.
    """

    def __init__(self, state: SessionState, signals: Signals) -> None:
        self._state = state
        self._signals = signals

    def in_doubt_reason(self) -> str | None:
        """Why the run must wait for a person about tasks in doubt, or None."""
        recs = self._state.records
        doubts = [t for t, s in recs.status.items() if s == "in_doubt"]
        if not doubts:
            return None
        first = recs[doubts[0]].reason or ""
        more = f" (and {len(doubts) - 1} more in doubt)" if len(doubts) > 1 else ""
        return f"in doubt: {first}{more}"

    def _set_status(
        self,
        status: SessionStatus,
        reason: str | None,
        events: list[EventBase],
        *,
        lease: LeaseArg = "keep",
    ) -> None:
        st = self._state
        counts = {k: v for k, v in st.counts().items() if v}
        meta = st.info.model_copy(
            update={
                "status": status,
                "reason": reason,
                "updated": st.now(),
                "counts": counts,
                "n_tasks": len(st.tasks),
            }
        )
        st.commit(events=events, meta=meta, lease=lease)

    def start(self) -> bool:
        """Enters "running"; returns False (after pausing) if a person must decide."""
        why = self.in_doubt_reason()
        if why is not None:
            self.pause_now(why)
            return False
        if self._state.info.status != "running":
            self._set_status("running", None, [self._state.event("resumed")])
        return True

    def pause_now(self, reason: str, *, lease: LeaseArg = "keep") -> None:
        """Commits a pause for ``reason`` (only if that changes the status)."""
        info = self._state.info
        if info.status != "paused" or info.reason != reason:
            self._set_status(
                "paused",
                reason,
                [self._state.event("paused", reason=reason)],
                lease=lease,
            )

    def finish(self, *, release: bool = False) -> RunResult:
        """Commits how the run ended (only when that changed) and returns it.

        ``release``: that commit also gives the runner lease back (the run is
        the outermost call and this is its last commit).
        """
        st = self._state
        c = st.counts()
        lease: LeaseArg = None if release else "keep"
        if release:
            st.lease.stop_heartbeat()  # nothing is to renew after this commit
        if self._signals.pause_requested is not None:
            self.pause_now(self._signals.why_paused(), lease=lease)
        elif (why := self.in_doubt_reason()) is not None:
            self.pause_now(why, lease=lease)
        elif c["awaiting_approval"]:
            asked = [
                t for t, s in st.records.status.items() if s == "awaiting_approval"
            ]
            first = asked[0]
            tool = st.tasks[first].tool
            more = f" (and {len(asked) - 1} more)" if len(asked) > 1 else ""
            self.pause_now(
                f"waiting for approval: task {first!r} (tool {tool!r}){more}; call "
                f"s.approve({first!r}) or s.reject({first!r}, reason)",
                lease=lease,
            )
        elif c["failed"] or c["blocked"]:
            failed = {t: r.error or "" for t, r in st.records.where("failed")}
            reason = failed_reason(failed, c["blocked"])
            if st.info.status != "failed" or st.info.reason != reason:
                self._set_status(
                    "failed",
                    reason,
                    [
                        st.event(
                            "session_failed",
                            failed=failed,
                            summary=reason,
                        )
                    ],
                    lease=lease,
                )
        elif all(s in DONE for s in st.records.status.values()):
            if st.info.status != "succeeded":
                self._set_status(
                    "succeeded", None, [st.event("session_succeeded")], lease=lease
                )
        else:
            waiting = [t for t, s in st.records.status.items() if s not in DONE]
            self.pause_now(
                f"nothing can run now; waiting: {', '.join(waiting[:10])}",
                lease=lease,
            )
        return self.result()

    def result(self) -> RunResult:
        """How the session stands, as a RunResult."""
        st = self._state
        failed = {t: r.error or "" for t, r in st.records.where("failed")}
        counts = {k: v for k, v in st.counts().items() if v}
        return RunResult(st.info.status, st.info.reason, counts, failed)
