"""SIGKILL a runner of quick inline tools at seeded moments (invariants 1, 2).

Quick sync tools run on the event loop, a side-effect-free one with its intent
deferred into its outcome's commit, a write with its intent committed in a
group first (runtime/attempt.py, runtime/intents.py). After any number of kills
the session must end as if each task ran once: record and task_started always
committed together (attempts == starts), no event lost or repeated, and each
write's effect once, under the key its record holds. The runner is
tests/inline_crash_worker.py; nothing here sleeps to synchronise.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import argus_lab as al
from tests import inline_crash_worker as iw
from tests import waiting
from tests.waiting import DEADLINE

WORKER = Path(__file__).resolve().parent / "inline_crash_worker.py"
N_KILLS = 12
SEED = 90210


def n_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def start(root: Path, logs: list[Path], *args: str) -> subprocess.Popen[bytes]:
    out = root.parent / f"worker{len(logs)}.out"
    logs.append(out)
    with out.open("wb") as f:
        return subprocess.Popen(
            [sys.executable, str(WORKER), str(root), *args],
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


@pytest.mark.slow
def test_sigkill_among_inline_tools_loses_and_repeats_nothing(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    calls = root / "calls.log"
    rng = random.Random(SEED)
    moments = sorted(rng.sample(range(3, iw.N_TASKS - 10), N_KILLS))
    logs: list[Path] = []
    kills = 0
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for lines in moments:
            p = start(root, logs)
            procs.append(p)

            def gone(p: subprocess.Popen[bytes] = p) -> str | None:
                return None if p.poll() is None else f"worker exit {p.returncode}"

            def reached(n: int = lines) -> bool:
                return n_lines(calls) >= n

            waiting.wait_until(reached, f"{lines} calls", gone=gone)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=rng.uniform(0, 0.004))
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(timeout=DEADLINE)
                kills += 1
            else:
                assert p.returncode == 0, logs[-1].read_text()
                break
        assert kills >= N_KILLS // 2, f"only {kills} kills landed mid-run"
        last = start(root, logs)
        procs.append(last)
        assert last.wait(timeout=DEADLINE) == 0, logs[-1].read_text()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    ws = al.Workspace(root)
    s = ws.open("inline", tools=iw.TOOLS, approvals=())
    try:
        plan = {t["id"]: t for t in iw.plan()["tasks"]}
        recs = s.records
        assert set(recs) == set(plan)
        assert {t for t, r in recs.items() if r.status != "succeeded"} == set()
        for tid, rec in recs.items():
            assert rec.result is not None and rec.result["task"] == tid
        events = s.events()
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        done = Counter(e.task_id for e in events if e.kind == "task_succeeded")
        assert done == dict.fromkeys(plan, 1)
        started = Counter(e.task_id for e in events if e.kind == "task_started")
        wrong = {
            t: (started[t], r.attempts)
            for t, r in recs.items()
            if started[t] != r.attempts
        }
        assert not wrong, f"task_started events != attempts: {wrong}"
        # A write's every call was counted first (its intent precedes it; a
        # kill may land between the intent and the call, so fewer calls than
        # attempts is fine). Uncounted calls: only tools without side effects.
        logged = Counter(ln.split(" ")[0] for ln in iw.read_lines(calls))
        writes = {t for t, spec in plan.items() if spec["tool"] == "stamp"}
        for tid, rec in recs.items():
            assert logged[tid] >= 1, tid
            if tid in writes:
                assert logged[tid] <= rec.attempts, tid
        stamps = [ln.split(" ") for ln in iw.read_lines(root / "ledger.txt")]
        by_task = Counter(t for _, t in stamps)
        assert by_task == dict.fromkeys(writes, 1)
        assert {t: k for k, t in stamps} == {t: recs[t].idempotency_key for t in writes}
    finally:
        s.close()
        ws.close()


@pytest.mark.slow
def test_sigkill_after_a_batch_of_write_intents_leaves_each_in_doubt(
    tmp_path: Path,
) -> None:
    """Non-idempotent writes starting together share one intent commit, made
    before any of their calls. A kill once the first call has begun leaves
    every one of them in doubt (committed, maybe begun), none silently rerun,
    each keeping its key for a person's retry."""
    root = tmp_path / "ws"
    root.mkdir()
    paid = root / "paid.log"
    logs: list[Path] = []
    p = subprocess.Popen(
        [sys.executable, str(WORKER), str(root), "doubts"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def gone() -> str | None:
            return None if p.poll() is None else f"worker exit {p.returncode}"

        waiting.wait_until(lambda: n_lines(paid) >= 1, "a call", gone=gone)
    finally:
        p.kill()
        p.wait(timeout=DEADLINE)
    before = iw.read_lines(paid)
    (root / "release").touch()
    again = start(root, logs, "doubts")
    assert again.wait(timeout=DEADLINE) == 1, logs[-1].read_text()  # paused
    assert "in doubt" in logs[-1].read_text()
    assert iw.read_lines(paid) == before  # nothing rerun on its own
    ws = al.Workspace(root)
    s = ws.open("doubts", tools=[iw.pay], approvals=())
    try:
        recs = s.records
        assert {t: r.status for t, r in recs.items()} == dict.fromkeys(
            [f"pay{i}" for i in range(iw.N_PAY)], "in_doubt"
        )
        for line in before:
            tid, key = line.split(" ")
            assert recs[tid].idempotency_key == key
        for tid in recs:  # a person decides: run them again, same keys
            s.retry(tid)
        assert s.run().status == "succeeded"
        assert {t: r.idempotency_key for t, r in s.records.items()} == {
            t: r.idempotency_key for t, r in recs.items()
        }
        assert len(iw.read_lines(paid)) == len(before) + iw.N_PAY
    finally:
        s.close()
        ws.close()
