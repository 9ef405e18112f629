"""A call left running after its attempt was abandoned guards its retry from
other processes too (runtime/abandoned.py: a lock file held while it runs).

A real worker process (tests/abandon_worker.py) pays, has its attempt
abandoned (a timeout, or its session closed) while the call still blocks, and
stays alive; this process then tries ``s.retry`` and ``argus retry``. Nothing
sleeps to synchronise: the worker says where it is on its stdout, and its
call returns when the test writes a line to its stdin.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import multiprocessing
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.runtime import abandoned
from argus_lab.runtime.supervisor import Supervisor
from tests import abandon_worker as aw
from tests.conftest import cli_run
from tests.waiting import DEADLINE

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "tests" / "abandon_worker.py"


class Worker:
    """One abandon_worker.py process, its stdout read line by line."""

    def __init__(self, root: Path, mode: str) -> None:
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            # This checkout's argus_lab, not whichever one is installed.
            "PYTHONPATH": os.pathsep.join(
                [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(root), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.pid = self.proc.pid
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._err: list[bytes] = []
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for t in self._readers:
            t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(b"")

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self._err.extend(self.proc.stderr)

    def said(self) -> dict[str, Any]:
        """The worker's next line (fails if it ends or says nothing in time)."""
        try:
            line = self._lines.get(timeout=DEADLINE)
        except queue.Empty:
            pytest.fail(f"worker {self.pid} said nothing in {DEADLINE}s")
        if not line:
            self.proc.wait(DEADLINE)
            pytest.fail(
                f"worker {self.pid} ended (exit {self.proc.returncode}):\n"
                + b"".join(self._err).decode(errors="replace")
            )
        data: dict[str, Any] = json.loads(line)
        return data

    def tell(self) -> None:
        """Writes a line to its stdin: first it ends the blocked call."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for t in self._readers:  # they end at the pipes' ends
            t.join(DEADLINE)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The payments' ledger, outside the workspace (the worker's env too)."""
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("ARGUS_TEST_LEDGER", str(path))
    return path


@contextlib.contextmanager
def worker(root: Path, mode: str) -> Iterator[tuple[Worker, dict[str, Any]]]:
    """A worker whose call runs on, abandoned; with what it said when ready."""
    w = Worker(root, mode)
    try:
        ready = w.said()
        assert ready.get("ready"), ready
        assert Path(ready["module"]).is_relative_to(REPO), ready["module"]
        assert ready["running"] and ready["locked"], ready  # kept, with its file
        assert ready["pid"] == w.pid
        yield w, ready
    finally:
        with contextlib.suppress(OSError):
            w.proc.kill()
        w.stop()


def locks(root: Path, sid: str) -> list[Path]:
    """The lock files of a session's calls (leftovers included)."""
    folder = root / "sessions" / sid / abandoned.LOCKS
    return sorted(folder.glob("*.lock")) if folder.is_dir() else []


def payments() -> list[str]:
    return aw.ledger_lines()


# -- another process ----------------------------------------------------------


