"""A copy of a LangGraph thread's files made while a graph ran it does not run
the graph again unasked: the run it was copied from may have gone on after
the copy, and resuming the copy would run those nodes again (``cp -r`` of a
workspace, a backup restored).

Process A (tests/langgraph_worker.py) runs the graph and is paused in its 4th
node (``a1``) when the workspace is copied; A then finishes the graph.
Resuming the copy is refused before any node runs (reading it is not),
naming the copy and the way on; ``ArgusSaver(ws, accept_copy=True)``
resumes it from where the copy stands. A copy of a killed run (its original
stopped where the copy did) or of a thread moved away is resumed as after a
crash (store/copies.py). A second process is refused as its graph starts.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.langgraph import ArgusSaver
from tests import langgraph_worker as lw
from tests.test_langgraph_crash import Worker
from tests.waiting import DEADLINE, wait_until

THREAD = "t"
CFG: Any = {"configurable": {"thread_id": THREAD}}


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Started workers; killed at the end if still running."""
    started: list[Worker] = []
    yield started
    for w in started:
        if w.proc.poll() is None:
            w.kill()


def start_a(ws: Path, workers: list[Worker]) -> Worker:
    """Starts A on THREAD and waits until it is paused in its 4th node (a1)."""
    al.Workspace(ws)
    a = Worker(ws, THREAD, "--pause-at", "4")
    workers.append(a)
    wait_until(lambda: "paused" in a.lines(), "A to pause in a1", gone=a.gone)
    return a


def copied_then_finished(ws: Path, a: Worker) -> Path:
    """Copies A's workspace (beside it, as "copy") while A waits, then lets A
    finish; returns the copy."""
    copy = ws.parent / "copy"
    shutil.copytree(ws, copy)
    (ws / "release").touch()
    assert a.proc.wait(timeout=DEADLINE) == 0, a.report()
    return copy


def resume(ws: Path, **options: Any) -> tuple[list[str], dict[str, Any]]:
    """Resumes THREAD in ``ws`` in this process: the nodes it ran, the state."""
    ran: list[str] = []
    saver = ArgusSaver(al.Workspace(ws), **options)
    try:
        app = lw.build(ran.append).compile(checkpointer=saver)
        assert app.get_state(CFG).next == ("a1",)  # where the copy stands
        app.invoke(None, CFG)
        snap = app.get_state(CFG)
        assert not snap.next
        return ran, dict(snap.values)
    finally:
        saver.close()


def original_state(ws: Path) -> dict[str, Any]:
    saver = ArgusSaver(al.Workspace(ws))
    try:
        snap = lw.build().compile(checkpointer=saver).get_state(CFG)
        assert not snap.next
        return dict(snap.values)
    finally:
        saver.close()


def test_a_thread_copied_during_a_run_is_refused_then_resumes_when_accepted(
    tmp_path: Path, workers: list[Worker]
) -> None:
    ws = tmp_path / "ws"
    copy = copied_then_finished(ws, start_a(ws, workers))

    ran: list[str] = []
    saver = ArgusSaver(al.Workspace(copy))
    try:
        app = lw.build(ran.append).compile(checkpointer=saver)
        with pytest.raises(al.ConcurrentSessionError, match="is a copy of") as e:
            app.invoke(None, CFG)
        msg = str(e.value)
        assert f"LangGraph thread {THREAD!r}" in msg and str(ws) in msg
        assert "ArgusSaver(ws, accept_copy=True)" in msg
        assert ran == []  # no node ran again
        assert app.get_state(CFG).next == ("a1",)  # reading the copy is fine
        with pytest.raises(al.ConcurrentSessionError, match="is a copy of"):
            app.invoke(None, CFG)  # refused as the graph starts, every time
        assert ran == []
    finally:
        saver.close()

    ran, values = resume(copy, accept_copy=True)
    assert ran[0] == "a1"  # the node A was in when copied runs again, as asked
    assert values == original_state(ws)
    # Accepted once: the copy's run gave its lease back, nothing is refused.
    saver = ArgusSaver(al.Workspace(copy))
    try:
        assert not lw.build().compile(checkpointer=saver).get_state(CFG).next
    finally:
        saver.close()


@pytest.mark.parametrize("original", ["killed", "gone"])
def test_a_thread_copy_whose_original_did_not_go_on_resumes_as_after_a_crash(
    tmp_path: Path, workers: list[Worker], original: str
) -> None:
    ws = tmp_path / "ws"
    a = start_a(ws, workers)
    a.kill()
    copy = tmp_path / "copy"
    shutil.copytree(ws, copy)
    if original == "gone":
        shutil.rmtree(ws)
    ran, values = resume(copy)
    assert ran[0] == "a1"
    names = sorted(x.split(":")[0] for x in values["log"])
    assert names == sorted(f"{p}{k}" for k in range(lw.ROUNDS) for p in "abc")


def test_a_second_process_is_refused_before_its_graph_runs_a_node(
    tmp_path: Path, workers: list[Worker]
) -> None:
    """While A runs the thread, B's invoke is refused as it starts: LangGraph
    writes checkpoints in the background by default, and a refusal met at
    B's first commit came after B had run every node left (and their side
    effects). Reading the thread (get_state) still works beside A's run."""
    ws = tmp_path / "ws"
    a = start_a(ws, workers)
    ran: list[str] = []
    saver = ArgusSaver(al.Workspace(ws))
    try:
        app = lw.build(ran.append).compile(checkpointer=saver)
        assert app.get_state(CFG).next == ("a1",)  # an observer reads it
        with pytest.raises(al.ConcurrentSessionError, match="being written by"):
            app.invoke(None, CFG)
        with pytest.raises(al.ConcurrentSessionError, match="being written by"):
            asyncio.run(app.ainvoke(None, CFG))
        assert ran == []
    finally:
        saver.close()
    (ws / "release").touch()
    assert a.proc.wait(timeout=DEADLINE) == 0, a.report()


def test_a_release_after_the_copy_is_no_progress(
    tmp_path: Path, workers: list[Worker]
) -> None:
    """A copy made after the graph's last checkpoint, whose original then only
    gave the lease back (saver.close()), stands where the original does: a
    graph started on it is not refused, and has nothing left to run."""
    ws = tmp_path / "ws"
    al.Workspace(ws)
    a = Worker(ws, THREAD, "--pause-before-close")
    workers.append(a)
    wait_until(lambda: "finished" in a.lines(), "A to finish", gone=a.gone)
    copy = copied_then_finished(ws, a)
    ran: list[str] = []
    saver = ArgusSaver(al.Workspace(copy))
    try:
        app = lw.build(ran.append).compile(checkpointer=saver)
        app.invoke(None, CFG)
        assert ran == [] and not app.get_state(CFG).next
    finally:
        saver.close()
