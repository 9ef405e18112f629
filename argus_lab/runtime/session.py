"""Session: runs a plan step by step on a private event loop, checkpointing each step.

Every mutation happens on the session's own loop thread, so the state needs no
locks; public methods submit coroutines to it and wait (``step``/``run``), or
return at once (``start``, ``pause``). See DESIGN.md sections 4-6.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from argus_lab.errors import ArgusError
from argus_lab.events import EventBase, make_event
from argus_lab.model import STATUSES, Plan, SessionInfo, SessionStatus, Task, TaskRecord
from argus_lab.plan.graph import ReferenceError_, resolve_args
from argus_lab.redact import Redactor
from argus_lab.runtime.executor import Outcome, run_attempt
from argus_lab.runtime.scheduler import DONE, Scheduler
from argus_lab.store.artifacts import from_stored
from argus_lab.store.checkpoints import Loaded, SessionStore, make_lease
from argus_lab.tools.approval import DEFAULT_POLICIES, ApprovalPolicy, decide
from argus_lab.tools.registry import Tool, ToolContext

if TYPE_CHECKING:
    import networkx as nx
    import pandas as pd

    from argus_lab.workspace import Workspace

__all__ = ["RunResult", "Session", "SessionOptions"]

log = logging.getLogger("argus_lab")
T = TypeVar("T")
Subscriber = Callable[[EventBase], None]


@dataclass(frozen=True)
class SessionOptions:
    """How a session runs (not stored: pass them again to ``ws.open``)."""

    concurrency: int = 4
    """Tasks that may run at once."""
    backoff: tuple[float, float] = (0.5, 30.0)
    """(first delay, largest delay) in seconds between transient retries;
    each delay doubles, with jitter, and honours a server's retry-after."""
    lease_ttl: float = 30.0
    """Seconds a runner lease lasts without renewal (renewed while running)."""
    inline_result_bytes: int = 64 * 1024
    """Results larger than this (as JSON) go to content-addressed artifacts."""
    approvals: tuple[ApprovalPolicy, ...] | None = None
    """Approval policies, first match decides; None: ask before write tools."""
    secrets: tuple[str, ...] = ()
    """Values to redact besides env vars named like KEY/TOKEN/SECRET/PASSWORD."""

    def __post_init__(self) -> None:
        if self.approvals is not None:
            object.__setattr__(self, "approvals", tuple(self.approvals))
        object.__setattr__(self, "secrets", tuple(self.secrets))
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.lease_ttl <= 0:
            raise ValueError(f"lease_ttl must be positive, got {self.lease_ttl}")


