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
approvals and forks run on a one-thread executor; Pause is immediate.

The widget only observes its Session and calls its public methods: breakpoints,
budgets and whether a run goes on are the Session's (``set_breakpoint`` /
``breakpoints``, ``set_budget``, ``running``); the traits mirror them.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from argus_lab.jupyter.display import (
    STATUS_CODES,
    STATUS_COLORS,
    session_html,
    session_summary,
)
from argus_lab.layout import GROUP_PREFIX, layout_plan

if TYPE_CHECKING:
    from argus_lab.events import EventBase
    from argus_lab.runtime.session import RunResult, Session

__all__ = ["ACTIONS", "GraphWidget", "asset_path"]

ACTIONS = (
    "approve",
    "fork",
    "pause",
    "reject",
    "rerun_stale",
    "retry",
    "retry_failed",
    "run",
    "select",
    "skip",
    "step",
    "toggle_breakpoint",
)
"""Actions the front end may send (``{"action": name, ...}``)."""

_BLOCKING = ("step", "run", "retry_failed", "rerun_stale", "fork")
"""Actions refused while a step or run of the session goes on."""

_PREVIEW_CHARS = 2000


def asset_path(name: str) -> Path:
    """Finds a front-end file: in the wheel (``argus_lab/_widgets``) or the checkout.

    Raises:
        FileNotFoundError: naming both places looked in.
    """
    pkg = Path(__file__).resolve().parent.parent
    places = (pkg / "_widgets" / name, pkg.parent / "widgets" / name)
    for p in places:
        if p.is_file():
            return p
    raise FileNotFoundError(
        f"the widget's front-end file {name!r} is missing (looked in "
        f"{places[0]} and {places[1]}); reinstall argus-lab"
    )


