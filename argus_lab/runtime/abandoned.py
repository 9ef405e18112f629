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

Other processes (``argus retry`` in a shell, a second kernel) do not see
this registry, so each such call also holds a lock file while it runs. When
a call is abandoned (before its attempt's outcome goes back to the run, so
before that run can release the session's lease), an exclusive
``fcntl.flock`` is taken on a new file,
``abandoned/<task>-<attempt>-<pid>-<random>.lock`` (``<task>``: a sha256 of
the task id, safe for any id), which holds the call as JSON (session, task,
attempt, tool, why, since, pid, the process's start time, host, key_of).
It is written in the folder of the session whose idempotency key the call
runs under: its own, or for a fork's task carried in doubt from its parent
(``TaskRecord.key_of``), the parent's, where the parent and its other forks,
whose calls of the task run under the same key, look too. It is made
under a dot name, locked, written, then renamed into place: under its final
name it is locked from the moment it can be seen. When the call ends, the
file is removed, then its descriptor closed (the lock goes with it); when
the process dies, however it dies, the system drops the lock.

``still_running`` (what ``s.retry`` and the supervisor ask, about the
task's session and, for a fork's task, the sessions its key and its parent
came from: calls of this process, then ``held``; and ``lookup_anywhere``,
the failure policy's, when a reopened session finds the attempt RUNNING)
asks ``held``, which tries a shared
lock on each file of the task without waiting: one it cannot get is a call
still running; one it can lock is a leftover (its process died), removed if
it was written on this host. So on this host the guard holds across
processes for as long as the call runs, and no longer. A process forked
while a call runs (``multiprocessing`` with "fork") lets go of its copy of
the lock at once (``os.register_at_fork``), so a long-lived child does not
keep the guard once the call's process died; ``subprocess`` children never
get it (the descriptor is close-on-exec).

Not covered: a fork's call under its parent's key whose parent was removed
(its lock file goes in the fork's folder: the parent's other forks do not
see it), or one whose parent is removed while it runs (its lock file goes
with the parent's folder). A call whose lock file could not be written (a
read-only or full disk) is guarded in this process only (logged; a timed-out
call's in-doubt reason says so). A session folder shared between hosts (NFS
and the like): the lock reaches other hosts only if the file system carries
``flock`` locks between its clients (Linux NFS clients emulate them with
byte-range locks the server arbitrates, unless mounted ``nolock`` or
``local_lock=flock``/``all``; many FUSE and SMB setups do not); a file
another host wrote that this host can lock is ignored, with a warning, and
kept (this host cannot tell whether its process lives). Work the call handed
to another process that outlives it (a child it started) is not guarded once
the call's process is gone. Calls shipped to a remote executor (Dask), and
async tool calls an LLM task's model makes (cancelled with it), are not kept
here; its sync ones are (``llm_task._fill``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argus_lab.runtime.options import log
from argus_lab.runtime.toolcall import error_text
from argus_lab.store.folders import ABANDONED, probe_lock
from argus_lab.store.head import HOST, _own_start

__all__ = [
    "LOCKS",
    "AbandonedCall",
    "abandon",
    "held",
    "lookup",
    "lookup_anywhere",
    "running",
    "still_running",
    "wait",
    "watch",
]

_KEEP_ENDED = 256
"""Ended calls remembered (for a session reopened after its call ended)."""
LOCKS = ABANDONED
"""The folder, in a session's folder, of the lock files of its calls that run."""


@dataclass(eq=False)
class AbandonedCall:
    """One abandoned call, running or ended (in this process, or one another
    process holds the lock file of: ``held``)."""

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
    """Set once it ended (only for a call of this process)."""
    pid: int = field(default_factory=os.getpid)
    """The process it runs in."""
    host: str = HOST
    """The host that process runs on."""
    key_of: str | None = None
    """The session whose idempotency key the call ran under, if not its own
    (a fork's task carried in doubt from its parent: that parent). Its lock
    file is in that session's folder, where the key's other users look."""
    locked: bool = False
    """Its lock file was written: other processes of this host see the call
    while it runs (``held``)."""
    _lockfile: Path | None = field(default=None, repr=False)
    _fd: int | None = field(default=None, repr=False)

    @property
    def owner(self) -> str:
        """The session whose key the call ran under (``key_of``, else its own)."""
        return self.key_of or self.session_id

    def what(self) -> str:
        """The call, for a person: ``attempt 1 of tool 'charge'``."""
        return f"attempt {self.attempt} of tool {self.tool!r}"

    def here(self) -> bool:
        """Whether it runs in this process."""
        return self.pid == os.getpid() and self.host == HOST

    def where(self) -> str:
        """Where it runs: ``in this process`` or ``in process 12 on host h``."""
        if self.here():
            return "in this process"
        return f"in process {self.pid} on host {self.host}"

    def at(self) -> str:
        """When it was abandoned, for a person (UTC)."""
        if self.since <= 0:  # a lock file that could not be read
            return "an unknown time"
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))

    def when(self) -> str:
        """When it was abandoned, and how long ago (for a message, not a record)."""
        if self.since <= 0:
            return self.at()
        return f"{self.at()}, {max(0.0, time.time() - self.since):.0f}s ago"


_lock = threading.Lock()
# Keyed by the call's session (its watchers, ``running``, ``wait``); who else
# shares its key (``key_of``) is asked by ``still_running``.
_running: dict[tuple[str, str], list[AbandonedCall]] = {}
_ended: OrderedDict[tuple[str, str], AbandonedCall] = OrderedDict()
_watchers: dict[str, list[Callable[[AbandonedCall], None]]] = {}
_fds: set[int] = set()
"""Descriptors of the lock files this process holds (closed in a forked child)."""


def _drop_in_child() -> None:
    # A forked child shares each lock with us until it closes its copy: a
    # long-lived one (a multiprocessing worker) would keep the file of a call
    # whose process died locked (a call that ends removes its file anyway).
    # Its calls' threads do not exist in the child: they never end there, so
    # they are forgotten (the child sees them as any other process does, by
    # their lock files: ``held``), and so are the watchers of the parent's
    # sessions. Only this thread runs in the child: no lock is taken, and a
    # new one replaces ours (another thread may have held it at the fork).
    global _lock
    for fd in list(_fds):
        with contextlib.suppress(OSError):
            os.close(fd)
    _fds.clear()
    _running.clear()
    _watchers.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_drop_in_child)


def abandon(
    fut: concurrent.futures.Future[Any],
    *,
    session_id: str,
    task_id: str,
    attempt: int,
    tool: str,
    why: str,
    sessions: Path | None = None,
    key_of: str | None = None,
) -> AbandonedCall:
    """Keeps the call running in ``fut`` until it ends; then tells the
    session's watchers. A call already over is only remembered as ended.

    ``sessions``: the workspace's sessions folder; the call's lock file is
    written before this returns, in the folder of the session whose key the
    call ran under (``key_of``, else its own; its own if that session's
    folder is gone). None: no lock file, the call is guarded in this
    process only."""
    key_of = key_of if key_of and key_of != session_id else None
    call = AbandonedCall(session_id, task_id, attempt, tool, why, key_of=key_of)
    if sessions is not None:
        owner = sessions / call.owner
        if not owner.is_dir():  # the key's session was removed: ours
            owner = sessions / session_id
        _take_lock(call, owner / LOCKS)
    key = (session_id, task_id)
    with _lock:
        _running.setdefault(key, []).append(call)
    fut.add_done_callback(lambda f: _end(call, f))
    return call


def _prefix(task_id: str) -> str:
    """The start of the task's lock file names: safe for any task id."""
    return hashlib.sha256(task_id.encode()).hexdigest()[:32]


def _take_lock(call: AbandonedCall, folder: Path) -> None:
    """Writes and locks the call's lock file (see the module's docstring);
    if it cannot, says so in the log and leaves ``call.locked`` False."""
    name = f"{_prefix(call.task_id)}-{call.attempt}-{call.pid}-{uuid.uuid4().hex[:12]}"
    tmp, final = folder / f".tmp-{name}", folder / f"{name}.lock"
    data = {
        "session_id": call.session_id,
        "task_id": call.task_id,
        "attempt": call.attempt,
        "tool": call.tool,
        "why": call.why,
        "since": call.since,
        "pid": call.pid,
        "started": _own_start(),
        "host": call.host,
        "key_of": call.key_of,
    }
    fd = None
    try:
        folder.mkdir(exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: never waits
        os.write(fd, json.dumps(data).encode())
        os.rename(tmp, final)
    except OSError as e:
        if fd is not None:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        log.warning(
            "task %s of session %s: could not write the lock file of %s, which "
            "runs on after it was abandoned (%s): only this process will refuse "
            "to retry it while it runs",
            call.task_id,
            call.session_id,
            call.what(),
            e,
        )
        return
    call._lockfile, call._fd, call.locked = final, fd, True
    with _lock:
        _fds.add(fd)


def _let_go(call: AbandonedCall) -> None:
    """Removes the call's lock file, then lets go of its lock: never is an
    unlocked file left under its name by a process that lives."""
    fd, path = call._fd, call._lockfile
    if fd is None or path is None:
        return
    call._fd = call._lockfile = None
    with contextlib.suppress(OSError):
        os.unlink(path)
    with _lock:
        _fds.discard(fd)
    with contextlib.suppress(OSError):
        os.close(fd)


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
    _let_go(call)  # first: other processes may retry from now on
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


def still_running(
    sessions: Path,
    task_id: str,
    session_id: str,
    key_of: str | None = None,
    parent: str | None = None,
) -> AbandonedCall | None:
    """Whether a call of task ``task_id`` of session ``session_id`` may still
    run anywhere on this host: an abandoned call of the task still running
    (in this process, or in another one holding its lock file) made by the
    session, by the session its key came from (``key_of``: the task's
    ``TaskRecord.key_of``) or its ``parent``, or by any session under the
    key of one of these (a fork's call under its parent's key: so a parent
    and each of its forks see each other's calls). None: none runs.

    The one question ``s.retry`` and the supervisor ask."""
    ids = {x for x in (session_id, key_of, parent) if x}
    with _lock:
        for (_, tid), calls in _running.items():
            if tid != task_id:
                continue
            for call in reversed(calls):
                if call.session_id in ids or call.owner in ids:
                    return call
    return held(sessions, ids, task_id)


def held(
    sessions: Path, session_ids: Iterable[str], task_id: str
) -> AbandonedCall | None:
    """An abandoned call of ``task_id`` whose lock file is in the folder of
    one of the sessions ``session_ids`` (calls of the session, and calls of
    its forks run under its key) and that still runs in a process of this
    host (this one included); else None. File work: only for a retry, a
    plan change held back by a failure, or a reopened session deciding
    about an attempt found running.

    ``sessions``: the workspace's sessions folder. Leftover files (their
    process died, or could not remove them) are removed on the way."""
    return next(_held(sessions, session_ids, task_id), None)


def _held(
    sessions: Path, session_ids: Iterable[str], task_id: str
) -> Iterator[AbandonedCall]:
    prefix = _prefix(task_id) + "-"
    for sid in dict.fromkeys(session_ids):
        folder = sessions / sid / LOCKS
        try:
            names = sorted(
                n
                for n in os.listdir(folder)
                if n.startswith(prefix) and n[-5:] == ".lock"
            )
        except FileNotFoundError:  # no call of the session was ever left
            continue
        except OSError as e:
            log.warning("could not read %s (%s): calls left running unseen", folder, e)
            continue
        for name in names:
            call = _probe(folder / name, sid, task_id)
            if call is not None:
                yield call


def _probe(path: Path, sid: str, task_id: str) -> AbandonedCall | None:
    """The call of lock file ``path`` if a process holds its lock, else None
    (a leftover written on this host is removed)."""
    try:
        held, data = probe_lock(path)
    except FileNotFoundError:  # its call ended just now
        return None
    except OSError as e:  # unreadable, or no locks here (network file systems)
        log.warning("could not lock %s (%s): a call left running unseen", path, e)
        return None
    if held:  # the call runs
        return _call_of(data, sid, task_id)
    if data.get("host", HOST) == HOST:
        # Its process let go of it without removing it, or died: a leftover
        # (nobody locks a file again once it is let go of: each call writes
        # its own, locked before it is named).
        with contextlib.suppress(OSError):
            os.unlink(path)
    else:
        log.warning(
            "%s was written by process %s on host %s, and this host sees no "
            "lock on it: its call ended, or that host's locks do not reach "
            "this one (the guard against a second call then does not hold)",
            path,
            data.get("pid"),
            data.get("host"),
        )
    return None


def _call_of(data: dict[str, Any], sid: str, task_id: str) -> AbandonedCall:
    """A held lock file's call, from what it says (what it cannot say: 0, ?)."""

    def num(key: str) -> float:
        v = data.get(key)
        return v if isinstance(v, int | float) and not isinstance(v, bool) else 0

    session = data.get("session_id")
    key_of = data.get("key_of")
    return AbandonedCall(
        session_id=session if isinstance(session, str) and session else sid,
        task_id=task_id,
        attempt=int(num("attempt")),
        tool=str(data.get("tool", "?")),
        why=str(data.get("why", "was abandoned")),
        since=float(num("since")),
        pid=int(num("pid")),
        host=str(data.get("host", "?")),
        key_of=key_of if isinstance(key_of, str) and key_of else None,
    )


def lookup_anywhere(
    sessions: Path, session_id: str, task_id: str, key_of: str | None = None
) -> AbandonedCall | None:
    """``lookup``, but a call of the session still running in another
    process of this host (its lock file held, in the session's folder or in
    that of ``key_of``, whose key the task's attempts run under) comes
    before one of this process that ended."""
    call = running(session_id, task_id)
    if call is None:
        ids = (session_id, key_of) if key_of else (session_id,)
        call = next(
            (c for c in _held(sessions, ids, task_id) if c.session_id == session_id),
            None,
        ) or lookup(session_id, task_id)
    return call


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
