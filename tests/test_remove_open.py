"""A session open in a Session object is never removed under it, and gc never
deletes an artifact a commit references (REPORT find_02, find_03).

Real processes: a child Python process holds a session open (paused for an
approval: no lease then) and says so on its stdout; ``argus rm`` and ``argus
gc`` run as the real CLI in subprocesses.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.cli._retention import plan_gc, run_gc
from argus_lab.errors import ConcurrentSessionError, StorageError
from argus_lab.store import folders
from argus_lab.store.folders import is_open

TOOLS = """
import errno
import fcntl
import json
import logging
import multiprocessing
import os

import argus_lab as al


@al.tool(side_effect="write")
def pay(amount: int, to: str, *, ctx: al.ToolContext) -> dict:
    with open(os.environ["LEDGER"], "a") as f:
        f.write(json.dumps({"to": to, "amount": amount}) + "\\n")
    return {"paid": amount, "to": to}


@al.tool
def report(n: int) -> dict:
    return {"rows": ["row %06d of the quarterly report" % i for i in range(n)]}
"""

CHILD = """
import os, sys
sys.path.insert(0, sys.argv[1])
import argus_lab as al
from paytools import pay, report

ws = al.Workspace(sys.argv[2])
s = ws.open(sys.argv[3], tools=[pay, report])
print("ready", os.getpid(), s.status, flush=True)
for line in sys.stdin:
    if line.strip() == "close":
        s.close()
        print("closed", flush=True)
"""

PAY_PLAN = {
    "goal": "pay",
    "tasks": [{"id": "p", "tool": "pay", "args": {"amount": 100, "to": "alice"}}],
}
REPORT_PLAN = {
    "goal": "quarterly report",
    "tasks": [{"id": "r", "tool": "report", "args": {"n": 20000}}],
}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The tools' folder (on sys.path); the ledger lies outside the workspace."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "paytools.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tools))
    monkeypatch.setenv("LEDGER", str(tmp_path / "ledger.txt"))
    sys.modules.pop("paytools", None)
    yield tools
    sys.modules.pop("paytools", None)


def _tools() -> list[al.Tool]:
    import paytools  # type: ignore[import-not-found]

    return [paytools.pay, paytools.report]


def _paused(ws: al.Workspace, name: str = "pay") -> None:
    s = ws.new_session(plan=PAY_PLAN, tools=_tools(), name=name)
    assert s.run().status == "paused" and s.pending_approvals()
    s.close()


class Holder:
    """A child process holding a session open (paused: no lease)."""

    def __init__(self, tools: Path, ws: Path, name: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(CHILD), str(tools), str(ws), name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent.parent,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        line = self.proc.stdout.readline().split()
        assert line[:1] == ["ready"] and line[2] == "paused", line
        self.pid = int(line[1])

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("close\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "closed"

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


def argus(ws: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "argus_lab.cli", "-w", str(ws), *argv],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
        timeout=120,
    )


def _age_artifacts(ws: al.Workspace, seconds: float = 7200) -> None:
    old = time.time() - seconds
    for p in ws.artifacts.root.glob("??/*"):
        os.utime(p, (old, old))


def test_rm_refuses_a_session_open_elsewhere_until_it_is_closed(
    env: Path, tmp_path: Path
) -> None:
    wsdir = tmp_path / "ws"
    ws = al.Workspace(wsdir)
    _paused(ws)
    holder = Holder(env, wsdir, "pay")
    try:
        got = argus(wsdir, "rm", "pay", "-y")
        assert got.returncode == 4, got
        assert f"is open in pid {holder.pid}" in got.stderr
        assert "Nothing was removed" in got.stderr and "s.close()" in got.stderr
        assert [i.name for i in ws.sessions()] == ["pay"]
        with pytest.raises(ConcurrentSessionError, match=f"pid {holder.pid}"):
            ws.delete("pay")  # the API too
        holder.close()
        got = argus(wsdir, "rm", "pay", "-y")
        assert got.returncode == 0, got
        assert ws.sessions() == []
    finally:
        holder.end()


def test_gc_keeps_a_session_open_elsewhere_then_drops_it_once_its_holder_dies(
    env: Path, tmp_path: Path
) -> None:
    """find_03's addendum: gc from cron against a session paused in a kernel."""
    wsdir = tmp_path / "ws"
    ws = al.Workspace(wsdir)
    _paused(ws)
    holder = Holder(env, wsdir, "pay")
    try:
        got = argus(wsdir, "--json", "gc", "--older-than", "0s", "--yes")
        assert got.returncode == 0, got
        out = json.loads(got.stdout)
        assert out["sessions"] == []
        assert out["sessions_open"] == [
            {"name": "pay", "id": ws.resolve("pay"), "pids": [holder.pid]}
        ]
        got = argus(wsdir, "gc", "--older-than", "0s", "--yes")
        assert "kept as open in a Session object" in got.stdout + got.stderr
        assert [i.name for i in ws.sessions()] == ["pay"]
        os.kill(holder.pid, signal.SIGKILL)  # the OS lets go of its lock
        holder.proc.wait()
        got = argus(wsdir, "--json", "gc", "--older-than", "0s", "--yes")
        assert got.returncode == 0, got
        assert [s["name"] for s in json.loads(got.stdout)["sessions"]] == ["pay"]
        assert ws.sessions() == []
    finally:
        holder.end()