@dataclass(frozen=True)
class RunResult:
    """How a ``run()`` ended."""

    status: SessionStatus
    """succeeded, failed or paused."""
    reason: str | None = None
    """Why it failed or paused, naming tasks."""
    counts: dict[str, int] = field(default_factory=dict)
    """Tasks per status."""
    failed: dict[str, str] = field(default_factory=dict)
    """Failed task id -> its error."""

    def __bool__(self) -> bool:
        return self.status == "succeeded"

    def __str__(self) -> str:
        done = ", ".join(f"{n} {s}" for s, n in self.counts.items() if n)
        return f"{self.status}: {done}" + (f" — {self.reason}" if self.reason else "")


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def input_hash(tool_name: str, args: Any) -> str:
    """Hash of a call's tool name and resolved arguments (staleness, caching)."""
    text = json.dumps([tool_name, args], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def idempotency_key(session_id: str, task_id: str, generation: int) -> str:
    """Stable for a task's generation: the same across crash- and transient retries."""
    raw = f"{session_id}\x00{task_id}\x00{generation}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


class Session:
    """A plan being executed, durable across crashes; get one from a Workspace.

    Attributes:
        id: Unique session id. name: Unique name in the workspace.
        workspace: The Workspace holding this session's checkpoints.
    """

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
        self._redactor = Redactor(options.secrets)
        store.redactor = self._redactor
        self._policies = (
            DEFAULT_POLICIES if options.approvals is None else options.approvals
        )
        self._apply(loaded)

    def _apply(self, loaded: Loaded) -> None:
        self._info = loaded.meta
        self._plan = loaded.plan
        self._tasks: dict[str, Task] = {t.id: t for t in loaded.plan.tasks}
        recs = loaded.records
        self._records: dict[str, TaskRecord] = {
            t: recs.get(t) or TaskRecord(task_id=t) for t in self._tasks
        }
        self._version = loaded.head.version
        self._last_seq = loaded.head.last_seq
        self._sched = Scheduler(
            {t.id: t.deps for t in loaded.plan.tasks},
            {t: r.status for t, r in self._records.items()},
        )

    # -- read-only views -----------------------------------------------------

    @property
    def id(self) -> str:
        """The session id."""
        return self._info.id

    @property
    def name(self) -> str:
        """The session name (unique in its workspace)."""
        return self._info.name

    @property
    def goal(self) -> str:
        """The goal."""
        return self._info.goal

    @property
    def plan(self) -> Plan:
        """The plan being run."""
        return self._plan

    @property
    def info(self) -> SessionInfo:
        """The stored SessionInfo (status, reason, counts, parent)."""
        return self._info

    @property
    def status(self) -> SessionStatus:
        """created, running, paused, succeeded or failed."""
        return self._info.status

    @property
    def reason(self) -> str | None:
        """Why the session paused or failed."""
        return self._info.reason

    @property
    def tools(self) -> dict[str, Tool]:
        """The tools this session was given, by name."""
        return dict(self._tools)

    @property
    def records(self) -> dict[str, TaskRecord]:
        """A snapshot of every task's record, by task id."""
        return dict(self._records)

    def record(self, task_id: str) -> TaskRecord:
        """The record of one task."""
        self._need_task(task_id)
        return self._records[task_id]

    def result(self, task_id: str) -> Any:
        """The result of a task (loaded from its artifact if it was large)."""
        self._need_task(task_id)
        return self._stored_result(self._records[task_id])

    def _stored_result(self, rec: TaskRecord) -> Any:
        raw = (
            self._load_artifact(rec.result_ref)
            if rec.result_ref is not None
            else rec.result
        )
        return from_stored(raw, self.workspace.artifacts, self._artifact_cache)

    def counts(self) -> dict[str, int]:
        """Tasks per status (every status, zeros included)."""
        c: dict[str, int] = dict.fromkeys(STATUSES, 0)
        for r in self._records.values():
            c[r.status] += 1
        return c

    def ready(self) -> list[str]:
        """Tasks that could start now, most urgent first."""
        return self._sched.peek_all()

    def events(self, since: int = 0) -> list[EventBase]:
        """Committed events with seq > since, in order (read from the store)."""
        return self._store.read_events(since)

    @property
    def graph(self) -> nx.DiGraph:
        """The plan DAG with live node attributes: status, attempts, error, times."""
        g = self._plan.graph
        for tid, rec in self._records.items():
            node = g.nodes[tid]
            node.update(
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

    def tasks_df(self) -> pd.DataFrame:
        """One row per task (see argus_lab.analysis for the columns)."""
        from argus_lab import analysis

        return analysis.tasks_df(self)

    def events_df(self) -> pd.DataFrame:
        """One row per committed event (see argus_lab.analysis for the columns)."""
        from argus_lab import analysis

        return analysis.events_df(self)

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Calls ``callback(event)`` for every event as it is committed.

        Callbacks run on the session's loop thread and must be quick; exceptions
        they raise are logged, never propagated. Returns an unsubscribe function.
        """
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def __repr__(self) -> str:
        c = self.counts()
        return (
            f"<Session {self.name!r} {self.status}: "
            f"{c['succeeded']}/{len(self._records)} succeeded, {c['failed']} failed>"
        )

    # -- the loop thread -----------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            started = threading.Event()

            def main() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(started.set)
                loop.run_forever()

            self._thread = threading.Thread(
                target=main, name=f"argus-{self.name}", daemon=True
            )
            self._thread.start()
            started.wait()
            self._loop = loop
        return self._loop

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(
                "a Session method was called from the session's own thread (from a "
                "subscriber or a tool); call it from another thread"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        fut = self._submit(coro)
        try:
            return fut.result()
        except KeyboardInterrupt:
            # Ctrl-C / the kernel's interrupt: stop cleanly rather than abandon
            # work half-committed; running attempts finish and commit first.
            self.pause("interrupted by the user")
            fut.result()
            raise

    def close(self) -> None:
        """Stops the loop thread and closes the store (waits for a background run)."""
        if self._bg is not None and not self._bg.done():
            self.pause("session closed")
            self._bg.result()
        if self._loop is not None:
            # diskcache keeps one SQLite connection per thread: close the loop
            # thread's own, so SQLite can checkpoint and drop its WAL file.
            asyncio.run_coroutine_threadsafe(self._close_store(), self._loop).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join()
            self._loop.close()
            self._loop = None
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        self._store.close()

    async def _close_store(self) -> None:
        self._store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public actions ------------------------------------------------------

    def step(self) -> list[TaskRecord]:
        """Runs the next ready task(s) once (up to the concurrency), commits each.

        Waits for a scheduled retry if that is all there is. Returns the records
        of the tasks that ran (empty when nothing could run).
        """
        return self._call(self._guarded(self._step()))

    def run(self) -> RunResult:
        """Runs until every task is done, the session pauses, or nothing can run."""
        return self._call(self._guarded(self._run()))

    def start(self) -> concurrent.futures.Future[RunResult]:
        """Starts ``run()`` in the background and returns its future at once."""
        if self._bg is not None and not self._bg.done():
            return self._bg
        self._bg = self._submit(self._guarded(self._run()))
        return self._bg

    async def arun(self) -> RunResult:
        """``run()`` for async code: awaits the run on the session's own loop."""
        return await asyncio.wrap_future(self.start())

    def wait(self, timeout: float | None = None) -> RunResult | None:
        """Waits for a background run started by ``start()``; None if there is none."""
        return None if self._bg is None else self._bg.result(timeout)

    def pause(self, reason: str = "paused by the user") -> None:
        """Asks a run to stop: no new task starts; running ones finish and commit."""
        self._pause_requested = reason
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    def retry(self, task_id: str) -> None:
        """Makes a failed or in-doubt task (and what it blocked) pending again."""
        self._need_task(task_id)
        self._call(self._guarded(self._retry(task_id)))

    def skip(self, task_id: str, reason: str = "skipped by the user") -> None:
        """Marks a task skipped: its dependents may run (they get no result from it)."""
        self._need_task(task_id)
        self._call(self._guarded(self._skip(task_id, reason)))

    def approve(
        self,
        task_id: str,
        args: dict[str, Any] | None = None,
        *,
        by: str | None = None,
    ) -> None:
        """Approves a task waiting for approval, optionally with edited arguments.

        The decision is committed (it survives a restart) and is an event naming
        who decided and both the original and the edited arguments.

        Raises:
            ArgusError: the task is not waiting, or the edited args do not fit
                the tool's signature (nothing is committed then).
        """
        self._need_task(task_id)
        self._call(self._guarded(self._approve(task_id, args, by or _user())))

    def reject(
        self, task_id: str, reason: str = "rejected", *, by: str | None = None
    ) -> None:
        """Refuses a task waiting for approval: it fails and blocks its dependents."""
        self._need_task(task_id)
        self._call(self._guarded(self._reject(task_id, reason, by or _user())))

    def pending_approvals(self) -> dict[str, dict[str, Any]]:
        """Tasks waiting for a decision -> what was asked (tool, args, policy)."""
        return {
            t: {"tool": self._tasks[t].tool, **(r.approval or {})}
            for t, r in self._records.items()
            if r.status == "awaiting_approval"
        }

    def update_tools(self, *tools: Tool | Callable[..., Any]) -> None:
        """Replaces tools by name (e.g. after redefining one in a notebook cell).

        Tasks that used an old version show up in ``stale()``.
        """
        from argus_lab.tools.registry import as_toolset

        self._tools = {**self._tools, **as_toolset(tools)}

    def stale(self) -> list[str]:
        """Succeeded tasks whose tool code or inputs changed, and their dependents.

        A task is stale when its tool's code hash differs from the one recorded
        when it succeeded, when its arguments resolve differently now (an
        upstream result changed), or when a dependency is stale or not done.
        """
        stale: set[str] = set()
        for tid in self._sched.topo:
            rec = self._records[tid]
            if rec.status != "succeeded":
                continue
            task = self._tasks[tid]
            if any(
                d in stale or self._records[d].status not in DONE for d in task.deps
            ):
                stale.add(tid)
                continue
            tool = self._tools.get(task.tool or "")
            if tool is None:
                continue  # unknown now: nothing to compare against
            if rec.tool_hash is not None and rec.tool_hash != tool.code_hash:
                stale.add(tid)
                continue
            try:
                args = resolve_args(task.args, self._result_of)
            except ReferenceError_:
                stale.add(tid)
                continue
            if (
                rec.input_hash is not None
                and input_hash(tool.name, args) != rec.input_hash
            ):
                stale.add(tid)
        return [t for t in self._tasks if t in stale]

    def rerun_stale(self) -> RunResult:
        """Makes exactly the stale tasks pending again, then ``run()``s."""
        return self._call(self._guarded(self._rerun_stale()))

    def fork(
        self,
        at: str | None = None,
        *,
        name: str | None = None,
        reuse: Literal["cached", "none"] = "cached",
    ) -> Session:
        """Branches a new session that keeps results from before ``at``.

        Args:
            at: The task to start again from; it and everything downstream of it
                are pending in the fork. None keeps every finished result.
            name: The fork's name; default ``<name>-fork<N>``.
            reuse: "cached" keeps finished results outside ``at``'s subtree;
                "none" keeps nothing, re-executing every task.
        """
        if at is not None:
            self._need_task(at)
        if reuse not in ("cached", "none"):
            raise ValueError(f"reuse must be 'cached' or 'none', got {reuse!r}")
        redo = set() if at is None else {at, *self._sched.descendants(at)}
        kept = [
            r.model_copy()
            for t, r in self._records.items()
            if reuse == "cached" and t not in redo and r.status == "succeeded"
        ]
        return self.workspace._fork_session(self, at=at, kept=kept, name=name)

    # -- internals: state changes, all on the loop thread ---------------------

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
        lease: dict[str, Any] | Literal["keep"] | None = "keep",
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
        head = self._store.commit(
            self._version,
            self._holder,
            records=records,
            events=events,
            meta=meta,
            lease=lease,
        )
        self._version = head.version
        self._last_seq = head.last_seq
        if isinstance(lease, dict):
            self._lease_expires = lease["expires"]
        for r in records:
            self._records[r.task_id] = r
        if meta is not None:
            self._info = meta
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

    async def _guarded(self, coro: Coroutine[Any, Any, T]) -> T:
        """Holds the runner lease around one public call (re-entrant)."""
        if self._wake is None:
            self._wake = asyncio.Event()
        if self._active == 0:
            self._acquire()
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
            if self._active:
                self._commit(lease=make_lease(self._holder, self.options.lease_ttl))
                self._heartbeat = loop.call_later(self.options.lease_ttl / 3, beat)

        self._heartbeat = loop.call_later(self.options.lease_ttl / 3, beat)

    def _recover(self) -> None:
        """Decides about attempts a dead process left RUNNING (invariant 2)."""
        changed: list[TaskRecord] = []
        events: list[EventBase] = []
        for tid, rec in self._records.items():
            if rec.status != "running" or tid in self._timers:
                continue
            tool = self._tools.get(self._tasks[tid].tool or "")
            if tool is not None and (tool.idempotent or tool.side_effect != "write"):
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

    # -- running -------------------------------------------------------------

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
        self._pause_requested = None
        if not self._start_run():
            return self._result()
        running: set[asyncio.Task[None]] = set()
        assert self._wake is not None
        try:
            while True:
                while (
                    self._pause_requested is None
                    and len(running) < self.options.concurrency
                    and (tid := self._sched.pop()) is not None
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
        self._pause_requested = None
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
        await asyncio.gather(*(self._execute(t) for t in ids))
        if not self._sched.has_ready() and not self._timers:
            self._finish()
        elif self._info.status not in ("paused",):
            self._pause_now("stepping: call step() or run() to go on")
        return [self._records[t] for t in ids]

    def _wake_up(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _take_ready(self) -> list[str]:
        ids: list[str] = []
        while len(ids) < self.options.concurrency and (t := self._sched.pop()):
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

    def _result_of(self, task_id: str) -> Any:
        rec = self._records[task_id]
        if rec.status != "succeeded":
            raise ReferenceError_(
                f"task {task_id!r} is {rec.status}, so it has no result to use"
            )
        return self._stored_result(rec)

    def _load_artifact(self, ref: str) -> Any:
        if ref not in self._artifact_cache:
            data = self.workspace.artifacts.get_bytes(ref, session_id=self.id)
            self._artifact_cache[ref] = json.loads(data)
        return self._artifact_cache[ref]

    def _ctx(self, task_id: str, attempt: int, key: str) -> ToolContext:
        workdir = self.workspace.path / "files" / self.id
        if not self._workdir_made:
            workdir.mkdir(parents=True, exist_ok=True)
            self._workdir_made = True
        return ToolContext(
            session_id=self.id,
            task_id=task_id,
            attempt=attempt,
            idempotency_key=key,
            workspace=self.workspace.path,
            workdir=workdir,
        )

    async def _execute(self, tid: str) -> None:
        task = self._tasks[tid]
        rec = self._records[tid]
        self._sched.set(tid, "running")
        tool = self._tools.get(task.tool or "")
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            self._fail(
                tid,
                rec,
                Outcome(
                    ok=False,
                    error_type="ToolError",
                    error=(
                        f"tool {task.tool!r} of task {tid!r} is not registered in this "
                        f"session (tools: {known}); reopen with "
                        f"ws.open({self.name!r}, tools=[...]) and retry the task"
                    ),
                ),
            )
            return
        try:
            args = resolve_args(task.args, self._result_of)
        except ReferenceError_ as e:
            self._fail(
                tid, rec, Outcome(ok=False, error=str(e), error_type="PlanError")
            )
            return
        in_hash = input_hash(tool.name, args)
        approval = rec.approval or {}
        if approval.get("state") == "approved":
            if approval.get("edited_args") is not None:
                args = approval["edited_args"]
        else:
            decision, policy = decide(self._policies, tool, args)
            if decision != "approve":
                self._gate(tid, rec, tool, args, decision, policy)
                return
        key = idempotency_key(self.id, tid, rec.generation)
        attempt = rec.attempts + 1
        # Invariant 2: the intent is durable before the side effect can happen.
        rec = rec.model_copy(
            update={
                "status": "running",
                "attempts": attempt,
                "started": self._now(),
                "ended": None,
                "idempotency_key": key,
                "input_hash": in_hash,
                "next_attempt_at": None,
            }
        )
        self._commit(
            [rec],
            [
                self._event(
                    "task_started", tid, attempt=attempt, payload={"tool": tool.name}
                )
            ],
        )
        out = await run_attempt(
            tool,
            args,
            self._ctx(tid, attempt, key),
            timeout=task.timeout or tool.timeout,
            success=task.success,
            pool=self._thread_pool(),
            artifacts=self.workspace.artifacts,
        )
        retries = task.retries if task.retries is not None else tool.retries
        if out.ok:
            self._succeed(tid, rec, out, tool)
        elif out.transient and attempt <= retries:
            self._schedule_retry(tid, rec, out)
        else:
            if out.transient:
                out.error = f"{out.error} (gave up after {attempt} attempt(s))"
            self._fail(tid, rec, out)

    def _thread_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.options.concurrency, thread_name_prefix="argus-tool"
            )
        return self._pool

    def _gate(
        self,
        tid: str,
        rec: TaskRecord,
        tool: Tool,
        args: dict[str, Any],
        decision: str,
        policy: ApprovalPolicy | None,
    ) -> None:
        """A policy said "ask" or "reject" for this call."""
        rule = policy.describe() if policy else None
        if decision == "reject":
            reason = (policy.reason if policy else "") or "refused by policy"
            rec = rec.model_copy(
                update={
                    "approval": {
                        "state": "rejected",
                        "by": "policy",
                        "at": self._now(),
                        "args": args,
                        "policy": rule,
                        "reason": reason,
                    }
                }
            )
            self._fail(
                tid,
                rec,
                Outcome(
                    ok=False, error_type="Rejected", error=f"rejected by policy {rule}"
                ),
                extra=[
                    self._event(
                        "approval_rejected",
                        tid,
                        payload={
                            "by": "policy",
                            "reason": reason,
                            "tool": tool.name,
                            "args": args,
                            "policy": rule,
                        },
                    )
                ],
            )
            return
        rec = rec.model_copy(
            update={
                "status": "awaiting_approval",
                "approval": {
                    "state": "asked",
                    "at": self._now(),
                    "args": args,
                    "policy": rule,
                    "reason": policy.reason if policy else "",
                },
            }
        )
        self._commit(
            [rec],
            [
                self._event(
                    "approval_requested",
                    tid,
                    payload={
                        "tool": tool.name,
                        "args": args,
                        "policy": rule,
                        "reason": policy.reason if policy else "",
                    },
                )
            ],
        )
        self._sched.set(tid, "awaiting_approval")

    def _succeed(self, tid: str, rec: TaskRecord, out: Outcome, tool: Tool) -> None:
        assert out.result_json is not None
        size = len(out.result_json)
        upd: dict[str, Any] = {
            "status": "succeeded",
            "ended": self._now(),
            "error": None,
            "error_type": None,
            "traceback": None,
            "reason": None,
            "tool_hash": tool.code_hash,
        }
        if size > self.options.inline_result_bytes:
            upd["result_ref"] = self.workspace.artifacts.put_bytes(
                out.result_json.encode()
            )
            upd["result"] = None
        else:
            upd["result"], upd["result_ref"] = out.result, None
        rec = rec.model_copy(update=upd)
        ev = self._event(
            "task_succeeded",
            tid,
            attempt=rec.attempts,
            duration=out.duration,
            payload={"bytes": size},
        )
        self._commit([rec], [ev])
        self._sched.set(tid, "succeeded")

    def _schedule_retry(self, tid: str, rec: TaskRecord, out: Outcome) -> None:
        base, cap = self.options.backoff
        delay = min(cap, base * 2 ** (rec.attempts - 1)) * (0.5 + random.random() / 2)
        if out.retry_after is not None:
            delay = max(delay, min(out.retry_after, max(cap, out.retry_after)))
        rec = rec.model_copy(
            update={
                "status": "pending",
                "error": out.error,
                "error_type": out.error_type,
                "traceback": out.traceback,
                "next_attempt_at": self._now() + delay,
            }
        )
        ev = self._event(
            "retry_scheduled",
            tid,
            attempt=rec.attempts,
            duration=out.duration,
            payload={"delay": delay, "error": out.error, "error_type": out.error_type},
        )
        self._commit([rec], [ev])
        loop = asyncio.get_running_loop()

        def due() -> None:
            self._timers.pop(tid, None)
            self._sched.set(tid, "pending")
            self._wake_up()

        # The scheduler keeps the task "running" until the delay is over.
        self._timers[tid] = loop.call_later(delay, due)

    def _fail(
        self,
        tid: str,
        rec: TaskRecord,
        out: Outcome,
        extra: list[EventBase] | None = None,
    ) -> None:
        now = self._now()
        rec = rec.model_copy(
            update={
                "status": "failed",
                "ended": now,
                "error": out.error,
                "error_type": out.error_type,
                "traceback": out.traceback,
                "next_attempt_at": None,
            }
        )
        blocked = [
            self._records[d].model_copy(
                update={
                    "status": "blocked",
                    "reason": f"blocked by failed task {tid!r}",
                }
            )
            for d in self._sched.descendants(tid)
            if self._records[d].status == "pending"
        ]
        events = [
            self._event(
                "task_failed",
                tid,
                attempt=rec.attempts,
                duration=out.duration,
                payload={
                    "error": out.error,
                    "error_type": out.error_type,
                    "blocked": len(blocked),
                },
            )
        ]
        events += [
            self._event("task_blocked", b.task_id, payload={"by": tid}) for b in blocked
        ]
        events = (extra or []) + events
        self._commit([rec, *blocked], events)
        self._sched.set(tid, "failed")
        for b in blocked:
            self._sched.set(b.task_id, "blocked")

    def _unblock_downstream(self, tid: str) -> list[TaskRecord]:
        """Blocked descendants whose dependencies no longer fail become pending."""
        status = {t: r.status for t, r in self._records.items()}
        changed: list[TaskRecord] = []
        order = self._sched.descendants(tid)
        # Repeat until stable: descendants() is breadth-first, not topological.
        progress = True
        while progress:
            progress = False
            for d in order:
                if status[d] != "blocked":
                    continue
                if not any(
                    status[p] in ("failed", "blocked", "in_doubt")
                    for p in self._tasks[d].deps
                ):
                    status[d] = "pending"
                    changed.append(
                        self._records[d].model_copy(
                            update={"status": "pending", "reason": None}
                        )
                    )
                    progress = True
        return changed

    async def _retry(self, tid: str) -> None:
        rec = self._records[tid]
        if rec.status not in ("failed", "in_doubt", "blocked", "skipped"):
            raise ArgusError(
                f"task {tid!r} of session {self.name!r} is {rec.status}; only failed, "
                "in-doubt, blocked or skipped tasks can be retried",
                session_id=self.id,
                task_id=tid,
            )
        # A failed attempt gets a fresh idempotency key; an in-doubt one keeps
        # its key so a remote that deduplicates can still recognise it.
        gen = rec.generation + (0 if rec.status == "in_doubt" else 1)
        new = rec.model_copy(
            update={
                "status": "pending",
                "generation": gen,
                "reason": None,
                "next_attempt_at": None,
                "approval": None if gen != rec.generation else rec.approval,
            }
        )
        self._records[tid] = new
        try:
            changed = [new, *self._unblock_downstream(tid)]
        finally:
            self._records[tid] = rec
        self._commit(
            changed,
            [
                self._event(
                    "task_retried",
                    tid,
                    payload={"from": rec.status, "unblocked": len(changed) - 1},
                )
            ],
        )
        for r in changed:
            self._sched.set(r.task_id, "pending")

    async def _approve(self, tid: str, args: dict[str, Any] | None, by: str) -> None:
        rec = self._records[tid]
        if rec.status != "awaiting_approval":
            raise ArgusError(
                f"task {tid!r} of session {self.name!r} is {rec.status}, not waiting "
                "for approval",
                session_id=self.id,
                task_id=tid,
            )
        tool = self._tools.get(self._tasks[tid].tool or "")
        if args is not None and tool is not None:
            tool.validate(args)  # fail now, naming the field, not at run time
        asked = rec.approval or {}
        new = rec.model_copy(
            update={
                "status": "pending",
                "approval": {
                    **asked,
                    "state": "approved",
                    "by": by,
                    "at": self._now(),
                    "edited_args": args,
                },
            }
        )
        ev = self._event(
            "approval_granted",
            tid,
            payload={"by": by, "args": asked.get("args"), "edited_args": args},
        )
        self._commit([new], [ev])
        self._sched.set(tid, "pending")
        self._wake_up()

    async def _reject(self, tid: str, reason: str, by: str) -> None:
        rec = self._records[tid]
        if rec.status != "awaiting_approval":
            raise ArgusError(
                f"task {tid!r} of session {self.name!r} is {rec.status}, not waiting "
                "for approval",
                session_id=self.id,
                task_id=tid,
            )
        asked = rec.approval or {}
        rec = rec.model_copy(
            update={
                "approval": {
                    **asked,
                    "state": "rejected",
                    "by": by,
                    "at": self._now(),
                    "reason": reason,
                }
            }
        )
        self._fail(
            tid,
            rec,
            Outcome(
                ok=False, error_type="Rejected", error=f"rejected by {by}: {reason}"
            ),
            extra=[
                self._event(
                    "approval_rejected",
                    tid,
                    payload={"by": by, "reason": reason, "args": asked.get("args")},
                )
            ],
        )
        self._wake_up()

    async def _rerun_stale(self) -> RunResult:
        stale = self.stale()
        if stale:
            changed = [
                self._records[t].model_copy(
                    update={
                        "status": "pending",
                        "generation": self._records[t].generation + 1,
                        "approval": None,
                        "reason": None,
                    }
                )
                for t in stale
            ]
            events = [
                self._event(
                    "task_retried", t, payload={"from": "succeeded", "why": "stale"}
                )
                for t in stale
            ]
            self._commit(changed, events)
            for t in stale:
                self._sched.set(t, "pending")
        return await self._run()

    async def _skip(self, tid: str, reason: str) -> None:
        rec = self._records[tid]
        if rec.status in ("succeeded", "skipped", "running"):
            raise ArgusError(
                f"task {tid!r} of session {self.name!r} is {rec.status} and cannot "
                "be skipped",
                session_id=self.id,
                task_id=tid,
            )
        new = rec.model_copy(
            update={"status": "skipped", "reason": reason, "ended": self._now()}
        )
        self._records[tid] = new
        try:
            changed = [new, *self._unblock_downstream(tid)]
        finally:
            self._records[tid] = rec
        timer = self._timers.pop(tid, None)
        if timer is not None:
            timer.cancel()
        self._commit(
            changed,
            [
                self._event(
                    "task_skipped", tid, payload={"reason": reason, "from": rec.status}
                )
            ],
        )
        for r in changed:
            self._sched.set(r.task_id, r.status)
