"""The runner: lease and recovery, the run and step loops, and how a run ends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Literal

from argus_lab.errors import ArgusError
from argus_lab.events import EventBase
from argus_lab.model import SessionStatus, TaskRecord
from argus_lab.runtime.options import RunResult, T, log
from argus_lab.runtime.scheduler import DONE
from argus_lab.runtime.supervisor import Supervisor
from argus_lab.store.checkpoints import make_lease

if TYPE_CHECKING:
    pass

__all__ = ["Engine"]


class Engine(Supervisor):
    """Holds the lease, recovers interrupted work, runs and steps the plan."""

    async def _guarded(self, coro: Coroutine[Any, Any, T]) -> T:
        """Holds the runner lease around one public call (re-entrant)."""
        if self._wake is None:
            self._wake = asyncio.Event()
        if self._active == 0:
            try:
                self._acquire()
            except BaseException:
                coro.close()  # refused: the call never starts, and never leaks
                raise
        self._active += 1
        try:
            return await coro
        finally:
            self._active -= 1
            if self._active == 0:
                self._release()

    def _acquire(self) -> None:
        before = self._version
        head = self._store.acquire_lease(self._holder, self.options.lease_ttl)
        self._lease_expires = head.lease["expires"] if head.lease else 0.0
        self._wall_mark = time.monotonic()  # idle time between calls is free
        if head.version != before + 1:
            # Someone else wrote since we loaded (their lease ended): continue from
            # what is on disk, never from our stale copy.
            self._apply(self._store.load())
        self._version = head.version
        self._recover()
        self._schedule_heartbeat()

    def _release(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        try:
            self._commit(lease=None)
        except ArgusError:
            log.warning("could not release the lease of session %s", self.id)
        self._lease_expires = 0.0

    def _schedule_heartbeat(self) -> None:
        loop = asyncio.get_running_loop()

        def beat() -> None:
            if not self._active:
                return
            try:
                self._commit(lease=make_lease(self._holder, self.options.lease_ttl))
            except ArgusError as e:
                # Our lease was taken over (we stalled past it): the next commit
                # of the run raises the same error to the caller; stop beating.
                log.warning("session %s: lease renewal refused: %s", self.id, e.message)
                return
            self._heartbeat = loop.call_later(self.options.lease_ttl / 3, beat)

        self._heartbeat = loop.call_later(self.options.lease_ttl / 3, beat)

    def _recover(self) -> None:
        """Decides about attempts a dead process left RUNNING (invariant 2)."""
        changed: list[TaskRecord] = []
        events: list[EventBase] = []
        for tid, rec in self._records.items():
            if rec.status != "running" or tid in self._timers:
                continue
            task = self._tasks[tid]
            tool = self._tool_for(task)
            risky = any(  # an LLM task that may have been making a write
                (t := self._tools.get(n)) is not None
                and t.side_effect == "write"
                and not t.idempotent
                for n in task.llm_tools
            )
            if (
                tool is not None
                and not risky
                and (tool.idempotent or tool.side_effect != "write")
            ):
                # Safe to repeat: same generation, so the same idempotency key.
                changed.append(rec.model_copy(update={"status": "pending"}))
                events.append(
                    self._event(
                        "resumed",
                        tid,
                        attempt=rec.attempts,
                        payload={"recovered": "rerun", "key": rec.idempotency_key},
                    )
                )
            else:
                why = (
                    f"task {tid!r} was interrupted during attempt {rec.attempts} of "
                    f"tool {self._tasks[tid].tool!r}, which has side effects and is "
                    "not idempotent (or is not registered): it may or may not have "
                    f"taken effect. Check, then call s.retry({tid!r}) to run it "
                    f"again or s.skip({tid!r}) if it took effect."
                )
                changed.append(
                    rec.model_copy(update={"status": "in_doubt", "reason": why})
                )
                events.append(
                    self._event(
                        "in_doubt", tid, attempt=rec.attempts, payload={"reason": why}
                    )
                )
        if changed:
            self._commit(changed, events)
            for r in changed:
                self._sched.set(r.task_id, r.status)

    def _in_doubt_reason(self) -> str | None:
        doubts = [t for t, r in self._records.items() if r.status == "in_doubt"]
        if not doubts:
            return None
        first = self._records[doubts[0]].reason or ""
        more = f" (and {len(doubts) - 1} more in doubt)" if len(doubts) > 1 else ""
        return f"in doubt: {first}{more}"

    def _set_status(
        self,
        status: SessionStatus,
        reason: str | None,
        events: list[EventBase],
        *,
        lease: dict[str, Any] | Literal["keep"] | None = "keep",
    ) -> None:
        counts = {k: v for k, v in self.counts().items() if v}
        meta = self._info.model_copy(
            update={
                "status": status,
                "reason": reason,
                "updated": self._now(),
                "counts": counts,
                "n_tasks": len(self._tasks),
            }
        )
        self._commit(events=events, meta=meta, lease=lease)

    def _start_run(self) -> bool:
        """Enters "running"; returns False (after pausing) if a person must decide."""
        why = self._in_doubt_reason()
        if why is not None:
            self._pause_now(why)
            return False
        if self._info.status != "running":
            self._set_status("running", None, [self._event("resumed")])
        return True

    def _pause_now(self, reason: str) -> None:
        if self._info.status != "paused" or self._info.reason != reason:
            self._set_status(
                "paused", reason, [self._event("paused", payload={"reason": reason})]
            )

    async def _run(self) -> RunResult:
        if self._info.status == "succeeded" and all(
            r.status in DONE for r in self._records.values()
        ):
            return self._result()  # nothing to do: no events, no changes
        if not self._start_run():
            return self._result()
        running: set[asyncio.Task[None]] = set()
        assert self._wake is not None
        try:
            while True:
                while (
                    self._pause_requested is None
                    and len(running) < self.options.concurrency
                    and (tid := self._pop_ready()) is not None
                ):
                    task = asyncio.create_task(self._execute(tid))
                    task.add_done_callback(lambda _: self._wake_up())
                    running.add(task)
                if not running and (self._pause_requested or not self._timers):
                    break
                self._wake.clear()
                if not any(t.done() for t in running):
                    await self._wake.wait()
                for t in [t for t in running if t.done()]:
                    running.discard(t)
                    t.result()  # re-raise store errors (ConcurrentSession, Corrupt)
        except BaseException:
            for t in running:
                t.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            raise
        return self._finish()

    async def _step(self) -> list[TaskRecord]:
        if self._in_doubt_reason():
            self._start_run()
            return []
        ids = self._take_ready()
        while not ids and self._timers:
            assert self._wake is not None
            self._wake.clear()
            await self._wake.wait()
            ids = self._take_ready()
        if not ids:
            self._finish()
            return []
        tasks = [asyncio.create_task(self._execute(t)) for t in ids]
        try:
            await asyncio.gather(*tasks)
        except BaseException:  # no attempt may outlive the lease
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if self._pause_requested is not None:  # e.g. a budget ran out
            self._pause_now(self._pause_requested)
        elif not self._sched.has_ready() and not self._timers:
            self._finish()
        elif self._info.status not in ("paused",):
            self._pause_now("stepping: call step() or run() to go on")
        return [self._records[t] for t in ids]

    def _pop_ready(self) -> str | None:
        """The next ready task, unless it has a breakpoint not yet passed."""
        tid = self._sched.pop()
        if tid is None or tid not in self._info.breakpoints:
            return tid
        if tid in self._bp_passed:  # continuing from this breakpoint
            self._bp_passed.discard(tid)
            return tid
        self._bp_passed.add(tid)
        self._sched.set(tid, "pending")
        self._pause_requested = (
            f"breakpoint before task {tid!r}; run() or step() goes on from it"
        )
        return None

    def _take_ready(self) -> list[str]:
        ids: list[str] = []
        while len(ids) < self.options.concurrency and (t := self._pop_ready()):
            ids.append(t)
        return ids

    def _finish(self) -> RunResult:
        """Commits how the run ended (only when that changed) and returns it."""
        c = self.counts()
        if self._pause_requested is not None:
            self._pause_now(self._pause_requested)
        elif (why := self._in_doubt_reason()) is not None:
            self._pause_now(why)
        elif c["awaiting_approval"]:
            asked = [
                t for t, r in self._records.items() if r.status == "awaiting_approval"
            ]
            first = asked[0]
            tool = self._tasks[first].tool
            more = f" (and {len(asked) - 1} more)" if len(asked) > 1 else ""
            self._pause_now(
                f"waiting for approval: task {first!r} (tool {tool!r}){more}; call "
                f"s.approve({first!r}) or s.reject({first!r}, reason)"
            )
        elif c["failed"] or c["blocked"]:
            failed = {
                t: r.error or ""
                for t, r in self._records.items()
                if r.status == "failed"
            }
            summary = "; ".join(f"{t}: {e}" for t, e in list(failed.items())[:5])
            if len(failed) > 5:
                summary += f"; and {len(failed) - 5} more"
            reason = f"{len(failed)} task(s) failed, {c['blocked']} blocked — {summary}"
            if self._info.status != "failed" or self._info.reason != reason:
                self._set_status(
                    "failed",
                    reason,
                    [
                        self._event(
                            "session_failed",
                            payload={"failed": failed, "summary": reason},
                        )
                    ],
                )
        elif all(r.status in DONE for r in self._records.values()):
            if self._info.status != "succeeded":
                self._set_status("succeeded", None, [self._event("session_succeeded")])
        else:
            waiting = [t for t, r in self._records.items() if r.status not in DONE]
            self._pause_now(f"nothing can run now; waiting: {', '.join(waiting[:10])}")
        return self._result()

    def _result(self) -> RunResult:
        failed = {
            t: r.error or "" for t, r in self._records.items() if r.status == "failed"
        }
        counts = {k: v for k, v in self.counts().items() if v}
        return RunResult(self._info.status, self._info.reason, counts, failed)