def test_a_session_opened_after_the_plan_is_skipped_by_run_gc(
    env: Path, tmp_path: Path
) -> None:
    wsdir = tmp_path / "ws"
    ws = al.Workspace(wsdir)
    _paused(ws)
    plan = plan_gc(ws, older_than=0)  # gc asks y/N here
    assert [i.name for i, _, _ in plan.sessions] == ["pay"]
    holder = Holder(env, wsdir, "pay")
    try:
        run_gc(ws, plan)
        assert [i.name for i, _ in plan.skipped] == ["pay"]
        assert f"pid {holder.pid}" in plan.skipped[0][1]
        assert [i.name for i in ws.sessions()] == ["pay"]
    finally:
        holder.end()


def test_this_process_holding_it_open_is_named_and_a_dropped_one_lets_go(
    env: Path, tmp_path: Path
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    _paused(ws)
    s = ws.open("pay", tools=_tools())
    with pytest.raises(ConcurrentSessionError, match="this process"):
        ws.delete("pay")
    s.close()
    _paused(ws, "other")
    assert ws.open("other").status == "paused"  # dropped unclosed
    ws.delete("pay")
    ws.delete("other")
    assert ws.sessions() == []


def _idle(ready: Any, go: Any) -> None:
    ready.set()  # after the fork handlers ran: the child's copies are closed
    go.wait(120)  # a long-lived worker (a Pool's), forked while a session was open


def test_a_forked_child_does_not_keep_a_session_closed_here_open(
    env: Path, tmp_path: Path
) -> None:
    """multiprocessing with "fork" while a Session is open: the child's copy of
    the lock's descriptor would keep the session open after s.close()."""
    ws = al.Workspace(tmp_path / "ws")
    _paused(ws)
    s = ws.open("pay", tools=_tools())
    folder = ws.path_of("pay")
    assert is_open(folder) == [os.getpid()]
    ctx = multiprocessing.get_context("fork")
    go, ready = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_idle, args=(ready, go))
    child.start()
    try:
        # start() returns once forked, before the child ran anything: wait for it.
        assert ready.wait(120)
        s.close()
        assert child.is_alive()
        assert is_open(folder) is None
        ws.delete("pay")
        assert ws.sessions() == []
    finally:
        go.set()
        child.join(120)
    assert child.exitcode == 0


