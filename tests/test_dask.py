"""DaskExecutor (argus_lab/runtime/dask.py) on a real LocalCluster: 2 worker processes.

Issue 9's acceptance: a 200-task fan-out gives the same records as the local
executor; killing a worker mid-run leads to retries and success with the ledger
exactly-once; killing the driver and reopening resumes under the in-doubt rules.
The tools live in tests/dask_driver.py (also the driver process that is killed).
Nothing sleeps to synchronise: waits poll files or cluster state with a deadline.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import argus_lab as al

distributed = pytest.importorskip("distributed", reason="the [dask] extra is missing")
cloudpickle = pytest.importorskip("cloudpickle")

from argus_lab.runtime.dask import DaskExecutor  # noqa: E402
from tests.waiting import DEADLINE, wait_until  # noqa: E402

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "dask_driver.py"
FAST: dict[str, Any] = {"backoff": (0.001, 0.01), "approvals": ()}

# No warning filter is needed: the dashboard listens on a free loopback port
# (no "port in use" UserWarning), and what a killed worker causes is logged by
# the nanny and the scheduler (logging, not warnings). The timeout guards CI
# against a hang; a normal run of the whole module takes ~10 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _load_driver() -> ModuleType:
    # By path, so this works whether or not tests/ is importable; workers cannot
    # import it by this name, so cloudpickle ships its functions by value.
    spec = importlib.util.spec_from_file_location("dask_driver", DRIVER)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("dask_driver", mod)
    spec.loader.exec_module(mod)
    cloudpickle.register_pickle_by_value(sys.modules["dask_driver"])
    return sys.modules["dask_driver"]


dd = _load_driver()
# Test-local tools below are shipped by value too (workers cannot import tests/).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """Two worker processes, one thread each, on loopback; no dashboard."""
    main = sys.modules["__main__"]
    with pytest.MonkeyPatch.context() as mp:
        # An IPython shell made by an earlier test leaves its namespace module as
        # __main__, without the __spec__ that multiprocessing's spawn reads.
        if not hasattr(main, "__spec__"):
            mp.setattr(main, "__spec__", None, raising=False)
        with distributed.LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as c:
            yield c


@pytest.fixture
def client(cluster: Any) -> Iterator[Any]:
    """A client of the shared cluster; both workers are back when the test ends."""
    allowed_failures = cluster.scheduler.allowed_failures
    with distributed.Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(2, timeout=DEADLINE)
        yield c
        cluster.scheduler.allowed_failures = allowed_failures  # a test changes it
        c.wait_for_workers(2, timeout=DEADLINE)


def comparable(s: al.Session) -> dict[str, tuple[Any, ...]]:
    """What must match between executors: per task, everything but pids."""
    out = {}
    for tid, r in s.records.items():
        res = r.result
        if isinstance(res, dict):
            res = {k: v for k, v in res.items() if k != "pid"}
        out[tid] = (r.status, res, r.result_ref, r.attempts, r.error_type)
    return out


def worker_pids(client: Any) -> set[int]:
    return set(client.run(os.getpid).values())


def scheduler_keys(cluster: Any, prefix: str) -> list[str]:
    return [str(k) for k in list(cluster.scheduler.tasks) if str(k).startswith(prefix)]


# -- the same records as locally ---------------------------------------------------


def test_fanout_of_200_tasks_gives_the_same_records_as_the_local_executor(
    ws: al.Workspace, client: Any
) -> None:
    plan = dd.fanout_plan()
    assert len(plan["tasks"]) == 200
    ex = DaskExecutor(client)
    local = ws.new_session(plan=plan, tools=dd.TOOLS, name="local", **FAST)
    remote = ws.new_session(
        plan=plan, tools=dd.TOOLS, name="remote", executor=ex, concurrency=4, **FAST
    )
    try:
        assert str(local.run()) == "succeeded: 200 succeeded"
        assert str(remote.run()) == "succeeded: 200 succeeded"
        assert comparable(remote) == comparable(local)

        # It really ran on the workers: both of them, never in this process.
        def pids(s: al.Session) -> set[int]:
            res = [r.result for r in s.records.values()]
            return {r["pid"] for r in res if isinstance(r, dict) and "pid" in r}

        assert pids(remote) <= worker_pids(client) and len(pids(remote)) == 2
        assert pids(local) == {os.getpid()}
        assert ex.submitted == 200 and ex.lost == 0

        # Large results and bytes became artifacts in the driver, as locally.
        assert remote.record("big").result_ref is not None
        assert remote.result("big") == local.result("big")
        assert remote.result("join") == {
            "n": 196,
            "sum": sum(i * i for i in range(197)),
        }
        assert remote.result("blob") == bytes(range(256)) * 3
    finally:
        local.close()
        remote.close()


def test_tool_errors_timeouts_and_retries_end_as_they_do_locally(
    ws: al.Workspace, client: Any
) -> None:
    ex = DaskExecutor(client)
    results = {}
    try:
        for name, opts in {"local": {}, "remote": {"executor": ex}}.items():
            s = ws.new_session(
                plan=dd.errors_plan(), tools=dd.TOOLS, name=name, **opts, **FAST
            )
            try:
                assert s.run().status == "failed"
                results[name] = comparable(s)
                errors = {t: r.error for t, r in s.records.items() if r.error}
                results[name + "-errors"] = errors
            finally:
                s.close()
    finally:
        (ws.path / "release").touch()  # let the stuck calls end
    assert results["remote"] == results["local"]
    assert results["remote"]["flaky"] == ("succeeded", {"attempt": 2}, None, 2, None)
    assert results["remote"]["refuse"][0::4] == ("failed", "ToolError")
    assert results["remote"]["crash"][0::4] == ("failed", "ZeroDivisionError")
    assert results["remote"]["stuck"][0::4] == ("failed", "TransientError")
    errs = results["remote-errors"]
    assert errs["refuse"] == results["local-errors"]["refuse"] == "refused: no"
    assert errs["crash"] == results["local-errors"]["crash"]
    assert "timed out after 0.5s" in errs["stuck"]


# -- the executor itself -------------------------------------------------------------


def call(
    ex: DaskExecutor,
    fn: Callable[..., Any],
    timeout: float | None = 30,
    deadline: float = DEADLINE,
    idempotent: bool = True,
    **kw: Any,
) -> Any:
    """ex.call on a private loop in another thread, as a session runs it."""
    box: dict[str, Any] = {}

    def main() -> None:
        try:
            box["value"] = asyncio.run(
                ex.call(fn, kw, timeout=timeout, key="k" * 32, idempotent=idempotent)
            )
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=main)
    t.start()
    t.join(deadline)
    assert not t.is_alive(), f"the call did not end within {deadline}s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def in_thread(target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Runs target in a thread; its result or error lands in the box."""
    box: dict[str, Any] = {}

    def main() -> None:
        try:
            box["value"] = target()
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=main)
    t.start()
    return t, box


