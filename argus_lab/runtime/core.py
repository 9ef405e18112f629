"""The Session's state and its one way to change it: ``_commit``.

The runtime is layered, each layer calling only those below it:
``_Core`` (state, commit, redaction) < ``Attempts`` (one task attempt and its
outcome) < ``Engine`` (lease, recovery, the run and step loops, how a run ends)
< ``Actions`` (a person's decisions: retry, skip, approve, reject, rerun stale)
< ``Session`` (the public API and the private loop thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from argus_lab.events import EventBase, make_event
from argus_lab.model import STATUSES, SessionInfo, Task, TaskRecord
from argus_lab.plan import Plan
from argus_lab.plan.graph import ReferenceError_
from argus_lab.redact import Redactor
from argus_lab.runtime.options import RunResult, SessionOptions, Subscriber, log
from argus_lab.runtime.remember import Rememberer
from argus_lab.runtime.scheduler import Scheduler
from argus_lab.store.artifacts import from_stored
from argus_lab.store.checkpoints import Loaded, SessionStore, make_lease
from argus_lab.tools.approval import DEFAULT_POLICIES
from argus_lab.tools.registry import Tool

if TYPE_CHECKING:
    from argus_lab.workspace import Workspace

__all__ = ["_Core"]


class _Core:
    """State shared by the runtime layers; see the module docstring."""

    def __init__(
        self,
        workspace: Workspace,
        store: SessionStore,
        loaded: Loaded,
        tools: dict[str, Tool],
        options: SessionOptions,
    ) -> None:
        self.workspace = workspace
        self.options = options
        self._store = store
        self._tools = tools
        self._holder = uuid.uuid4().hex
        self._lease_expires = 0.0
        self._active = 0  # public calls in progress that hold the lease
        self._subscribers: list[Subscriber] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pause_requested: str | None = None
        self._wake: asyncio.Event | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._heartbeat: asyncio.TimerHandle | None = None
        self._bg: concurrent.futures.Future[RunResult] | None = None
        self._artifact_cache: dict[str, Any] = {}
        self._workdir_made = False
        self._failed_seq = 0
        self._memories = Rememberer(lambda: self.workspace.memory)
        self._bp_passed: set[str] = set()  # breakpoints paused at, to go past next
        self._budget_hits: dict[str, Any] = {}  # task -> BudgetHit found mid-attempt
        self._seen_costs: dict[str, list[tuple[float, int]]] = {}  # model -> calls
        self._redactor = Redactor(options.secrets)
        store.redactor = self._redactor
        store.label = f"{loaded.meta.name!r} ({loaded.meta.id})"
        self._policies = (
            DEFAULT_POLICIES if options.approvals is None else options.approvals
        )
        self._apply(loaded)
        self._prepare()

    def _prepare(self) -> None:
        """Work to do in the caller's thread when the session is made (a hook)."""

    def _apply(self, loaded: Loaded) -> None:
        for timer in getattr(self, "_timers", {}).values():  # a reload: start over
            timer.cancel()
        self._timers = {}
        self._info = loaded.meta
        self._plan = loaded.plan
        self._tasks: dict[str, Task] = {t.id: t for t in loaded.plan.tasks}
        recs = loaded.records
        # Records of tasks a plan patch removed are kept aside (their ids are
        # never reused).
        self._retired = {t: r for t, r in recs.items() if t not in self._tasks}
        self._records: dict[str, TaskRecord] = {
            t: recs.get(t) or TaskRecord(task_id=t) for t in self._tasks
        }
        self._usage: dict[str, float] = dict(loaded.head.usage)
        # Only a cached fork starts with recorded tool results: a plain session
        # skips the replay lookup on every step.
        self._tool_replays = self._store.has_replays("tool:")
        self._wall_mark = time.monotonic()
        self._version = loaded.head.version
        self._last_seq = loaded.head.last_seq
        self._sched = Scheduler(
            {t.id: t.deps for t in loaded.plan.tasks},
            {t: r.status for t, r in self._records.items()},
        )

    @property
    def id(self) -> str:
        """The session id."""
        return self._info.id

    @property
    def name(self) -> str:
        """The session name (unique in its workspace)."""
        return self._info.name

    def _need_task(self, task_id: str) -> None:
        if task_id not in self._tasks:
            some = ", ".join(list(self._tasks)[:15])
            raise KeyError(
                f"session {self.name!r} has no task {task_id!r} (tasks: {some}...)"
            )

    def _now(self) -> float:
        return time.time()

    def _event(self, kind: str, task_id: str | None = None, **kw: Any) -> EventBase:
        return make_event(
            kind, session_id=self.id, ts=self._now(), task_id=task_id, **kw
        )

    def _commit(
        self,
        records: Iterable[TaskRecord] = (),
        events: list[EventBase] | None = None,
        *,
        meta: SessionInfo | None = None,
        plan: Plan | None = None,
        lease: dict[str, Any] | Literal["keep"] | None = "keep",
        notify: bool = True,
        relaxed: bool = False,
    ) -> None:
        records = [self._redact(r) for r in records]
        events = events or []
        for ev in events:
            if ev.payload:
                ev.payload = self._redactor.value(ev.payload)
        if (
            lease == "keep"
            and self._active
            and self._now() > self._lease_expires - (self.options.lease_ttl / 2)
        ):
            lease = make_lease(self._holder, self.options.lease_ttl)
        if self._active:  # running time counts against max_wall_s
            mark = time.monotonic()
            self._usage["wall_s"] = (
                self._usage.get("wall_s", 0.0) + mark - self._wall_mark
            )
            self._wall_mark = mark
        head = self._store.commit(
            self._version,
            self._holder,
            records=records,
            events=events,
            meta=meta,
            plan=plan,
            lease=lease,
            usage=self._usage,
            relaxed=relaxed,
        )
        self._version = head.version
        self._last_seq = head.last_seq
        if isinstance(lease, dict):
            self._lease_expires = lease["expires"]
        for r in records:
            self._records[r.task_id] = r
        if meta is not None:
            self._info = meta
        if notify:
            self._notify(events)

    def _notify(self, events: list[EventBase]) -> None:
        """Hands committed events to the subscribers (after the state is updated)."""
        for ev in events:
            for cb in list(self._subscribers):
                try:
                    cb(ev)
                except Exception:
                    log.exception("argus subscriber %r failed on %s", cb, ev.kind)

    def _redact(self, rec: TaskRecord) -> TaskRecord:
        """Invariant 7: secrets leave a record before it is stored or kept."""
        red = self._redactor
        upd: dict[str, Any] = {}
        for name in ("result", "error", "traceback", "reason", "approval"):
            v = getattr(rec, name)
            if v is not None:
                nv = red.value(v)
                if nv != v:
                    upd[name] = nv
        return rec.model_copy(update=upd) if upd else rec

    def _wake_up(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def counts(self) -> dict[str, int]:
        """Tasks per status (every status, zeros included)."""
        c: dict[str, int] = dict.fromkeys(STATUSES, 0)
        for r in self._records.values():
            c[r.status] += 1
        return c

    def _stored_result(self, rec: TaskRecord) -> Any:
        raw = (
            self._load_artifact(rec.result_ref)
            if rec.result_ref is not None
            else rec.result
        )
        return from_stored(raw, self.workspace.artifacts, self._artifact_cache)

    def _load_artifact(self, ref: str) -> Any:
        if ref not in self._artifact_cache:
            data = self.workspace.artifacts.get_bytes(ref, session_id=self.id)
            self._artifact_cache[ref] = json.loads(data)
        return self._artifact_cache[ref]

    def _result_of(self, task_id: str) -> Any:
        rec = self._records[task_id]
        if rec.status != "succeeded":
            raise ReferenceError_(
                f"task {task_id!r} is {rec.status}, so it has no result to use"
            )
        return self._stored_result(rec)
