"""Session: runs a plan step by step on a private event loop, checkpointing each step.

A thin facade: public methods check their arguments and hand the work to the
parts drawn in runtime/__init__.py, on the session's own loop thread (the
RunDriver, driver.py, carries each call there), so the state needs no locks.
See DESIGN.md sections 4-6.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterator, Mapping
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from argus_lab.errors import ArgusError
from argus_lab.events import EventBase
from argus_lab.model import SessionInfo, SessionStatus, TaskRecord
from argus_lab.plan import Plan
from argus_lab.redact import refuse_secret_key
from argus_lab.runtime.assembly import assemble
from argus_lab.runtime.budget import budget_scope
from argus_lab.runtime.budget import merge as merge_budget
from argus_lab.runtime.gates import fork_seed
from argus_lab.runtime.options import (
    RunResult,
    SessionOptions,
    Subscriber,
    current_user,
)
from argus_lab.runtime.views import VIEWS
from argus_lab.store.checkpoints import Loaded, SessionStore
from argus_lab.tools.registry import Tool, as_toolset

if TYPE_CHECKING:
    import networkx as nx
    import pandas as pd

    from argus_lab.workspace import Workspace

__all__ = [
    "RunResult",
    "Session",
    "SessionOptions",
    "any_running",
    "intents_left",
    "run_live",
]


class Session:
    """A plan being executed, durable across crashes; get one from a Workspace.

    Attributes:
        workspace: The Workspace holding this session's checkpoints.
        options: How it runs (not stored: pass them again to ``ws.open``).
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
        parts = assemble(workspace, store, loaded, tools, options)
        self._state = parts.state
        self._signals = parts.signals
        self._actions = parts.actions
        self._driver = parts.driver
        self._closer = parts.closer

    # -- what it is ----------------------------------------------------------

    @property
    def id(self) -> str:
        """The session id."""
        return self._state.info.id

    @property
    def name(self) -> str:
        """The session name (unique in its workspace)."""
        return self._state.info.name

    @property
    def goal(self) -> str:
        """The goal."""
        return self._state.info.goal

    @property
    def plan(self) -> Plan:
        """The plan being run."""
        return self._state.plan

    @property
    def info(self) -> SessionInfo:
        """The stored SessionInfo (status, reason, counts, parent)."""
        return self._state.info

    @property
    def status(self) -> SessionStatus:
        """created, running, paused, succeeded or failed."""
        return self._state.info.status

    @property
    def reason(self) -> str | None:
        """Why the session paused or failed."""
        return self._state.info.reason

    @property
    def interrupted(self) -> bool:
        """Whether its last run was cut short and nothing runs it now: stored
        as "running" (its process or kernel died mid-run), held neither by this
        object nor by a live process elsewhere. ``argus ls``, the widget and
        ``argus serve`` say "interrupted" for it, and so does ``repr``; its
        tasks stored as running are intents the next ``run()`` decides on.
        ``status`` keeps the stored word."""
        return self.status == "running" and not run_live(self)

    @property
    def tools(self) -> dict[str, Tool]:
        """The tools this session was given, by name."""
        return dict(self._state.tools)

    @property
    def path(self) -> Path:
        """The folder of this session's checkpoint store."""
        return self._state.path

    @property
    def version(self) -> int:
        """The store's version counter as this Session object last wrote or read
        it (each commit adds one; a writer on an older version is refused)."""
        return self._state.version

    # -- the trajectory ------------------------------------------------------

    @property
    def records(self) -> dict[str, TaskRecord]:
        """A snapshot of every task's record, by task id."""
        return dict(self._state.records.items())  # validated in one call

    def record(self, task_id: str) -> TaskRecord:
        """The record of one task."""
        self._state.need_task(task_id)
        return self._state.records[task_id]

    def result(self, task_id: str) -> Any:
        """The result of a task (loaded from its artifact if it was large)."""
        self._state.need_task(task_id)
        return self._state.stored_result(self._state.records[task_id])

    def counts(self) -> dict[str, int]:
        """Tasks per status (every status, zeros included)."""
        return self._state.counts()

    def ready(self) -> list[str]:
        """Tasks that could start now, most urgent first."""
        return self._state.sched.peek_all()

    def events(self, since: int = 0) -> list[EventBase]:
        """Committed events with seq > since, in order (read from the store)."""
        return self._state.read_events(since)

    def event_json(self, since: int = 0) -> Iterator[str]:
        """Committed events with seq > since as their stored JSON, in order
        (for readers that parse many at once, like ``analysis``)."""
        return self._state.iter_event_json(since)

    @property
    def graph(self) -> nx.DiGraph:
        """The plan DAG with live node attributes: status, attempts, error, times."""
        return self._state.live_graph()

    def tasks_df(self, **options: Any) -> pd.DataFrame:
        """One row per task; options as ``argus_lab.analysis.tasks_df``."""
        return VIEWS.get("tasks_df")(self, **options)  # type: ignore[no-any-return]

    def events_df(self, **options: Any) -> pd.DataFrame:
        """One row per committed event; options as ``argus_lab.analysis.events_df``."""
        return VIEWS.get("events_df")(self, **options)  # type: ignore[no-any-return]

    def _repr_html_(self) -> str:
        return str(VIEWS.get("session_html")(self))

    def emit(self, *events: EventBase) -> None:
        """Adds events of your own to the trajectory (a score, a note, steps
        imported from elsewhere) in one commit, redacted and numbered like the
        runtime's own. Callable from a subscriber too (on the loop thread).
        """
        red = self._state.redactor
        for ev in events:
            # The commit masks each kind's own fields; the common ones are the
            # runtime's own elsewhere, here they are the caller's.
            for field in ("session_id", "task_id"):
                v = getattr(ev, field)
                if isinstance(v, str) and red.needed(v):
                    setattr(ev, field, red.text(v))
        if self._driver.is_current():
            self._state.commit(events=list(events))
        else:
            self._driver.call(self._actions.emit(list(events)))

    def context_breakdown(self, task_id: str) -> dict[str, Any] | None:
        """What the last prompt of an LLM task held: items included, truncated or
        dropped, with why (the latest ``context_built`` event), or None."""
        self._state.need_task(task_id)
        last = self._state.last_event("context_built", task_id)
        return None if last is None else last.details()

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Calls ``callback(event)`` for every event as it is committed.

        Callbacks run on the session's loop thread and must be quick; exceptions
        they raise are logged, never propagated. Returns an unsubscribe function.
        """
        return self._state.subscribe(callback)

    def __repr__(self) -> str:
        c = self.counts()
        try:
            status = "interrupted" if self.interrupted else self.status
        except (ArgusError, KeyError, OSError):  # its files went away: as stored
            status = self.status
        return (
            f"<Session {self.name!r} {status}: "
            f"{c['succeeded']}/{len(self._state.records)} succeeded, "
            f"{c['failed']} failed>"
        )

    # -- running -------------------------------------------------------------

    @property
    def blocking_run(self) -> bool:
        """Whether a blocking ``run()``, ``step()`` or ``rerun_stale()`` is in
        progress: its caller (e.g. a notebook cell) waits until it returns, unlike
        a background ``start()``. The widget uses it to say its controls act
        only when the cell is done."""
        return self._driver.blocking_run

    def close(self) -> None:
        """Closes the session; idempotent, and done for you at interpreter exit.

        No task starts from now on. Attempts in flight get
        ``shutdown_grace`` seconds to finish and commit; any still running then
        are left as their committed intents, decided on the next open exactly
        as after a crash. Nothing is marked failed by closing.
        """
        self._closer.close("session closed")

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def step(self) -> list[TaskRecord]:
        """Runs the next ready task(s) once (up to the concurrency), commits each.

        Waits for a scheduled retry if that is all there is. Returns the records
        of the tasks that ran (empty when nothing could run).
        """
        return self._driver.step()

    def run(self) -> RunResult:
        """Runs until every task is done, the session pauses, or nothing can run."""
        return self._driver.run()

    def start(self) -> concurrent.futures.Future[RunResult]:
        """Starts ``run()`` in the background and returns its future at once."""
        return self._driver.start()

    async def arun(self) -> RunResult:
        """``run()`` for async code: awaits the run on the session's own loop."""
        return await self._driver.arun()

    def wait(self, timeout: float | None = None) -> RunResult | None:
        """Waits for a background run started by ``start()``; None if there is none."""
        return self._driver.wait(timeout)

    def pause(self, reason: str = "paused by the user") -> None:
        """Asks a run to stop: no new task starts; running ones finish and commit.

        Raises:
            ConcurrentSessionError: this object is not running the session and
                another live process (or object) is: it says which, and how to
                pause it there. Nothing runs it: nothing to pause, no error.
        """
        if not self.running:
            self._state.refuse_pause()
        self._signals.pause(reason)

    @property
    def closed(self) -> bool:
        """Whether this object is shut down (``close()``, or its process
        exiting): it runs nothing more; ``ws.open(name)`` gives a live one."""
        return self._signals.stopping is not None

    @property
    def running(self) -> bool:
        """Whether a step or run of this Session object is in progress."""
        return self._state.lease.held

    # -- a person's decisions ------------------------------------------------

    def retry(self, task_id: str) -> None:
        """Makes a failed or in-doubt task (and what it blocked) pending again."""
        self._state.need_task(task_id)
        self._driver.call(self._actions.retry(task_id))

    def skip(self, task_id: str, reason: str = "skipped by the user") -> None:
        """Marks a task skipped: its dependents may run (they get no result from it)."""
        self._state.need_task(task_id)
        self._driver.call(self._actions.skip(task_id, reason))

    def approve(
        self,
        task_id: str,
        args: dict[str, Any] | None = None,
        *,
        by: str | None = None,
    ) -> None:
        """Approves a task waiting for approval, optionally with edited arguments
        (``args``: all of the task's arguments; they replace the plan's, they
        are not merged into them).

        The decision is committed (it survives a restart) and is an event naming
        who decided and both the original and the edited arguments.

        Raises:
            ArgusError: the task is not waiting, or the edited args do not fit
                the tool's signature (nothing is committed then).
        """
        self._state.need_task(task_id)
        if args is not None and not isinstance(args, dict):
            raise TypeError(
                f"args must be a dict of argument name -> value (all of the "
                f"task's arguments: they replace them), got {type(args).__name__}"
            )
        if by is not None and not isinstance(by, str):
            raise TypeError(f"by must be a str (who decided), got {by!r}")
        self._driver.call(self._actions.approve(task_id, args, by or current_user()))

    def reject(
        self, task_id: str, reason: str = "rejected", *, by: str | None = None
    ) -> None:
        """Refuses a task waiting for approval: it fails and blocks its dependents."""
        self._state.need_task(task_id)
        for what, v in (("reason", reason), ("by", by)):
            if v is not None and not isinstance(v, str):
                raise TypeError(f"{what} must be a str, got {v!r}")
        self._driver.call(self._actions.reject(task_id, reason, by or current_user()))

    def pending_approvals(self) -> dict[str, dict[str, Any]]:
        """Tasks waiting for a decision -> what was asked (tool, args, policy)."""
        return self._actions.pending_approvals()

    def set_budget(self, scope: str = "session", **limits: float | int | None) -> None:
        """Sets or raises limits, committed with the session (they survive restarts).

        Args:
            scope: "session", "task:<task id>" or "subtree:<HTN compound id>".
            **limits: max_cost_usd, max_tokens, max_wall_s, max_steps; None
                removes a limit.

        Example: ``s.set_budget(max_cost_usd=2.0); s.run()`` goes on after a
        pause for budget.
        """
        kind, target = budget_scope(scope)
        refuse_secret_key(  # a key of the stored budgets
            self._state.redactor,
            scope,
            "the budget scope",
            "scopes are stored as keys",
            "Name the task or subtree by its id",
        )
        if kind == "task":
            self._state.need_task(target)
        budget = merge_budget(self._state.info.budgets.get(scope), **limits)
        self._driver.call(self._actions.set_budget(scope, budget))

    @property
    def usage(self) -> dict[str, float]:
        """What budgets are checked against: steps, cost_usd, tokens, wall_s."""
        zero = {"steps": 0.0, "cost_usd": 0.0, "tokens": 0.0, "wall_s": 0.0}
        return {**zero, **self._state.usage}

    @property
    def breakpoints(self) -> list[str]:
        """Tasks a run pauses before."""
        return list(self._state.info.breakpoints)

    def set_breakpoint(self, task_id: str, on: bool = True) -> None:
        """Pauses runs before ``task_id`` (a debugger's breakpoint; committed).

        When a run reaches it, the session pauses; the next ``run()`` or
        ``step()`` goes on from it.
        """
        self._state.need_task(task_id)
        self._driver.call(self._actions.set_breakpoint(task_id, on))

    def graph_svg(self) -> str:
        """The plan's graph as a standalone SVG document, nodes coloured and
        marked by status (for papers and issue reports; ``argus show --svg``)."""
        return str(VIEWS.get("graph_svg")(self))

    # -- change: tools, staleness, forks ---------------------------------------

    def update_tools(self, *tools: Tool | Callable[..., Any]) -> None:
        """Replaces tools by name (e.g. after redefining one in a notebook cell).

        Tasks that used an old version show up in ``stale()``.
        """
        self._state.tools = {**self._state.tools, **as_toolset(tools)}

    def stale(self) -> list[str]:
        """Succeeded tasks whose tool code or inputs changed, and their dependents.

        A task is stale when its tool's code hash differs from the one recorded
        when it succeeded, when its arguments resolve differently now (an
        upstream result changed), or when a dependency is stale or not done.
        """
        return self._actions.stale()

    def rerun_stale(self) -> RunResult:
        """Makes exactly the stale tasks pending again, then ``run()``s."""
        return self._driver.rerun_stale()

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
            self._state.need_task(at)
        if reuse not in ("cached", "none"):
            raise ValueError(f"reuse must be 'cached' or 'none', got {reuse!r}")
        kept, replays = fork_seed(self._state, at, reuse)
        return self.workspace._fork_session(
            self, at=at, kept=kept, name=name, replays=replays
        )


def run_live(s: Session) -> bool:
    """Whether a run of ``s`` goes on now: this object's, or a live process's
    (its lease; one head read). Else a task stored as running is an intent a
    run left when it was closed or its process or kernel died: nothing runs
    it, and the next run reruns it or holds it in doubt. One definition for
    ``Session.interrupted``, ``tasks_df().interrupted``, ``argus show`` and
    the widget's "interrupted" (``jupyter/_detail.py``, which asks the same of
    the store it polls)."""
    return s.running or s.workspace.runner(s.id) is not None


def intents_left(s: Session, records: Mapping[str, TaskRecord] | None = None) -> bool:
    """Whether ``s`` has tasks stored as running that no run goes on with
    (``run_live`` false): they read "interrupted" in ``tasks_df``, ``argus
    show`` and ``argus serve``. The lease is read only when some task is
    stored as running (``any_running``). ``records``: ``s.records`` if the
    caller holds them already (each read of it is a snapshot)."""
    return any_running(s.records if records is None else records) and not run_live(s)


def any_running(records: Mapping[str, TaskRecord]) -> bool:
    """Whether any task is stored as running (a C-level scan, no bytecode per
    task: a 10,000-task frame pays it)."""
    return "running" in set(map(attrgetter("status"), records.values()))
