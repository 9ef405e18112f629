"""State transactions across threads and processes: no lost update, no torn
version after SIGKILL. The writers are ``tests/state_worker.py`` subprocesses."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import argus_lab as al

sys.path.insert(0, str(Path(__file__).parent))
from state_worker import Counters, consistent, open_ledger

WORKER = Path(__file__).parent / "state_worker.py"
PROCS = 8
PER_PROC = int(os.environ.get("ARGUS_STATE_TXS", "200"))
"""Transactions per process (CI boxes that are very loaded may lower it)."""


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["opt", "lock"])
def test_eight_processes_never_lose_an_update(tmp_path: Path, mode: str) -> None:
    ws = al.Workspace(tmp_path / "ws")
    ws.state("counters", model=Counters).close()  # created once, before the race
    procs = [
        _spawn("count", str(ws.path), str(PER_PROC), mode, f"w{i}")
        for i in range(PROCS)
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    st = ws.state("counters", model=Counters)
    final = st.get()
    assert final.total == PROCS * PER_PROC
    assert final.per == {f"w{i}": PER_PROC for i in range(PROCS)}
    assert st.version == 1 + PROCS * PER_PROC  # one version per transaction
    assert st.at(st.version // 2).total == st.version // 2 - 1


def test_many_threads_never_lose_an_update(ws: al.Workspace) -> None:
    st = ws.state("counters", model=Counters)
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def work(me: str, lock: bool) -> None:
        def bump(s: Counters) -> None:
            s.total += 1
            s.per[me] = s.per.get(me, 0) + 1

        start.wait(timeout=30)
        try:
            for _ in range(25):
                st.update(bump, retries=10_000, lock=lock)
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [
        threading.Thread(target=work, args=(f"t{i}", i % 2 == 0)) for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert st.get().total == 200 and st.get().per == {f"t{i}": 25 for i in range(8)}


@pytest.mark.slow
def test_sigkill_while_committing_leaves_every_version_whole(tmp_path: Path) -> None:
    ws = al.Workspace(tmp_path / "ws")
    rng = random.Random(20261201)
    reported = 0
    for n in range(6):
        lock = n % 2 == 1  # every other writer is killed holding the lock
        p = _spawn("crash", str(ws.path), "lock" if lock else "opt")
        assert p.stdout is not None
        kill_after = rng.randint(5, 60)  # commits seen before the kill
        for seen, line in enumerate(p.stdout, 1):
            reported = max(reported, int(line))
            if seen == kill_after:
                os.kill(p.pid, signal.SIGKILL)  # lands mid-commit, at random
                break
        p.wait(timeout=60)
        err = p.stderr.read() if p.stderr else ""
        p.stdout.close()
        if p.stderr:
            p.stderr.close()
        assert p.returncode == -signal.SIGKILL, err
        st = open_ledger(ws)
        head = st.version
        assert head >= reported  # nothing the writer saw committed was lost
        for v in range(1, head + 1):
            s = st.at(v)
            assert consistent(s) and s.n == v - 1, f"version {v} is torn"
        # The killed writer's lock (if it held it) goes with it: the next
        # writer takes over at once, it does not wait out the lease.
        with st.transaction(lock=True, timeout=5) as s:
            s.n, s.entries, s.total = s.n + 1, [*s.entries, s.n + 1], s.total + s.n + 1
            s.by_key["k"] = s.by_key.get("k", 0) + s.n
        assert consistent(st.get()) and st.version == head + 1
        st.close()
