"""A typed state whose WAL is damaged is refused, never rolled back in silence.

``tests/faults_worker.py state`` commits transactions and dies by SIGKILL, so
its last versions are still frames of the SQLite WAL. Cutting, flipping or
deleting that WAL (a bad copy, a bad sector) made SQLite roll the state back
to an older version with no error: 16 of 30 committed transactions vanished,
and a WAL lost whole made ``ws.state()`` create the state again from the
model's defaults. A state's log now has the sessions' witness (state_lost.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import argus_lab as al
from tests import faults_worker as fw

N = 30


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace whose state "tally" has N transactions, all in the WAL."""
    base = tmp_path_factory.mktemp("state-wal")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    p = subprocess.run(
        [sys.executable, fw.__file__, "state", str(base / "ws"), str(N)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    assert p.stdout.split() == [str(N + 1)]  # version 1 is the creation
    return base / "ws"


@pytest.fixture
def damaged(killed: Path, tmp_path: Path) -> Callable[[str], Path]:
    def make(how: str) -> Path:
        ws = tmp_path / "ws"
        shutil.copytree(killed, ws)
        wal = ws / "states" / "tally" / "cache.db-wal"
        assert wal.stat().st_size > 50_000  # every version is a WAL frame
        if how == "truncate":
            os.truncate(wal, wal.stat().st_size // 2)
        elif how == "flip":
            data = bytearray(wal.read_bytes())
            data[len(data) // 2] ^= 0x01
            wal.write_bytes(bytes(data))
        elif how == "delete":
            wal.unlink()
        return ws

    return make


def test_an_intact_wal_keeps_every_version(killed: Path, tmp_path: Path) -> None:
    shutil.copytree(killed, tmp_path / "ws")
    st = al.Workspace(tmp_path / "ws").state("tally", model=fw.Tally)
    assert st.version == N + 1 and st.get().n == N
    st.close()


@pytest.mark.parametrize("how", ["truncate", "flip", "delete"])
def test_a_damaged_wal_raises_lost_commits_naming_the_versions(
    damaged: Callable[[str], Path], how: str
) -> None:
    ws = al.Workspace(damaged(how))
    with pytest.raises(al.LostCommitsError) as info:
        ws.state("tally", model=fw.Tally)
    e = info.value
    assert e.witness_version == N + 1 and e.head_version < N + 1
    assert f"but version {N + 1} had been committed" in e.message
    assert "ws.state('tally', model=..., accept_lost_commits=True)" in e.message
    if how == "delete":
        # Not created again from the model's defaults as if it never existed.
        assert e.head_version == 0 and "Nothing of the state survived" in e.message
    # Refusing wrote nothing: it refuses again.
    with pytest.raises(al.LostCommitsError):
        ws.state("tally", model=fw.Tally)


def test_accepting_goes_on_from_the_version_that_survived(
    damaged: Callable[[str], Path],
) -> None:
    ws = al.Workspace(damaged("truncate"))
    with pytest.raises(al.LostCommitsError) as info:
        ws.state("tally", model=fw.Tally)
    kept = info.value.head_version
    assert f"To go on from version {kept} (as version {N + 2})" in info.value.message
    st = ws.state("tally", model=fw.Tally, accept_lost_commits=True)
    # The survivor again, past every version that was ever committed: a
    # version (an HTTP ETag) seen before the loss never names another document.
    assert st.version == N + 2
    survived = st.get()
    assert survived.n == kept - 1 and survived.seen == list(range(kept - 1))
    assert st.at(kept) == survived
    h = st.history()
    assert list(h["version"])[-2:] == [kept, N + 2]
    assert list(h["kind"])[-1] == "recovered"
    with st.transaction() as s:
        s.n += 1
    assert st.version == N + 3
    st.close()
    # Accepted once: a plain open works again, with the new commit in it.
    again = ws.state("tally", model=fw.Tally)
    assert again.version == N + 3 and again.get().n == kept
    again.close()


def test_accepting_a_state_that_lost_everything_makes_it_anew(
    damaged: Callable[[str], Path],
) -> None:
    ws = al.Workspace(damaged("delete"))
    st = ws.state("tally", model=fw.Tally, accept_lost_commits=True)
    assert st.get() == fw.Tally()
    st.close()
    again = ws.state("tally", model=fw.Tally)  # no LostCommitsError now
    assert again.get() == fw.Tally()
    again.close()


def test_a_fork_killed_before_its_commit_is_not_a_state(tmp_path: Path) -> None:
    from tests.test_faults_create import kill_when_inside

    root = tmp_path / "ws"
    kill_when_inside(root, "state-fork")  # held inside the fork's transaction
    assert (root / "states" / "copy" / "cache.db").exists()
    ws = al.Workspace(root)
    # Nothing was committed: no state "copy" to list (or to open as a fresh
    # one from the model's defaults, believing it the fork).
    assert ws.states() == ["tally"]
    st = ws.state("tally", model=fw.Tally)
    copy = st.fork(at=3, name="copy")  # the fork can simply be made again
    assert copy.get().seen == [0, 1]
    assert ws.states() == ["copy", "tally"]
    copy.close()
    st.close()


def test_events_after_accepting_a_loss_are_numbered_past_every_lost_one(
    tmp_path: Path,
) -> None:
    # growth_window=1: every growing commit writes a state_size_warning event,
    # so the versions the damaged WAL loses had events a reader (the server's
    # GET /states/NAME/events?since=) may have seen.
    st = al.Workspace(tmp_path / "a").state("tally", model=fw.Tally, growth_window=1)
    for i in range(20):
        with st.transaction() as s:
            s.n += 1
            s.seen.append(i)
    seen = max(ev["seq"] for ev in st.events())
    assert seen >= 20
    # A bad copy taken while the state is open: its versions are WAL frames.
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    st.close()
    wal = tmp_path / "b" / "states" / "tally" / "cache.db-wal"
    os.truncate(wal, wal.stat().st_size // 2)
    ws = al.Workspace(tmp_path / "b")
    with pytest.raises(al.LostCommitsError):
        ws.state("tally", model=fw.Tally, growth_window=1)
    st = ws.state("tally", model=fw.Tally, growth_window=1, accept_lost_commits=True)
    with st.transaction() as s:
        s.n += 1
        s.seen.append(99)
    kept = [ev for ev in st.events() if ev["version"] >= st.version - 1]
    assert {ev["kind"] for ev in kept} >= {"lost_commits", "state_size_warning"}
    # A reader resuming after the last seq it saw finds every new event.
    assert kept == st.events(since=seen), [ev["seq"] for ev in kept]
    st.close()
