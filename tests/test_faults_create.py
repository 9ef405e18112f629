"""A process killed while it creates or forks a session leaves nothing damaged.

The worker (``tests/faults_worker.py create``) is held inside the create's
one SQLite transaction and SIGKILLed there: nothing was committed. Its folder
was listed as a damaged session forever ("checkpoint record 'meta' is damaged
(unexpected NoneType value) ... fork from an earlier task"), which is false
and gives advice that cannot be followed. A folder whose commits were all lost
with its WAL was listed with the same wrong words.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import argus_lab as al
from tests import faults_worker as fw
from tests.conftest import BASIC_TOOLS
from tests.waiting import wait_until


def kill_when_inside(ws: Path, what: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    inside = ws.parent / "inside"
    proc = subprocess.Popen(
        [sys.executable, fw.__file__, what, str(ws)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            inside.exists,
            f"the {what} worker to reach the moment it is killed at",
            gone=lambda: None if proc.poll() is None else f"exit {proc.returncode}",
        )
    finally:
        proc.kill()
        proc.wait(timeout=60)


@pytest.mark.parametrize("what", ["create", "fork"])
def test_a_create_killed_before_its_commit_is_not_a_damaged_session(
    tmp_path: Path, what: str
) -> None:
    ws_path = tmp_path / "ws"
    kill_when_inside(ws_path, what)
    ws = al.Workspace(ws_path)
    folders = {d.name for d in (ws_path / "sessions").iterdir()}
    expected = {"base"} if what == "fork" else set()
    assert {i.name for i in ws.sessions()} == expected
    assert len(folders) == len(expected) + 1  # the half-made one is there
    assert ws.damaged_sessions() == {}
    # The name was never taken: it can be made now.
    name = "base-fork" if what == "fork" else "made"
    if what == "fork":
        ws.open("base", tools=BASIC_TOOLS).fork(name=name).close()
    else:
        ws.new_session(plan=fw.PLAN, tools=BASIC_TOOLS, name=name).close()
    assert name in {i.name for i in ws.sessions()}
    assert ws.damaged_sessions() == {}


def test_a_session_whose_whole_wal_was_lost_is_listed_as_lost(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    ws_path = tmp_path / "ws"
    p = subprocess.run(
        [sys.executable, fw.__file__, "session", str(ws_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    (d,) = (ws_path / "sessions").iterdir()
    (d / "cache.db-wal").unlink()
    ws = al.Workspace(ws_path)
    assert ws.sessions() == []
    why = ws.damaged_sessions()[d.name]
    assert "committed version(s) were lost" in why and "damaged (" not in why
    with pytest.raises(al.LostCommitsError):
        ws.open(d.name, tools=BASIC_TOOLS)


def test_a_create_committing_while_sessions_are_listed_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The listing found the new folder's cache.db with no session in it yet;
    # the create committed (and wrote its witness) before the listing read
    # the witness. That witness must not make it "lost with its WAL".
    import threading

    from argus_lab.store.checkpoints import SessionStore
    from argus_lab.store.witness import Witness

    ws = al.Workspace(tmp_path / "ws")
    go, made = threading.Event(), threading.Event()
    create, read = SessionStore.create, Witness.read

    def held_create(self: SessionStore, *args: object, **kwargs: object) -> object:
        assert go.wait(30), "the listing never reached the witness"
        return create(self, *args, **kwargs)  # type: ignore[arg-type]

    def read_after_the_commit(self: Witness) -> int | None:
        go.set()  # the create commits now, between the head check and here
        assert made.wait(30), "the create never finished"
        return read(self)

    monkeypatch.setattr(SessionStore, "create", held_create)

    def make() -> None:
        ws.new_session(plan=fw.PLAN, tools=BASIC_TOOLS, name="made").close()
        made.set()

    maker = threading.Thread(target=make)
    maker.start()
    try:
        sessions = ws.path / "sessions"
        wait_until(
            lambda: any((d / "cache.db").exists() for d in sessions.iterdir()),
            "the create to make its cache.db",
        )
        monkeypatch.setattr(Witness, "read", read_after_the_commit)
        damaged = ws.damaged_sessions()
    finally:
        go.set()
        maker.join(30)
    monkeypatch.setattr(Witness, "read", read)
    assert damaged == {}
    assert [i.name for i in ws.sessions()] == ["made"]


def test_a_create_undone_and_killed_midway_is_not_a_lost_session(
    tmp_path: Path,
) -> None:
    # Its name was taken meanwhile, so the create removes the folder it had
    # committed; killed once cache.db is gone, its witness must not remain,
    # or the folder is listed as a session whose commits were all lost.
    ws_path = tmp_path / "ws"
    kill_when_inside(ws_path, "unclaimed")
    ws = al.Workspace(ws_path)
    assert ws.sessions() == []
    assert ws.damaged_sessions() == {}
