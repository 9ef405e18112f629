"""SIGKILL a fan-out runner in the middle of a batch of outcomes (invariants 1,
2; runtime/outcomes.py). The batch is one transaction: killed before it is
written, every task of it is back at its committed intent, decided as after
any crash (the side-effect-free and idempotent rerun, the non-idempotent wait
in doubt, none silently repeated); killed after, every task of it is done,
once, and what depends on them runs next. The runner is
tests/fanout_crash_worker.py; nothing here sleeps to synchronise."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import argus_lab as al
from tests import fanout_crash_worker as fw
from tests import waiting
from tests.waiting import DEADLINE

WORKER = Path(__file__).resolve().parent / "fanout_crash_worker.py"
OPTS = {"approvals": (), "concurrency": len(fw.FAN)}


def kill_while_holding(root: Path, where: str) -> list[str]:
    """Runs the worker until it holds a batch (before/after its commit), kills
    it, and returns the task ids of that batch."""
    holding = root / "holding.txt"
    p = subprocess.Popen(
        [sys.executable, str(WORKER), str(root), where],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:

        def gone() -> str | None:
            if p.poll() is None:
                return None
            out = p.stdout.read().decode() if p.stdout else ""
            return f"worker exit {p.returncode}: {out}"

        waiting.wait_until(lambda: bool(fw.read_lines(holding)), "a batch", gone=gone)
    finally:
        p.kill()
        p.wait(timeout=DEADLINE)
        if p.stdout:
            p.stdout.close()
    assert p.returncode == -9
    return fw.read_lines(holding)[0].split()


def open_fan(root: Path) -> tuple[al.Workspace, al.Session]:
    ws = al.Workspace(root)
    s = ws.open("fan", tools=fw.make_tools(0), **OPTS)
    s.update_tools(*fw.make_tools(fw.to_run(s.records)))
    return ws, s


def check_done_once(s: al.Session) -> None:
    """Every task succeeded, one task_succeeded each, one task_started per
    attempt, events numbered without a gap."""
    recs = s.records
    assert {t: r.status for t, r in recs.items()} == dict.fromkeys(
        [*fw.FAN, "join"], "succeeded"
    )
    events = s.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    done = Counter(e.task_id for e in events if e.kind == "task_succeeded")
    assert done == dict.fromkeys([*fw.FAN, "join"], 1)
    started = Counter(e.task_id for e in events if e.kind == "task_started")
    assert {t: started[t] for t in recs} == {t: r.attempts for t, r in recs.items()}


@pytest.mark.slow
def test_sigkill_before_a_batch_of_outcomes_commits_leaves_each_at_its_intent(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    batch = kill_while_holding(root, "before")
    assert sorted(batch) == sorted(fw.FAN)  # the whole fan, one batch
    paid = fw.read_lines(root / "paid.log")
    assert len(paid) == fw.N_EACH  # each pay called once, then the kill
    ws, s = open_fan(root)
    try:
        # Nothing of the batch landed: each task is at its committed intent.
        assert {t: s.records[t].status for t in fw.FAN} == dict.fromkeys(
            fw.FAN, "running"
        )
        assert not [e for e in s.events() if e.kind == "task_succeeded"]
        assert s.records["join"].status == "pending"
        # Reopened: the side-effect-free and idempotent rerun, the pays wait
        # for a person (in doubt), none of them called again on its own.
        result = s.run()
        assert result.status == "paused" and "in doubt" in (result.reason or "")
        pays = [t for t in fw.FAN if t.startswith("pay")]
        assert {t: s.records[t].status for t in pays} == dict.fromkeys(pays, "in_doubt")
        assert {
            t: s.records[t].status for t in fw.FAN if not t.startswith("pay")
        } == dict.fromkeys([t for t in fw.FAN if not t.startswith("pay")], "pending")
        assert fw.read_lines(root / "paid.log") == paid
        keys = {t: s.records[t].idempotency_key for t in fw.FAN}
        for t in pays:  # a person decides: pay again, same keys
            s.retry(t)
        assert s.run().status == "succeeded"
        check_done_once(s)
        assert {t: s.records[t].idempotency_key for t in fw.FAN} == keys
        # Each stamp's effect once, under the key its record holds.
        stamps = [ln.split(" ") for ln in fw.read_lines(root / "ledger.txt")]
        assert {t: k for k, t in stamps} == {
            t: keys[t] for t in fw.FAN if t.startswith("stamp")
        }
        assert len(stamps) == fw.N_EACH
    finally:
        s.close()
        ws.close()


@pytest.mark.slow
def test_sigkill_after_a_batch_of_outcomes_commits_keeps_every_result(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    batch = kill_while_holding(root, "after")
    assert sorted(batch) == sorted(fw.FAN)
    calls = fw.read_lines(root / "calls.log")
    paid = fw.read_lines(root / "paid.log")
    ws, s = open_fan(root)
    try:
        # The whole batch landed, and nothing after it began: the dependant
        # is readied only once the batch is durable.
        assert {t: s.records[t].status for t in fw.FAN} == dict.fromkeys(
            fw.FAN, "succeeded"
        )
        assert {t: s.records[t].result for t in fw.FAN} == {t: t for t in fw.FAN}
        assert s.records["join"].status == "pending"
        assert s.run().status == "succeeded"
        check_done_once(s)
        # No task of the fan ran again: only join called anything.
        assert fw.read_lines(root / "calls.log") == [*calls, "join 1"]
        assert fw.read_lines(root / "paid.log") == paid
    finally:
        s.close()
        ws.close()