def _pid() -> int:
    return os.getpid()


def _tool_error() -> None:
    raise al.ToolError("no such invoice", task_id="charge")


def _transient() -> None:
    raise al.TransientError("slow down", retry_after=7.5)


def _connection() -> None:
    raise ConnectionResetError("the tool's own connection dropped")


def test_the_tools_own_exceptions_come_back_unchanged(client: Any) -> None:
    ex = DaskExecutor(client)
    with pytest.raises(al.ToolError, match="no such invoice") as e1:
        call(ex, _tool_error)
    assert e1.value.task_id == "charge"
    assert "_tool_error" in "".join(traceback.format_tb(e1.tb))  # the worker's
    with pytest.raises(al.TransientError, match="slow down") as e2:
        call(ex, _transient)
    assert e2.value.retry_after == 7.5
    # A tool's ConnectionError is the tool's (the session retries it if the tool
    # has retries), not a lost worker: it is not resubmitted.
    with pytest.raises(ConnectionResetError):
        call(ex, _connection)
    assert (ex.submitted, ex.lost) == (3, 0)
    # Arguments named like submit()'s own options reach the tool.
    assert call(
        ex,
        lambda key, priority, workers: [key, priority, workers],
        key="a",
        priority=1,
        workers=None,
    ) == ["a", 1, None]


