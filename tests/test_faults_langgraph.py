"""A LangGraph thread whose WAL is damaged is refused: no node reruns in silence.

``tests/faults_worker.py graph`` runs a 36-node graph on ArgusSaver to its end
and dies by SIGKILL, its last checkpoints still frames of the SQLite WAL; each
node appends its name to ``ran.log`` (its side effect). Cutting or deleting
that WAL rolled the thread back to an older checkpoint with no error, and the
next invoke ran again the nodes whose checkpoints were lost. A thread's store
now has the sessions' witness (langgraph/_lost.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from tests import faults_worker as fw

NODES = 36


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace (ran.log beside it) of a thread run to its end, then killed."""
    base = tmp_path_factory.mktemp("lg-wal")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    p = subprocess.run(
        [sys.executable, fw.__file__, "graph", str(base / "ws")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    assert p.stdout.split() == ["done"]
    return base


@pytest.fixture
def damaged(finished: Path, tmp_path: Path) -> Callable[[str], Path]:
    def make(how: str) -> Path:
        shutil.copytree(finished / "ws", tmp_path / "ws")
        shutil.copy(finished / "ran.log", tmp_path / "ran.log")
        (d,) = (tmp_path / "ws" / "sessions").glob("lg-*")
        wal = d / "cache.db-wal"
        assert wal.stat().st_size > 100_000  # every checkpoint is a WAL frame
        if how == "truncate":
            os.truncate(wal, wal.stat().st_size // 2)
        else:
            wal.unlink()
        return tmp_path / "ws"

    return make


def ran(ws: Path) -> Counter[str]:
    return Counter(fw.ran_log(ws).read_text().split())


def test_an_intact_wal_resumes_nothing(finished: Path, tmp_path: Path) -> None:
    shutil.copytree(finished / "ws", tmp_path / "ws")
    shutil.copy(finished / "ran.log", tmp_path / "ran.log")
    saver, app, cfg = fw.graph_thread(tmp_path / "ws")
    snap: Any = app.get_state(cfg)  # type: ignore[attr-defined]
    assert not snap.next and len(snap.values["log"]) == NODES
    saver.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", ["truncate", "delete"])
def test_a_damaged_wal_raises_lost_commits_before_any_node_reruns(
    damaged: Callable[[str], Path], how: str
) -> None:
    ws = damaged(how)
    before = ran(ws)
    assert len(before) == NODES and set(before.values()) == {1}
    saver, app, cfg = fw.graph_thread(ws)
    with pytest.raises(al.LostCommitsError) as info:
        app.invoke(None, cfg)  # type: ignore[attr-defined]
    e = info.value
    assert 0 <= e.head_version < e.witness_version
    assert "LangGraph thread 't1'" in e.message
    assert "ArgusSaver(ws, accept_lost_commits=True)" in e.message
    assert e.session_id is not None and e.session_id.startswith("lg-t1-")
    with pytest.raises(al.LostCommitsError):
        app.get_state(cfg)  # type: ignore[attr-defined]
    assert ran(ws) == before  # refused before any node ran again
    saver.close()  # type: ignore[attr-defined]


def test_accepting_goes_on_from_the_latest_surviving_checkpoint(
    damaged: Callable[[str], Path],
) -> None:
    from argus_lab.langgraph import ArgusSaver
    from tests import langgraph_worker as lw

    ws = damaged("truncate")
    saver = ArgusSaver(al.Workspace(ws), accept_lost_commits=True)
    app = lw.build().compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "t1"}}
    kept = len(app.get_state(cfg).values["log"])
    assert 0 < kept < NODES
    saver.close()
    # Accepted once: a plain saver opens the thread again.
    plain = ArgusSaver(al.Workspace(ws))
    app = lw.build().compile(checkpointer=plain)
    assert len(app.get_state(cfg).values["log"]) == kept
    plain.close()


def test_a_thread_made_again_after_a_delete_killed_midway(tmp_path: Path) -> None:
    from tests.test_faults_create import kill_when_inside

    ws = tmp_path / "ws"
    kill_when_inside(ws, "delete")  # held inside rmtree, cache.db gone
    (d,) = (ws / "sessions").glob("lg-*")
    assert not (d / "cache.db").exists()
    saver, app, cfg = fw.graph_thread(ws)
    fw.ran_log(ws).unlink()
    app.invoke({"log": [], "total": 0}, cfg)  # type: ignore[attr-defined]
    assert len(ran(ws)) == NODES  # a new thread, run whole; no LostCommitsError
    saver.close()  # type: ignore[attr-defined]


def test_a_long_journal_starts_afresh_once_no_wal_is_left(
    finished: Path, tmp_path: Path
) -> None:
    shutil.copytree(finished / "ws", tmp_path / "ws")
    (d,) = (tmp_path / "ws" / "sessions").glob("lg-*")
    saver, app, cfg = fw.graph_thread(tmp_path / "ws")
    app.get_state(cfg)  # type: ignore[attr-defined]
    saver.close()  # type: ignore[attr-defined]  # the WAL goes into cache.db
    assert not (d / "cache.db-wal").exists()
    journal = d / "journal"
    with journal.open("a") as f:  # as after a long life
        f.write("".join(f"{v}\n" for v in range(1, 20000)))
    assert journal.stat().st_size > 1 << 16
    saver, app, cfg = fw.graph_thread(tmp_path / "ws")
    assert not app.get_state(cfg).next  # type: ignore[attr-defined]
    saver.close()  # type: ignore[attr-defined]
    assert journal.stat().st_size < 100