def _preview(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            text = repr(value)
    if len(text) > _PREVIEW_CHARS:
        text = text[:_PREVIEW_CHARS] + f"\n… ({len(text) - _PREVIEW_CHARS} more chars)"
    return text


class GraphWidget(anywidget.AnyWidget):
    """A live view of a Session's plan that can also drive it.

    Args:
        session: The session to show.
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
    """Height of the view in pixels."""

    def __init__(
        self,
        session: Session,
        *,
        update_interval: float = 0.25,
        height: int = 440,
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
        super().__init__(height=height, **kwargs)
        self.on_msg(self._on_msg)
        self._bind(session)

    # -- binding -------------------------------------------------------------

    @property
    def session(self) -> Session:
        """The session shown (after "Fork here", the fork)."""
        return self._session

    def _bind(self, session: Session) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        self._session = session
        self._plan_dirty = False
        with self._lock, self.hold_sync():
            self.session_name = session.name
            self.breakpoints = session.breakpoints
            self.selected = ""
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
        recs = s.records
        codes = [STATUS_CODES[recs[t].status] for t in self._index]
        stale = s.stale()
        with self._lock, self.hold_sync():
            self._codes = codes
            self.status_codes = "".join(codes)
            self.stale = stale
            self.breakpoints = s.breakpoints
            self.approvals = s.pending_approvals()
            self.summary = session_summary(s)
            self._update_detail()

    def _update_detail(self) -> None:
        with self._lock:
            self.detail = self._detail(self.selected)

    def _detail(self, node: str) -> dict[str, Any]:
        s = self._session
        if not node:
            return {}
        if node.startswith(GROUP_PREFIX):
            key = node[len(GROUP_PREFIX) :]
            members = [t.id for t in s.plan.tasks if t.parent == key]
            recs = s.records
            counts: dict[str, int] = {}
            for t in members:
                counts[recs[t].status] = counts.get(recs[t].status, 0) + 1
            return {"id": node, "kind": "group", "title": key, "members": members,
                    "counts": counts}  # fmt: skip
        if node not in self._index:
            return {}
        task = s.plan.task(node)
        rec = s.record(node)
        try:
            result = _preview(s.result(node)) if rec.status == "succeeded" else None
        except Exception as e:  # a missing artifact must not break the panel
            result = f"(result unavailable: {e})"
        duration = (
            rec.ended - rec.started
            if rec.ended is not None and rec.started is not None
            else None
        )
        # What the task's prompt held (LLM tasks): read on selection only.
        context = s.context_breakdown(node) if task.kind == "llm" else None
        return {
            "id": node,
            "kind": "task",
            "title": task.title or task.id,
            "description": task.description,
            "tool": task.tool,
            "args": task.args,
            "deps": list(task.deps),
            "group": task.parent,
            "status": rec.status,
            "attempts": rec.attempts,
            "started": rec.started,
            "ended": rec.ended,
            "duration": duration,
            "result": result,
            "error": rec.error,
            "error_type": rec.error_type,
            "traceback": rec.traceback,
            "reason": rec.reason,
            "approval": rec.approval,
            "idempotency_key": rec.idempotency_key,
            "cost": rec.cost_usd,
            "tokens": rec.tokens,
            "context": context(node) if callable(context) else None,
            "stale": node in self.stale,
            "breakpoint": node in self.breakpoints,
        }

    # -- live updates (on the session's loop thread) --------------------------

    def _on_event(self, ev: EventBase) -> None:
        tid = ev.task_id
        if ev.kind == "plan_patched":
            self._plan_dirty = True
        with self._dirty_lock:
            if tid is not None:
                self._dirty.add(tid)
            if self._flush_handle is not None:
                return
            delay = max(0.0, self._last_flush + self.update_interval - time.monotonic())
            self._flush_handle = self._schedule(delay)

    def _schedule(self, delay: float) -> Any:
        import asyncio

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
        s = self._session
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
            self.summary = session_summary(s)
            if self.selected in dirty:
                self._update_detail()
            self.flushes += 1

    # -- actions -------------------------------------------------------------

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict) or "action" not in content:
            return
        payload = {k: v for k, v in content.items() if k != "action"}
        try:
            self.act(str(content["action"]), **payload)
        except Exception as e:  # shown in the widget; the kernel must not raise
            self._say(str(e), "error")

    def act(self, action: str, **payload: Any) -> concurrent.futures.Future[Any]:
        """Performs a toolbar action, as a click in the front end does.

        Args:
            action: One of :data:`ACTIONS`.
            **payload: ``task`` (approve, reject, retry, skip, select,
                toggle_breakpoint), ``args`` (approve), ``reason`` (reject, skip),
                ``at`` (fork).

        Returns:
            A future for the action's outcome: it is done once the widget's
            traits reflect it. Errors are also shown in the widget.

        Raises:
            ValueError: an unknown action or a missing task.
        """
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; known: {', '.join(ACTIONS)}")
        task = payload.get("task")
        if action in ("approve", "reject", "retry", "skip", "toggle_breakpoint") and (
            not isinstance(task, str) or task not in self._index
        ):
            raise ValueError(f"action {action!r} needs the id of a task, got {task!r}")
        if action in _BLOCKING and self._running():
            return self._failed(
                RuntimeError(
                    f"a run is going on in session {self._session.name!r}; "
                    "pause it first"
                )
            )
        if action == "select":
            self.selected = str(payload.get("task") or "")
            return self._done(self.selected)
        if action == "toggle_breakpoint":
            assert isinstance(task, str)
            return self._done(self._toggle_breakpoint(task))
        if action == "pause":
            self._session.pause()
            self._say("pausing: running tasks finish, no new task starts")
            return self._done(None)
        if action == "run":
            return self._run(self._session.start)
        if action == "retry_failed":
            return self._run(self._retry_failed)
        return self._in_background(action, payload)

    def _running(self) -> bool:
        """Whether a step or run is in progress that another must not overlap:
        one this widget is starting (``busy``) or any of the session's, from the
        widget or from a cell (``session.running``)."""
        return bool(self.busy) or self._session.running

    def _toggle_breakpoint(self, task: str) -> bool:
        on = task not in self._session.breakpoints
        self._session.set_breakpoint(task, on=on)
        with self._lock:
            self.breakpoints = self._session.breakpoints
            self._update_detail()
        return on

    def _retry_failed(self) -> concurrent.futures.Future[RunResult]:
        failed = [t for t, r in self._session.records.items() if r.status == "failed"]
        for t in failed:
            self._session.retry(t)
        return self._session.start()

    def _run(
        self, start: Callable[[], concurrent.futures.Future[RunResult]]
    ) -> concurrent.futures.Future[Any]:
        """Starts a background run; the returned future ends after the refresh."""
        outer: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._set_busy("run")
        try:
            fut = start()
        except Exception as e:
            self._set_busy("")
            self._say(str(e), "error")
            outer.set_exception(e)
            return outer

        def finished(f: concurrent.futures.Future[RunResult]) -> None:
            try:
                result = f.result()
            except BaseException as e:
                self._say(f"run stopped: {e}", "error")
                self._set_busy("")
                self.refresh()
                outer.set_exception(e)
                return
            self._say(str(result), "info" if result.status != "failed" else "error")
            self._set_busy("")
            self.refresh()
            outer.set_result(result)

        fut.add_done_callback(finished)
        return outer

    def _in_background(
        self, action: str, payload: Mapping[str, Any]
    ) -> concurrent.futures.Future[Any]:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="argus-widget"
            )
        if action in _BLOCKING:
            self._set_busy(action)
        return self._executor.submit(self._perform, action, dict(payload))

    def _perform(self, action: str, p: dict[str, Any]) -> Any:
        s = self._session
        try:
            out: Any = None
            if action == "step":
                ran = s.step()
                text = ", ".join(f"{r.task_id} {r.status}" for r in ran)
                self._say(
                    f"step: {text}" if ran else f"step: nothing to run ({s.reason})"
                )
                out = ran
            elif action == "approve":
                args = p.get("args")
                if args is not None and not isinstance(args, dict):
                    raise ValueError("approve: args must be a JSON object")
                s.approve(p["task"], args)
                self._say(f"approved {p['task']!r}; Step or Run goes on")
            elif action == "reject":
                s.reject(p["task"], str(p.get("reason") or "rejected in the widget"))
                self._say(f"rejected {p['task']!r}")
            elif action == "retry":
                s.retry(p["task"])
                self._say(f"{p['task']!r} is pending again; Step or Run goes on")
            elif action == "skip":
                s.skip(p["task"], str(p.get("reason") or "skipped in the widget"))
                self._say(f"skipped {p['task']!r}")
            elif action == "rerun_stale":
                n = len(s.stale())
                result = s.rerun_stale()
                self._say(f"reran {n} stale task(s): {result}")
                out = result
            elif action == "fork":
                at = p.get("at") or None
                fork = s.fork(at=at)
                self._bind(fork)
                self._say(
                    f"forked {s.name!r} at {at!r} into {fork.name!r}; this widget "
                    "now shows the fork (widget.session)"
                )
                out = fork
        except Exception as e:
            self._say(f"{action}: {e}", "error")
            raise
        finally:
            if self.busy == action:
                self._set_busy("")
            self.refresh()
        return out

    def _done(self, value: Any) -> concurrent.futures.Future[Any]:
        f: concurrent.futures.Future[Any] = concurrent.futures.Future()
        f.set_result(value)
        return f

    def _failed(self, error: Exception) -> concurrent.futures.Future[Any]:
        self._say(str(error), "error")
        f: concurrent.futures.Future[Any] = concurrent.futures.Future()
        f.set_exception(error)
        return f

    def _set_busy(self, action: str) -> None:
        with self._lock:
            self.busy = action

    def _say(self, text: str, level: str = "info") -> None:
        with self._lock:
            self._msg_n += 1
            self.message = {"text": text, "level": level, "n": self._msg_n}

    # -- plumbing ------------------------------------------------------------

    def _send(self, msg: Any, buffers: Any = None) -> None:
        self.comm_messages += 1
        self.comm_bytes += len(json.dumps(msg, default=str))
        super()._send(msg, buffers)

    def close(self) -> None:
        """Stops live updates and closes the front-end view (not the session)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._executor is not None:
            # No waiting: close() also runs from __del__ (garbage collection).
            self._executor.shutdown(wait=False)
            self._executor = None
        super().close()

    def __repr__(self) -> str:
        summ = self.summary
        return (
            f"<GraphWidget of session {self.session_name!r} "
            f"{summ.get('status')}: {summ.get('done')}/{summ.get('total')} done>"
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        bundle = super()._repr_mimebundle_(**kwargs)
        assert bundle is not None
        data, meta = bundle
        # Shown wherever no widget front end runs (nbconvert, GitHub, nbval).
        data["text/html"] = session_html(self._session)
        return data, meta
