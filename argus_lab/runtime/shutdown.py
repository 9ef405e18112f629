"""Shutdown is not failure: how a session stops when it is closed or its process
ends (a kernel restart, interpreter exit, SIGTERM).

``Closer.close`` stops starting tasks at once, gives the attempts in flight a
grace period (``SessionOptions.shutdown_grace``) to finish and commit, and then
leaves those still running as their committed intents: ``RunLoop.abandon``
turns each into a ``ShutDown`` outcome, which the failure policy never makes a
failure. On the next open they are decided exactly as after a crash (rerun
with the same idempotency key if the tool is idempotent, in doubt otherwise).

The process-wide part (``track``) runs every live session's close when the
process shuts down:

- ``threading._register_atexit``: the hook ``concurrent.futures`` itself uses.
  Threading's exit hooks run in reverse order of registration, before
  non-daemon threads are joined and before ``atexit``; ours is registered after
  ``concurrent.futures.thread`` is imported, so it runs while the tool thread
  pools still take work. (A plain ``atexit`` hook runs after the pools refuse
  work: the next task would fail with "cannot schedule new futures after
  shutdown", which is what a Jupyter kernel restart did.) A kernel's shutdown
  request ends in this exit too.
- SIGTERM, when its handler is still the default (never over one of yours):
  close every session, then die of SIGTERM as before.

Sessions and workspaces are registered weakly, so they can still be
garbage-collected; a session with a background run is held until it ends.
A sync tool's thread cannot be killed: one left in flight runs to its end
before the interpreter exits (Python joins tool pool threads), its result
dropped; after SIGTERM the process dies at once, ending it wherever it is.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.thread  # its exit hook must be registered before ours
import contextlib
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from argus_lab.runtime.options import log

if TYPE_CHECKING:
    from argus_lab.runtime.engine import RunLoop
    from argus_lab.runtime.loop import LoopThread
    from argus_lab.runtime.signals import Signals

__all__ = ["Closer", "hold", "shut_down", "stop_all", "track"]


class Closer:
    """Closes one session: stop, grace, leave what is in flight, then close.

    Args:
        loop: The session's loop thread.
        runner: Abandons the attempts in flight when the grace is over.
        signals: Where the shutdown is announced.
        grace: Seconds attempts in flight get to finish and commit.
        last: Closes the session's parts (pool, memory writer, store), once.
    """

    def __init__(
        self,
        loop: LoopThread,
        runner: RunLoop,
        signals: Signals,
        grace: float,
        last: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._runner = runner
        self._signals = signals
        self._grace = grace
        self._last = last
        self._deadline: float | None = None
        self.closed = False

    def stop(self, why: str) -> None:
        """No task starts from now on; the grace period begins (any thread)."""
        if self._deadline is None:
            self._deadline = time.monotonic() + self._grace
            self._signals.stop(
                f"interrupted by a shutdown ({why}); no task failed: open the "
                "session again and run() to go on",
                cause=why,
            )

    def close(self, why: str) -> None:
        """Stops, waits out the grace, leaves what still runs, closes (once)."""
        if self.closed:
            return
        self.closed = True
        self.stop(why)
        assert self._deadline is not None
        if not self._loop.drain(max(0.0, self._deadline - time.monotonic())):
            self._loop.call_soon(self._runner.abandon)
            # Abandoned attempts end at their next await; what is left is the
            # commit of the pause and the lease's release.
            if not self._loop.drain(10.0):
                log.warning("a session's run did not stop within 10s of %s", why)
        self._last()


# -- the process ---------------------------------------------------------------


class _Closeable(Protocol):
    def close(self) -> None: ...


_closers: weakref.WeakSet[Closer] = weakref.WeakSet()
_others: weakref.WeakSet[Any] = weakref.WeakSet()
_held: set[Closer] = set()
_lock = threading.Lock()
_hooked = False
_shell_seen = False
_sigterm_set = False
_why: str | None = None


def track(closer: Closer | _Closeable) -> None:
    """Closes ``closer`` when the process shuts down (held weakly).

    Sessions' Closers are closed first (all stop at once, then each waits out
    its grace), then everything else (workspaces).
    """
    global _hooked, _shell_seen, _sigterm_set
    with _lock:
        if isinstance(closer, Closer):
            _closers.add(closer)
        else:
            _others.add(closer)
        hook, _hooked = not _hooked, True
    if hook:
        try:
            threading._register_atexit(_at_exit)  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):  # not CPython, or exiting already
            import atexit

            atexit.register(_at_exit)
    if not _shell_seen and (shell := _ipython_shell()) is not None:
        _shell_seen = True
        shell.observe(_on_kernel_exit, names="exit_now")
    # Only the main thread may set a handler: a session made elsewhere first
    # (a server's worker thread) leaves it to the next one made there.
    if (
        not _sigterm_set
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ):
        _sigterm_set = True
        signal.signal(signal.SIGTERM, _on_sigterm)


def hold(closer: Closer, fut: concurrent.futures.Future[Any]) -> None:
    """Keeps ``closer`` alive while ``fut`` (a background run) is not done."""
    with _lock:
        _held.add(closer)
    fut.add_done_callback(lambda _: _held.discard(closer))


def shut_down(why: str) -> None:
    """Closes every live session (all stop at once), then the workspaces."""
    global _why
    with _lock:
        if _why is not None:
            return
        _why = why
        closers = [c for c in list(_closers) if not c.closed]
        others = list(_others)
    for c in closers:
        c.stop(why)
    for c in closers:
        try:
            c.close(why)
        except Exception:  # the process is going: say so, close the rest
            log.exception("could not close a session at %s", why)
    for o in others:
        with contextlib.suppress(Exception):
            o.close()


def stop_all(why: str) -> None:
    """Every live session stops starting tasks now; nothing waits here."""
    with _lock:
        closers = [c for c in list(_closers) if not c.closed]
    for c in closers:
        c.stop(why)


def _ipython_shell() -> Any:
    """The running IPython shell, if this is one (IPython is not imported)."""
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    return None if get is None else get()


def _on_kernel_exit(change: dict[str, Any]) -> None:
    if change.get("new"):
        stop_all("the kernel was asked to shut down or restart")


def _forget() -> None:
    # A forked child has none of the parent's threads: closing the parent's
    # sessions there would wait forever for their loop threads.
    _closers.clear()
    _others.clear()
    _held.clear()


os.register_at_fork(after_in_child=_forget)


def _at_exit() -> None:
    shut_down("the interpreter is exiting: a kernel restart or shutdown, or exit")


def _on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it now
    try:
        shut_down("SIGTERM")
    finally:
        # Die of SIGTERM as the default handler would (exit status, no atexit);
        # tool threads still running end here, leaving their intents.
        os.kill(os.getpid(), signal.SIGTERM)