def test_a_call_running_in_another_process_blocks_retry_here(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ws"
    with worker(root, "timeout") as (w, ready):
        pid, sid = w.pid, ready["session"]
        assert ready["status"] == "in_doubt"
        assert payments() == [f"o1 1 {pid}"]
        [lock] = locks(root, sid)
        held = json.loads(lock.read_text())
        assert held["pid"] == pid and held["task_id"] == "o1"
        assert held["attempt"] == 1 and held["tool"] == "charge"

        # The CLI, in a shell: refused, exit 2, saying where the call runs.
        code, _, err = cli_run(capsys, "-w", root, "retry", "pay", "o1")
        assert code == 2, err
        assert f"still running in process {pid} on host" in err
        assert "attempt 1 of tool 'charge'" in err and "timed out" in err

        ws = al.Workspace(root)
        try:
            s = ws.open("pay", tools=[aw.charge], approvals=[])
            rec = s.record("o1")
            assert rec.status == "in_doubt"
            assert f"still running in process {pid} on host" in (rec.reason or "")
            with pytest.raises(al.SessionStateError) as e:
                s.retry("o1")
            msg = e.value.message
            assert f"still running in process {pid} on host" in msg
            assert "a retry now could take effect twice" in msg
            assert f"end process {pid}" in msg
            assert re.search(r"at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, \d+s ago", msg)
            assert s.record("o1").status == "in_doubt"
            assert payments() == [f"o1 1 {pid}"]  # nothing ran a second time

            w.tell()  # the gateway answers: the call returns
            assert w.said() == {"ended": True}
            assert w.alive()  # the guard ends with the call, not the process
            assert locks(root, sid) == []  # removed as the call ended
            s.retry("o1")  # a person who checked may run it again
            assert s.run().status == "succeeded"
            assert payments() == [f"o1 1 {pid}", f"o1 2 {os.getpid()}"]
            s.close()
        finally:
            ws.close()


def test_a_session_closed_with_its_call_running_reopens_here_saying_where(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Close (``shutdown_grace``) left the attempt as its intent (running):
    a reopen elsewhere puts it in doubt naming the process it still runs in,
    never as an interrupted call that may be retried."""
    root = tmp_path / "ws"
    with worker(root, "close") as (w, ready):
        pid, sid = w.pid, ready["session"]
        assert ready["status"] == "running"
        [lock] = locks(root, sid)
        assert "shut down" in json.loads(lock.read_text())["why"]
        code, _, err = cli_run(capsys, "-w", root, "retry", "pay", "o1")
        assert code == 2 and f"still running in process {pid} on host" in err
        ws = al.Workspace(root)
        try:
            s = ws.open("pay", tools=[aw.charge], approvals=[])
            assert s.run().status == "paused"  # never reruns it on its own
            rec = s.record("o1")
            assert rec.status == "in_doubt"
            reason = rec.reason or ""
            assert f"still running in process {pid} on host" in reason
            assert "was left running when the session shut down" in reason
            assert "was interrupted" not in reason
            with pytest.raises(al.SessionStateError, match=f"process {pid} "):
                s.retry("o1")
            assert payments() == [f"o1 1 {pid}"]
            w.tell()
            assert w.said() == {"ended": True}
            s.retry("o1")
            assert s.run().status == "succeeded"
            assert len(payments()) == 2
            s.close()
        finally:
            ws.close()


@pytest.mark.parametrize("mode", ["timeout", "close"])
def test_a_killed_process_no_longer_blocks_the_retry(
    tmp_path: Path, ledger: Path, mode: str
) -> None:
    """SIGKILL: the system drops the lock; the task is in doubt as after any
    crash, and a plain retry (what in doubt asks today) runs it again."""
    root = tmp_path / "ws"
    with worker(root, mode) as (w, ready):
        pid, sid = w.pid, ready["session"]
        ws = al.Workspace(root)
        try:
            if mode == "timeout":  # (a close's task is left untouched till then)
                s = ws.open("pay", tools=[aw.charge], approvals=[])
                with pytest.raises(al.SessionStateError, match=f"process {pid} "):
                    s.retry("o1")
                s.close()
            os.kill(pid, signal.SIGKILL)
            w.proc.wait(DEADLINE)
            assert len(locks(root, sid)) == 1  # left behind, but nobody holds it
            s = ws.open("pay", tools=[aw.charge], approvals=[])
            assert s.run().status == "paused"  # still in doubt: a person decides
            rec = s.record("o1")
            assert rec.status == "in_doubt"
            if mode == "close":  # decided on this open, as after a crash
                assert "was interrupted during attempt 1" in (rec.reason or "")
                assert "still running" not in (rec.reason or "")
            s.retry("o1")
            assert locks(root, sid) == []  # the leftover is removed on the way
            assert s.run().status == "succeeded"
            assert payments() == [f"o1 1 {pid}", f"o1 2 {os.getpid()}"]
            s.close()
        finally:
            ws.close()


def test_a_fork_made_elsewhere_waits_for_its_parents_call(
    tmp_path: Path, ledger: Path
) -> None:
    root = tmp_path / "ws"
    with worker(root, "timeout") as (w, ready):
        pid, sid = w.pid, ready["session"]
        ws = al.Workspace(root)
        try:
            s = ws.open("pay", tools=[aw.charge], approvals=[])
            f = s.fork()
            assert f.record("o1").status == "in_doubt"
            assert f.record("o1").key_of == sid
            with pytest.raises(al.SessionStateError) as e:
                f.retry("o1")
            assert f"still running in process {pid} on host" in e.value.message
            assert f"for session {sid}" in e.value.message
            f2 = f.fork()  # a fork of the fork carries the same key
            with pytest.raises(al.SessionStateError, match=f"process {pid} "):
                f2.retry("o1")
            assert payments() == [f"o1 1 {pid}"]
            w.tell()
            assert w.said() == {"ended": True}
            f.retry("o1")
            assert f.run().status == "succeeded"
            assert payments() == [f"o1 1 {pid}", f"o1 2 {os.getpid()}"]
            for x in (f2, f, s):
                x.close()
        finally:
            ws.close()


def test_a_forks_call_under_its_parents_key_blocks_the_parent_and_siblings(
    tmp_path: Path, ledger: Path
) -> None:
    """The call runs in another process, in a fork, under its parent's key:
    the parent and the parent's other forks see it (its lock file is in the
    parent's folder), where checking only their own ids missed it."""
    root = tmp_path / "ws"
    with worker(root, "fork") as (w, ready):
        pid, fid, pid_of = w.pid, ready["session"], ready["parent"]
        assert ready["status"] == "in_doubt" and pid_of
        assert [p.parent.parent.name for p in locks(root, pid_of)] == [pid_of]
        assert locks(root, fid) == []
        ws = al.Workspace(root)
        try:
            p = ws.open(pid_of, tools=[aw.charge], approvals=[])
            sibling = p.fork()
            assert sibling.record("o1").key_of == pid_of
            for s in (p, sibling):
                with pytest.raises(al.SessionStateError) as e:
                    s.retry("o1")
                assert f"still running in process {pid} on host" in e.value.message
                assert f"for session {fid}" in e.value.message
                # The supervisor asks the same (lock files of other processes too).
                held = Supervisor(s._state, None).held()
                assert "attempt 2 of tool 'charge'" in held["o1"], held
            assert payments() == [f"o1 1 {pid}", f"o1 2 {pid}"]
            w.tell()
            assert w.said() == {"ended": True}
            assert locks(root, pid_of) == []
            p.retry("o1")
            assert p.run().status == "succeeded"
            for x in (sibling, p):
                x.close()
        finally:
            ws.close()


def test_sibling_forks_and_their_parent_see_a_forks_call_in_this_process(
    ws: al.Workspace,
) -> None:
    release, first, charged = threading.Event(), threading.Event(), []

    @al.tool(name="charge", side_effect="write", timeout=0.05)
    def charge(*, ctx: al.ToolContext) -> str:
        charged.append((ctx.session_id, ctx.idempotency_key))
        (first if ctx.attempt == 1 else release).wait(DEADLINE)
        return "ok"

    p = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "o1", "tool": "charge"}]},
        tools=[charge],
        approvals=[],
    )
    try:
        assert p.run().status == "paused"
        first.set()
        assert abandoned.wait(p.id, "o1", DEADLINE)
        f1, f2 = p.fork(), p.fork()
        f1.retry("o1")
        assert f1.run().status == "paused"
        assert abandoned.running(f1.id, "o1") is not None  # runs on, on a thread
        for s in (p, f2):
            with pytest.raises(al.SessionStateError, match="still running in this"):
                s.retry("o1")
        # The supervisor holds it too (a plan change must keep the task).
        for s in (p, f2):
            held = Supervisor(s._state, None).held()
            assert "attempt 2 of tool 'charge'" in held["o1"], held
        assert [k for _, k in charged] == [charged[0][1]] * 2  # one key
        release.set()
        assert abandoned.wait(f1.id, "o1", DEADLINE)
        f2.retry("o1")
        assert f2.run().status == "succeeded"
        for x in (f2, f1):
            x.close()
    finally:
        release.set()
        p.close()