@pytest.fixture
def no_flock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system whose flock fails (NFSv3 without lockd: ENOLCK), for the
    open/removal lock only."""

    def flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    consts = {k: getattr(fcntl, k) for k in dir(fcntl) if k.isupper()}
    monkeypatch.setattr(folders, "fcntl", types.SimpleNamespace(**consts, flock=flock))
    monkeypatch.setattr(folders, "_warned", set(), raising=False)


@pytest.mark.usefixtures("no_flock")
def test_sessions_open_without_flock_and_removal_says_what_to_do(
    env: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    with caplog.at_level(logging.WARNING, logger="argus_lab"):
        _paused(ws)  # created and opened, unlocked
        _paused(ws, "other")
        s = ws.open("pay", tools=_tools())
        s.approve("p")
        assert s.run().status == "succeeded"
        s.close()
    said = [r.getMessage() for r in caplog.records if "no flock" in r.getMessage()]
    assert len(said) == 1, said  # once per file system
    assert "opened without their lock against removal" in said[0]
    assert sorted(i.name for i in ws.sessions()) == ["other", "pay"]
    assert len(os.listdir(ws.path / "sessions")) == 2  # no stray folder
    with pytest.raises(StorageError, match="gives no flock locks") as e:
        ws.delete("pay")
    assert "nothing was removed" in e.value.message
    assert "local_lock=flock" in e.value.message
    assert str(ws.path_of("pay")) in e.value.message
    assert sorted(i.name for i in ws.sessions()) == ["other", "pay"]


def test_a_folder_removed_by_hand_under_an_open_session_stops_it(
    env: Path, tmp_path: Path
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    _paused(ws)
    s = ws.open("pay", tools=_tools())
    shutil.rmtree(ws.path_of("pay"))  # rm -rf by hand: no lock asked
    for call in (lambda: s.approve("p"), s.run, s.step):
        with pytest.raises(StorageError, match="was removed while this Session"):
            call()
    assert not (tmp_path / "ledger.txt").exists()  # no payment made
    s.close()


def test_a_folder_replaced_under_an_open_session_stops_it(
    env: Path, tmp_path: Path
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    _paused(ws)
    folder = ws.path_of("pay")
    s = ws.open("pay", tools=_tools())
    shutil.copytree(folder, tmp_path / "copy")
    shutil.rmtree(folder)
    shutil.move(tmp_path / "copy", folder)
    with pytest.raises(StorageError, match="replaced by another copy"):
        s.approve("p")
    assert not (tmp_path / "ledger.txt").exists()
    s.close()


def test_gc_keeps_an_artifact_a_session_reused_while_gc_asked(
    env: Path, tmp_path: Path
) -> None:
    """find_02: a dedupe onto an old orphan between gc's plan and its run."""
    ws = al.Workspace(tmp_path / "ws")
    a = ws.new_session(plan=REPORT_PLAN, tools=_tools(), name="old-report")
    assert a.run().status == "succeeded"
    ref = a.record("r").result_ref
    assert ref is not None and ws.artifacts.path(ref).is_file()
    a.close()
    ws.delete("old-report")  # its artifact is an orphan now
    scratch = ws.new_session(plan=PAY_PLAN, tools=_tools(), name="scratch")
    scratch.close()
    _age_artifacts(ws)  # an old orphan, past the grace
    plan = plan_gc(ws, older_than=0)  # gc asks y/N here
    assert [r for r, _, _ in plan.artifacts] == [ref]
    b = ws.new_session(plan=REPORT_PLAN, tools=_tools(), name="new-report")
    assert b.run().status == "succeeded" and b.record("r").result_ref == ref
    b.close()
    run_gc(ws, plan)  # the user said y
    assert plan.rescued == 1 and ws.artifacts.path(ref).is_file()
    s = ws.open("new-report", tools=_tools())
    assert len(s.result("r")["rows"]) == 20000
    s.close()


def test_gc_keeps_an_old_artifact_a_commit_referenced_while_gc_asked(
    env: Path, tmp_path: Path
) -> None:
    """Only gc's second reading of the references saves it: the commit made
    after the plan refers to the old orphan, whose mtime says old (set back
    after the commit: as a put long ago would leave it)."""
    ws = al.Workspace(tmp_path / "ws")
    a = ws.new_session(plan=REPORT_PLAN, tools=_tools(), name="old-report")
    assert a.run().status == "succeeded"
    ref = a.record("r").result_ref
    assert ref is not None
    a.close()
    ws.delete("old-report")
    _age_artifacts(ws)
    plan = plan_gc(ws, older_than=0)  # gc asks y/N here
    assert [r for r, _, _ in plan.artifacts] == [ref]
    b = ws.new_session(plan=REPORT_PLAN, tools=_tools(), name="new-report")
    assert b.run().status == "succeeded" and b.record("r").result_ref == ref
    b.close()
    _age_artifacts(ws)  # no young mtime to save it
    run_gc(ws, plan)
    assert plan.rescued == 1 and ws.artifacts.path(ref).is_file()
    s = ws.open("new-report", tools=_tools())
    assert len(s.result("r")["rows"]) == 20000
    s.close()


