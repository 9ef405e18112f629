"""ArgusSaver under SIGKILL and against a second writer (real processes).

The worker is ``tests/langgraph_worker.py``: a LangGraph graph of 36 nodes (12
rounds of one node, then two in parallel) on ArgusSaver with durability "full".
Nothing here sleeps to synchronise: it polls the worker's output with deadlines.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import argus_lab as al
from argus_lab.langgraph import ArgusSaver
from tests import langgraph_worker as lw
from tests.waiting import wait_until

WORKER = Path(__file__).resolve().parent / "langgraph_worker.py"


class Worker:
    def __init__(self, ws: Path, thread: str, *args: str) -> None:
        n = len(list(ws.parent.glob("w*.out")))
        self.out = ws.parent / f"w{n:03d}.out"
        self.err = ws.parent / f"w{n:03d}.err"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER), str(ws), thread, *args],
                stdout=out,
                stderr=err,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines()

    def gone(self) -> str | None:
        code = self.proc.poll()
        return None if code is None else f"worker exited {code}: {self.report()}"

    def report(self) -> str:
        return f"stdout:\n{self.out.read_text()}\nstderr:\n{self.err.read_text()}"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=60)


def _final(ws_path: Path, thread: str) -> dict[str, object]:
    saver = ArgusSaver(al.Workspace(ws_path))
    app = lw.build().compile(checkpointer=saver)
    snap = app.get_state({"configurable": {"thread_id": thread}})
    saver.close()
    assert not snap.next, f"thread {thread} did not finish: next={snap.next}"
    return dict(snap.values)


@pytest.mark.slow
def test_sigkill_at_seeded_moments_then_resume_equals_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    al.Workspace(ws)
    clean = Worker(ws, "clean")
    assert clean.proc.wait(timeout=120) == 0, clean.report()

    rng = random.Random(20261201)
    kills = 0
    for _ in range(6):
        want = rng.randint(2, 12)
        if rng.random() < 0.5:
            # Mid-node: the want-th node this process starts blocks before it
            # returns, so its writes are never sent.
            w = Worker(ws, "crashy", "--block-at", str(want))
        else:
            # Anywhere: killed once it has started want nodes, mid-commit or not.
            w = Worker(ws, "crashy")
        wait_until(
            lambda w=w, want=want: w.proc.poll() is not None or len(w.lines()) >= want,
            "the worker to reach its kill point",
        )
        if w.proc.poll() is not None:  # finished before its kill point
            assert w.proc.returncode == 0, w.report()
            break
        w.kill()
        kills += 1
    assert kills >= 3, f"only {kills} kills landed: the test did not test much"
    last = Worker(ws, "crashy")
    assert last.proc.wait(timeout=120) == 0, last.report()

    crashy, reference = _final(ws, "crashy"), _final(ws, "clean")
    assert crashy == reference
    log = crashy["log"]
    assert isinstance(log, list)
    # Every node's write is in the state exactly once.
    names = [x.split(":")[0] for x in log]
    assert sorted(names) == sorted(f"{p}{k}" for k in range(lw.ROUNDS) for p in "abc")


@pytest.mark.slow
def test_a_second_process_on_the_same_thread_gets_concurrent_session_error(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    al.Workspace(ws)
    holder = Worker(ws, "shared", "--hold")
    wait_until(lambda: "holding" in holder.lines(), "the holder", gone=holder.gone)
    second = Worker(ws, "shared")
    assert second.proc.wait(timeout=120) == 3, second.report()
    assert "being written by process" in second.err.read_text()
    assert str(holder.proc.pid) in second.err.read_text()

    # In this process too, and nothing is written.
    saver = ArgusSaver(al.Workspace(ws))
    app = lw.build().compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "shared"}}
    before = len(list(app.get_state_history(cfg)))
    with pytest.raises(al.ConcurrentSessionError, match="shared"):
        app.invoke(None, cfg)
    assert len(list(app.get_state_history(cfg))) == before

    # Once the holder is dead, the thread is free at once (same host, pid gone).
    holder.kill()
    app.invoke(None, cfg)
    assert not app.get_state(cfg).next
    saver.close()
