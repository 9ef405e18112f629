"""Shutdown is not failure (issue 13, item 1).

A session closed, or a process shut down (a Jupyter kernel's restart or
shutdown request, SIGTERM, interpreter exit), stops starting tasks at once;
attempts in flight finish and commit within ``shutdown_grace`` or are left as
their committed intents, decided on the next open exactly as after a crash;
nothing is marked failed. The slow tests drive a real Jupyter kernel
(jupyter_client) and real worker processes (tests/shutdown_worker.py); they wait
by polling the session's committed events from this process, never by sleeping.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import weakref
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.model import Task
from argus_lab.runtime.executor import run_attempt
from argus_lab.runtime.intents import IntentBatch
from argus_lab.runtime.options import SessionOptions
from argus_lab.runtime.outcome import ShutDown
from argus_lab.runtime.policy import FailurePolicy, LeaveIntent
from argus_lab.tools.registry import ToolContext
from tests import shutdown_worker as sw
from tests.waiting import DEADLINE, wait_until

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "tests" / "shutdown_worker.py"
TOOL_OF = {t["id"]: t["tool"] for t in sw.plan()["tasks"]}
SHUT = "interrupted by a shutdown"


# -- what must hold after any shutdown ---------------------------------------------


def check_resumed(report: dict[str, Any], root: Path, *, left: bool) -> None:
    """The guarantees, from ``sw.resume``'s report: nothing failed; each attempt
    left in flight reran with its key (idempotent) or was in doubt (not); the run
    finished; the ledger holds every task's effect exactly once."""
    before = report["before"]
    status, reason = report["opened"]
    assert status == "paused", report["opened"]
    assert SHUT in reason
    bad = {t: s for t, (s, _) in before.items() if s in ("failed", "blocked")}
    assert not bad, f"the shutdown failed or blocked tasks: {bad}"
    in_flight = {t for t, (s, _) in before.items() if s == "running"}
    if left:
        assert in_flight, "no attempt was left in flight: the test proves nothing"
        assert all(t in reason for t in in_flight), reason
    else:  # the grace let every attempt in flight finish and commit
        assert not in_flight, in_flight
    assert sum(s == "succeeded" for s, _ in before.values()) < sw.N_TASKS

    idem = {t for t in in_flight if sw.IDEMPOTENT[TOOL_OF[t]]}
    assert set(report["rerun"]) == idem
    for t in idem:  # the same idempotency key, so the same effect
        assert report["rerun"][t] == before[t][1] == report["final"][t][1]
    assert set(report["doubted"]) == in_flight - idem

    assert report["status"] == "succeeded", report
    assert report["failed_events"] == []
    for t, (s, _) in report["final"].items():
        assert s == ("skipped" if report["settled"].get(t) == "skip" else "succeeded")
    lines = sw.ledger(root)
    assert Counter(t for _, t in lines) == dict.fromkeys(TOOL_OF, 1), lines
    assert set(lines) == {(key, t) for t, (_, key) in report["final"].items()}