def test_gc_keeps_an_artifact_stored_but_not_yet_committed(
    env: Path, tmp_path: Path
) -> None:
    """The --yes window: a put (a dedupe onto an old orphan) whose commit has
    not landed yet when gc deletes orphans."""
    ws = al.Workspace(tmp_path / "ws")
    ref = ws.artifacts.put_bytes(b"x" * 70_000)
    _age_artifacts(ws)
    plan = plan_gc(ws)
    assert [r for r, _, _ in plan.artifacts] == [ref]
    assert ws.artifacts.put_bytes(b"x" * 70_000) == ref  # touched: young again
    run_gc(ws, plan)
    assert plan.rescued == 1
    assert ws.artifacts.get_bytes(ref) == b"x" * 70_000
    # Past the grace and unreferenced, it goes.
    _age_artifacts(ws)
    got = argus(ws.path, "--json", "gc", "--yes")
    assert got.returncode == 0 and json.loads(got.stdout)["artifacts"] == 1, got
    assert not ws.artifacts.path(ref).exists()


def test_an_artifact_a_killed_gc_left_aside_is_put_back(tmp_path: Path) -> None:
    ws = al.Workspace(tmp_path / "ws")
    ref = ws.artifacts.put_bytes(b"y" * 1000)
    path = ws.artifacts.path(ref)
    path.rename(path.with_name(f".gc-999999-{path.name}"))  # killed mid-way
    assert ws.artifacts.get_bytes(ref) == b"y" * 1000  # a reader puts it back
    assert path.is_file()
    path.rename(path.with_name(f".gc-999999-{path.name}"))
    got = argus(ws.path, "--json", "gc", "--yes")  # the next gc does too
    assert got.returncode == 0, got
    assert path.is_file() and json.loads(got.stdout)["young_artifacts_kept"] == 0


def _answer_gc(ws: Path, argv: list[str], meanwhile: Callable[[], None]) -> str:
    """``argus gc ARGV`` on a terminal: ``meanwhile()`` runs while it asks
    [y/N], then it is told y; returns what it printed."""
    import pty
    import select

    pid, fd = pty.fork()
    if pid == 0:  # the child: the real CLI
        os.execv(
            sys.executable,
            [sys.executable, "-m", "argus_lab.cli", "-w", str(ws), "gc", *argv],
        )
    seen = b""
    try:
        while b"[y/N]" not in seen:
            ready, _, _ = select.select([fd], [], [], 60)
            assert ready, seen
            seen += os.read(fd, 4096)
        meanwhile()
        os.write(fd, b"y\n")
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child is done
                break
            if not chunk:
                break
            seen += chunk
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, seen
    return seen.decode(errors="replace")


def test_real_gc_keeps_an_artifact_committed_while_it_asked(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """find_02 as the tester ran it: the real ``argus gc`` on a terminal."""
    monkeypatch.chdir(Path(__file__).parent.parent)  # the CLI child imports us
    ws = al.Workspace(tmp_path / "ws")
    a = ws.new_session(plan=REPORT_PLAN, tools=_tools(), name="old-report")
    a.run()
    ref = a.record("r").result_ref
    assert ref is not None
    a.close()
    ws.delete("old-report")
    ws.new_session(plan=PAY_PLAN, tools=_tools(), name="scratch").close()
    _age_artifacts(ws)

    def commit_the_same_report() -> None:
        b = ws.new_session(plan=REPORT_PLAN, tools=_tools(), name="new-report")
        assert b.run().status == "succeeded" and b.record("r").result_ref == ref
        b.close()

    said = _answer_gc(ws.path, ["--older-than", "0s"], commit_the_same_report)
    assert "1 artifact(s) kept as referenced or stored since" in said, said
    s = ws.open("new-report", tools=_tools())
    assert len(s.result("r")["rows"]) == 20000
    s.close()
