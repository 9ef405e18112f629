"""The session's state and the ONLY writer to its store: ``SessionState.commit``.

The state holds what the session knows (its info, plan, task records, usage
counters, the scheduler's view) and is the one object that talks to the
SessionStore. Every change is one ``commit``: records, events, metadata and the
plan in one diskcache transaction (invariant 1), checked against the version
counter and the lease (invariant 6), redacted first (invariant 7), and handed
to subscribers only once it is durable. Everything runs on the session's loop
thread, so nothing here needs a lock.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from argus_lab.errors import ConcurrentSessionError, UnresolvedReferenceError
from argus_lab.events import EventBase, make_event
from argus_lab.model import STATUSES, SessionInfo, Task, TaskRecord
from argus_lab.plan import Plan
from argus_lab.runtime.lease import Lease, pause_refusal
from argus_lab.runtime.options import SessionOptions, Subscriber, log
from argus_lab.runtime.scheduler import Scheduler
from argus_lab.store._bulk import paused_gc
from argus_lab.store._commit import mask_events, mask_record
from argus_lab.store._vocabulary import session_redactor
from argus_lab.store.artifacts import ArtifactStore, from_stored
from argus_lab.store.checkpoints import Loaded, SessionStore
from argus_lab.store.envelope import Durability
from argus_lab.store.records import TaskRecords
from argus_lab.store.stored_plan import StoredPlan
from argus_lab.tools.registry import Tool

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["SessionState"]

LeaseArg = dict[str, Any] | Literal["keep"] | None
"""A lease to write, "keep" (renew only if due) or None (release it)."""


class SessionState:
    """What a session knows, and its one way to change what is stored.

    Args:
        store: The session's checkpoint store (this object is its only writer).
        loaded: What the store held when the session was opened.
        tools: The session's tools, by name.
        options: How the session runs.
        lease: This Session object's runner lease.
        artifacts: Where large results live.
        clock: Wall-clock time for records and events (a test seam).
    """

    def __init__(
        self,
        store: SessionStore,
        loaded: Loaded,
        *,
        tools: dict[str, Tool],
        options: SessionOptions,
        lease: Lease,
        artifacts: ArtifactStore,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.options = options
        self.tools = tools
        """The session's tools, by name (replaced by ``update_tools``)."""
        self.lease = lease
        self.artifacts = artifacts
        self.clock = clock
        self.redactor = session_redactor(options.secrets)
        self.subscribers: list[Subscriber] = []
        self.timers: dict[str, asyncio.TimerHandle] = {}
        """Tasks waiting out a retry delay -> the timer that makes them ready."""
        self._store = store
        store.redactor = self.redactor
        store.label = f"{loaded.meta.name!r} ({loaded.meta.id})"
        self._artifact_cache: dict[str, Any] = {}
        self._deferred: list[EventBase] = []
        self.apply(loaded)

    def apply(self, loaded: Loaded) -> None:
        """Takes ``loaded`` as the whole state (opening, or reloading from disk)."""
        with paused_gc():  # per task a record and scheduler entries: no garbage
            self._apply(loaded)

    def _apply(self, loaded: Loaded) -> None:
        for timer in self.timers.values():  # a reload: start over
            timer.cancel()
        self.timers = {}
        self.info: SessionInfo = loaded.meta
        # Plan, tasks and records are validated when first read: a reopen reads
        # dependencies and statuses only (store/stored_plan.py, records.py).
        self._plan = loaded.stored_plan
        self.tasks: MutableMapping[str, Task] = self._plan.tasks()
        recs = loaded.records
        # Records of tasks a plan patch removed are kept aside (their ids are
        # never reused).
        self.retired = {t: recs[t] for t in recs.keys() - self.tasks.keys()}
        self.records = TaskRecords.of(recs, self.tasks)
        self.usage: dict[str, float] = dict(loaded.head.usage)
        # Only a cached fork starts with recorded tool results: a plain session
        # skips the replay lookup on every step.
        self.tool_replays = self._store.has_replays("tool:")
        self._wall_mark = time.monotonic()
        self.version = loaded.head.version
        self.last_seq = loaded.head.last_seq
        self.sched = Scheduler(self._plan.deps(), self.records.status)

    @property
    def plan(self) -> Plan:
        """The session's plan (validated when first read after a reopen)."""
        return self._plan.plan

    @property
    def plan_source(self) -> StoredPlan:
        """The plan as stored (a new object when the plan changes), unvalidated."""
        return self._plan

    def need_task(self, task_id: str) -> None:
        """KeyError naming the session and (some of) its tasks, if ``task_id``
        is not one of them."""
        if task_id not in self.tasks:
            raise KeyError(no_such_task(self.info.name, task_id, list(self.tasks)))

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Adds a subscriber; returns the function that removes it."""
        subs = self.subscribers
        subs.append(callback)

        def unsubscribe() -> None:
            if callback in subs:
                subs.remove(callback)

        return unsubscribe

    # -- time and events ---------------------------------------------------

    def now(self) -> float:
        """Wall-clock time, as records and events state it."""
        return self.clock()

    def event(self, kind: str, task_id: str | None = None, **kw: Any) -> EventBase:
        """An event of this session, stamped now (not committed yet)."""
        return make_event(
            kind, session_id=self.info.id, ts=self.now(), task_id=task_id, **kw
        )

    # -- the one writer ----------------------------------------------------

    def commit(
        self,
        records: Iterable[TaskRecord] = (),
        events: list[EventBase] | None = None,
        *,
        meta: SessionInfo | None = None,
        plan: Plan | None = None,
        lease: LeaseArg = "keep",
        notify: bool = True,
        relaxed: bool = False,
    ) -> None:
        """Writes records, events, metadata and the plan in one transaction.

        The in-memory records follow only once the store accepted the write.
        ``notify=False`` leaves telling subscribers to the caller (who must
        first finish updating the state they will look at).
        """
        red = self.redactor
        red.learn_new_env()  # an env secret a tool set mid-run
        records = [mask_record(red, r) for r in records]
        events = events or []
        if self._deferred:
            events = [*self._deferred, *events]
            self._deferred = []
        mask_events(red, events)
        if lease == "keep":
            lease = self.lease.renewal(self.now()) or "keep"
        if self.lease.active:  # running time counts against max_wall_s
            mark = time.monotonic()
            self.usage["wall_s"] = (
                self.usage.get("wall_s", 0.0) + mark - self._wall_mark
            )
            self._wall_mark = mark
        head = self._store.commit(
            self.version,
            self.lease.holder,
            records=records,
            events=events,
            meta=meta,
            plan=plan,
            lease=lease,
            usage=self.usage,
            relaxed=relaxed,
            fields_redacted=True,  # just above: the store need not scan again
        )
        self.version = head.version
        self.last_seq = head.last_seq
        if isinstance(lease, dict):
            self.lease.expires = lease["expires"]
            self.lease.pending = False
        elif lease is None:
            self.lease.expires = 0.0
            self.lease.pending = False
        for r in records:
            self.records[r.task_id] = r
        if meta is not None:
            self.info = meta
        if notify:
            self.notify(events)

    def defer(self, events: list[EventBase]) -> None:
        """Events that go into the next commit, ahead of its own (an intent
        that needs no transaction of its own; see AttemptRunner.begin)."""
        self._deferred.extend(events)

    def take_deferred(self) -> list[EventBase]:
        """Takes the deferred events out, for a commit made elsewhere (the
        group commit of outcomes, runtime/outcomes.py)."""
        events, self._deferred = self._deferred, []
        return events

    def drop_deferred(self) -> None:
        """Forgets deferred events (the step they belong to was abandoned)."""
        self._deferred = []

    def notify(self, events: list[EventBase]) -> None:
        """Hands committed events to the subscribers (after the state is updated)."""
        if not self.subscribers:
            return
        for ev in events:
            for cb in list(self.subscribers):
                try:
                    cb(ev)
                except Exception:
                    log.exception("argus subscriber %r failed on %s", cb, ev.kind)

    def take_lease(self) -> None:
        """Takes the runner lease; reloads first if someone else wrote since.

        If nobody did, it is only checked: the call's first commit writes it
        (``Lease.pending``, checked again there), sparing a transaction."""
        before = self.version
        self._wall_mark = time.monotonic()  # idle time between calls is free
        head = self._store.read_head()
        if head is not None and head.version == before:
            self._store.refuse_if_held(head, self.lease.holder)
            self.lease.pending = True
            return
        head = self._store.acquire_lease(self.lease.holder, self.lease.ttl)
        self.lease.expires = head.lease["expires"] if head.lease else 0.0
        if head.version != before + 1:
            # Someone else wrote since we loaded (their lease ended): continue from
            # what is on disk, never from our stale copy.
            self.apply(self._store.load())
        self.version = head.version

    def refuse_pause(self) -> None:
        """ConcurrentSessionError if a live holder other than us runs the session."""
        head = self._store.read_head()
        lease = head.lease if head is not None else None
        why = pause_refusal(lease, self.lease.holder, self._store.label)
        if why is not None:
            raise ConcurrentSessionError(why, session_id=self.info.id)

    def claim_lease(self) -> None:
        """Writes a lease taken but not written yet (a commit of its own)."""
        if self.lease.pending:
            self.commit()

    # -- the plan changing under a run -------------------------------------

    def swap_task(self, plan: Plan, task: Task) -> None:
        """Adopts a committed plan that changed only ``task`` (a fallback)."""
        self._plan = StoredPlan(plan)
        self.tasks[task.id] = task

    def fresh_record(self, task_id: str, before: TaskRecord | None) -> TaskRecord:
        """The first record of a task added to the plan. ``before``: the
        record its id had (a task a patch retired): the new task starts at
        the generation after it, so its idempotency keys (session, task id,
        generation) are never the old task's, a different call."""
        gen = 0 if before is None else before.generation + 1
        return TaskRecord(task_id=task_id, generation=gen)

    def adopt_plan(
        self,
        plan: Plan,
        removed: Iterable[str],
        fresh: Mapping[str, TaskRecord] | None = None,
    ) -> None:
        """Adopts a committed plan patch: removed tasks' records are retired,
        added tasks get fresh records (``fresh``: the ones committed with the
        patch, for ids that had a record before), and the scheduler starts
        over."""
        fresh = fresh or {}
        for tid in removed:
            if tid in self.records:
                self.retired[tid] = self.records.pop(tid)
        self._plan = StoredPlan(plan)
        self.tasks = self._plan.tasks()
        for t in self.tasks:
            if t in fresh:
                self.records[t] = fresh[t]
            elif t not in self.records:
                self.records[t] = self.fresh_record(t, self.retired.get(t))
            self.retired.pop(t, None)  # its id is the new task's now
        # In flight, whatever their records say yet (an intent may be waiting
        # for its group commit): never ready a second time.
        busy = [t for t, st in self.sched.status.items() if st == "running"]
        self.sched = Scheduler(self._plan.deps(), self.records.status)
        for t in [*self.timers, *busy]:  # or waiting out a retry delay
            if t in self.tasks:
                self.sched.set(t, "running")

    # -- reading -----------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Tasks per status (every status, zeros included)."""
        return {**dict.fromkeys(STATUSES, 0), **Counter(self.records.status.values())}

    def stored_result(self, rec: TaskRecord) -> Any:
        """A record's result, loaded from its artifact if it was large."""
        raw = (
            self._load_artifact(rec.result_ref)
            if rec.result_ref is not None
            else rec.result
        )
        return from_stored(raw, self.artifacts, self._artifact_cache)

    def _load_artifact(self, ref: str) -> Any:
        if ref not in self._artifact_cache:
            data = self.artifacts.get_bytes(ref, session_id=self.info.id)
            self._artifact_cache[ref] = json.loads(data)
        return self._artifact_cache[ref]

    def committed_records(self) -> Mapping[str, TaskRecord]:
        """Every task record as the store holds it now: another process may
        be running the session (a fork is made from what it committed)."""
        return self._store.task_records()

    def result_of(self, task_id: str) -> Any:
        """The result of a succeeded task (UnresolvedReferenceError otherwise)."""
        rec = self.records[task_id]
        if rec.status != "succeeded":
            more = (
                f": a task that uses it fails again until {task_id!r} succeeds "
                f"(s.retry({task_id!r}) runs it again), so retry {task_id!r} "
                "first, or skip the tasks that use it too"
                if rec.status in ("skipped", "failed")
                else ""
            )
            raise UnresolvedReferenceError(
                f"task {task_id!r} is {rec.status}, so it has no result to use{more}"
            )
        return self.stored_result(rec)

    def live_graph(self) -> nx.DiGraph:
        """The plan DAG with each task's status, attempts, error and times."""
        g = self.plan.graph
        for tid, rec in self.records.items():
            g.nodes[tid].update(
                status=rec.status,
                attempts=rec.attempts,
                error=rec.error,
                started=rec.started,
                ended=rec.ended,
                duration=(rec.ended - rec.started)
                if rec.ended is not None and rec.started is not None
                else None,
            )
        return g

    def replays(self) -> dict[str, str]:
        """The replay cache as stored (what a fork inherits, invariant 9)."""
        return self._store.replays()

    @property
    def path(self) -> Path:
        """The folder of the session's store."""
        return self._store.directory

    @property
    def durability(self) -> Durability:
        """The store's durability (another session's store is opened alike)."""
        return self._store.durability

    def read_events(self, since: int = 0) -> list[EventBase]:
        """Committed events with seq > since, in order."""
        return self._store.read_events(since)

    def last_event(self, kind: str, task_id: str | None) -> EventBase | None:
        """The latest committed event of ``kind`` about ``task_id``, or None."""
        found = None
        for e in self._store.read_events():
            if e.kind == kind and e.task_id == task_id:
                found = e
        return found

    def iter_event_json(self, since: int = 0) -> Iterator[str]:
        """Committed events with seq > since as stored JSON, in order."""
        return self._store.iter_event_json(since)

    # -- the replay cache (invariant 9) ------------------------------------

    def get_replay(self, key: str) -> dict[str, Any] | None:
        """A recorded model reply or tool result, or None."""
        return self._store.get_replay(key)

    def put_replay(self, key: str, data: dict[str, Any]) -> None:
        """Records a model reply or a write's result for replays."""
        self._store.put_replay(key, data)

    def close(self) -> None:
        """Closes the store's connections in the calling thread."""
        self._store.close()


def no_such_task(session: str, task_id: str, ids: list[str], shown: int = 15) -> str:
    """Why ``task_id`` is none of session ``session``'s tasks ``ids``: the
    one meant when one is close, and some of them (or that it has none)."""
    if not ids:
        return f"session {session!r} has no task {task_id!r} (its plan has no tasks)"
    import difflib

    close = difflib.get_close_matches(task_id, ids, n=1, cutoff=0.75)
    meant = f"did you mean {close[0]!r}? " if close else ""
    more = f", ... ({len(ids)} in all)" if len(ids) > shown else ""
    return (
        f"session {session!r} has no task {task_id!r} ({meant}tasks: "
        f"{', '.join(ids[:shown])}{more})"
    )