# -- the lock files, in this process ------------------------------------------


def _blocked_session(
    ws: al.Workspace, tid: str
) -> tuple[al.Session, threading.Event, list[int]]:
    release, charged = threading.Event(), []

    @al.tool(name="charge", side_effect="write", timeout=0.05)
    def charge(*, ctx: al.ToolContext) -> str:
        charged.append(ctx.attempt)
        if ctx.attempt == 1:
            release.wait(DEADLINE)
        return "ok"

    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": tid, "tool": "charge"}]},
        tools=[charge],
        name="c",
        approvals=[],
    )
    return s, release, charged


def _is_locked(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_the_lock_is_held_once_run_returns_and_named_safely(
    ws: al.Workspace,
) -> None:
    """Taken before the run releases its lease: held when run() returns. Any
    task id makes one flat file name (no folder, no dots to climb out)."""
    tid = "_/../pay/o:1"
    s, release, charged = _blocked_session(ws, tid)
    try:
        assert s.run().status == "paused"
        folder = ws.path / "sessions" / s.id / abandoned.LOCKS
        [lock] = [p for p in folder.iterdir()]  # no temporary file left either
        assert lock.is_file() and lock.name.endswith(".lock")
        assert "pay" not in lock.name and "/" not in lock.name
        assert json.loads(lock.read_text())["task_id"] == tid
        assert _is_locked(lock)
        call = abandoned.held(ws.path / "sessions", [s.id], tid)
        assert call is not None and call.here() and call.attempt == 1
        assert call.where() == "in this process"
        release.set()
        assert abandoned.wait(s.id, tid, DEADLINE)
        assert not lock.exists()
        assert abandoned.held(ws.path / "sessions", [s.id], tid) is None
        s.retry(tid)
        assert s.run().status == "succeeded" and charged == [1, 2]
    finally:
        release.set()
        s.close()


def test_a_leftover_of_this_host_is_removed_another_hosts_is_kept(
    ws: al.Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    """A file nobody holds: its process died (here: removed), or it was
    written on another host (kept, with a warning: this host cannot tell)."""
    s, release, _ = _blocked_session(ws, "o1")
    s.close()
    release.set()
    folder = ws.path / "sessions" / s.id / abandoned.LOCKS
    folder.mkdir()
    prefix = abandoned._prefix("o1")
    mine, theirs = folder / f"{prefix}-1-1-a.lock", folder / f"{prefix}-2-1-b.lock"
    mine.write_text(json.dumps({"pid": 1, "host": abandoned.HOST, "attempt": 1}))
    theirs.write_text(json.dumps({"pid": 1, "host": "elsewhere", "attempt": 2}))
    other = folder / f"{abandoned._prefix('o2')}-1-1-c.lock"  # another task's
    other.write_text("{}")
    with caplog.at_level(logging.WARNING, logger="argus_lab"):
        assert abandoned.held(ws.path / "sessions", [s.id], "o1") is None
    assert not mine.exists() and theirs.exists() and other.exists()
    [warned] = [r.getMessage() for r in caplog.records if "elsewhere" in r.getMessage()]
    assert "locks do not reach this one" in warned


KEYED = """
import concurrent.futures, sys
from pathlib import Path
from argus_lab.runtime import abandoned

fut = concurrent.futures.Future()
fut.set_running_or_notify_cancel()  # calls that run on and never end
for sid, key_of in (("f1", "p"), ("g1", "gone")):
    call = abandoned.abandon(
        fut, session_id=sid, task_id="t", attempt=2, tool="charge", why="w",
        sessions=Path(sys.argv[1]), key_of=key_of,
    )
    assert call.locked
print("ready", flush=True)
sys.stdin.readline()
"""


def test_a_call_under_another_sessions_key_is_locked_where_that_key_is_asked(
    tmp_path: Path,
) -> None:
    """Fork f1 of p runs a call under p's key in another process: its lock
    file is in p's folder, so p and p's other forks (f2) see it, and f1
    reopened finds it as its own; a key whose session is gone: f1's own."""
    sessions = tmp_path / "sessions"
    for sid in ("p", "f1", "f2", "g1", "q"):
        (sessions / sid).mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", KEYED, str(sessions)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == b"ready"
        assert len(locks(tmp_path, "p")) == 1 and locks(tmp_path, "f1") == []
        assert len(locks(tmp_path, "g1")) == 1
        for ask in (("p",), ("f2", "p", "p"), ("f1", "p", "p")):
            call = abandoned.still_running(sessions, "t", *ask)
            assert call is not None, ask
            assert (call.session_id, call.key_of, call.pid) == ("f1", "p", proc.pid)
        assert abandoned.still_running(sessions, "t", "q") is None
        assert abandoned.still_running(sessions, "u", "p") is None  # another task
        found = abandoned.lookup_anywhere(sessions, "f1", "t", key_of="p")
        assert found is not None and found.pid == proc.pid and found.attempt == 2
        assert abandoned.lookup_anywhere(sessions, "f1", "t") is None
        assert abandoned.lookup_anywhere(sessions, "p", "t") is None  # not p's
        gone = abandoned.still_running(sessions, "t", "g1", "gone")
        assert gone is not None and gone.session_id == "g1"
        proc.kill()
        proc.wait(DEADLINE)
        assert abandoned.still_running(sessions, "t", "p") is None
        assert locks(tmp_path, "p") == []  # the leftover is removed
    finally:
        proc.kill()
        proc.stdin.close()
        proc.stdout.close()
        proc.wait(DEADLINE)


FORKS = """
import concurrent.futures, os, sys
from pathlib import Path
from argus_lab.runtime import abandoned
from argus_lab.runtime.supervisor import Supervisor

fut = concurrent.futures.Future()
fut.set_running_or_notify_cancel()  # a call that runs on and never ends
call = abandoned.abandon(
    fut, session_id="s", task_id="t", attempt=1, tool="charge", why="w",
    sessions=Path(sys.argv[1]),
)
assert call.locked
child = os.fork()  # as multiprocessing's "fork" does, the call running
if child == 0:
    sys.stdin.readline()  # lives until the test closes its stdin
    os._exit(0)
print(child, flush=True)
sys.stdin.readline()
"""


def test_a_forked_child_does_not_hold_the_guard_past_its_parent(
    tmp_path: Path,
) -> None:
    """The process running the call forked a child, then died: the child
    (still alive) let go of its copy of the lock at the fork, so the guard
    ends with the call's process, as it should."""
    sessions = tmp_path / "sessions"
    (sessions / "s").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", FORKS, str(sessions)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        child = int(proc.stdout.readline() or 0)
        assert child > 0, "the worker did not fork"
        call = abandoned.held(sessions, ["s"], "t")
        assert call is not None and call.pid == proc.pid  # its call runs
        proc.kill()
        proc.wait(DEADLINE)
        os.kill(child, 0)  # the child lives on (blocked on the open stdin)
        assert abandoned.held(sessions, ["s"], "t") is None
        assert locks(tmp_path, "s") == []  # the leftover is removed
    finally:
        proc.kill()
        proc.stdin.close()  # the child reads its end and exits
        proc.stdout.close()
        proc.wait(DEADLINE)


def _retry_later(root: str, sid: str, go: Any, out: Any) -> None:
    # In a child forked while the call ran: once its parent's call ended.
    go.wait(120)
    ws = al.Workspace(root)
    try:
        s = ws.open(sid, approvals=[])
        try:
            s.retry("o1")
            out.send("allowed")
        except al.SessionStateError as e:
            out.send(f"refused: {e.message}")
        finally:
            s.close()
    finally:
        ws.close()


def test_a_forked_child_forgets_a_call_that_ended_after_the_fork(
    ws: al.Workspace,
) -> None:
    """The call's thread does not exist in the child: its copy of the call
    never ended there, and the child refused the retry forever."""
    s, release, charged = _blocked_session(ws, "o1")
    assert s.run().status == "paused" and s.record("o1").status == "in_doubt"
    sid = s.id
    s.close()
    assert abandoned.running(sid, "o1") is not None
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    theirs, ours = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_retry_later, args=(str(ws.path), sid, go, ours))
    child.start()
    try:
        ours.close()
        release.set()
        assert abandoned.wait(sid, "o1", DEADLINE)
        assert locks(ws.path, sid) == []  # ended: its lock file is gone
        go.set()
        assert theirs.poll(DEADLINE)
        assert theirs.recv() == "allowed"
    finally:
        release.set()
        go.set()
        child.join(DEADLINE)
        theirs.close()
    assert child.exitcode == 0
    assert charged == [1]


def test_a_forked_child_still_sees_a_call_that_runs_by_its_lock_file(
    ws: al.Workspace,
) -> None:
    """What the child forgets it still sees the other way, as any process."""
    s, release, _ = _blocked_session(ws, "o1")
    assert s.run().status == "paused"
    sid = s.id
    s.close()
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    theirs, ours = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_retry_later, args=(str(ws.path), sid, go, ours))
    child.start()
    try:
        ours.close()
        go.set()
        assert theirs.poll(DEADLINE)
        said = theirs.recv()
        assert said.startswith("refused:") and f"process {os.getpid()}" in said, said
    finally:
        release.set()
        go.set()
        child.join(DEADLINE)
        theirs.close()
    assert child.exitcode == 0