def test_a_timed_out_call_keeps_its_thread_busy_until_it_ends(
    tmp_path: Path, client: Any, cluster: Any
) -> None:
    # A worker thread cannot be interrupted. Had the future been cancelled, the
    # scheduler would think that thread free and queue later calls behind the
    # stuck one; kept, they go to the other worker.
    ex = DaskExecutor(client)
    ctx = al.ToolContext("s", "gate", 1, "k" * 32, tmp_path, tmp_path)
    prefix = f"gate-{'k' * 32}-{ex._token}"
    try:
        with pytest.raises(al.TransientError, match=r"timed out after 0\.3s"):
            call(ex, dd.gate.fn, timeout=0.3, ctx=ctx)
        assert ex.timed_out == 1
        (line,) = dd.read_lines(tmp_path / "gate.log")
        stuck_pid = int(line.split()[0])
        assert [
            cluster.scheduler.tasks[k].state for k in scheduler_keys(cluster, prefix)
        ] == ["processing"]
        pids = {call(ex, _pid, deadline=10) for _ in range(4)}
        assert stuck_pid not in pids and len(pids) == 1
    finally:
        (tmp_path / "release").touch()
    # Once it ends, its future is released and the scheduler forgets it.
    wait_until(lambda: not scheduler_keys(cluster, prefix), "the task forgotten")
    assert not ex._abandoned


def test_the_timeout_counts_from_the_start_on_a_worker_not_from_submission(
    tmp_path: Path, client: Any, cluster: Any
) -> None:
    ex = DaskExecutor(client)
    busy = [
        in_thread(
            lambda i=i: call(
                ex,
                dd.gate.fn,
                ctx=al.ToolContext("s", f"g{i}", 1, "k" * 32, tmp_path, tmp_path),
            )
        )
        for i in range(2)
    ]
    try:
        wait_until(lambda: len(dd.read_lines(tmp_path / "gate.log")) == 2, "2 gates")
        # Both worker threads are taken: this call waits in the scheduler's queue
        # for longer than its timeout, which must not count.
        submitted = time.monotonic()
        queued, box = in_thread(lambda: call(ex, _pid, timeout=0.2))
        # (queued by the scheduler, or sent to a worker whose thread is taken)
        wait_until(
            lambda: scheduler_keys(cluster, f"_pid-{'k' * 32}-{ex._token}"),
            "the call to reach the scheduler",
        )
        wait_until(lambda: time.monotonic() - submitted > 0.6, "0.6s in the queue")
        assert queued.is_alive()
    finally:
        (tmp_path / "release").touch()
    queued.join(DEADLINE)
    assert box.get("value") in worker_pids(client), box
    for t, b in busy:
        t.join(DEADLINE)
        assert b["value"]["key"] == "k" * 32
    assert ex.timed_out == 0


def test_cancelling_the_call_cancels_the_dask_future(
    tmp_path: Path, client: Any, cluster: Any
) -> None:
    ex = DaskExecutor(client)
    ctx = al.ToolContext("s", "stuck", 1, "k" * 32, tmp_path, tmp_path)
    prefix = f"stuck-{'k' * 32}-{ex._token}"
    cancelled = threading.Event()

    async def go() -> None:
        task = asyncio.ensure_future(
            ex.call(dd.stuck.fn, {"ctx": ctx}, timeout=None, key="k" * 32)
        )
        end = time.monotonic() + DEADLINE
        while not scheduler_keys(cluster, prefix) and time.monotonic() < end:
            await asyncio.sleep(0.002)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cancelled.set()

    try:
        asyncio.run(go())
        assert cancelled.is_set()
        wait_until(lambda: not scheduler_keys(cluster, prefix), "the task forgotten")
    finally:
        (tmp_path / "release").touch()


def drop_running_gate(
    root: Path, client: Any, cluster: Any, retries: int, idempotent: bool = True
) -> tuple[DaskExecutor, dict[str, Any]]:
    """Runs the gate tool through a DaskExecutor and cancels its task on the
    cluster while it runs (as a scheduler restart or a lost connection would)."""
    root.mkdir()
    ex = DaskExecutor(client, retries_on_lost_worker=retries)
    ctx = al.ToolContext("s", f"g{retries}", 1, "k" * 32, root, root)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["ok"] = call(ex, dd.gate.fn, idempotent=idempotent, ctx=ctx)
        except (al.TransientError, al.InDoubtError) as e:
            box["error"] = e

    t = threading.Thread(target=run)
    t.start()
    wait_until(lambda: len(dd.read_lines(root / "gate.log")) == 1, "the gate")
    (key,) = scheduler_keys(cluster, f"gate-{'k' * 32}-{ex._token}")
    client.cancel([distributed.Future(key, client)], force=True)
    (root / "release").touch()
    t.join(DEADLINE)
    assert not t.is_alive()
    return ex, box


