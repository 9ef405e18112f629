"""Crash safety, the acceptance test: SIGKILL a real runner process again and again.

Invariants 1 and 2 of DESIGN.md: a step is atomic, and an attempt's intent is
durable before its side effect, so after any crash an idempotent task reruns with
the same idempotency key and a non-idempotent one is never silently rerun.
The runner is ``tests/crash_worker.py`` in a subprocess; nothing here sleeps to
synchronise: it polls files and processes with deadlines.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

import argus_lab as al
from tests import crash_worker as cw
from tests import waiting
from tests.waiting import DEADLINE

HERE = Path(__file__).resolve().parent
WORKER = HERE / "crash_worker.py"


class Worker:
    """One run of crash_worker.py, with its output captured in files."""

    def __init__(self, workspace: Path, *args: str) -> None:
        self.log_dir = workspace.parent / "logs"
        self.log_dir.mkdir(exist_ok=True)
        n = len(list(self.log_dir.glob("*.out")))
        self.out = self.log_dir / f"{n:03d}.out"
        self.err = self.log_dir / f"{n:03d}.err"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER), str(workspace), *args],
                stdout=out,
                stderr=err,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.pid = self.proc.pid

    def output(self) -> str:
        return (
            f"worker {self.pid} exit {self.proc.returncode}\n"
            f"stdout:\n{self.out.read_text()}\nstderr:\n{self.err.read_text()}"
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> bool:
        """SIGKILLs the worker and reaps it; True if it was still running."""
        if self.proc.poll() is not None:
            return False
        self.proc.send_signal(signal.SIGKILL)
        # Reap it: a zombie still answers kill(pid, 0), which would make its
        # lease look held by a live process.
        self.proc.wait(timeout=DEADLINE)
        return self.proc.returncode == -signal.SIGKILL

    def finish(self) -> int:
        try:
            return self.proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"worker did not finish in {DEADLINE}s\n{self.output()}")


def wait_until(
    cond: Callable[[], bool], what: str, worker: Worker | None = None
) -> None:
    """Polls cond until it holds; fails after DEADLINE or if the worker exits."""

    def gone() -> str | None:
        if worker is None or worker.alive():
            return None
        return f"worker exited\n{worker.output()}"

    waiting.wait_until(cond, what, gone=gone, every=0.0005)


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Started workers; any left running are killed at the end of the test."""
    started: list[Worker] = []
    yield started
    for w in started:
        w.kill()


def n_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def ledger_has(path: Path, lines: int) -> bool:
    return n_lines(path) >= lines


def opened_by(path: Path, pid: int) -> bool:
    return str(pid) in cw.read_lines(path)


# -- the acceptance test --------------------------------------------------------

N_KILLS = 26
MIN_KILLS = 20
SEED = 4711


@pytest.mark.slow
def test_repeated_sigkill_leaves_every_task_done_exactly_once(
    tmp_path: Path, workers: list[Worker]
) -> None:
    root = tmp_path / "ws"
    ledger = root / "ledger.txt"
    opened = root / "opened.log"
    rng = random.Random(SEED)
    # Kill moments: mostly "once the ledger has reached n lines, plus 0-15 ms"
    # (lands mid-tool or mid-commit), some "0-30 ms after the worker opened the
    # session" (lands in taking the lease, crash recovery or the first steps).
    moments: list[int | None] = sorted(rng.sample(range(2, 176), N_KILLS - 5))
    for _ in range(5):
        moments.insert(rng.randrange(len(moments) + 1), None)

    kills = 0
    for lines in moments:
        w = Worker(root)
        workers.append(w)
        if lines is not None:
            wait_until(partial(ledger_has, ledger, lines), f"{lines} lines", w)
            extra = rng.uniform(0, 0.015)
        else:
            wait_until(partial(opened_by, opened, w.pid), "the session open", w)
            extra = rng.uniform(0, 0.03)
        with contextlib.suppress(subprocess.TimeoutExpired):
            w.proc.wait(timeout=extra)
        if w.kill():
            kills += 1
        else:
            # It may only end on its own by finishing, which is fine (but then
            # the later moments are moot).
            assert w.proc.returncode == 0, w.output()
            break

    assert kills >= MIN_KILLS, f"only {kills} kills landed mid-run"

    last = Worker(root)
    workers.append(last)
    assert last.finish() == 0, last.output()
    assert "succeeded: 200 succeeded" in last.out.read_text()

    ws = al.Workspace(root)
    s = ws.open("crash", tools=cw.LEDGER_TOOLS, **cw.NO_APPROVALS)
    try:
        plan = cw.ledger_plan()
        all_ids = {t["id"] for t in plan["tasks"]}
        assert len(all_ids) == cw.N_TASKS
        assert s.status == "succeeded"

        # Every task's final record is succeeded, with the right result.
        recs = s.records
        assert set(recs) == all_ids
        bad = {t: r.status for t, r in recs.items() if r.status != "succeeded"}
        assert not bad, f"tasks not succeeded: {bad}"
        for t in plan["tasks"]:
            res = recs[t["id"]].result
            assert res["task"] == t["id"]
            assert res["key"] == recs[t["id"]].idempotency_key
            if t.get("deps"):
                assert res["upstream"] == t["deps"][0]

        # The trajectory: seqs gapless, one task_succeeded per task, and each
        # record's attempt count matches its task_started events (record and
        # events were committed together, never one without the other).
        events = s.events()
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        succeeded = Counter(e.task_id for e in events if e.kind == "task_succeeded")
        assert succeeded == dict.fromkeys(all_ids, 1)
        started = Counter(e.task_id for e in events if e.kind == "task_started")
        for tid, rec in recs.items():
            assert started[tid] == rec.attempts, tid
        last_start = {e.task_id: e.seq for e in events if e.kind == "task_started"}
        for e in events:
            if e.kind == "task_succeeded":
                assert e.seq > last_start[e.task_id]

        # The kills really interrupted attempts, which were rerun after recovery
        # with the same key (else the ledger check below would be vacuous).
        rerun = {
            e.task_id: e.key
            for e in events
            if e.kind == "resumed" and getattr(e, "recovered", None) == "rerun"
        }
        assert rerun, "no kill interrupted an attempt"
        for tid, key in rerun.items():
            assert recs[tid].idempotency_key == key
        assert sum(1 for r in recs.values() if r.attempts > 1) >= 1

        # The side effects: exactly one ledger line per key, one key per task,
        # and it is the key the record holds.
        lines = cw.read_lines(ledger)
        pairs = [ln.split(" ") for ln in lines]
        assert all(len(p) == 2 for p in pairs), lines
        keys = Counter(k for k, _ in pairs)
        dupes = {k: n for k, n in keys.items() if n > 1}
        assert not dupes, f"side effects repeated: {dupes}"
        by_task = Counter(t for _, t in pairs)
        assert by_task == dict.fromkeys(all_ids, 1)
        assert {t: k for k, t in pairs} == {
            t: r.idempotency_key for t, r in recs.items()
        }
        assert len(lines) == cw.N_TASKS
    finally:
        s.close()
        ws.close()


