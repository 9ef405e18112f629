"""Crashes at moments earlier crash tests did not try, and what a resume owes.

Each runner is ``tests/attack_worker.py`` in a real subprocess that dies by
SIGKILL; the tests wait on its exit and files, never on sleeps.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import argus_lab as al
from tests import attack_worker as aw

ROOT = Path(__file__).resolve().parent.parent


def killed(what: str, ws: Path, *args: str) -> str:
    """Runs the worker to its SIGKILL; its stdout."""
    p = subprocess.run(
        [sys.executable, aw.__file__, what, str(ws), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    return p.stdout


@pytest.mark.slow
def test_memories_a_crash_kept_from_being_written_are_written_on_reopen(
    tmp_path: Path,
) -> None:
    # Memories are written by a background thread after the step commits: a
    # SIGKILL in between lost them for good, so the next session's LLM task
    # did not see what an uninterrupted run would have shown it.
    ws_dir = tmp_path / "ws"
    assert killed("remember", ws_dir).split() == ["succeeded"]
    ws = al.Workspace(ws_dir)
    with ws.open("mem", tools=aw.MEM_TOOLS, remember=True) as s:
        sid = s.id
        assert s.status == "succeeded"
    hits = ws.memory.search("Fabrica venue", k=5, mode="fts", kind="result")
    assert sorted(str(h.task_id) for h in hits if h.session_id == sid) == [
        "lisbon",
        "porto",
    ]
    # ... each once, leading back to the event that finished its task.
    with ws.open("mem", tools=aw.MEM_TOOLS, remember=True) as s:
        done = {e.seq: e.task_id for e in s.events() if e.kind == "task_succeeded"}
    assert {done[h.seq or 0] for h in hits} == {"lisbon", "porto"}
    assert len(ws.memory.search("Fabrica venue", k=10, mode="fts")) == 2
