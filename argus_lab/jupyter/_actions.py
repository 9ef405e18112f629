"""The widget's actions: what a toolbar or panel click does to the Session.

Every action maps to public Session methods. Long ones never block the kernel:
Run uses ``session.start()``; Step, approvals and forks run on a one-thread
executor; Pause is immediate. Messages speak the user's terms: the session by
its name or the variable ``%%argus -o VAR`` bound, never a Python repr.
"""

from __future__ import annotations

import concurrent.futures
import re
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import traitlets

from argus_lab.jupyter._family import differing_tasks

if TYPE_CHECKING:
    from argus_lab.runtime.session import RunResult, Session

__all__ = ["ACTIONS", "BLOCKING", "WidgetActions", "user_terms"]

ACTIONS = (
    "approve",
    "compare",
    "fork",
    "open_family",
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

BLOCKING = ("step", "run", "retry_failed", "rerun_stale", "fork", "open_family")
"""Actions refused while a step or run of the session goes on."""

_TASK_ACTIONS = ("approve", "reject", "retry", "skip", "toggle_breakpoint")
# Busy with one of these (not a run, which Pause ends): wait for it.
_STEPS = {"step": "a step", "fork": "a fork", "open_family": "opening a session"}
_VIEW_ACTIONS = ("select", "compare", "open_family")  # still fine once closed
_CALL = re.compile(r"\bs\.(approve|reject|retry|skip)\((['\"])([^'\"]*)\2[^)]*\)")
_OTHER_CALL = re.compile(r"\bs\.(\w+)\(")
_BARE = re.compile(r"(?<![.\w])(run|step)\(\)")


def user_terms(text: str, name: str, var: str = "") -> str:
    """Rewrites the runtime's ``s.approve('t')`` hints for the notebook at hand.

    With a bound variable (``%%argus -o r``) the hint names it (``r.approve('t')``);
    otherwise the line magic that needs no variable (``%argus approve NAME t``).
    """
    # In the widget, the runtime's bare "run() or step()" are its buttons.
    text = _BARE.sub(lambda m: m.group(1).capitalize(), text)
    text = text.replace("call Step or Run", "press Step or Run")
    if var:
        return _OTHER_CALL.sub(lambda m: f"{var}.{m.group(1)}(", text)

    def magic(m: re.Match[str]) -> str:
        return f"%argus {m.group(1)} {name} {m.group(3)}"

    text = _CALL.sub(magic, text)
    return _OTHER_CALL.sub(lambda m: f"session {name!r}.{m.group(1)}(", text)


def plain(e: BaseException) -> str:
    """An error's message as the user should read it: a KeyError's without
    the quotes ``str(KeyError)`` adds (no Python reprs in messages)."""
    if isinstance(e, KeyError) and len(e.args) == 1 and isinstance(e.args[0], str):
        return e.args[0]
    return str(e)


class WidgetActions(traitlets.HasTraits):
    """Mixin of GraphWidget: :meth:`act` and the actions behind it."""

    unsupported = traitlets.Dict().tag(sync=True)
    """Actions the shown object cannot do -> what to do instead (its
    ``unsupported_actions``: a LangGraph thread has no Step); drawn disabled."""

    _session: Session
    _index: dict[str, int]
    _executor: concurrent.futures.ThreadPoolExecutor | None
    busy: str
    selected: str
    hint_var: str

    if TYPE_CHECKING:  # provided by GraphWidget

        def _say(self, text: str, level: str = "info") -> None: ...
        def _set_busy(self, action: str) -> None: ...
        def refresh(self) -> None: ...
        def _bind(self, session: Session) -> None: ...

        _lock: threading.RLock
        family: dict[str, Any]
        differs: list[str]
        breakpoints: list[str]
        tasks: list[str]
        _family: dict[str, Session]

        def _update_detail(self) -> None: ...

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict) or "action" not in content:
            return
        payload = {k: v for k, v in content.items() if k != "action"}
        try:
            self.act(str(content["action"]), **payload)
        except Exception as e:  # shown in the widget; the kernel must not raise
            self._say(plain(e), "error")

    def _toggle_breakpoint(self, task: str) -> bool:
        on = task not in self._session.breakpoints
        self._session.set_breakpoint(task, on=on)
        with self._lock:
            self.breakpoints = self._session.breakpoints
            self._update_detail()
        return on

    def _open_family(self, name: str) -> Session:
        """The parent or a fork by name: the object already open here if any."""
        if name in self._family:
            return self._family[name]
        s = self._session
        if name != self.family.get("parent"):
            raise ValueError(f"{name!r} is neither the parent nor a fork of {s.name!r}")
        other = s.workspace.open(name, tools=list(s.tools.values()))
        self._family[name] = other
        return other

    def _compare(self) -> list[str]:
        """Marks tasks whose status or result differ from the parent's."""
        parent = self.family.get("parent")
        if not parent:
            raise ValueError(
                f"{self._session.name} is not a fork: no parent to compare"
            )
        other = self._open_family(parent)
        differs = differing_tasks(self._session, other, self.tasks)
        with self._lock:
            self.differs = differs
        n = len(differs)
        self._say(f"{n} task(s) differ from {parent}" if n else f"same as {parent}")
        return differs

    def act(self, action: str, **payload: Any) -> concurrent.futures.Future[Any]:
        """Performs a toolbar action, as a click in the front end does.

        Args:
            action: One of :data:`ACTIONS`.
            **payload: ``task`` (approve, reject, retry, skip, select,
                toggle_breakpoint), ``args`` (approve), ``reason`` (reject, skip),
                ``at`` (fork), ``name`` (open_family: the parent or a fork).

        Returns:
            A future for the action's outcome: it is done once the widget's
            traits reflect it. Errors are also shown in the widget.

        Raises:
            ValueError: an unknown action or a missing task.
        """
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; known: {', '.join(ACTIONS)}")
        refused = self.unsupported.get(action)
        if refused:  # e.g. Step on a LangGraph thread: say what to do instead
            return self._failed(ValueError(f"{action}: {refused}"))
        if action not in _VIEW_ACTIONS and self._closed():
            name = self._session.name
            return self._failed(
                RuntimeError(
                    f"session {name!r} was closed in this kernel: it acts no "
                    f"more; reopen it with %argus open {name}"
                )
            )
        task = payload.get("task")
        if action in _TASK_ACTIONS and (
            not isinstance(task, str) or task not in self._index
        ):
            raise ValueError(f"action {action!r} needs the id of a task, got {task!r}")
        if action in BLOCKING and self._running():
            return self._failed(RuntimeError(self._why_busy()))
        if action == "select":
            self.selected = str(payload.get("task") or "")
            return self._done(self.selected)
        if action == "toggle_breakpoint":
            assert isinstance(task, str)
            return self._done(self._toggle_breakpoint(task))
        if action == "compare":
            return self._done(self._compare())
        if action == "pause":
            if not self._session.running:
                self._say("nothing to pause: no run is going on")
                return self._done(None)
            self._session.pause()
            self._say("pausing: running tasks finish, no new task starts")
            return self._done(None)
        if action == "run":
            return self._run(self._session.start)
        if action == "retry_failed":
            return self._run(self._retry_failed)
        return self._in_background(action, payload)

    def _closed(self) -> bool:
        """Whether the shown session object was closed (``s.close()`` in a
        cell); a LangGraph thread view has no such state."""
        return bool(getattr(self._session, "closed", False))

    def _run_or_follow(self) -> concurrent.futures.Future[Any]:
        """Run, or follow the background run going on: what ``%argus resume``
        and a ``--run`` cell run again mean (not an error to pause it)."""
        if not self.busy and self._background_run():
            return self._run(self._session.start)  # start() hands back that run
        return self.act("run")

    def _background_run(self) -> bool:
        """Whether the session's background run (``start()``) goes on."""
        try:
            self._session.wait(0)
        except concurrent.futures.TimeoutError:
            return True
        except Exception:  # the last one failed (its error was shown): none runs
            return False
        return False

    def _why_busy(self) -> str:
        """What goes on that another step or run must not overlap."""
        name = self._session.name
        if self.busy in _STEPS:
            what = _STEPS[self.busy]
            return f"{what} is going on in session {name!r}; wait for it to end"
        if not self.busy and self._session.blocking_run:
            return f"a cell is running session {name!r}; this acts when it returns"
        return f"a run is going on in session {name!r}; pause it first"

    def _running(self) -> bool:
        """Whether a step or run is in progress that another must not overlap:
        one this widget is starting (``busy``) or any of the session's, from the
        widget or from a cell (``session.running``)."""
        return bool(self.busy) or self._session.running

    def _retry_failed(self) -> concurrent.futures.Future[RunResult]:
        failed = [t for t, r in self._session.records.items() if r.status == "failed"]
        for t in failed:
            self._session.retry(t)
        return self._session.start()

    def _outcome(self, result: RunResult) -> str:
        done = result.counts.get("succeeded", 0) + result.counts.get("skipped", 0)
        total = sum(result.counts.values())
        text = f"run ended: {result.status}, {done}/{total} done"
        return text if not result.reason else f"{text}; {self._terms(result.reason)}"

    def _terms(self, text: str) -> str:
        return user_terms(text, self._session.name, self.hint_var)

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
            self._say(plain(e), "error")
            outer.set_exception(e)
            return outer

        def finished(f: concurrent.futures.Future[RunResult]) -> None:
            try:
                result = f.result()
            except BaseException as e:
                self._say(f"run stopped: {plain(e)}", "error")
                self._set_busy("")
                self.refresh()
                outer.set_exception(e)
                return
            self._say(
                self._outcome(result), "info" if result.status != "failed" else "error"
            )
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
        if action in BLOCKING:
            self._set_busy(action)
        return self._executor.submit(self._perform, action, dict(payload))

    def _approve(self, task: str, args: Any) -> concurrent.futures.Future[Any] | None:
        """Approves; returns the future of the run it resumed, if it did."""
        s = self._session
        if args is not None and not isinstance(args, dict):
            raise ValueError("approve: args must be a JSON object")
        s.approve(task, args)
        edited = " with edited args" if args is not None else ""
        if "run" in self.unsupported:  # approving ran it on (a LangGraph thread)
            self._say(f"approved {task}{edited}; the thread ran on: {s.status}")
            return None
        if s.running:  # the run goes on and picks the task up at once
            self._say(f"approved {task}{edited}; the run goes on")
            return None
        if s.pending_approvals() or not (s.reason or "").startswith(
            "waiting for approval"
        ):
            self._say(f"approved {task}{edited}; Step or Run goes on")
            return None
        # The run paused only for this approval: go on with it.
        self._say(f"approved {task}{edited}; the run goes on")
        return self._run(s.start)

    def _perform(self, action: str, p: dict[str, Any]) -> Any:
        s = self._session
        try:
            out: Any = None
            if action == "step":
                ran = s.step()
                text = ", ".join(f"{r.task_id} {r.status}" for r in ran)
                why = self._terms(s.reason) if s.reason else "every task is done"
                self._say(f"step: {text}" if ran else f"step: nothing to run; {why}")
                out = ran
            elif action == "approve":
                out = self._approve(p["task"], p.get("args"))
            elif action == "reject":
                s.reject(p["task"], str(p.get("reason") or "rejected in the widget"))
                self._say(f"rejected {p['task']}")
            elif action == "retry":
                s.retry(p["task"])
                self._say(f"{p['task']} is pending again; Step or Run goes on")
            elif action == "skip":
                s.skip(p["task"], str(p.get("reason") or "skipped in the widget"))
                self._say(f"skipped {p['task']}")
            elif action == "rerun_stale":
                n = len(s.stale())
                result = s.rerun_stale()
                self._say(f"reran {n} stale task(s); {self._outcome(result)}")
                out = result
            elif action == "fork":
                at = p.get("at") or None
                fork = s.fork(at=at)
                self._bind(fork)
                where = f"at {at}" if at else "with every result kept"
                self._say(
                    f"forked {s.name} {where} into {fork.name}; the breadcrumb "
                    f"leads back to {s.name}"
                )
                out = fork
            elif action == "open_family":
                other = self._open_family(str(p.get("name") or ""))
                self._bind(other)
                self._say(f"showing {other.name}")
                out = other
        except Exception as e:
            self._say(f"{action}: {plain(e)}", "error")
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
        self._say(plain(error), "error")
        f: concurrent.futures.Future[Any] = concurrent.futures.Future()
        f.set_exception(error)
        return f