def test_a_call_the_cluster_drops_is_resubmitted(
    tmp_path: Path, client: Any, cluster: Any
) -> None:
    ex, box = drop_running_gate(tmp_path / "r", client, cluster, retries=1)
    assert box.get("ok", box) == {"task": "g1", "key": "k" * 32}
    assert (ex.lost, ex.submitted) == (1, 2)
    # It ran again, with the same key.
    runs = dd.read_lines(tmp_path / "r" / "gate.log")
    assert [ln.split()[1] for ln in runs] == ["k" * 32] * 2


def test_a_call_dropped_more_often_than_allowed_is_a_transient_error(
    tmp_path: Path, client: Any, cluster: Any
) -> None:
    ex, box = drop_running_gate(tmp_path / "r", client, cluster, retries=0)
    assert "lost the call" in str(box.get("error", box))
    assert isinstance(box["error"], al.TransientError)
    assert (ex.lost, ex.submitted) == (1, 1)


def test_a_lost_call_of_a_non_idempotent_write_is_in_doubt_not_rerun(
    tmp_path: Path, client: Any, cluster: Any
) -> None:
    ex, box = drop_running_gate(
        tmp_path / "r", client, cluster, retries=2, idempotent=False
    )
    assert isinstance(box["error"], al.InDoubtError)
    assert "may or may not have taken effect" in str(box["error"])
    assert (ex.lost, ex.submitted) == (1, 1)  # never resubmitted
    assert len(dd.read_lines(tmp_path / "r" / "gate.log")) == 1


def _generator() -> Any:
    return (i for i in range(3))


def test_what_does_not_pickle_is_a_tool_error_not_a_lost_worker(
    client: Any,
) -> None:
    lock = threading.Lock()

    def uses_lock() -> None:
        with lock:
            pass

    ex = DaskExecutor(client)
    with pytest.raises(al.ToolError, match="could not be sent to the Dask cluster"):
        call(ex, uses_lock)
    assert ex.submitted == 0
    # A result that cannot travel back is permanent, like a result that is not
    # JSON: it must not be taken for a lost worker and run again.
    with pytest.raises(al.ToolError, match="could not be sent back from the Dask"):
        call(ex, _generator)
    assert (ex.submitted, ex.lost) == (1, 0)


def test_client_ownership_and_misuse(cluster: Any) -> None:
    with pytest.raises(ValueError, match="retries_on_lost_worker"):
        DaskExecutor(cluster.scheduler_address, retries_on_lost_worker=-1)
    ex = DaskExecutor(cluster.scheduler_address)  # makes and owns its client
    assert "127.0.0.1" in repr(ex)
    assert ex.nthreads() == 2
    assert call(ex, lambda x: x + 1, x=1) == 2
    ex.close()
    assert ex.client.status == "closed"
    with pytest.raises(al.ArgusError, match="client is closed"):
        call(ex, lambda: 1)

    with distributed.Client(cluster, set_as_default=False) as mine:
        DaskExecutor(mine).close()
        assert mine.status == "running"  # a client handed in stays the caller's

    async def with_async_client() -> None:
        async with distributed.Client(
            cluster.scheduler_address, asynchronous=True, set_as_default=False
        ) as c:
            with pytest.raises(TypeError, match="synchronous"):
                DaskExecutor(c)

    asyncio.run(with_async_client())


