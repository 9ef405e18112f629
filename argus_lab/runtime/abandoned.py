"""Calls still running on threads after their attempt was abandoned.

Python cannot stop a thread: a sync call past its timeout, or still running
when its session closed (``shutdown_grace``), runs on in this process. For a
write that is not idempotent its attempt is in doubt; while its call runs, a
retry would make a second call beside it, which may take effect as well. So
the calls are kept here, process-wide, by session and task: ``s.retry`` of
such a task refuses while its call runs, a session reopened in this process
leaves the task in doubt saying the call still runs, and when the call ends
the session is told how (it returned, or raised what), to say so in the
task's in-doubt reason.

Thread-safe: calls are added on a session's loop thread, end on tool
threads, and are read from any thread; the session hears of an end through
the callback it watches with, which only hands the news to its loop thread.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from argus_lab.runtime.options import log
from argus_lab.runtime.toolcall import error_text

__all__ = ["AbandonedCall", "abandon", "lookup", "running", "wait", "watch"]

_KEEP_ENDED = 256
"""Ended calls remembered (for a session reopened after its call ended)."""


@dataclass(eq=False)
class AbandonedCall:
    """One abandoned call, running or ended."""

    session_id: str
    task_id: str
    attempt: int
    """The attempt it belongs to."""
    tool: str
    why: str
    """Why it was abandoned ("timed out after 0.3s", "the session shut down")."""
    since: float = field(default_factory=time.time)
    """When it was abandoned (epoch seconds)."""
    ended: str | None = None
    """How it ended ("returned", "raised KeyError: ..."); None while it runs."""
    done: threading.Event = field(default_factory=threading.Event)
    """Set once it ended."""

    def what(self) -> str:
        """The call, for a person: ``attempt 1 of tool 'charge'``."""
        return f"attempt {self.attempt} of tool {self.tool!r}"


_lock = threading.Lock()
_running: dict[tuple[str, str], list[AbandonedCall]] = {}
_ended: OrderedDict[tuple[str, str], AbandonedCall] = OrderedDict()
_watchers: dict[str, list[Callable[[AbandonedCall], None]]] = {}


def abandon(
    fut: concurrent.futures.Future[Any],
    *,
    session_id: str,
    task_id: str,
    attempt: int,
    tool: str,
    why: str,
) -> AbandonedCall:
    """Keeps the call running in ``fut`` until it ends; then tells the
    session's watchers. A call already over is only remembered as ended."""
    call = AbandonedCall(session_id, task_id, attempt, tool, why)
    key = (session_id, task_id)
    with _lock:
        _running.setdefault(key, []).append(call)
    fut.add_done_callback(lambda f: _end(call, f))
    return call


def _how(fut: concurrent.futures.Future[Any]) -> str:
    if fut.cancelled():
        return "was cancelled before it began"
    e = fut.exception()
    if e is None:
        return "returned"
    return f"raised {type(e).__name__}: {error_text(e)}"


def _end(call: AbandonedCall, fut: concurrent.futures.Future[Any]) -> None:
    try:
        how = _how(fut)
    except Exception:  # never lose the end of a call over its message
        how = "ended (how could not be read)"
    key = (call.session_id, call.task_id)
    with _lock:
        call.ended = how
        left = [c for c in _running.get(key, ()) if c is not call]
        if left:
            _running[key] = left
        else:
            _running.pop(key, None)
        _ended[key] = call
        _ended.move_to_end(key)
        while len(_ended) > _KEEP_ENDED:
            _ended.popitem(last=False)
        watchers = list(_watchers.get(call.session_id, ()))
    for fn in watchers:  # first: a waiter then finds the news on its way
        try:
            fn(call)
        except Exception:
            log.exception("telling a session that an abandoned call ended")
    call.done.set()


def running(session_id: str, task_id: str) -> AbandonedCall | None:
    """The task's abandoned call still running in this process, if any."""
    with _lock:
        calls = _running.get((session_id, task_id))
        return calls[-1] if calls else None


def lookup(session_id: str, task_id: str) -> AbandonedCall | None:
    """The task's abandoned call still running, else the last one that ended
    (among the last few hundred in this process), else None."""
    with _lock:
        calls = _running.get((session_id, task_id))
        if calls:
            return calls[-1]
        return _ended.get((session_id, task_id))


def wait(session_id: str, task_id: str, timeout: float | None = None) -> bool:
    """Waits up to ``timeout`` seconds for the task's abandoned calls to end;
    True if none is left running."""
    end = None if timeout is None else time.monotonic() + timeout
    while (call := running(session_id, task_id)) is not None:
        left = None if end is None else max(0.0, end - time.monotonic())
        if not call.done.wait(left):
            return False
    return True


def watch(session_id: str, fn: Callable[[AbandonedCall], None], owner: object) -> None:
    """Calls ``fn(call)`` (on the thread the call ended on) for each abandoned
    call of the session that ends, while ``owner`` lives."""
    with _lock:
        _watchers.setdefault(session_id, []).append(fn)
    weakref.finalize(owner, unwatch, session_id, fn)


def unwatch(session_id: str, fn: Callable[[AbandonedCall], None]) -> None:
    """Stops calling ``fn`` (no error if it was not watching)."""
    with _lock:
        fns = [f for f in _watchers.get(session_id, ()) if f is not fn]
        if fns:
            _watchers[session_id] = fns
        else:
            _watchers.pop(session_id, None)