def test_a_lock_file_that_cannot_be_written_leaves_the_guard_in_this_process(
    ws: al.Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    s, release, _ = _blocked_session(ws, "o1")
    try:
        (ws.path / "sessions" / s.id / abandoned.LOCKS).write_text("in the way")
        with caplog.at_level(logging.WARNING, logger="argus_lab"):
            assert s.run().status == "paused"
        reason = s.record("o1").reason or ""
        assert "its lock file could not be written" in reason
        assert any(
            "could not write the lock file" in r.getMessage() for r in caplog.records
        )
        with pytest.raises(al.SessionStateError, match="still running in this process"):
            s.retry("o1")
    finally:
        release.set()
        assert abandoned.wait(s.id, "o1", DEADLINE)
        s.close()


def test_a_session_whose_call_still_runs_is_not_removed(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Removing the session dropped the lock of its abandoned call with its
    folder, and a fork's retry then paid beside the call (an outside check).
    rm, gc and ws.delete refuse while the call runs, and go on once it ended."""
    root = tmp_path / "ws"
    with worker(root, "timeout") as (w, ready):
        pid, sid = w.pid, ready["session"]
        assert len(locks(root, sid)) == 1
        code, _, err = cli_run(capsys, "-w", root, "rm", "pay", "-y")
        assert code == 4, err
        assert f"still runs in process {pid}" in err and "nothing was removed" in err
        ws = al.Workspace(root)
        try:
            with pytest.raises(
                al.ConcurrentSessionError, match="still runs in process"
            ):
                ws.delete("pay")
            assert [i.id for i in ws.sessions()] == [sid] and len(locks(root, sid)) == 1
            w.tell()  # the call returns: its lock goes
            assert w.said() == {"ended": True}
            ws.delete("pay")
            assert ws.sessions() == []
        finally:
            ws.close()