class Committed:
    """Reads the session's committed events from this process (read-only)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.session: al.Session | None = None

    def second_round(self) -> bool:
        """Whether the first WIDTH tasks succeeded and the next WIDTH started:
        attempts are in flight now, and for the next WORK_S seconds."""
        if self.session is None:
            if not (self.root / "sessions").is_dir():
                return False
            try:
                self.session = al.Workspace(self.root).open(sw.NAME, tools=sw.TOOLS)
            except KeyError:
                return False
        return in_second_round(self.session.events())

    def close(self) -> None:
        if self.session is not None:
            self.session.close()


def in_second_round(events: list[Any]) -> bool:
    kinds = Counter(e.kind for e in events)
    return bool(
        kinds["task_succeeded"] >= sw.WIDTH and kinds["task_started"] >= 2 * sw.WIDTH
    )


@pytest.fixture
def committed(tmp_path: Path) -> Iterator[Committed]:
    c = Committed(tmp_path / "ws")
    yield c
    c.close()


# -- close() -------------------------------------------------------------------------


@al.tool(side_effect="write", idempotent=True)
def hold_idem(i: int, *, ctx: al.ToolContext) -> dict[str, Any]:
    """Blocks until the test releases it."""
    assert GATE.wait(DEADLINE)
    return {"i": i, "key": ctx.idempotency_key}


@al.tool(side_effect="write", idempotent=False)
def hold_pay(i: int, *, ctx: al.ToolContext) -> dict[str, Any]:
    """Blocks until the test releases it; not idempotent."""
    assert GATE.wait(DEADLINE)
    return {"i": i}


GATE = threading.Event()
HOLD_PLAN = {
    "tasks": [
        {"id": "a", "tool": "hold_idem", "args": {"i": 0}},
        {"id": "b", "tool": "hold_pay", "args": {"i": 1}},
        {"id": "c", "tool": "hold_idem", "args": {"i": 2}, "deps": ["a", "b"]},
    ]
}


def started(s: al.Session, n: int) -> threading.Event:
    """Set once ``n`` attempts have committed their intents."""
    seen: list[str] = []
    ev = threading.Event()

    def on(e: Any) -> None:
        if e.kind == "task_started":
            seen.append(e.task_id)
            if len(seen) >= n:
                ev.set()

    s.subscribe(on)
    return ev


def test_close_leaves_attempts_past_the_grace_as_intents(tmp_path: Path) -> None:
    GATE.clear()
    ws = al.Workspace(tmp_path / "ws")
    tools = [hold_idem, hold_pay]
    s = ws.new_session(
        plan=HOLD_PLAN, tools=tools, name="h", approvals=(), shutdown_grace=0.0
    )
    both = started(s, 2)
    s.start()
    assert both.wait(DEADLINE)
    s.close()  # grace 0: a and b are left in flight at once
    GATE.set()  # their threads end now, after the session stopped
    s.close()  # idempotent
    with pytest.raises(al.ArgusError, match="shut down"):
        s.run()

    s2 = ws.open("h", tools=tools, approvals=())
    assert s2.status == "paused"
    assert SHUT in (s2.reason or "") and "left in flight: " in (s2.reason or "")
    recs = s2.records
    assert {t: r.status for t, r in recs.items()} == {
        "a": "running",
        "b": "running",
        "c": "pending",
    }
    assert not [e for e in s2.events() if e.kind == "task_failed"]
    key_a = recs["a"].idempotency_key
    res = s2.run()  # recovery: a is pending with its key, b is in doubt
    assert res.status == "paused" and "in doubt" in (res.reason or "")
    assert s2.record("a").status == "pending"
    assert s2.record("b").status == "in_doubt"
    s2.skip("b", "it took effect")
    assert s2.run().status == "succeeded"
    assert s2.result("a")["key"] == key_a == s2.record("a").idempotency_key
    s2.close()
    ws.close()
    ws.close()


def test_close_lets_attempts_in_flight_finish_and_commit(tmp_path: Path) -> None:
    GATE.clear()
    ws = al.Workspace(tmp_path / "ws")
    tools = [hold_idem, hold_pay]
    s = ws.new_session(
        plan=HOLD_PLAN, tools=tools, name="h", approvals=(), shutdown_grace=DEADLINE
    )
    both = started(s, 2)
    s.start()
    assert both.wait(DEADLINE)
    closing = threading.Thread(target=s.close)
    closing.start()
    # close() waits for a and b (it stopped c from starting first: c depends on
    # them, so it could not have started before they end anyway).
    GATE.set()
    closing.join(DEADLINE)
    assert not closing.is_alive()
    s2 = ws.open("h", tools=tools)
    statuses = {t: r.status for t, r in s2.records.items()}
    assert statuses["a"] == statuses["b"] == "succeeded"
    assert statuses["c"] in ("pending", "succeeded")
    assert not [e for e in s2.events() if e.kind == "task_failed"]
    s2.close()


def test_closed_sessions_and_workspaces_can_be_collected(tmp_path: Path) -> None:
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(plan=HOLD_PLAN, tools=[hold_idem, hold_pay], name="h")
    s.set_breakpoint("a")  # a call on its loop thread
    refs = [weakref.ref(s), weakref.ref(ws)]
    s.close()
    ws.close()
    del s, ws
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_bad_grace_is_refused() -> None:
    with pytest.raises(ValueError, match="shutdown_grace must be >= 0"):
        SessionOptions(shutdown_grace=-1)


# -- the typed outcome -----------------------------------------------------------------


def test_a_shutdown_outcome_is_never_a_failure() -> None:
    policy = FailurePolicy((0.5, 30.0))
    task = Task(id="t", tool="x", on_failure="fail")
    for started_ in (True, False):
        d = policy.decide(
            task, ShutDown("exit", started_), attempt=9, retries=0, jitter=0.5
        )
        assert d == LeaveIntent("exit", started_)


def test_a_pool_that_refuses_work_is_a_shutdown(tmp_path: Path) -> None:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    pool.shutdown()
    ctx = ToolContext(
        session_id="s",
        task_id="t",
        attempt=1,
        idempotency_key="k",
        workspace=tmp_path,
        workdir=tmp_path,
    )
    out = asyncio.run(
        run_attempt(
            hold_idem,
            {"i": 1},
            ctx,
            timeout=None,
            success=None,
            pool=pool,
            artifacts=lambda: al.Workspace(tmp_path / "ws").artifacts,
        )
    )
    assert isinstance(out, ShutDown) and not out.started
    assert "cannot schedule new futures" in out.why


# -- a real process: SIGTERM, interpreter exit --------------------------------------


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def _gone(proc: subprocess.Popen[bytes]) -> str | None:
    if proc.poll() is None:
        return None
    return (
        f"the worker exited ({proc.returncode}): {proc.stderr and proc.stderr.read()!r}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("grace", [None, 0.0], ids=["default-grace", "no-grace"])
def test_sigterm_mid_run_fails_nothing(
    tmp_path: Path, committed: Committed, grace: float | None
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    args = [] if grace is None else ["--grace", str(grace)]
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(root), *args],
        env=_env(),
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(
            committed.second_round,
            "a second round of tasks",
            gone=lambda: _gone(proc),
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(DEADLINE) == -signal.SIGTERM  # it still dies of SIGTERM
    finally:
        proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
    report = sw.resume(al.Workspace(root))
    assert "SIGTERM" in report["opened"][1]
    check_resumed(report, root, left=grace == 0.0)


EXITING = """
import sys, threading
import argus_lab as al
from tests import shutdown_worker as sw
s = sw.open_or_create(al.Workspace(sys.argv[1]), shutdown_grace=0.0)
n, second_round = {"task_started": 0, "task_succeeded": 0}, threading.Event()
def on(e):
    n[e.kind] = n.get(e.kind, 0) + 1
    if n["task_succeeded"] >= sw.WIDTH and n["task_started"] >= 2 * sw.WIDTH:
        second_round.set()