# -- a non-idempotent side effect interrupted mid-attempt -----------------------


def _kill_during_charge(root: Path, workers: list[Worker]) -> str:
    """Runs the in-doubt plan until `charge` has started, SIGKILLs it; returns the
    key its first attempt used."""
    w = Worker(root, "--plan", "indoubt")
    workers.append(w)
    wait_until(lambda: n_lines(root / "started.charge") >= 1, "charge to start", w)
    assert w.kill(), w.output()
    (charge_line,) = cw.read_lines(root / "charges.log")
    key, attempt = charge_line.split(" ")
    assert attempt == "1"
    return key


@pytest.mark.parametrize("decision", ["retry", "skip"])
@pytest.mark.slow
def test_interrupted_non_idempotent_write_is_in_doubt_until_decided(
    tmp_path: Path,
    workers: list[Worker],
    decision: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "ws"
    key = _kill_during_charge(root, workers)
    # In this process `charge` must never wait: if it were rerun while still in
    # doubt it would block, so fail fast instead of after the worker's limit.
    monkeypatch.setattr(cw, "BLOCK_LIMIT", 5.0)
    ws = al.Workspace(root)
    s = ws.open("doubt", tools=cw.INDOUBT_TOOLS, **cw.NO_APPROVALS)
    try:
        assert s.record("charge").status == "running"  # as the dead process left it

        res = s.run()
        assert res.status == "paused"
        assert "charge" in (res.reason or "")
        assert s.record("charge").status == "in_doubt"
        assert "charge" in (s.record("charge").reason or "")
        assert s.record("after").status == "pending"
        # Not silently rerun: still the one call of the dead process.
        assert len(cw.read_lines(root / "charges.log")) == 1
        kinds = [(e.kind, e.task_id) for e in s.events()]
        assert ("in_doubt", "charge") in kinds

        # Running again asks again; it does not slip through.
        again = s.run()
        assert again.status == "paused"
        assert "charge" in (again.reason or "")
        assert len(cw.read_lines(root / "charges.log")) == 1

        # The tool no longer blocks from here on.
        (root / "release").touch()
        if decision == "retry":
            s.retry("charge")
            assert s.record("charge").status == "pending"
            final = s.run()
            assert final.status == "succeeded", final
            calls = [ln.split(" ") for ln in cw.read_lines(root / "charges.log")]
            # Retrying an in-doubt attempt keeps its idempotency key, so a remote
            # that deduplicates can still recognise the repeat.
            assert calls == [[key, "1"], [key, "2"]]
            assert s.record("charge").status == "succeeded"
            assert s.record("charge").result["charged"] == 42
            assert s.record("charge").idempotency_key == key
        else:
            s.skip("charge", reason="the charge went through")
            assert s.record("charge").status == "skipped"
            final = s.run()
            assert final.status == "succeeded", final
            assert len(cw.read_lines(root / "charges.log")) == 1
            assert s.record("charge").status == "skipped"
            assert s.record("charge").result is None
        assert s.record("after").status == "succeeded"
        assert s.record("side").status == "succeeded"
        assert "after" in cw.read_lines(root / "notified.log")
    finally:
        s.close()
        ws.close()

    # And the decision is durable.
    ws = al.Workspace(root)
    s = ws.open("doubt", tools=cw.INDOUBT_TOOLS, **cw.NO_APPROVALS)
    try:
        want = "succeeded" if decision == "retry" else "skipped"
        assert s.record("charge").status == want
        assert s.status == "succeeded"
    finally:
        s.close()
        ws.close()
