"""tasks_df and attempts_df tell an interrupted task from a running one.

A task stored as running while no run goes on (its run was closed, or its
process died) is an intent the next run decides on: nothing runs it. The frames
said "running" for it, where the widget draws it interrupted; they say
``interrupted`` now, by the same rule (``runtime.session.run_live``), for a
Session and for a Workspace read from its stores. The dead run is a real
process killed with SIGKILL mid-call (``tests/crash_worker.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

import argus_lab as al
from argus_lab.cli import main
from argus_lab.jupyter._detail import status_marks
from tests import crash_worker as cw
from tests.waiting import DEADLINE, wait_until

WORKER = Path(cw.__file__).resolve()


def _interrupted(df: pd.DataFrame) -> list[str]:
    assert str(df["interrupted"].dtype) == "boolean"
    assert not df["interrupted"].isna().any()
    return sorted(df.loc[df["interrupted"], "task_id"].astype(str))


def _outcomes(df: pd.DataFrame, task: str) -> list[str]:
    return [str(o) for o in df.loc[df["task_id"] == task, "outcome"]]


@pytest.mark.slow
def test_a_task_whose_process_was_killed_mid_call_is_interrupted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ws"
    with (tmp_path / "worker.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(root), "--plan", "indoubt"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:

        def gone() -> str | None:
            if proc.poll() is None:
                return None
            log = (tmp_path / "worker.log").read_text()
            return f"worker exited {proc.returncode}: {log}"

        wait_until(
            lambda: bool(cw.read_lines(root / "started.charge")),
            "charge to start",
            gone=gone,
        )
        # A live process runs it: its in-flight task is running, not interrupted.
        ws = al.Workspace(root)
        live = al.analysis.tasks_df(ws)
        assert live.set_index("task_id").loc["charge", "status"] == "running"
        assert _interrupted(live) == []
        assert _outcomes(al.analysis.attempts_df(ws), "charge") == ["running"]
        assert main(["-w", str(root), "--json", "show", "doubt"]) == 0
        shown = json.loads(capsys.readouterr().out)["tasks"]
        assert not any(r["interrupted"] for r in shown)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=DEADLINE)  # reaped: a zombie would look alive
    assert proc.returncode == -signal.SIGKILL

    # Read from the stores (no Session), then through a Session and the widget.
    df = al.analysis.tasks_df(ws)
    assert df.set_index("task_id").loc["charge", "status"] == "running"  # stored
    assert _interrupted(df) == ["charge"]
    assert _outcomes(al.analysis.attempts_df(ws), "charge") == ["interrupted"]
    # argus show: the row says interrupted (it said running); JSON keeps the
    # stored status beside an interrupted flag, as argus serve does.
    assert main(["-w", str(root), "--json", "show", "doubt"]) == 0
    rows = {r["task"]: r for r in json.loads(capsys.readouterr().out)["tasks"]}
    assert rows["charge"]["status"] == "running" and rows["charge"]["interrupted"]
    assert [t for t, r in rows.items() if r["interrupted"]] == ["charge"]
    assert main(["-w", str(root), "show", "doubt"]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if " charge " in ln]
    assert [c.strip() for c in line.strip("│ ").split("│")][:3] == [
        "charge",
        "charge",
        "interrupted",
    ]
    # argus serve: each task record says it too, its status as stored.
    from starlette.testclient import TestClient

    from argus_lab.server import create_app

    auth = {"Authorization": "Bearer tok"}
    with TestClient(create_app(ws, "tok"), base_url="http://127.0.0.1") as c:
        items = c.get("/sessions/doubt/tasks", headers=auth).json()["items"]
    served = {d["task_id"]: (d["status"], d["interrupted"]) for d in items}
    assert served["charge"] == ("running", True)
    assert [t for t, (_, i) in served.items() if i] == ["charge"]
    s = ws.open("doubt", tools=cw.INDOUBT_TOOLS, **cw.NO_APPROVALS)
    try:
        assert s.interrupted
        assert _interrupted(s.tasks_df()) == ["charge"]
        assert status_marks(s)["interrupted"] == ["charge"]  # one definition
        # The next run decides: a write that is not idempotent is in doubt.
        assert s.run().status == "paused"
        after = s.tasks_df().set_index("task_id")
        assert after.loc["charge", "status"] == "in_doubt"
        assert not after["interrupted"].any()
        assert _outcomes(al.analysis.attempts_df(s), "charge") == ["interrupted"]
        assert len(cw.read_lines(root / "charges.log")) == 1  # not called again
    finally:
        s.close()
        ws.close()


def test_a_task_left_running_by_a_closed_run_is_interrupted(tmp_path: Path) -> None:
    started, gate = threading.Event(), threading.Event()

    @al.tool
    def gated() -> int:
        started.set()
        gate.wait(DEADLINE)
        return 1

    @al.tool
    def quick() -> int:
        return 2

    plan = {
        "goal": "close mid-run",
        "tasks": [
            {"id": "slow", "tool": "gated"},
            {"id": "after", "tool": "quick", "deps": ["slow"]},
            {"id": "done", "tool": "quick"},
        ],
    }
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(plan=plan, tools=[gated, quick], name="cut", shutdown_grace=0)
    try:
        assert _interrupted(s.tasks_df()) == []  # created: nothing in flight
        s.start()
        assert started.wait(DEADLINE)
        # This object runs it: running is running, in both frames.
        assert _interrupted(s.tasks_df()) == []
        assert _interrupted(al.analysis.tasks_df(ws)) == []  # its lease, live
        assert _outcomes(al.analysis.attempts_df(s), "slow") == ["running"]
        s.close()  # the attempt is left as its intent (the call still blocks)
        assert s.record("slow").status == "running"
        assert _interrupted(s.tasks_df()) == ["slow"]
        assert _interrupted(al.analysis.tasks_df(ws)) == ["slow"]
        assert _interrupted(al.analysis.tasks_df([s])) == ["slow"]
        assert _outcomes(al.analysis.attempts_df(s), "slow") == ["interrupted"]
        assert status_marks(s)["interrupted"] == ["slow"]
    finally:
        gate.set()
    again = ws.open("cut", tools=[gated, quick])
    try:
        assert _interrupted(again.tasks_df()) == ["slow"]
        assert again.run().status == "succeeded"  # gated has no side effect: rerun
        df = again.tasks_df()
        assert _interrupted(df) == [] and set(df["status"]) == {"succeeded"}
        assert _outcomes(al.analysis.attempts_df(again), "slow") == [
            "interrupted",
            "succeeded",
        ]
    finally:
        again.close()
        ws.close()