s.subscribe(on)
s.start()
assert second_round.wait(60)
sys.exit(0)  # no close(): the interpreter's exit must do it
"""


@pytest.mark.slow
def test_interpreter_exit_mid_run_fails_nothing(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    done = subprocess.run(
        [sys.executable, "-c", EXITING, str(root)],
        env=_env(),
        capture_output=True,
        timeout=DEADLINE,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    report = sw.resume(al.Workspace(root))
    assert "the interpreter is exiting" in report["opened"][1]
    check_resumed(report, root, left=True)


@pytest.mark.parametrize("own", [True, False], ids=["own-handler", "default"])
def test_sigterm_handler_is_installed_only_over_the_default(
    tmp_path: Path, own: bool
) -> None:
    code = (
        "import signal, sys\n"
        "mine = lambda *a: None\n"
        f"if {own}: signal.signal(signal.SIGTERM, mine)\n"
        "before = signal.getsignal(signal.SIGTERM)\n"
        "import argus_lab as al\n"
        "@al.tool\n"
        "def x() -> int:\n"
        "    return 1\n"
        "ws = al.Workspace(sys.argv[1])\n"
        "s = ws.new_session(plan={'tasks': [{'id': 'a', 'tool': 'x'}]}, tools=[x])\n"
        "now = signal.getsignal(signal.SIGTERM)\n"
        "print(now is mine, now is signal.SIG_DFL)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "ws")],
        env=_env(),
        capture_output=True,
        timeout=DEADLINE,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.split() == ([b"True", b"False"] if own else [b"False"] * 2)


# -- a real Jupyter kernel -------------------------------------------------------------

START = """
import argus_lab as al
from tests import shutdown_worker as sw
s = sw.open_or_create(al.Workspace({root!r}), **{options!r})
s.start()
"""
RESUME = """
import json
import argus_lab as al
from tests import shutdown_worker as sw
print(json.dumps(sw.resume(al.Workspace({root!r}))))
"""


def run_code(kc: Any, code: str) -> str:
    """Runs code in the kernel; returns its stdout (fails on an error)."""
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))

    reply = kc.execute_interactive(code, timeout=DEADLINE, output_hook=hook)
    assert reply["content"]["status"] == "ok", "".join(out)
    return "".join(out)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "grace"),
    [("restart", None), ("shutdown", 0.0)],
    ids=["restart_kernel", "shutdown_kernel-no-grace"],
)
def test_kernel_shutdown_mid_run_fails_nothing(
    tmp_path: Path, committed: Committed, how: str, grace: float | None
) -> None:
    from jupyter_client.manager import KernelManager

    root = tmp_path / "ws"
    options = {} if grace is None else {"shutdown_grace": grace}
    km = KernelManager(kernel_name="python3")
    launch = {"cwd": str(tmp_path), "env": _env()}
    km.start_kernel(**launch)
    kc = km.client()
    try:
        kc.start_channels()
        kc.wait_for_ready(timeout=DEADLINE)
        run_code(kc, START.format(root=str(root), options=options))
        wait_until(
            committed.second_round,
            "a second round of tasks",
            gone=lambda: None if km.is_alive() else "the kernel died",
        )
        kc.stop_channels()
        if how == "restart":
            km.restart_kernel()  # a shutdown request, then a new kernel
        else:
            km.shutdown_kernel(now=False)  # a shutdown request, then a wait
            km = KernelManager(kernel_name="python3")  # that one's context is gone
            km.start_kernel(**launch)
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=DEADLINE)
        report = json.loads(run_code(kc, RESUME.format(root=str(root))))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert "the kernel was asked to shut down" in report["opened"][1]
    check_resumed(report, root, left=grace == 0.0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_exits_without_closing_the_parents_sessions(
    tmp_path: Path,
) -> None:
    code = (
        "import os, sys\n"
        "import argus_lab as al\n"
        "@al.tool\n"
        "def x() -> int:\n"
        "    return 1\n"
        "ws = al.Workspace(sys.argv[1])\n"
        "s = ws.new_session(plan={'tasks': [{'id': 'a', 'tool': 'x'}]}, tools=[x])\n"
        "s.run()  # its loop thread runs in this process only\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    sys.exit(0)  # a normal exit: the exit hook runs in the child\n"
        "import signal, time\n"
        "end = time.monotonic() + 30\n"
        "while not (done := os.waitpid(pid, os.WNOHANG))[0]:\n"
        "    if time.monotonic() > end:  # hung: end it, leave no orphan\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "        done = os.waitpid(pid, 0)\n"
        "        print('hung')\n"
        "        break\n"
        "    time.sleep(0.01)\n"
        "print(os.waitstatus_to_exitcode(done[1]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "ws")],
        env=_env(),
        capture_output=True,
        timeout=DEADLINE,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.split() == [b"0"]


def test_a_shutdown_while_intents_wait_in_their_batch_starts_no_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Intents of tasks starting together wait one turn of the loop for their
    group commit (runtime/intents.py). A shutdown that comes in that turn (from
    another thread: SIGTERM, the interpreter's exit) must start none of those
    calls: they are pending again, with nothing in doubt, as if refused
    before their intents."""
    calls: list[int] = []

    @al.tool(side_effect="write", idempotent=False)
    def pay(i: int) -> int:
        calls.append(i)
        return i

    ws = al.Workspace(tmp_path / "ws")
    plan = {"tasks": [{"id": f"p{i}", "tool": "pay", "args": {"i": i}} for i in (0, 1)]}
    s = ws.new_session(plan=plan, tools=[pay], name="t", approvals=())
    real = IntentBatch._flush

    def shutdown_first(batch: IntentBatch) -> None:
        s._closer.stop("injected, while the intents wait")  # as SIGTERM would
        real(batch)

    monkeypatch.setattr(IntentBatch, "_flush", shutdown_first)
    res = s.run()
    monkeypatch.setattr(IntentBatch, "_flush", real)
    assert calls == []
    assert res.status == "paused" and SHUT in (res.reason or ""), res
    s.close()
    s2 = ws.open("t", tools=[pay], approvals=())
    assert {t: r.status for t, r in s2.records.items()} == {
        "p0": "pending",
        "p1": "pending",
    }
    assert s2.usage["steps"] == 0  # no step was taken
    assert s2.run().status == "succeeded"  # nothing in doubt: never began
    assert sorted(calls) == [0, 1]
    assert s2.usage["steps"] == 2
    events = s2.events()
    started = Counter(e.task_id for e in events if e.kind == "task_started")
    assert {t: r.attempts for t, r in s2.records.items()} == dict(started)
    s2.close()
    ws.close()


