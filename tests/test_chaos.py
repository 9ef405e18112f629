"""SIGKILL a mixed session at seeded moments: async and sync writes, writes that
need approval, LLM tasks making a write through the model, transient failures
with retries, and memories; then check no side effect was repeated.

The runner is ``tests/chaos_worker.py`` (it decides approvals and doubts as a
person would, from ``effects.log``); kill moments are "once effects.log has n
lines, plus 0-20 ms" or "0-40 ms after the session opened", after a first kill
inside a ``pay`` call that wrote its effect (so one write is surely in doubt).
"""

from __future__ import annotations

import contextlib
import random
import subprocess
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

import argus_lab as al
from tests import chaos_worker as cw
from tests.crash_worker import read_lines
from tests.test_crash import Worker, n_lines, opened_by, wait_until

WORKER = Path(cw.__file__)
SEED = 777
KILLS = 14


class ChaosWorker(Worker):
    """Worker on chaos_worker.py instead of crash_worker.py."""

    def __init__(self, workspace: Path, *args: str) -> None:
        import tests.test_crash as tc

        real = tc.WORKER
        tc.WORKER = WORKER
        try:
            super().__init__(workspace, *args)
        finally:
            tc.WORKER = real


def _paid(log: Path, w: Worker) -> bool:
    """effects.log has a ``pay`` line, or the worker ended."""
    return any(ln.startswith("pay ") for ln in read_lines(log)) or not w.alive()


def _reached(log: Path, want: int, w: Worker) -> bool:
    """effects.log has ``want`` lines, or the worker ended (it may finish)."""
    return n_lines(log) >= want or not w.alive()


@pytest.mark.slow
def test_repeated_sigkill_of_a_mixed_session_repeats_no_side_effect(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    log = cw.effects(root)
    rng = random.Random(SEED)
    total = 30  # one line per task's effect (chaos_worker's plan)
    workers: list[ChaosWorker] = []
    kills = 0
    try:
        # First a kill that surely holds a write in doubt: `pay` stops after
        # its effect (the seeded kills below land in such a window by chance).
        held = ChaosWorker(root, "--hold-pay")
        workers.append(held)
        wait_until(partial(_paid, log, held), "a pay effect")
        assert held.kill(), held.output()
        kills += 1
        for k in range(KILLS):
            w = ChaosWorker(root)
            workers.append(w)
            if k % 4 == 3:
                wait_until(partial(opened_by, root / "opened.log", w.pid), "open", w)
                extra = rng.uniform(0, 0.04)
            else:
                want = min(total - 1, n_lines(log) + rng.randint(1, 4))
                wait_until(partial(_reached, log, want, w), f"{want} effects")
                extra = rng.uniform(0, 0.02)
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.proc.wait(timeout=extra)
            if w.kill():
                kills += 1
            else:
                assert w.proc.returncode == 0, w.output()
                break
        last = ChaosWorker(root)
        workers.append(last)
        assert last.finish() == 0, last.output()
    finally:
        for w in workers:
            w.kill()

    lines = [ln.split(" ") for ln in read_lines(log)]
    by_key = Counter(key for _, key, _ in lines)
    assert not {k: n for k, n in by_key.items() if n > 1}, lines
    by_task = Counter(task for _, _, task in lines)
    plan = cw.chaos_plan()
    effectful = {t["id"] for t in plan["tasks"] if t.get("tool") != "flaky"}
    assert by_task == dict.fromkeys(effectful, 1), "each effect exactly once"

    ws = al.Workspace(root)
    with ws.open("chaos", tools=cw.TOOLS, models=cw.model(), **cw.OPTIONS) as s:
        recs = s.records
        done = {t for t, r in recs.items() if r.status == "succeeded"}
        skipped = {t for t, r in recs.items() if r.status == "skipped"}
        assert done | skipped == {t["id"] for t in plan["tasks"]}
        events = s.events()
        kinds = Counter(e.kind for e in events)
        # the kills landed mid-run: attempts were rerun and writes held in doubt
        assert kills >= 10 and kinds["resumed"] and kinds["in_doubt"], (kills, kinds)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert Counter(e.task_id for e in events if e.kind == "task_succeeded") == (
            dict.fromkeys(done, 1)
        )
        sid = s.id
    # every result a step committed is remembered (runtime/remember.py)
    kept = ws.memory._ids(f"session_id = '{sid}' AND kind = 'result'")
    assert len(kept) == len(done)
