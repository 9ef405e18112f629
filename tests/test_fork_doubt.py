"""A fork never runs again on its own what its parent may already have done.

An outside check forked a session whose payment was in doubt (its process
killed inside the call) and the fork paid again, under a new idempotency key;
forked while another process was inside a payment, the fork paid it too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import argus_lab as al
from tests import attack_worker as aw
from tests.crash_worker import read_lines
from tests.test_faults_resume import ROOT, held
from tests.waiting import wait_until


def calls(ws: Path, task: str) -> list[str]:
    """The idempotency keys ``task``'s payments were made with, in order."""
    return [
        line.split()[1]
        for line in read_lines(aw.pay_log(ws))
        if line.split()[0] == task
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("at", "reuse"), [("p2", "cached"), (None, "cached"), ("p0", "none")]
)
def test_a_fork_holds_in_doubt_what_its_parent_had_in_doubt(
    tmp_path: Path, at: str | None, reuse: str
) -> None:
    ws_dir = tmp_path / "ws"
    held("pay", ws_dir)
    assert len(calls(ws_dir, "p1")) == 1  # paid, then the process died
    ws = al.Workspace(ws_dir)
    s = ws.open("pay", tools=[aw.pay], approvals=())
    assert s.run().status == "paused"
    assert s.record("p1").status == "in_doubt"
    key = s.record("p1").idempotency_key
    assert key is not None

    f = s.fork(at=at, reuse=reuse)  # type: ignore[arg-type]
    res = f.run()
    assert res.status == "paused", res
    rec = f.record("p1")
    assert rec.status == "in_doubt", rec
    assert "was in doubt in session 'pay'" in (rec.reason or "")
    assert "s.retry('p1')" in (rec.reason or "") and key in (rec.reason or "")
    assert calls(ws_dir, "p1") == [key]  # not paid again
    forked = next(e for e in f.events() if e.kind == "forked")
    assert forked.carried == ["p1"] and "p1" not in forked.kept  # type: ignore[attr-defined]

    # A person who checked retries it: the call gets the parent's key, so a
    # remote that deduplicates knows it.
    f.retry("p1")
    assert f.run().status == "succeeded"
    assert calls(ws_dir, "p1") == [key, key]
    assert f.record("p1").idempotency_key == key
    assert f.record("p1").key_of == s.id


@pytest.mark.slow
def test_a_fork_made_while_another_process_is_inside_a_payment_holds_it(
    tmp_path: Path,
) -> None:
    ws_dir = tmp_path / "ws"
    p = subprocess.Popen(
        [sys.executable, aw.__file__, "pay", str(ws_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        wait_until(
            (ws_dir.parent / "inside").exists,
            "the pay worker to be inside p1's call",
            gone=lambda: None if p.poll() is None else f"exit {p.returncode}",
        )
        ws = al.Workspace(ws_dir)
        s = ws.open("pay", tools=[aw.pay], approvals=())  # loaded before: stale
        f = s.fork(at="p2")
        assert f.run().status == "paused"
        rec = f.record("p1")
        assert rec.status == "in_doubt", rec
        assert "was running (it may be running still)" in (rec.reason or "")
        assert f.record("p0").status == "succeeded"  # kept: its result is known
        assert len(calls(ws_dir, "p1")) == 1
    finally:
        p.kill()
        p.communicate(timeout=60)


@pytest.mark.slow
def test_a_fork_reruns_an_idempotent_write_under_its_parents_key(
    tmp_path: Path,
) -> None:
    ws_dir = tmp_path / "ws"
    held("pay", ws_dir, "idempotent")
    (key,) = calls(ws_dir, "p1")
    ws = al.Workspace(ws_dir)
    s = ws.open("pay", tools=[aw.stamp], approvals=())
    f = s.fork(at="p2")
    assert f.record("p1").status == "pending"  # safe to repeat, as on a resume
    assert f.run().status == "succeeded"
    assert calls(ws_dir, "p1") == [key, key]  # the same key both times
    assert f.record("p1").key_of == s.id


def test_a_fork_made_mid_call_refuses_a_retry_while_the_parent_still_calls(
    tmp_path: Path,
) -> None:
    """The fork holds the parent's running payment in doubt; its retry was
    accepted while the parent's call was still in flight, and the fork paid
    beside it (an outside check). Refused until the parent's run ends."""
    import threading

    go = threading.Event()
    started = threading.Event()
    paid: list[str] = []

    @al.tool(side_effect="write")
    def charge(n: int, *, ctx: al.ToolContext) -> int:
        """Pays, slowly."""
        paid.append(ctx.session_id)
        started.set()
        go.wait(30)
        return n

    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan={
            "goal": "pay",
            "tasks": [{"id": "o1", "tool": "charge", "args": {"n": 7}}],
        },
        tools=[charge],
        name="pay",
        approvals=[],
    )
    run = s.start()
    try:
        assert started.wait(30)
        wait_until(lambda: s.record("o1").status == "running", "the intent's commit")
        f = s.fork(name="pay-f")
        assert f.record("o1").status == "in_doubt"
        with pytest.raises(al.ArgusError, match="is running it now"):
            f.retry("o1")
        assert f.record("o1").status == "in_doubt" and paid == [s.id]
    finally:
        go.set()
    assert run.result(30).status == "succeeded"
    f.retry("o1")  # the parent's run ended: the person decides, with facts
    f.close()
    s.close()
