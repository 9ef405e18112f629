"""A person's decisions: retry, skip, approve, reject, and rerunning stale work."""

from __future__ import annotations

from typing import Any

from argus_lab.errors import (
    ArgusError,
    SessionStateError,
    ToolArgumentsError,
    UnresolvedReferenceError,
)
from argus_lab.events import EventBase
from argus_lab.model import Budget, Status, TaskRecord
from argus_lab.plan.graph import resolve_args
from argus_lab.plan.static import refuse_literal_secrets
from argus_lab.runtime import abandoned
from argus_lab.runtime.abandoned import AbandonedCall
from argus_lab.runtime.gates import edited_args, watch_env
from argus_lab.runtime.options import input_hashes, log, plain_args
from argus_lab.runtime.outcome import Rejected
from argus_lab.runtime.policy import ended_reason
from argus_lab.runtime.scheduler import DONE
from argus_lab.runtime.settle import Settler
from argus_lab.runtime.signals import Signals
from argus_lab.runtime.state import SessionState

__all__ = ["Actions"]


class Actions:
    """What a person decides about tasks, applied on the loop thread.

    Args:
        state: The session state (the only writer).
        settler: Fails a rejected task like any failure.
        signals: Wakes the run loop after a decision.
    """

    def __init__(self, state: SessionState, settler: Settler, signals: Signals) -> None:
        self._state = state
        self._settler = settler
        self._signals = signals

    def stale(self) -> list[str]:
        """Succeeded tasks whose tool code or inputs changed, and their dependents.

        A task is stale when its tool's code hash differs from the one recorded
        when it succeeded, when its arguments resolve differently now (an
        upstream result changed), or when a dependency is stale or not done.
        """
        st = self._state
        stale: set[str] = set()
        for tid in st.sched.topo:
            rec = st.records[tid]
            if rec.status != "succeeded":
                continue
            task = st.tasks[tid]
            if any(d in stale or st.records[d].status not in DONE for d in task.deps):
                stale.add(tid)
                continue
            tool = st.tools.get(task.tool or "")
            if tool is None:
                continue  # unknown now: nothing to compare against
            if rec.tool_hash is not None and rec.tool_hash != tool.code_hash:
                stale.add(tid)
                continue
            red = None if plain_args(task.args) else st.redactor  # as begin()
            # The first call also watches every ${env.NAME} the run read: a task
            # may have hashed, masked, a value a task after it in this order read.
            watch_env(st, task.args)  # hashed masked, as when it ran
            try:
                args = resolve_args(task.args, st.result_of)
            except UnresolvedReferenceError:
                stale.add(tid)
                continue
            h = rec.input_hash
            if h is not None and h not in input_hashes(tool.name, args, red):
                stale.add(tid)
        return [t for t in st.tasks if t in stale]

    def pending_approvals(self) -> dict[str, dict[str, Any]]:
        """Tasks waiting for a decision -> what was asked (tool, args, policy)."""
        st = self._state
        return {
            t: {"tool": st.tasks[t].tool, **(r.approval or {})}
            for t, r in st.records.where("awaiting_approval")
        }

    def _unblock_downstream(self, tid: str, now: Status) -> list[TaskRecord]:
        """Blocked descendants whose dependencies no longer fail (``tid`` being
        ``now``) become pending."""
        st = self._state
        status = dict(st.records.status)
        status[tid] = now
        changed: list[TaskRecord] = []
        order = st.sched.descendants(tid)
        # Repeat until stable: descendants() is breadth-first, not topological.
        progress = True
        while progress:
            progress = False
            for d in order:
                if status[d] != "blocked":
                    continue
                if not any(
                    status[p] in ("failed", "blocked", "in_doubt")
                    for p in st.tasks[d].deps
                ):
                    status[d] = "pending"
                    changed.append(
                        st.records[d].model_copy(
                            update={"status": "pending", "reason": None}
                        )
                    )
                    progress = True
        return changed

    def _misuse(self, tid: str, what: str) -> SessionStateError:
        st = self._state
        return SessionStateError(
            f"task {tid!r} of session {st.info.name!r} is {what}",
            session_id=st.info.id,
            task_id=tid,
        )

    def _running_in_origin(self, tid: str, rec: TaskRecord) -> str | None:
        """Why ``tid`` may not be retried here: the session its key came from
        (a fork's task carried from its parent, ``key_of``) or this session's
        parent runs it now, its call in flight (its run's lease is live and
        its record says running). A fork made mid-call holds the task in
        doubt; retried here, it would call beside the parent's call (an
        outside check paid twice). None: no such run. File work, on a retry
        only."""
        from argus_lab.store.checkpoints import SessionStore
        from argus_lab.store.index import live_runner

        st = self._state
        for sid in dict.fromkeys(x for x in (rec.key_of, st.info.parent) if x):
            folder = st.path.parent / sid
            if sid == st.info.id or not (folder / "cache.db").is_file():
                continue
            store = SessionStore(folder, sid, durability=st.durability)
            try:
                runner = live_runner(store.read_head())
                if runner is None:
                    continue
                other = store.task_records().get(tid)
            except ArgusError:
                continue  # unreadable: its own open says what is wrong
            finally:
                store.close()
            if other is not None and other.status == "running":
                pid = runner["pid"]
                return (
                    f"{rec.status}, and session {sid}, whose call of it this "
                    f"session holds in doubt, is running it now (process {pid}): "
                    "a retry could take effect beside that call. Let that run "
                    "end (or pause it), check whether its call took effect, "
                    "then retry or skip it"
                )
        return None

    async def retry(self, tid: str) -> None:
        """Makes a failed or in-doubt task (and what it blocked) pending again."""
        st = self._state
        rec = st.records[tid]
        if rec.status not in ("failed", "in_doubt", "blocked", "skipped"):
            raise self._misuse(
                tid,
                f"{rec.status}; only failed, in-doubt, blocked or skipped tasks can "
                "be retried",
            )
        # Its call may run in this session, in the session it came from (a
        # fork's task carried from its parent), or in another fork under the
        # same key; in this process, or in another one of this host.
        call = abandoned.still_running(
            st.path.parent, tid, st.info.id, rec.key_of, st.info.parent
        )
        if call is not None and call.here():
            # Python cannot stop a thread: a second call beside it may take
            # effect as well as the first (invariant 2).
            raise self._misuse(
                tid,
                f"{rec.status}, and its last call ({call.what()}, which "
                f"{call.why}) is still running in this process: a retry now "
                "could take effect twice. Wait for it to end (the task's "
                "reason and an in_doubt event will say how it ended), check, "
                "then retry or skip it",
            )
        if call is not None:
            of = (
                ""
                if call.session_id == st.info.id
                else f" for session {call.session_id}"
            )
            raise self._misuse(
                tid,
                f"{rec.status}, and its last call ({call.what()}, which "
                f"{call.why} at {call.when()}) is still running {call.where()}"
                f"{of}: a retry now could take effect twice. Wait for that call to "
                f"end, or end process {call.pid} if it must not go on (its "
                "lock is let go of when the call or the process ends); check "
                "whether it took effect, then retry or skip it",
            )
        running = self._running_in_origin(tid, rec)
        if running is not None:
            raise self._misuse(tid, running)
        # A failed attempt gets a fresh idempotency key; an in-doubt one keeps
        # its key so a remote that deduplicates can still recognise it.
        new = rec.model_copy(
            update={
                "status": "pending",
                "reason": None,
                "next_attempt_at": None,
                **rec.next_generation(rec.status != "in_doubt"),
            }
        )
        changed = [new, *self._unblock_downstream(tid, "pending")]
        st.commit(
            changed,
            [
                st.event(
                    "task_retried",
                    tid,
                    previous=rec.status,
                    unblocked=len(changed) - 1,
                )
            ],
        )
        for r in changed:
            st.sched.set(r.task_id, "pending")
        self._signals.wake_up()

    def call_ended(self, call: AbandonedCall) -> None:
        """An abandoned call of this session's ended (abandoned.py): says how
        in the task's in-doubt reason and an in_doubt event, if the task is
        still in doubt about that attempt. Runs on the loop thread."""
        st = self._state
        tid = call.task_id
        rec = st.records.get(tid)
        if self._signals.stopping is not None or rec is None:
            return
        if rec.status != "in_doubt" or rec.attempts != call.attempt:
            log.warning(
                "task %s of session %s: %s, abandoned while it ran, has ended: "
                "it %s (the task is %s now)",
                tid,
                st.info.name,
                call.what(),
                call.ended,
                rec.status,
            )
            return
        why = ended_reason(tid, call)
        ev = st.event(
            "in_doubt", tid, attempt=call.attempt, reason=why, call_ended=call.ended
        )
        try:
            st.commit([rec.model_copy(update={"reason": why})], [ev])
        except ArgusError as e:  # another writer, a full disk: say it at least
            log.warning("task %s: could not record that its call ended: %s", tid, e)

    def _waiting_for_approval(self, tid: str) -> TaskRecord:
        rec = self._state.records[tid]
        if rec.status != "awaiting_approval":
            raise self._misuse(tid, f"{rec.status}, not waiting for approval")
        return rec

    async def approve(self, tid: str, args: dict[str, Any] | None, by: str) -> None:
        """Lets a task waiting for approval run, maybe with edited arguments."""
        st = self._state
        rec = self._waiting_for_approval(tid)
        tool = st.tools.get(st.tasks[tid].tool or "")
        if args is not None:
            # Stored with the approval, so masked there: a literal secret would
            # reach the tool as "[REDACTED]". ${env.NAME} is read when it runs.
            edited = st.tasks[tid].model_copy(update={"args": args})
            refuse_literal_secrets([edited], st.redactor)
            try:  # fail now, naming the field (or the reference), not at run time
                resolved = edited_args(st, args)
                if tool is not None:
                    tool.validate(resolved)
            except (ToolArgumentsError, UnresolvedReferenceError) as e:
                raise type(e)(st.redactor.text(str(e))) from None  # no env value
        asked = rec.approval or {}
        new = rec.model_copy(
            update={
                "status": "pending",
                "approval": {
                    **asked,
                    "state": "approved",
                    "by": by,
                    "at": st.now(),
                    "edited_args": args,
                },
            }
        )
        ev = st.event(
            "approval_granted",
            tid,
            by=by,
            args=asked.get("args"),
            edited_args=args,
        )
        st.commit([new], [ev])
        st.sched.set(tid, "pending")
        self._signals.wake_up()

    async def reject(self, tid: str, reason: str, by: str) -> None:
        """Refuses a task waiting for approval: it fails like any failure."""
        st = self._state
        rec = self._waiting_for_approval(tid)
        asked = rec.approval or {}
        rec = rec.model_copy(
            update={
                "approval": {
                    **asked,
                    "state": "rejected",
                    "by": by,
                    "at": st.now(),
                    "reason": reason,
                }
            }
        )
        self._settler.settle(
            tid,
            rec,
            Rejected(f"rejected by {by}: {reason}", by=by),
            extra=[
                st.event(
                    "approval_rejected",
                    tid,
                    by=by,
                    reason=reason,
                    args=asked.get("args"),
                )
            ],
        )
        self._signals.wake_up()

    async def mark_stale(self) -> None:
        """Makes exactly the stale tasks pending again (a new generation each)."""
        st = self._state
        stale = self.stale()
        if not stale:
            return
        changed = [
            st.records[t].model_copy(
                update={
                    "status": "pending",
                    "reason": None,
                    **st.records[t].next_generation(),
                }
            )
            for t in stale
        ]
        events = [
            st.event("task_retried", t, previous="succeeded", why="stale")
            for t in stale
        ]
        st.commit(changed, events)
        for t in stale:
            st.sched.set(t, "pending")

    async def skip(self, tid: str, reason: str) -> None:
        """Marks a task skipped; what it blocked may run."""
        st = self._state
        rec = st.records[tid]
        if rec.status in ("succeeded", "skipped", "running"):
            raise self._misuse(tid, f"{rec.status} and cannot be skipped")
        new = rec.model_copy(
            update={"status": "skipped", "reason": reason, "ended": st.now()}
        )
        changed = [new, *self._unblock_downstream(tid, "skipped")]
        timer = st.timers.pop(tid, None)
        if timer is not None:
            timer.cancel()
        st.commit(
            changed,
            [st.event("task_skipped", tid, reason=reason, previous=rec.status)],
        )
        for r in changed:
            st.sched.set(r.task_id, r.status)
        self._signals.wake_up()

    async def set_budget(self, scope: str, budget: Budget) -> None:
        """Sets the limits of one scope (committed with the session)."""
        await self.set_meta(budgets={**self._state.info.budgets, scope: budget})

    async def set_breakpoint(self, tid: str, on: bool) -> None:
        """Adds or removes a breakpoint before ``tid`` (committed)."""
        bps = [t for t in self._state.info.breakpoints if t != tid]
        if on:
            bps.append(tid)
        await self.set_meta(breakpoints=bps)

    async def emit(self, events: list[EventBase]) -> None:
        """Commits events of the user's own (``Session.emit``)."""
        self._state.commit(events=events)

    async def set_meta(self, **fields: Any) -> None:
        """Commits changed session metadata (budgets, breakpoints)."""
        st = self._state
        st.commit(meta=st.info.model_copy(update=fields))
