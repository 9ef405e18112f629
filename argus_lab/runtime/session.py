"""Session: runs a plan step by step on a private event loop, checkpointing each step.

Every mutation happens on the session's own loop thread, so the state needs no
locks; public methods submit coroutines to it and wait (``step``/``run``), or
return at once (``start``, ``pause``). See DESIGN.md sections 4-6; the machinery
is layered in core.py, attempts.py, engine.py and actions.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Literal

from argus_lab.events import EventBase
from argus_lab.model import Plan, SessionInfo, SessionStatus, TaskRecord
from argus_lab.runtime.actions import Actions
from argus_lab.runtime.budget import merge as merge_budget
from argus_lab.runtime.options import (
    RunResult,
    SessionOptions,
    Subscriber,
    T,
    _user,
    tool_replay_key,
)
from argus_lab.tools.registry import Tool

if TYPE_CHECKING:
    import networkx as nx
    import pandas as pd


__all__ = ["RunResult", "Session", "SessionOptions"]

_BLOCKING_LOCK = threading.Lock()


class Session(Actions):
    """A plan being executed, durable across crashes; get one from a Workspace.

    Attributes:
        id: Unique session id. name: Unique name in the workspace.
        workspace: The Workspace holding this session's checkpoints.
    """

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

    def tasks_df(self, **options: Any) -> pd.DataFrame:
        """One row per task; options as ``argus_lab.analysis.tasks_df``."""
        from argus_lab import analysis

        return analysis.tasks_df(self, **options)

    def events_df(self, **options: Any) -> pd.DataFrame:
        """One row per committed event; options as ``argus_lab.analysis.events_df``."""
        from argus_lab import analysis

        return analysis.events_df(self, **options)

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

    _blocking_calls = 0  # blocking run()/step()/rerun_stale() calls waiting now

    def _blocking(self, coro: Coroutine[Any, Any, T]) -> T:
        """``_call`` for the calls that run tasks while their caller waits."""
        with _BLOCKING_LOCK:
            self._blocking_calls += 1
        try:
            return self._call(coro)
        finally:
            with _BLOCKING_LOCK:
                self._blocking_calls -= 1

    @property
    def blocking_run(self) -> bool:
        """Whether a blocking ``run()``, ``step()`` or ``rerun_stale()`` is in
        progress: its caller (e.g. a notebook cell) waits until it returns, unlike
        a background ``start()``. The widget uses it to say its controls act
        only when the cell is done."""
        return self._blocking_calls > 0

    def close(self) -> None:
        """Stops the loop thread and closes the store (waits for a background run)."""
        if self._bg is not None and not self._bg.done():
            self.pause("session closed")
            concurrent.futures.wait([self._bg])  # its error stays in the future
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
        self._memories.close()  # the queued memories are written before we go
        self._store.close()

    async def _close_store(self) -> None:
        self._store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def step(self) -> list[TaskRecord]:
        """Runs the next ready task(s) once (up to the concurrency), commits each.

        Waits for a scheduled retry if that is all there is. Returns the records
        of the tasks that ran (empty when nothing could run).
        """
        self._pause_requested = None  # here, so a pause() right after counts
        return self._blocking(self._guarded(self._step()))

    def run(self) -> RunResult:
        """Runs until every task is done, the session pauses, or nothing can run."""
        self._pause_requested = None
        return self._blocking(self._guarded(self._run()))

    def start(self) -> concurrent.futures.Future[RunResult]:
        """Starts ``run()`` in the background and returns its future at once."""
        if self._bg is not None and not self._bg.done():
            return self._bg
        self._pause_requested = None
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

    def set_budget(self, scope: str = "session", **limits: float | int | None) -> None:
        """Sets or raises limits, committed with the session (they survive restarts).

        Args:
            scope: "session", "task:<task id>" or "subtree:<HTN compound id>".
            **limits: max_cost_usd, max_tokens, max_wall_s, max_steps; None
                removes a limit.

        Example: ``s.set_budget(max_cost_usd=2.0); s.run()`` goes on after a
        pause for budget.
        """
        kind, _, target = scope.partition(":")
        if kind not in ("session", "task", "subtree") or (kind != "session") != bool(
            target
        ):
            raise ValueError(
                f"budget scope must be 'session', 'task:<id>' or 'subtree:<id>', "
                f"got {scope!r}"
            )
        if kind == "task":
            self._need_task(target)
        budget = merge_budget(self._info.budgets.get(scope), **limits)
        self._call(self._guarded(self._set_budget(scope, budget)))

    @property
    def breakpoints(self) -> list[str]:
        """Tasks a run pauses before."""
        return list(self._info.breakpoints)

    @property
    def usage(self) -> dict[str, float]:
        """What budgets are checked against: steps, cost_usd, tokens, wall_s."""
        return {
            "steps": 0.0,
            "cost_usd": 0.0,
            "tokens": 0.0,
            "wall_s": 0.0,
            **self._usage,
        }

    @property
    def running(self) -> bool:
        """Whether a step or run of this Session object is in progress."""
        return self._active > 0

    def set_breakpoint(self, task_id: str, on: bool = True) -> None:
        """Pauses runs before ``task_id`` (a debugger's breakpoint; committed).

        When a run reaches it, the session pauses; the next ``run()`` or
        ``step()`` goes on from it.
        """
        self._need_task(task_id)
        bps = [t for t in self._info.breakpoints if t != task_id]
        if on:
            bps.append(task_id)
        self._call(self._guarded(self._set_meta(breakpoints=bps)))

    def _repr_html_(self) -> str:
        from argus_lab.jupyter.display import session_html

        return session_html(self)

    def graph_svg(self) -> str:
        """The plan's graph as a standalone SVG document, nodes coloured and
        marked by status (for papers and issue reports; ``argus show --svg``)."""
        from argus_lab.jupyter.display import session_svg

        return session_svg(self)

    def context_breakdown(self, task_id: str) -> dict[str, Any] | None:
        """What the last prompt of an LLM task held: items included, truncated or
        dropped, with why (the latest ``context_built`` event), or None."""
        self._need_task(task_id)
        found = None
        for e in self._store.read_events():
            if e.kind == "context_built" and e.task_id == task_id:
                found = e.payload
        return found

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

    def rerun_stale(self) -> RunResult:
        """Makes exactly the stale tasks pending again, then ``run()``s."""
        self._pause_requested = None
        return self._blocking(self._guarded(self._rerun_stale()))

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
        replays: dict[str, str] = {}
        if reuse == "cached":
            # Invariant 9: what reruns in the fork is served from what the parent
            # recorded (model replies, and tool results for the same inputs and
            # code), so replaying a branch costs nothing and repeats no effect.
            replays = self._store.replays()
            for t in redo:
                r = self._records[t]
                if r.status == "succeeded" and r.input_hash and r.tool_hash:
                    replays[tool_replay_key(t, r.input_hash, r.tool_hash)] = json.dumps(
                        {"result": r.result, "result_ref": r.result_ref}
                    )
        return self.workspace._fork_session(
            self, at=at, kept=kept, name=name, replays=replays
        )
