"""An expired lease of a process that still runs on this host is still held.

A run whose event loop is blocked by a long call (a tool declared
``inline=True``, an async tool with a blocking client) cannot renew its lease.
An outside check let the lease expire mid-payment: a second process took the
session over, found the payment interrupted, and a person's retry paid twice.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import argus_lab as al
from argus_lab.errors import ConcurrentSessionError
from argus_lab.store import head as head_mod
from argus_lab.store.head import HOST, lease_is_live, make_lease
from argus_lab.store.state_records import held
from tests.test_concurrency import foreign_commit, head


@pytest.fixture
def other() -> Iterator[subprocess.Popen[bytes]]:
    """Another live process on this host (it waits for its stdin to close)."""
    p = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    yield p
    assert p.stdin is not None
    p.stdin.close()
    p.wait(timeout=60)


def lease_of(p: subprocess.Popen[bytes], *, expired: bool = True) -> dict[str, object]:
    """A lease as process ``p`` would have written it, expired a minute ago."""
    lease = make_lease("them", 30.0, renewed=True)  # a run's (its heartbeat's)
    lease["pid"] = p.pid
    lease["started"] = head_mod._start_time(p.pid)
    if expired:
        lease["expires"] = time.time() - 60
    return lease


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux /proc")
def test_an_expired_lease_of_a_live_process_here_is_live(
    other: subprocess.Popen[bytes],
) -> None:
    now = time.time()
    lease = lease_of(other)
    assert lease["host"] == HOST and lease["started"] is not None
    assert lease_is_live(lease, now)
    # Its pid taken by another process (another start time): not that holder.
    assert not lease_is_live({**lease, "started": lease["started"] + 1}, now)  # type: ignore[operator]
    # Written by an older argus-lab (no start time): the expiry decides.
    assert not lease_is_live({k: v for k, v in lease.items() if k != "started"}, now)
    # On another host, nothing can be checked: the expiry decides.
    assert not lease_is_live({**lease, "host": HOST + "-elsewhere"}, now)
    # This very process (another object of it; a cell run again): as before.
    mine = {**lease, "pid": os.getpid(), "started": head_mod._own_start()}
    assert not lease_is_live(mine, now)
    # A typed state's lock expires with its holder alive, as documented.
    assert not held(lease, "me")
    # A lease nothing renews (a LangGraph thread's, held between invocations)
    # keeps the expiry rule: its idle holder must not lock others out.
    assert not lease_is_live({k: v for k, v in lease.items() if k != "renewed"}, now)
    # Past the bound, a run that cannot renew is taken for hung (or a failed
    # release): the session is free again.
    assert not lease_is_live(lease, now + head_mod.PAST_EXPIRY_S)


def test_an_expired_lease_of_a_process_that_ended_is_not_live() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(timeout=60)
    lease = make_lease("them", 30.0)
    lease["pid"], lease["expires"] = p.pid, time.time() - 60
    assert not lease_is_live(lease, time.time())


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux /proc")
def test_a_run_refuses_a_session_whose_live_runner_let_its_lease_expire(
    tmp_path: Path, other: subprocess.Popen[bytes]
) -> None:
    @al.tool
    def echo(x: int) -> int:
        return x

    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "a", "tool": "echo", "args": {"x": 1}}]},
        tools=[echo],
        name="held",
    )
    s.close()
    foreign_commit(s, head(s).version, "them", lease=lease_of(other))
    s = ws.open("held", tools=[echo])
    with pytest.raises(ConcurrentSessionError, match=r"lease expired .* still runs"):
        s.run()
    assert s.record("a").status == "pending"  # nothing ran, nothing written
    assert not s.interrupted  # a live runner: not cut short
