"""One writer (invariant 6): a runner lease plus a version counter on every commit.

A second writer gets ``ConcurrentSessionError`` and never a lost update; a lease
whose holder died (on this host) or expired can be taken over. Process A is
``tests/crash_worker.py --plan slow`` in a subprocess; the test process is B.
"""

from __future__ import annotations

import gc
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.store.checkpoints import SessionStore
from argus_lab.store.head import HOST, _start_time, make_lease
from tests import crash_worker as cw
from tests import waiting
from tests.waiting import DEADLINE

HERE = Path(__file__).resolve().parent
WORKER = HERE / "crash_worker.py"


def wait_until(
    cond: Callable[[], bool], what: str, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Polls cond until it holds; fails after DEADLINE or if proc exits first."""

    def gone() -> str | None:
        if proc is None or proc.poll() is None:
            return None
        return f"process A exited ({proc.returncode})"

    waiting.wait_until(cond, what, gone=gone)


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    # Frees reference cycles (a raised error's traceback) before the test ends,
    # so anything unraisable they hold, such as a coroutine that was never
    # awaited, is reported against the test that leaked it, not a later one.
    yield
    gc.collect()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Started subprocesses; killed (and resumed, if stopped) at the end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait(timeout=DEADLINE)


def start_a(
    root: Path, procs: list[subprocess.Popen[bytes]], *args: str
) -> subprocess.Popen[bytes]:
    """Starts process A on the slow plan and waits until its `slow` task runs."""
    err = (root.parent / "a.err").open("wb")
    p = subprocess.Popen(
        [sys.executable, str(WORKER), str(root), "--plan", "slow", *args],
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    err.close()
    procs.append(p)
    wait_until(lambda: (root / "started.slow").exists(), "A to start `slow`", p)
    return p


def sigkill(p: subprocess.Popen[bytes]) -> None:
    p.kill()
    # Reap it: a zombie still answers kill(pid, 0) and would look alive.
    p.wait(timeout=DEADLINE)
    assert p.returncode == -signal.SIGKILL


def head(s: al.Session) -> Any:
    """The stored head, read like another process would."""
    store = SessionStore(s.path, s.id)
    try:
        return store.read_head()
    finally:
        store.close()


def foreign_commit(s: al.Session, version: int, holder: str, **kw: Any) -> None:
    """Commits to ``s``'s store as another writer would."""
    store = SessionStore(s.path, s.id)
    try:
        store.commit(version, holder, **kw)
    finally:
        store.close()


def open_slow(root: Path, **options: Any) -> tuple[al.Workspace, al.Session]:
    ws = al.Workspace(root)
    return ws, ws.open("slow", tools=cw.SLOW_TOOLS, **cw.NO_APPROVALS, **options)


def fast_ids() -> list[str]:
    return [f"fast{i}" for i in range(cw.N_QUICK)]


# -- two processes --------------------------------------------------------------


def test_second_process_is_refused_then_takes_over_when_the_holder_dies(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    root = tmp_path / "ws"
    a = start_a(root, procs)  # holds the lease (30 s), blocked in `slow`
    ws, b = open_slow(root)
    try:
        # What A committed before `slow` started: the fast tasks, run by A.
        for t in fast_ids():
            assert b.record(t).status == "succeeded"
            assert b.record(t).result["pid"] == a.pid
        assert b.record("slow").status == "running"
        events_before = [e.model_dump() for e in b.events()]
        lease = head(b).lease
        assert lease is not None and lease["pid"] == a.pid

        for call in (b.step, b.run, lambda: b.retry("slow"), lambda: b.skip("tail0")):
            with pytest.raises(al.ConcurrentSessionError) as exc:
                call()
            msg = str(exc.value)
            assert b.id in msg, msg
            assert str(a.pid) in msg, msg
        # B's refused calls wrote nothing and A's commits are intact.
        assert [e.model_dump() for e in b.events()] == events_before
        assert head(b).lease == lease
        ws2, c = open_slow(root)
        try:
            for t in fast_ids():
                assert c.record(t).status == "succeeded"
                assert c.record(t).result["pid"] == a.pid
            assert c.record("slow").status == "running"
        finally:
            c.close()
            ws2.close()
        assert a.poll() is None  # A never noticed

        # A dies. Its lease (still valid for ~30 s) is taken over at once.
        sigkill(a)
        (root / "release").touch()  # our `slow` will not block
        t0 = time.monotonic()
        res = b.run()
        assert res.status == "succeeded", res
        assert time.monotonic() - t0 < 25  # did not wait the lease out

        # A's results were kept, not recomputed; `slow` was rerun by B.
        for t in fast_ids():
            assert b.record(t).result["pid"] == a.pid
            assert b.record(t).attempts == 1
        assert b.record("slow").result == {"pid": os.getpid(), "attempt": 2}
        for t in ("tail0", "tail1", "tail2"):
            assert b.record(t).result["pid"] == os.getpid()
        events = b.events()
        assert [e.model_dump() for e in events[: len(events_before)]] == events_before
        done = Counter(e.task_id for e in events if e.kind == "task_succeeded")
        assert done == dict.fromkeys(b.records, 1)
        recovered = [e for e in events if e.kind == "resumed" and e.task_id == "slow"]
        assert [getattr(e, "recovered", None) for e in recovered] == ["rerun"]
        starts = [ln.split(" ") for ln in cw.read_lines(root / "started.slow")]
        assert starts == [[str(a.pid), "1"], [str(os.getpid()), "2"]]
        assert head(b).lease is None  # released when run() returned
    finally:
        b.close()
        ws.close()


def _wait_unlocked(db: Path, p: subprocess.Popen[bytes]) -> None:
    """Stops p outside an SQLite write transaction (SIGCONT-and-retry otherwise):
    a process frozen while it holds the write lock would block everyone, which is
    SQLite's nature and not what this test is about."""
    end = time.monotonic() + DEADLINE
    while True:
        p.send_signal(signal.SIGSTOP)
        con = sqlite3.connect(db, timeout=0.5, isolation_level=None)
        try:
            con.execute("BEGIN IMMEDIATE")
            con.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            if time.monotonic() > end:
                raise
            p.send_signal(signal.SIGCONT)
        finally:
            con.close()


@pytest.mark.slow
def test_a_frozen_holder_whose_lease_expired_keeps_the_session(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    # A holder that cannot renew its lease (stopped here; in life, an event
    # loop blocked by a long call) may still make its call's effect and
    # commit. Taking its session over made a second runner repeat the call
    # (an outside check paid twice): while its process runs, it keeps it.
    root = tmp_path / "ws"
    a = start_a(root, procs, "--lease-ttl", "2")
    ws, b = open_slow(root)
    try:
        _wait_unlocked(root / "sessions" / b.id / "cache.db", a)
        lease = head(b).lease
        assert lease is not None and lease["pid"] == a.pid
        wait_until(
            lambda: time.time() > head(b).lease["expires"], "A's lease to expire"
        )
        assert a.poll() is None  # still alive, only stopped
        events_before = [e.model_dump() for e in b.events()]
        with pytest.raises(al.ConcurrentSessionError, match="still runs") as exc:
            b.run()
        assert str(a.pid) in str(exc.value)
        assert [e.model_dump() for e in b.events()] == events_before  # nothing

        # A wakes up, its `slow` returns, and its run ends as if never stopped.
        (root / "release").touch()
        a.send_signal(signal.SIGCONT)
        assert a.wait(timeout=DEADLINE) == 0, (tmp_path / "a.err").read_text()
        ws2, c = open_slow(root)
        try:
            assert c.status == "succeeded"
            assert c.record("slow").result["pid"] == a.pid
            assert c.record("slow").attempts == 1  # run once, by A
            assert head(c).lease is None
        finally:
            c.close()
            ws2.close()
    finally:
        b.close()
        ws.close()


# -- leases written through the store -------------------------------------------


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(timeout=DEADLINE)
    return p.pid


@pytest.mark.parametrize(
    ("host", "pid", "ttl", "taken_over"),
    [
        pytest.param("elsewhere", "live", 60.0, False, id="other-host-live"),
        pytest.param("elsewhere", "live", -1.0, True, id="other-host-expired"),
        pytest.param(HOST, "live", 60.0, False, id="this-host-live"),
        # Alive here, its lease expired: a blocked event loop kept it from
        # renewing, and it may still make its call's effect. Held.
        pytest.param(HOST, "live", -1.0, False, id="this-host-alive-but-expired"),
        # Its pid now another process's (another start time): taken over.
        pytest.param(HOST, "reused", -1.0, True, id="this-host-pid-reused-expired"),
        pytest.param(HOST, "dead", 60.0, True, id="this-host-dead-holder"),
    ],
)
def test_foreign_lease(
    tmp_path: Path, host: str, pid: str, ttl: float, taken_over: bool
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=cw.slow_plan(), tools=cw.SLOW_TOOLS, name="leased", **cw.NO_APPROVALS
    )
    (ws.path / "release").touch()
    try:
        # Another runner's lease, written through a store of its own as that
        # runner would write it.
        with ws.store(s.id) as store:
            h = store.read_head()
            assert h is not None
            holder = _dead_pid() if pid == "dead" else os.getppid()
            started = _start_time(holder)
            lease = {
                **make_lease("foreign", 1.0, renewed=True),  # a run's
                "host": host,
                "pid": holder,
                # As that runner wrote it (a reused pid: another process's).
                "started": started + 1 if pid == "reused" and started else started,
                "expires": time.time() + ttl,
            }
            store.commit(h.version, "foreign", lease=lease)
        if not taken_over:
            events_before = [e.model_dump() for e in s.events()]
            with pytest.raises(al.ConcurrentSessionError) as exc:
                s.step()
            assert s.id in str(exc.value)
            assert host in str(exc.value)
            assert head(s).lease == lease
            assert [e.model_dump() for e in s.events()] == events_before
            assert all(r.status == "pending" for r in s.records.values())
        else:
            res = s.run()
            assert res.status == "succeeded", res
            assert head(s).lease is None
    finally:
        s.close()
        ws.close()


@pytest.mark.slow
def test_foreign_lease_can_be_taken_once_it_expires(tmp_path: Path) -> None:
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=cw.slow_plan(), tools=cw.SLOW_TOOLS, name="leased", **cw.NO_APPROVALS
    )
    (ws.path / "release").touch()
    try:
        h = head(s)
        lease = {**make_lease("foreign", 2.5), "host": "elsewhere"}
        foreign_commit(s, h.version, "foreign", lease=lease)
        with pytest.raises(al.ConcurrentSessionError):
            s.run()
        wait_until(lambda: time.time() > lease["expires"], "the lease to expire")
        res = s.run()
        assert res.status == "succeeded", res
    finally:
        s.close()
        ws.close()


def test_refused_call_is_clean(tmp_path: Path) -> None:
    """The refusal carries the session id, like every ArgusError with a context,
    and leaves nothing half-done behind (no un-awaited coroutine: under pytest's
    warnings-as-errors a leaked ``coroutine ... was never awaited`` fails)."""
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=cw.slow_plan(), tools=cw.SLOW_TOOLS, name="leased", **cw.NO_APPROVALS
    )
    try:
        h = head(s)
        foreign_commit(
            s,
            h.version,
            "foreign",
            lease={**make_lease("foreign", 60), "host": "elsewhere"},
        )
        with pytest.raises(al.ConcurrentSessionError) as exc:
            s.step()
        err = exc.value
        text, message, session_id = str(err), err.message, err.session_id
        del exc, err  # their traceback holds the refused call's frames
        gc.collect()  # anything those frames leaked is reported here
        assert s.id in text
        assert message == text
        assert session_id == s.id
    finally:
        s.close()
        ws.close()


# -- the version check, two Sessions in one process -------------------------------


def test_stale_session_gets_concurrent_error_instead_of_overwriting(
    tmp_path: Path,
) -> None:
    """s1 freezes mid-task (its loop is blocked, so it cannot renew its lease), s2
    takes the expired lease and finishes; when s1 comes back its next commit fails
    the version check and writes nothing."""
    entered, release = threading.Event(), threading.Event()

    @al.tool(name="slow", side_effect="write", idempotent=True)
    async def slow_frozen(*, ctx: al.ToolContext) -> dict[str, Any]:
        entered.set()
        # Blocks the session's event loop on purpose: no heartbeat, like a
        # frozen process.
        assert release.wait(DEADLINE)
        return {"by": "s1"}

    @al.tool(name="slow", side_effect="write", idempotent=True)
    def slow_quick(*, ctx: al.ToolContext) -> dict[str, Any]:
        return {"by": "s2"}

    ws = al.Workspace(tmp_path / "ws")
    s1 = ws.new_session(
        plan=cw.slow_plan(),
        tools=[cw.quick, slow_frozen],
        name="v",
        lease_ttl=0.5,
        **cw.NO_APPROVALS,
    )
    s2: al.Session | None = None
    try:
        fut = s1.start()
        assert entered.wait(DEADLINE)
        s2 = ws.open("v", tools=[cw.quick, slow_quick], lease_ttl=5, **cw.NO_APPROVALS)
        assert s2.record("slow").status == "running"
        s1_holder = head(s2).lease["holder"]  # s1 holds it (for now)
        wait_until(
            lambda: time.time() > head(s2).lease["expires"], "s1's lease to lapse"
        )

        res = s2.run()
        assert res.status == "succeeded", res
        assert s2.record("slow").result == {"by": "s2"}
        events_after = [e.model_dump() for e in s2.events()]
        records_after = {t: r.model_dump() for t, r in s2.records.items()}
        head_after = head(s2)

        release.set()
        with pytest.raises(al.ConcurrentSessionError) as exc:
            fut.result(timeout=DEADLINE)
        assert "changed by another writer" in str(exc.value)
        assert s1.id in str(exc.value)

        # The store's version check itself: a commit on a stale version is
        # refused whole, lease or no lease.
        stale = s1.version
        assert stale < head_after.version
        bogus = s1.record("slow").model_copy(
            update={"status": "succeeded", "result": {"by": "s1"}}
        )
        for holder in (s1_holder, "nobody"):
            with pytest.raises(al.ConcurrentSessionError, match="expected"):
                foreign_commit(s1, stale, holder, records=[bogus], lease=None)

        ws2 = al.Workspace(tmp_path / "ws")
        s3 = ws2.open("v", tools=[cw.quick, slow_quick], **cw.NO_APPROVALS)
        try:
            assert [e.model_dump() for e in s3.events()] == events_after
            assert {t: r.model_dump() for t, r in s3.records.items()} == records_after
            assert s3.record("slow").result == {"by": "s2"}
            assert s3.status == "succeeded"
            assert head(s3).version == head_after.version
        finally:
            s3.close()
            ws2.close()
    finally:
        release.set()
        s1.close()
        if s2 is not None:
            s2.close()
        ws.close()


@pytest.mark.parametrize(
    ("host", "pid", "ttl", "refused"),
    [
        pytest.param("elsewhere", "live", 60.0, True, id="other-host"),
        pytest.param(HOST, "live", 60.0, True, id="this-host-alive"),
        pytest.param(HOST, "dead", 60.0, False, id="this-host-dead-holder"),
        pytest.param("elsewhere", "live", -1.0, False, id="expired"),
    ],
)
def test_pause_of_a_session_another_process_runs_says_where_to_pause_it(
    tmp_path: Path, host: str, pid: str, ttl: float, refused: bool
) -> None:
    # skip/retry/approve on a session another live process runs raise; pause
    # used to do nothing, silently, leaving the person believing it paused.
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=cw.slow_plan(), tools=cw.SLOW_TOOLS, name="leased", **cw.NO_APPROVALS
    )
    try:
        s.pause()  # nobody runs it: nothing to pause, no error
        holder_pid = os.getppid() if pid == "live" else _dead_pid()
        with ws.store(s.id) as store:
            h = store.read_head()
            assert h is not None
            lease = {
                **make_lease("foreign", 1.0, renewed=True),  # a run's
                "host": host,
                "pid": holder_pid,
                "expires": time.time() + ttl,
            }
            store.commit(h.version, "foreign", lease=lease)
        events_before = [e.model_dump() for e in s.events()]
        if refused:
            with pytest.raises(al.ConcurrentSessionError) as exc:
                s.pause()
            msg = str(exc.value)
            assert s.id in msg and f"process {holder_pid} on {host}" in msg, msg
            assert "SIGINT" in msg and f"kill -INT {holder_pid}" in msg, msg
            assert "widget" in msg, msg
            assert exc.value.session_id == s.id
        else:
            s.pause()
        assert head(s).lease == lease  # nothing written either way
        assert [e.model_dump() for e in s.events()] == events_before
    finally:
        s.close()
        ws.close()


def test_pause_of_its_own_run_still_pauses_it(tmp_path: Path) -> None:
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=cw.slow_plan(), tools=cw.SLOW_TOOLS, name="own", **cw.NO_APPROVALS
    )
    try:
        run = s.start()
        wait_until(lambda: (ws.path / "started.slow").exists(), "`slow` to start")
        s.pause("by the test")
        (ws.path / "release").touch()
        res = run.result(DEADLINE)
        assert res.status == "paused" and res.reason == "by the test", res
    finally:
        s.close()
        ws.close()
