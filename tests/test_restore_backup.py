"""An older backup of a whole session folder, restored in place, is seen.

The folder's own witness and journal come back with the backup and agree with
its older checkpoint; the workspace's mark (``<workspace>/marks/<id>``,
``store/witness.py``) stays behind and names the latest commit. Opening the
restored session raises LostCommitsError; accepting it holds every payment the
backup shows as not made in doubt, so no payment is made twice.

Real files throughout: a session run in this process or in a subprocess that
dies by SIGKILL, its folder copied with ``shutil.copytree`` (``cp -a``) and
copied back over the original.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import argus_lab as al
from argus_lab.store.witness import Witness
from tests import restore_worker as rw


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.txt"  # outside the workspace
    monkeypatch.setenv("ARGUS_TEST_LEDGER", str(path))
    return path


def paid() -> Counter[str]:
    return Counter(line.split()[0] for line in rw.ledger_lines())


def _copy(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True)  # cp -a


def _restore(backup: Path, folder: Path) -> None:
    """The backup put back in place of the folder (same path)."""
    shutil.rmtree(folder)
    _copy(backup, folder)


def _run_a_then_back_up(ws: al.Workspace, backup: Path | None) -> Path:
    """Session "pay" run through task a, closed, its folder copied to ``backup``
    (if given); returns the folder."""
    with ws.new_session(
        plan=rw.plan(), tools=rw.TOOLS, name="pay", approvals=rw.APPROVE_ALL
    ) as s:
        s.step()
        assert s.record("a").status == "succeeded"
        folder = ws.path_of(s)
    if backup is not None:
        _copy(folder, backup)
    return folder


def _mark(ws: al.Workspace, folder: Path) -> int | None:
    return Witness(
        folder, fsync=False, mark=ws.path / "marks" / folder.name
    ).read_mark()


def _check_the_restore_is_seen_and_nothing_repeats(
    ws: al.Workspace, backup_version: int
) -> None:
    before = paid()
    assert before == {"a": 1, "b": 1, "c": 1, "d": 1}
    with pytest.raises(al.LostCommitsError) as info:
        ws.open("pay", tools=rw.TOOLS)
    e = info.value
    assert e.head_version == backup_version < e.witness_version
    assert e.tasks is None  # the backup's journal cannot say what ran since
    msg = e.message
    assert "is older than its last commit" in msg
    assert "restored over it?" in msg
    assert f"versions {backup_version + 1}-{e.witness_version} are missing" in msg
    assert "accept_lost_commits=True" in msg
    assert "every task it shows unfinished may have run: b, c, d." in msg

    # Nothing ran on the failed open: opening again says the same.
    with pytest.raises(al.LostCommitsError):
        ws.open("pay", tools=rw.TOOLS)
    assert paid() == before

    s = ws.open("pay", tools=rw.TOOLS, accept_lost_commits=True)
    with s:
        assert s.record("a").status == "succeeded"  # the backup's results stay
        res = s.run()
        # b and c show as not run in the backup but were paid: in doubt,
        # never paid again. d (idempotent) was its successor: c holds it.
        assert res.status == "paused" and "in doubt" in (res.reason or "")
        assert s.record("b").status == "in_doubt"
        assert s.record("c").status == "in_doubt"
        assert paid() == before
        # Each is held under the key its payment was made with: checkable.
        keys = dict(line.split() for line in rw.ledger_lines())
        assert s.record("b").idempotency_key == keys["b"]
        assert s.record("c").idempotency_key == keys["c"]
        # The person checks the ledger: b and c were paid.
        s.skip("b", "the ledger shows the payment")
        s.skip("c", "the ledger shows the payment")
        res = s.run()
        assert res.status == "succeeded"
        # d reran under the key it ran with before the restore: no effect.
        assert s.record("d").status == "succeeded"
        lost = [
            ev for ev in s.events() if getattr(ev, "recovered", None) == "lost_commits"
        ]
        assert len(lost) == 1 and lost[0].witness_version == e.witness_version
    assert paid() == before
    # Accepted once: versions went on past the mark, a plain open works.
    ws.open("pay", tools=rw.TOOLS).close()


def test_a_backup_restored_in_place_is_seen_and_repeats_no_payment(
    tmp_path: Path, ledger: Path
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    folder = _run_a_then_back_up(ws, tmp_path / "backup")
    with ws.open("pay", tools=rw.TOOLS) as s:
        assert s.run().status == "succeeded"
    assert paid() == {"a": 1, "b": 1, "c": 1, "d": 1}
    with ws.store("pay") as store:
        head = store.read_head()
        assert head is not None
        assert _mark(ws, folder) == head.version
    _restore(tmp_path / "backup", folder)
    with ws.store("pay") as store:
        restored = store.read_head()
        assert restored is not None and restored.version < head.version
    _check_the_restore_is_seen_and_nothing_repeats(ws, restored.version)


def test_a_backup_restored_after_a_crash_is_seen(tmp_path: Path, ledger: Path) -> None:
    # The run after the backup is killed (SIGKILL: no close, the WAL still
    # holds its commits): the mark was written by its commits alone.
    ws = al.Workspace(tmp_path / "ws")
    folder = _run_a_then_back_up(ws, tmp_path / "backup")
    backup_version = Witness(tmp_path / "backup", fsync=False).read()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    p = subprocess.run(
        [sys.executable, rw.__file__, str(ws.path), str(ledger)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    assert p.stdout.strip() == "succeeded"
    assert (folder / "cache.db-wal").stat().st_size > 0
    _restore(tmp_path / "backup", folder)
    assert backup_version is not None
    _check_the_restore_is_seen_and_nothing_repeats(ws, backup_version)


def test_a_backup_taken_while_a_run_held_the_session_is_seen(
    tmp_path: Path, ledger: Path
) -> None:
    # Backed up mid-run (the lease held, c's intent committed and its call
    # under way, the WAL live), the run then finishes and its process dies.
    ws = al.Workspace(tmp_path / "ws")
    folder = _run_a_then_back_up(ws, None)
    hold = tmp_path / "hold"
    hold.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parent.parent),
        "ARGUS_TEST_HOLD": str(hold),
    }
    p = subprocess.Popen(
        [sys.executable, rw.__file__, str(ws.path), str(ledger)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not (hold / "started.c").exists():  # c's call has begun
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline, "task c never started"
            time.sleep(0.005)
        _copy(folder, tmp_path / "backup")
        (hold / "release").touch()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -9, err
    assert out.strip() == "succeeded"
    _restore(tmp_path / "backup", folder)
    before = paid()
    assert before == {"a": 1, "b": 1, "c": 1, "d": 1}
    with pytest.raises(al.LostCommitsError) as info:
        ws.open("pay", tools=rw.TOOLS)
    assert "is older than its last commit" in info.value.message
    with ws.open("pay", tools=rw.TOOLS, accept_lost_commits=True) as s:
        assert s.record("b").status == "succeeded"  # done before the backup
        res = s.run()
        assert res.status == "paused"
        assert s.record("c").status == "in_doubt"  # paid after the backup
        s.skip("c", "the ledger shows the payment")
        assert s.run().status == "succeeded"
    assert paid() == before


def test_argus_resume_says_so_and_accepting_holds_the_payments(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from argus_lab.cli import main

    ws = al.Workspace(tmp_path / "ws")
    folder = _run_a_then_back_up(ws, tmp_path / "backup")
    with ws.open("pay", tools=rw.TOOLS) as s:
        assert s.run().status == "succeeded"
    _restore(tmp_path / "backup", folder)
    tools = str(Path(rw.__file__))
    argv = ["-w", str(ws.path), "resume", "pay", "--tools", tools]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "is older than its last commit" in err
    assert "--accept-lost-commits" in err
    main([*argv, "--accept-lost-commits"])
    capsys.readouterr()
    assert paid() == {"a": 1, "b": 1, "c": 1, "d": 1}
    with ws.open("pay", tools=rw.TOOLS) as s:
        assert s.record("b").status == "in_doubt"
        assert s.record("c").status == "in_doubt"


# -- no false alarm ------------------------------------------------------------


def test_a_session_copied_to_a_new_workspace_runs(tmp_path: Path, ledger: Path) -> None:
    ws = al.Workspace(tmp_path / "ws")
    folder = _run_a_then_back_up(ws, tmp_path / "backup")
    with ws.open("pay", tools=rw.TOOLS) as s:
        s.run()
    # The backup (older than the original's mark) into another workspace:
    # that workspace has no mark of it.
    other = al.Workspace(tmp_path / "other")
    _copy(tmp_path / "backup", other.path / "sessions" / folder.name)
    with other.open(folder.name, tools=rw.TOOLS) as s:  # by id: no index yet
        assert s.record("a").status == "succeeded"
        assert s.record("b").status == "pending"


def test_a_workspace_moved_or_copied_whole_runs(tmp_path: Path, ledger: Path) -> None:
    ws = al.Workspace(tmp_path / "ws")
    _run_a_then_back_up(ws, tmp_path / "backup")
    ws.close()
    _copy(ws.path, tmp_path / "copied")
    (tmp_path / "ws").rename(tmp_path / "moved")
    for where in ("moved", "copied"):
        with al.Workspace(tmp_path / where).open("pay", tools=rw.TOOLS) as s:
            assert s.run().status == "succeeded"
    # Two workspaces, two runs (the stamp's key is the same in both).
    assert paid() == {"a": 1, "b": 2, "c": 2, "d": 1}


def test_a_whole_workspace_restored_in_place_is_not_seen(
    tmp_path: Path, ledger: Path
) -> None:
    # The limit README states: the marks come back with the workspace.
    ws = al.Workspace(tmp_path / "ws")
    _run_a_then_back_up(ws, tmp_path / "backup")
    ws.close()
    _copy(ws.path, tmp_path / "ws-backup")
    with al.Workspace(ws.path).open("pay", tools=rw.TOOLS) as s:
        s.run()
    shutil.rmtree(ws.path)
    _copy(tmp_path / "ws-backup", ws.path)
    with al.Workspace(ws.path).open("pay", tools=rw.TOOLS) as s:
        assert s.record("b").status == "pending"


def test_fresh_forked_and_reopened_sessions_keep_marks_of_their_own(
    tmp_path: Path, ledger: Path
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=rw.plan(), tools=rw.TOOLS, name="pay", approvals=rw.APPROVE_ALL
    )
    folder = ws.path_of(s)
    assert _mark(ws, folder) == 1  # the create's commit
    s.step()
    f = s.fork(at="b", name="pay-fork")
    s.close()
    with f:
        assert f.run().status == "succeeded"
        fork_folder = ws.path_of(f)
    with ws.open("pay", tools=rw.TOOLS) as s:
        assert s.run().status == "succeeded"
    for name, d in (("pay", folder), ("pay-fork", fork_folder)):
        with ws.store(name) as store:
            head = store.read_head()
            assert head is not None and _mark(ws, d) == head.version
        ws.open(name, tools=rw.TOOLS).close()


def test_deleting_a_session_deletes_its_mark(tmp_path: Path, ledger: Path) -> None:
    ws = al.Workspace(tmp_path / "ws")
    folder = _run_a_then_back_up(ws, tmp_path / "backup")
    with ws.open("pay", tools=rw.TOOLS) as s:
        s.run()
    mark = ws.path / "marks" / folder.name
    assert mark.exists()
    ws.delete("pay")
    assert not mark.exists()
    # A backup of a deleted session put back is a session again, not a loss.
    _copy(tmp_path / "backup", folder)
    with ws.open(folder.name, tools=rw.TOOLS) as s:
        assert s.record("b").status == "pending"


def test_argus_gc_deletes_marks_whose_session_is_gone(
    tmp_path: Path, ledger: Path
) -> None:
    from argus_lab.cli._retention import GRACE_S, plan_gc

    ws = al.Workspace(tmp_path / "ws")
    folder = _run_a_then_back_up(ws, tmp_path / "backup")
    mark = ws.path / "marks" / folder.name
    plan = plan_gc(ws, now=mark.stat().st_mtime + 2 * GRACE_S)
    assert mark not in [p for p, _ in plan.leftovers]
    shutil.rmtree(folder)  # by hand, not by ws.delete
    assert mark not in [p for p, _ in plan_gc(ws).leftovers]  # a moment ago
    plan = plan_gc(ws, now=mark.stat().st_mtime + 2 * GRACE_S)
    assert mark in [p for p, _ in plan.leftovers]


def test_the_mark_never_moves_backwards(tmp_path: Path) -> None:
    # Two writers of one folder: each writes after its own commit, under the
    # witness's lock; a late write of an older version changes nothing.
    d = tmp_path / "ws" / "sessions" / "x"
    d.mkdir(parents=True)
    mark = tmp_path / "ws" / "marks" / "x"
    one = Witness(d, fsync=False, mark=mark)
    two = Witness(d, fsync=False, mark=mark)
    one.record(10, [])
    two.record(11, [])
    one.record(10, [])
    assert one.read_mark() == two.read_mark() == 11
    two.record(12, [])
    one.record(13, [])
    assert two.read_mark() == 13
    # The witness rolled back under it (the folder restored, one writer still
    # holding the old files): the mark keeps the greater version.
    (d / "witness").unlink()
    three = Witness(d, fsync=False, mark=mark)
    three.record(5, [])
    assert three.read() == 5 and three.read_mark() == 13
    for w in (one, two, three):
        w.close()


def test_a_damaged_or_missing_mark_raises_nothing(tmp_path: Path, ledger: Path) -> None:
    ws = al.Workspace(tmp_path / "ws")
    folder = _run_a_then_back_up(ws, tmp_path / "backup")
    mark = ws.path / "marks" / folder.name
    data = bytearray(mark.read_bytes())
    data[6] ^= 0x01
    mark.write_bytes(bytes(data))
    with ws.open("pay", tools=rw.TOOLS) as s:
        s.step()
    assert _mark(ws, folder) is not None  # rewritten by the next commit
    mark.unlink()
    with ws.open("pay", tools=rw.TOOLS) as s:
        assert s.run().status == "succeeded"
    assert mark.exists()


def test_a_mark_that_cannot_be_written_loses_no_commit(
    tmp_path: Path, ledger: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    (ws.path / "marks").write_text("not a folder")  # as a read-only disk would
    with ws.new_session(
        plan=rw.plan(), tools=rw.TOOLS, name="pay", approvals=rw.APPROVE_ALL
    ) as s:
        assert s.run().status == "succeeded"
    assert "could not update" in caplog.text
    with ws.open("pay", tools=rw.TOOLS) as s:
        assert s.counts()["succeeded"] == 4


def test_a_mark_left_behind_by_a_kill_raises_nothing(
    tmp_path: Path, ledger: Path
) -> None:
    # Killed between a commit and its mark write: the mark names an older
    # version than the head, which is no loss; the next commit catches up.
    from argus_lab.store.witness import _line

    ws = al.Workspace(tmp_path / "ws")
    folder = _run_a_then_back_up(ws, tmp_path / "backup")
    mark = ws.path / "marks" / folder.name
    mark.write_bytes(_line(2))
    with ws.open("pay", tools=rw.TOOLS) as s:
        assert s.run().status == "succeeded"
    with ws.store("pay") as store:
        head = store.read_head()
        assert head is not None and _mark(ws, folder) == head.version > 2
