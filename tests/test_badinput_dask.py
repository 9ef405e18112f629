"""DaskExecutor given what a new user gives it: no address, a port number, a
scheduler that is not there, a cluster that goes away mid-run. Each is a clear
error, and what the session committed stays."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

import argus_lab as al

distributed = pytest.importorskip("distributed", reason="the [dask] extra is missing")
dask = pytest.importorskip("dask")

from argus_lab.runtime.dask import DaskExecutor  # noqa: E402
from tests.waiting import wait_until  # noqa: E402


@pytest.mark.parametrize(("address", "kind"), [(None, ValueError), ("", ValueError)])
def test_no_address_is_refused_instead_of_starting_a_cluster(
    address: object, kind: type[Exception]
) -> None:
    # distributed.Client(None) starts worker processes and a dashboard.
    before = threading.active_count()
    with pytest.raises(kind) as info:
        DaskExecutor(address)
    msg = str(info.value)
    assert "got no scheduler address" in msg and "'tcp://127.0.0.1:8786'" in msg
    assert "DaskExecutor(Client(LocalCluster(n_workers=2)))" in msg
    assert threading.active_count() == before


def test_a_port_number_is_not_an_address() -> None:
    with pytest.raises(TypeError, match=r"got a int: give a distributed.Client"):
        DaskExecutor(8786)


def test_a_malformed_address_says_what_an_address_looks_like() -> None:
    with pytest.raises(al.ArgusError) as info:
        DaskExecutor("my-cluster")
    assert "could not connect to the Dask scheduler at 'my-cluster'" in str(info.value)
    assert "'tcp://127.0.0.1:8786'" in str(info.value)


@pytest.mark.slow
def test_a_scheduler_that_is_not_there() -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with (
        dask.config.set({"distributed.comm.timeouts.connect": "1s"}),
        pytest.raises(al.ArgusError) as info,
    ):
        DaskExecutor(f"tcp://127.0.0.1:{port}")
    msg = str(info.value)
    assert f"could not connect to the Dask scheduler at 'tcp://127.0.0.1:{port}'" in msg
    assert "is it running and reachable from here?" in msg


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_cluster_closed_mid_run_fails_the_calls_clearly_and_keeps_the_session(
    tmp_path: Path,
) -> None:
    """What held: the calls in flight fail with what to do, and the session
    reopens with every record, to be retried on another executor."""
    flag, release = tmp_path / "started", tmp_path / "release"

    @al.tool(idempotent=True)
    def wait_for_release(i: int, started: str, go: str) -> int:
        import pathlib
        import time

        pathlib.Path(started).touch()
        end = time.monotonic() + 30  # never outlive the test
        while not pathlib.Path(go).exists() and time.monotonic() < end:
            time.sleep(0.01)
        return i

    plan = al.Plan.from_dict(
        {
            "tasks": [
                {
                    "id": f"t{i}",
                    "tool": "wait_for_release",
                    "args": {"i": i, "started": str(flag), "go": str(release)},
                }
                for i in range(2)
            ]
        }
    )
    ws = al.Workspace(tmp_path / "ws")
    cluster = distributed.LocalCluster(
        n_workers=1,
        processes=False,
        threads_per_worker=2,
        protocol="tcp://",
        host="127.0.0.1",
        dashboard_address=None,
    )
    client = distributed.Client(cluster, set_as_default=False)
    try:
        s = ws.new_session(
            plan=plan,
            tools=[wait_for_release],
            name="dies",
            executor=DaskExecutor(client),
            backoff=(0.001, 0.01),
        )
        s.start()
        wait_until(flag.exists, "a call to start on the cluster")
        client.close()
        release.touch()  # the worker's threads end; no client takes their results
        cluster.close()
        result = s.wait(timeout=60)
        assert result is not None and result.status == "failed"
        errors = s.tasks_df().set_index("task_id")["error"]
        for tid in ("t0", "t1"):
            assert "the Dask client is" in errors[tid]
            assert "make a new DaskExecutor" in errors[tid]
        s.close()
    finally:
        release.touch()
        client.close()
        cluster.close()
    s2 = ws.open("dies", tools=[wait_for_release])
    assert {t: r.status for t, r in s2.records.items()} == {
        "t0": "failed",
        "t1": "failed",
    }
    s2.retry("t0")
    s2.retry("t1")
    assert s2.run().status == "succeeded"
    assert s2.result("t1") == 1
    s2.close()