def test_a_shutdown_abandoning_attempts_between_their_batch_and_call_fails_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shutdown with no grace cancels the attempts in flight (RunLoop.abandon).
    One that lands after a batch of intents was written but before its
    attempts resumed must end them as shutdowns (calls never begun: pending
    again), not let the cancellation escape run() and leave no pause behind."""
    calls: list[int] = []

    @al.tool(side_effect="write", idempotent=False)
    def pay(i: int) -> int:
        calls.append(i)
        return i

    ws = al.Workspace(tmp_path / "ws")
    plan = {"tasks": [{"id": f"p{i}", "tool": "pay", "args": {"i": i}} for i in (0, 1)]}
    s = ws.new_session(
        plan=plan, tools=[pay], name="t", approvals=(), shutdown_grace=0.0
    )
    real = IntentBatch._flush

    def then_abandon(batch: IntentBatch) -> None:
        real(batch)  # the intents are written; their attempts not resumed yet
        s._closer.stop("injected, after the batch")  # as SIGTERM would
        s._closer._runner.abandon()  # the grace (0 s) is over

    monkeypatch.setattr(IntentBatch, "_flush", then_abandon)
    res = s.run()
    monkeypatch.setattr(IntentBatch, "_flush", real)
    assert calls == []
    assert res.status == "paused" and SHUT in (res.reason or ""), res
    s.close()
    s2 = ws.open("t", tools=[pay], approvals=())
    assert s2.status == "paused"
    assert {t: r.status for t, r in s2.records.items()} == {
        "p0": "pending",
        "p1": "pending",
    }
    assert s2.run().status == "succeeded"  # nothing in doubt: never began
    assert sorted(calls) == [0, 1]
    s2.close()
    ws.close()
