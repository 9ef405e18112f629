"""GraphWidget: the live, clickable plan DAG of a Session (anywidget).

State lives in traitlets, so a re-rendered view needs no round trip: the layout
(computed in Python by :mod:`argus_lab.layout`), every task's status as
one character per task (``status_codes``, in ``tasks`` order), the selection and
its detail, the summary, breakpoints and pending approvals. Buttons send
*actions* as custom messages (``{"action": "step"}``) which map to Session
methods; :meth:`GraphWidget.act` is the same entry point from Python.

Live updates come from ``session.subscribe``: each committed event marks its
task dirty and a flush is scheduled on the session's loop at most every
``update_interval`` seconds, so a 10,000-task run sends a number of comm
messages bounded by its duration, not by its task count (``comm_messages``
counts them; see benchmarks/bench_widget.py).

Long actions never block the kernel: Run uses ``session.start()``; Step,
approvals and forks run on a one-thread executor; Pause is immediate (see
:mod:`argus_lab.jupyter._actions`). While a run goes on, flushes keep coming
until it ends; while a *cell* runs a blocking ``s.run()`` (``blocking_run``),
``cell_running`` tells the front end that clicks wait for the cell.

What no event announces is caught up after each notebook cell: tools redefined
with ``s.update_tools`` (stale tasks), ``s.close()``, and the static fallback
output shown before the live view, so a page reload without the kernel still
shows the graph (both in :mod:`argus_lab.jupyter._output`). A session another
process runs sends no event here: the widget polls its store (``_elsewhere``).

The widget only observes its Session and calls its public methods: breakpoints,
budgets, whether a run goes on are the Session's (``set_breakpoint``,
``set_budget``, ``running``, ``blocking_run``, ``closed``); the traits mirror them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from argus_lab.jupyter._actions import ACTIONS, WidgetActions, user_terms
from argus_lab.jupyter._detail import node_detail, status_marks
from argus_lab.jupyter._elsewhere import POLL_S, run_elsewhere
from argus_lab.jupyter._family import family_of
from argus_lab.jupyter._output import (
    after_each_cell,
    asset_path,
    fallback_html,
    fallback_state,
    show_with_fallback,
    sync_fallback,
)
from argus_lab.jupyter.display import (
    STATUS_CODES,
    STATUS_COLORS,
    session_html,
    session_summary,
)
from argus_lab.layout import layout_plan

if TYPE_CHECKING:
    from argus_lab.events import EventBase
    from argus_lab.runtime.session import Session

__all__ = ["ACTIONS", "GraphWidget", "asset_path"]


class GraphWidget(WidgetActions, anywidget.AnyWidget):
    """A live view of a Session's plan that can also drive it.

    Args:
        session: The session, or a LangGraph thread view (``widget_session()``).
        update_interval: Seconds between coalesced live updates (at most).
        height: Height of the view in pixels.

    Attributes:
        comm_messages: Comm messages this widget has sent (state updates and
            custom messages), for benchmarks.
        comm_bytes: Their size as JSON.
        flushes: Coalesced live updates sent so far.
    """

    _esm = asset_path("graph.js")
    _css = asset_path("graph.css")

    session_name = traitlets.Unicode("").tag(sync=True)
    """The shown session's name."""
    tasks = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """Task ids in plan order: the index space of ``status_codes``."""
    graph = traitlets.Dict().tag(sync=True)
    """The layout: node and group boxes and edges (argus_lab.layout.Layout);
    not named ``layout``, which ipywidgets uses for CSS layout."""
    collapsed = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """Keys (``parent`` values) of HTN groups drawn as one node."""
    status_codes = traitlets.Unicode("").tag(sync=True)
    """One character per task (``codes`` maps it back to the status)."""
    codes = traitlets.Dict({c: s for s, c in STATUS_CODES.items()}).tag(sync=True)
    """Status code character -> status."""
    palette = traitlets.Dict(dict(STATUS_COLORS)).tag(sync=True)
    """Status -> fill colour."""
    stale = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """Succeeded tasks whose inputs or tool changed (``session.stale()``)."""
    selected = traitlets.Unicode("").tag(sync=True)
    """The selected node's id ("" for none)."""
    detail = traitlets.Dict().tag(sync=True)
    """What the detail panel shows for the selected node."""
    summary = traitlets.Dict().tag(sync=True)
    """The summary bar's numbers (see display.session_summary)."""
    breakpoints = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """Tasks a run pauses before: ``session.breakpoints``, mirrored."""
    approvals = traitlets.Dict().tag(sync=True)
    """Tasks waiting for approval -> what was asked (tool, args, policy)."""
    busy = traitlets.Unicode("").tag(sync=True)
    """The action in progress ("" when idle)."""
    message = traitlets.Dict().tag(sync=True)
    """The last action's outcome: text, level ("info" or "error"), n."""
    height = traitlets.Int(440).tag(sync=True)
    """Largest height of the canvas in pixels (it follows the graph up to it)."""
    cell_running = traitlets.Bool(False).tag(sync=True)
    """A cell runs a blocking ``s.run()``: clicks act only once it returns."""
    hint_var = traitlets.Unicode("").tag(sync=True)
    """The variable the session is bound to (``%%argus -o VAR``), for hints."""
    family = traitlets.Dict().tag(sync=True)
    """The fork's parent (name, forked_at) and the forks made here (names)."""
    differs = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """After "compare with parent": tasks whose status or result differ."""
    marks = traitlets.Dict().tag(sync=True)
    """Tasks drawn apart from their status: ``rejected`` (by a person or a
    policy) and ``cached`` (a fork's results kept from its parent)."""
    fallback_key = traitlets.Unicode("").tag(sync=True)
    """Marks this widget's static fallback output, which the live view hides."""

    def __init__(
        self,
        session: Session,
        *,
        update_interval: float = 0.25,
        height: int = 440,
        hint_var: str = "",
        **kwargs: Any,
    ) -> None:
        # Plain attributes first: the base class sends state while it initialises.
        self.update_interval = update_interval
        self.comm_messages = 0
        self.comm_bytes = 0
        self.flushes = 0
        self._lock = threading.RLock()
        self._dirty_lock = threading.Lock()
        self._dirty: set[str] = set()
        self._flush_handle: Any = None
        self._last_flush = 0.0
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._msg_n = 0
        self._unsubscribe: Callable[[], None] | None = None
        self._family: dict[str, Session] = {}  # name -> parent or fork opened here
        self._unwatch: Callable[[], None] | None = None  # the after-cell hook
        self._fallback_seen: tuple[str, int, int] | None = None  # as last shown
        super().__init__(
            height=height, hint_var=hint_var, fallback_key=uuid.uuid4().hex, **kwargs
        )
        self.on_msg(self._on_msg)
        adapt = getattr(session, "widget_session", None)
        self._bind(adapt() if callable(adapt) else session)
        self._unwatch = after_each_cell(self, GraphWidget._after_cell)

    # -- binding -------------------------------------------------------------

    @property
    def session(self) -> Session:
        """The session shown (after "Fork here", the fork)."""
        return self._session

    def _bind(self, session: Session) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        old = getattr(self, "_session", None)
        if old is not None:
            self._family.setdefault(old.name, old)
        self._session = session
        self._family.setdefault(session.name, session)
        self._plan_dirty = False
        with self._lock, self.hold_sync():
            self.session_name = session.name
            self.breakpoints = session.breakpoints
            self.unsupported = dict(getattr(session, "unsupported_actions", {}))
            self.selected = ""
            self.differs = []
            self.family = family_of(session, self._family)
            self._load_plan()
        self._unsubscribe = session.subscribe(self._on_event)
        self.refresh()

    def _load_plan(self) -> None:
        """(Re)reads the plan: ids, edges and layout (also after a plan patch)."""
        plan = self._session.plan
        self._index = {t.id: i for i, t in enumerate(plan.tasks)}
        rec = self._session.record
        self._codes = [STATUS_CODES[rec(t.id).status] for t in plan.tasks]
        with self._lock, self.hold_sync():
            self.tasks = [t.id for t in plan.tasks]
            self.status_codes = "".join(self._codes)
            self.graph = dict(layout_plan(plan, collapsed=self.collapsed))

    @traitlets.observe("collapsed")
    def _collapsed_changed(self, change: Mapping[str, Any]) -> None:
        with self._lock:
            self.graph = dict(layout_plan(self._session.plan, collapsed=change["new"]))

    @traitlets.observe("selected")
    def _selected_changed(self, change: Mapping[str, Any]) -> None:
        self._update_detail()

    # -- state ---------------------------------------------------------------

    @property
    def statuses(self) -> dict[str, str]:
        """Task id -> status as the front end has it (decoded ``status_codes``)."""
        codes = self.codes
        return {t: codes[c] for t, c in zip(self.tasks, self.status_codes, strict=True)}

    def refresh(self) -> None:
        """Recomputes every trait from the session now (not coalesced)."""
        s = self._session
        with self._dirty_lock:
            self._dirty.clear()
        if len(s.plan.tasks) != len(self._index) or self._plan_dirty:
            self._plan_dirty = False
            self._load_plan()
        other = run_elsewhere(s)  # no event of that run comes here: poll
        now = other["tasks"] if other else {t: r.status for t, r in s.records.items()}
        codes = [STATUS_CODES[now.get(t, "pending")] for t in self._index]
        stale = s.stale()
        with self._lock, self.hold_sync():
            self._codes = codes
            self.status_codes = "".join(codes)
            self.stale = stale
            self.breakpoints = s.breakpoints
            self.approvals = s.pending_approvals()
            self.summary = self._summary(other)
            self.marks = status_marks(s, other)
            self.cell_running = s.blocking_run and not self.busy
            self._update_detail()
        if other is not None and other["status"] == "running":
            with self._dirty_lock:
                if self._flush_handle is None:
                    self._flush_handle = self._schedule(POLL_S)

    def _update_detail(self) -> None:
        with self._lock:
            self.detail = node_detail(
                self._session,
                self.selected,
                stale=self.stale,
                breakpoints=self.breakpoints,
            )

    def _summary(self, other: dict[str, Any] | None = None) -> dict[str, Any]:
        s = self._session
        summ = session_summary(s, other)
        summ["reason"] = user_terms(summ["reason"], s.name, self.hint_var)
        summ["live"] = s.running
        summ["closed"] = self._closed()  # s.close() in a cell: banner, no actions
        return summ

    # -- live updates (on the session's loop thread) --------------------------

    def _on_event(self, ev: EventBase) -> None:
        if ev.kind == "plan_patched":
            self._plan_dirty = True
        with self._dirty_lock:
            if ev.kind in ("task_retried", "task_skipped"):  # dependents change too
                self._dirty.update(self._index)
            elif ev.task_id is not None:
                self._dirty.add(ev.task_id)
            if self._flush_handle is not None:
                return
            delay = max(0.0, self._last_flush + self.update_interval - time.monotonic())
            self._flush_handle = self._schedule(delay)

    def _schedule(self, delay: float) -> Any:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the session's loop: use a timer thread
            timer = threading.Timer(delay, self._flush)
            timer.daemon = True
            timer.start()
            return timer
        return loop.call_later(delay, self._flush)

    def _flush(self) -> None:
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, set()
            self._flush_handle = None
            self._last_flush = time.monotonic()
        if self._unsubscribe is None:  # closed meanwhile
            return
        s = self._session
        if run_elsewhere(s) is not None:  # another process runs it: look again
            self.refresh()
            return
        with self._lock, self.hold_sync():
            if self._plan_dirty:  # tasks were added or removed: lay out again
                self._plan_dirty = False
                self._load_plan()
            recs = s.records
            for t in dirty:
                i = self._index.get(t)
                if i is not None and t in recs:
                    self._codes[i] = STATUS_CODES[recs[t].status]
            self.status_codes = "".join(self._codes)
            self.breakpoints = s.breakpoints
            self.approvals = s.pending_approvals()
            self.summary = self._summary()
            self.marks = status_marks(s)
            self.cell_running = s.blocking_run and not self.busy
            # A run's last events come before it ends: look again until it has,
            # so "Running…" and Pause do not outlive it.
            again = self.summary.get("live") or self.cell_running
            if self.selected in dirty:
                self._update_detail()
            self.flushes += 1
        if again:
            with self._dirty_lock:
                if self._flush_handle is None:
                    self._flush_handle = self._schedule(max(self.update_interval, 0.1))

    def _set_busy(self, action: str) -> None:
        with self._lock:
            self.busy = action

    def _say(self, text: str, level: str = "info") -> None:
        with self._lock:
            if self.message.get("text") == text:  # each message once
                return
            self._msg_n += 1
            self.message = {"text": text, "level": level, "n": self._msg_n}

    # -- plumbing ------------------------------------------------------------

    def _send(self, msg: Any, buffers: Any = None) -> None:
        self.comm_messages += 1
        self.comm_bytes += len(json.dumps(msg, default=str))
        super()._send(msg, buffers)

    def _after_cell(self) -> None:
        """Catches up with what no event announces: tools redefined by
        ``s.update_tools(...)`` (stale tasks), the end of a blocking run, and
        ``s.close()``."""
        if self._unsubscribe is None:
            return
        closed = self._closed() != self.summary.get("closed")
        if self._session.stale() != self.stale or self.cell_running or closed:
            self.refresh()
        sync_fallback(self)

    def close(self) -> None:
        """Stops live updates and closes the front-end view (not the session)."""
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        # A flush already scheduled finds the widget closed and does nothing.
        if self._executor is not None:
            # No waiting: close() also runs from __del__ (garbage collection).
            self._executor.shutdown(wait=False)
            self._executor = None
        super().close()

    def __repr__(self) -> str:
        m = self.summary
        done = f"{m.get('status')}: {m.get('done')}/{m.get('total')} done"
        return f"<GraphWidget of session {self.session_name!r} {done}>"

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        bundle = super()._repr_mimebundle_(**kwargs)
        assert bundle is not None
        data, meta = bundle
        # Shown wherever no widget front end runs (nbconvert, GitHub, nbval).
        data["text/html"] = session_html(self._session)
        return data, meta

    def fallback_html(self) -> str:
        """The static view shown when the live one cannot be (its model is gone
        after a kernel restart and a page reload): the session's SVG and table,
        and how to reopen it. The live view hides it (``fallback_key``)."""
        return fallback_html(self._session, self.fallback_key)

    def _ipython_display_(self) -> None:
        """Two outputs: the static fallback, then the live view (see _output)."""
        self._fallback_seen = fallback_state(self.summary)
        data, meta = super()._repr_mimebundle_() or ({}, {})
        show_with_fallback(self.fallback_html(), self.fallback_key, data, meta)
