"""A full disk or an I/O error under a LangGraph thread or a typed state is not
called damage, and nothing committed is lost.

Issue 13 made sessions say ``StorageFullError`` on a full disk; a LangGraph
thread on ArgusSaver still said "record 'cache.db' is damaged (database or disk
is full) ... delete the thread to start it over" (advice that destroys data),
and a typed state called an I/O error with space left "damaged".
"""

from __future__ import annotations

import errno
import logging
import operator
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

import argus_lab as al
from argus_lab.langgraph import ArgusSaver
from argus_lab.langgraph._store import ThreadStore
from argus_lab.store.state_log import StateLog
from tests.test_storage_full import _mount_tmpfs


class Notes(TypedDict):
    log: Annotated[list[str], operator.add]


def _app(ws: al.Workspace, size: int) -> tuple[ArgusSaver, Any]:
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(Notes)
    g.add_node("n", lambda s: {"log": [str(len(s["log"])) * size]})
    g.add_edge(START, "n")
    g.add_edge("n", END)
    saver = ArgusSaver(ws)
    return saver, g.compile(checkpointer=saver)


CFG = {"configurable": {"thread_id": "t"}}


def _assert_full(e: al.StorageFullError) -> None:
    assert isinstance(e, OSError) and e.errno == errno.ENOSPC
    assert e.message.startswith("LangGraph thread 't' (session lg-t-")
    assert "the disk is full" in e.message and "Nothing committed was lost" in e.message
    assert "damaged" not in e.message and "delete the thread" not in e.message
    assert e.session_id is not None and e.session_id.startswith("lg-t-")


def test_a_thread_on_a_full_disk_says_so_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    saver, app = _app(ws, 10)
    for _ in range(3):
        app.invoke({"log": []}, CFG)

    def full(*_: object, **__: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(ThreadStore, "_put_head", full)
    with pytest.raises(al.StorageFullError) as info:
        app.invoke({"log": []}, CFG)
    _assert_full(info.value)
    # Still full: closing cannot write the release; it says so in the log
    # instead of raising, and closes every store all the same.
    with caplog.at_level(logging.WARNING, "argus_lab.langgraph"):
        saver.close()
    assert "could not release LangGraph thread 't'" in caplog.text
    assert saver._threads.open_ids() == []
    monkeypatch.undo()
    saver, app = _app(al.Workspace(tmp_path / "ws"), 10)
    assert len(app.get_state(CFG).values["log"]) == 3  # every commit kept
    saver.close()


@pytest.mark.slow
def test_a_thread_on_a_real_full_tmpfs(tmp_path: Path) -> None:
    mnt = tmp_path / "small-disk"
    if not _mount_tmpfs(mnt):
        pytest.skip("needs root and tmpfs (the injected test above runs anyway)")
    try:
        filler = mnt / "filler"
        filler.write_bytes(b"f" * 1_000_000)  # what the user frees afterwards
        ws = al.Workspace(mnt / "ws")
        saver, app = _app(ws, 200_000)
        done = 0
        with pytest.raises(al.StorageFullError) as info:
            for _ in range(40):  # 3 MiB hold fewer than 40 values of 200 KB
                app.invoke({"log": []}, CFG)
                done += 1
        _assert_full(info.value)
        assert done > 0
        filler.unlink()  # the user frees space, and goes on
        # The failed commit rolled back: the next one must not take that for
        # "another writer" (ConcurrentSessionError).
        app.invoke({"log": []}, CFG)
        saver.close()
        saver, app = _app(al.Workspace(mnt / "ws"), 200_000)
        # Every committed checkpoint is there (and the failed step's node
        # writes, where they were committed before its checkpoint failed).
        kept = len(app.get_state(CFG).values["log"])
        assert kept in (done + 1, done + 2)
        saver.close()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_a_state_i_o_error_with_space_left_is_not_called_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = al.Workspace(tmp_path / "ws").state("s")
    st.update(lambda d: d.update(n=1))

    real = StateLog._write

    def broken(self: StateLog, *a: Any, **k: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(StateLog, "_write", broken)
    with pytest.raises(al.CorruptCheckpointError) as info:
        st.update(lambda d: d.update(n=2))
    msg = info.value.message
    assert msg.startswith("state s: could not read or write 'cache.db' in ")
    assert "Nothing is known to be damaged" in msg and "is damaged" not in msg
    monkeypatch.setattr(StateLog, "_write", real)
    assert st.get() == {"n": 1}  # nothing half-written
    st.update(lambda d: d.update(n=2))
    assert st.get() == {"n": 2}
    st.close()
    assert os.path.exists(tmp_path / "ws" / "states" / "s" / "cache.db")