def test_import_argus_lab_does_not_import_dask() -> None:
    code = (
        "import sys, argus_lab, argus_lab.runtime.dask\n"
        "bad = [m for m in ('dask', 'distributed') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=DEADLINE)


def test_missing_distributed_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(al.MissingDependency, match=r"argus-lab\[dask\]"):
        DaskExecutor("tcp://127.0.0.1:1")


# -- a worker killed mid-run ---------------------------------------------------------


@pytest.mark.parametrize("layer", ["session", "executor"])
def test_killing_a_worker_mid_run_retries_and_keeps_the_ledger_exactly_once(
    ws: al.Workspace, client: Any, cluster: Any, layer: str
) -> None:
    # allowed_failures=0: the scheduler does not rerun the task itself but
    # reports KilledWorker at once, so the retry is ours. "session": the
    # executor hands the loss on (TransientError) and the session retries the
    # task, visibly; "executor": the executor resubmits it within the attempt.
    cluster.scheduler.allowed_failures = 0
    by_session = layer == "session"
    ex = DaskExecutor(client, retries_on_lost_worker=0 if by_session else 2)
    plan = dd.ledger_plan(retries=3 if by_session else 0)
    s = ws.new_session(plan=plan, tools=dd.TOOLS, executor=ex, concurrency=4, **FAST)
    root = ws.path
    try:
        s.start()
        wait_until(lambda: len(dd.read_lines(root / "gate.log")) == 1, "the gate")
        pid_text, key = dd.read_lines(root / "gate.log")[0].split()
        pid = int(pid_text)
        assert pid in worker_pids(client)  # the gate runs on a worker, not here
        os.kill(pid, signal.SIGKILL)  # mid-call: its ledger line is already written
        (root / "release").touch()
        result = s.wait(timeout=DEADLINE)
        assert result is not None and result.status == "succeeded", result

        recs = s.records
        assert {r.status for r in recs.values()} == {"succeeded"}
        gate_id = next(t["id"] for t in plan["tasks"] if t["tool"] == "gate")
        assert recs[gate_id].idempotency_key == key
        # The gate ran twice (killed, then again elsewhere) with the same key...
        runs = dd.read_lines(root / "gate.log")
        assert [ln.split()[1] for ln in runs] == [key, key]
        assert int(runs[1].split()[0]) != pid
        # ...and its side effect took place once: one ledger line per key, one
        # key per task, the key each record holds.
        pairs = [ln.split(" ") for ln in dd.read_lines(root / "ledger.txt")]
        assert Counter(k for k, _ in pairs) == dict.fromkeys(
            (r.idempotency_key for r in recs.values()), 1
        )
        assert {t: k for k, t in pairs} == {
            t: r.idempotency_key for t, r in recs.items()
        }
        calls = Counter(ln.split(" ")[0] for ln in dd.read_lines(root / "calls.log"))
        assert calls[key] == 2

        assert ex.lost >= 1
        retried = [
            e
            for e in s.events()
            if e.kind == "retry_scheduled" and e.task_id == gate_id
        ]
        if by_session:
            assert recs[gate_id].attempts == 2
            assert retried and "lost the call" in retried[0].error
            assert retried[0].error_type == "TransientError"
        else:
            assert recs[gate_id].attempts == 1 and not retried
            assert ex.submitted > len(plan["tasks"])
    finally:
        (root / "release").touch()
        s.close()


# -- the driver killed mid-run -------------------------------------------------------


def start_driver(
    root: Path, cluster: Any, n: int
) -> tuple[subprocess.Popen[bytes], Path]:
    log = root.parent / f"driver{n}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(DRIVER), str(root), cluster.scheduler_address],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    return proc, log


def test_killing_the_driver_mid_run_and_reopening_resumes(
    tmp_path: Path, client: Any, cluster: Any
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    first, log1 = start_driver(root, cluster, n=1)
    try:
        wait_until(
            lambda: dd.read_lines(root / "gate.log") or first.poll() is not None,
            "the gate to start on a worker",
        )
        assert first.poll() is None, log1.read_text()
        ((pid_text, key),) = (ln.split() for ln in dd.read_lines(root / "gate.log"))
        assert int(pid_text) in worker_pids(client)
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=DEADLINE) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    # The orphaned call may now finish on its worker; its result goes nowhere.
    (root / "release").touch()

    ws = al.Workspace(root)
    s = ws.open("dask", tools=dd.TOOLS)
    try:
        running = {t for t, r in s.records.items() if r.status == "running"}
        assert "w10" in running  # in doubt: its intent was committed, no result
    finally:
        s.close()

    second, log2 = start_driver(root, cluster, n=2)
    try:
        assert second.wait(timeout=DEADLINE) == 0, log2.read_text()
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    assert "succeeded: 40 succeeded" in log2.read_text()

    s = ws.open("dask", tools=dd.TOOLS)
    try:
        recs = s.records
        assert s.status == "succeeded"
        assert {r.status for r in recs.values()} == {"succeeded"}
        # In doubt and idempotent: rerun with the same key, after recovery.
        rerun = {
            e.task_id: e.key
            for e in s.events()
            if e.kind == "resumed" and getattr(e, "recovered", None) == "rerun"
        }
        assert rerun.get("w10") == key == recs["w10"].idempotency_key
        assert recs["w10"].attempts == 2
        # One ledger line per key although w10 was called twice with it.
        pairs = [ln.split(" ") for ln in dd.read_lines(root / "ledger.txt")]
        assert sorted(t for _, t in pairs) == sorted(recs)
        assert {t: k for k, t in pairs} == {
            t: r.idempotency_key for t, r in recs.items()
        }
        assert [ln.split()[1] for ln in dd.read_lines(root / "gate.log")] == [key, key]
    finally:
        s.close()
        ws.close()
