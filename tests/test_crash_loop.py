"""A task whose tool kills its own process is not rerun at every resume for
ever: after INTERRUPTED_RERUNS reruns with no task done in between (or
INTERRUPTED_RERUNS_TOGETHER, when other tasks ran beside it each time), a
person decides. Interrupts with progress in between (a run killed at random
moments) are not counted against it (test_inline_crash, test_chaos)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import argus_lab as al
from argus_lab.runtime.policy import INTERRUPTED_RERUNS, INTERRUPTED_RERUNS_TOGETHER

WORKER = textwrap.dedent(
    """
    import os, sys
    import argus_lab as al

    @al.tool(side_effect="none")
    def boom(x: int) -> int:
        with open(sys.argv[2], "a") as f:
            f.write("called\\n")
        os._exit(9)  # the tool takes its process down, every time

    @al.tool
    def first(x: int) -> int:
        return x + 1

    plan = {"goal": "g", "tasks": [
        {"id": "a", "tool": "first", "args": {"x": 1}},
        {"id": "b", "tool": "boom", "args": {"x": "${a.result}"}, "retries": 1},
    ]}
    tools, name = [boom, first], "loop"
    """
)
RUN = textwrap.dedent(
    """
    ws = al.Workspace(sys.argv[1])
    try:
        s = ws.open(name, tools=tools)
    except KeyError:
        s = ws.new_session(plan=plan, tools=tools, name=name)
    r = s.run()
    print(r.status, r.reason)
    """
)
"""Opens (or creates) the worker's session and runs it; prints how it ended."""


def _run(ws: Path, calls: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WORKER + RUN, str(ws), str(calls)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_a_tool_that_kills_its_process_is_rerun_a_bounded_number_of_times(
    tmp_path: Path,
) -> None:
    ws_dir, calls = tmp_path / "ws", tmp_path / "calls.txt"
    attempts = 1 + INTERRUPTED_RERUNS  # the first, then the reruns
    for i in range(attempts):
        p = _run(ws_dir, calls)
        assert p.returncode == 9, (i, p.stdout, p.stderr)
    p = _run(ws_dir, calls)  # before: os._exit(9) again, and on every resume
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("paused in doubt: task 'b' was interrupted during")
    assert calls.read_text().count("called") == attempts
    ws = al.Workspace(ws_dir)
    s = ws.open("loop", tools=[])
    rec = s.record("b")
    assert (rec.status, rec.attempts) == ("in_doubt", attempts)
    assert f"the {attempts}th time in a row" in (rec.reason or "")
    assert "s.retry('b')" in (rec.reason or "")
    assert s.record("a").status == "succeeded"
    s.close()
    ws.close()


TOGETHER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import argus_lab as al

    marks = Path(sys.argv[2])

    @al.tool(side_effect="none")
    def hog(x: int) -> int:
        # Takes the process down once both siblings are running (memory
        # running out, say): every resume, all three are found running.
        deadline = time.monotonic() + 30
        while len(list(marks.glob("started-*"))) < 2:
            assert time.monotonic() < deadline, "the siblings never started"
            time.sleep(0.001)
        os._exit(9)

    @al.tool(side_effect="none")
    def sibling(x: int) -> int:
        (marks / f"started-{x}").touch()
        time.sleep(30)  # cut short by hog
        return x

    plan = {"goal": "g", "tasks": [
        {"id": "h", "tool": "hog", "args": {"x": 0}},
        {"id": "s1", "tool": "sibling", "args": {"x": 1}},
        {"id": "s2", "tool": "sibling", "args": {"x": 2}},
    ]}
    for m in marks.glob("started-*"):
        m.unlink()
    tools, name = [hog, sibling], "together"
    """
)


@pytest.mark.slow
def test_tasks_that_die_together_are_rerun_a_bounded_number_of_times(
    tmp_path: Path,
) -> None:
    ws_dir, marks = tmp_path / "ws", tmp_path / "marks"
    marks.mkdir()
    runs = 1 + INTERRUPTED_RERUNS_TOGETHER  # none ran alone: the larger bound
    for i in range(runs):
        p = subprocess.run(
            [sys.executable, "-c", TOGETHER + RUN, str(ws_dir), str(marks)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 9, (i, p.stdout, p.stderr)
    p = subprocess.run(
        [sys.executable, "-c", TOGETHER + RUN, str(ws_dir), str(marks)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("paused in doubt: task "), p.stdout
    ws = al.Workspace(ws_dir)
    s = ws.open("together", tools=[])
    for t in ("h", "s1", "s2"):
        rec = s.record(t)
        assert rec.status == "in_doubt", (t, rec.status)
        assert f"the {runs}th time in a row" in (rec.reason or "")
        assert "with other tasks running beside it" in (rec.reason or "")
    s.close()
    ws.close()
