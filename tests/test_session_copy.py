"""A copy of a session's files made while a run held it does not run again
unasked: the run it was copied from may have gone on after the copy, and the
copy would repeat what it did (a backup restored, ``cp -r`` of a workspace).

Process A runs the slow plan (tests/crash_worker.py) and is blocked in its
`slow` task when the workspace is copied; A then finishes. Running the copy
is refused, naming the copy and the way on; ``accept_copy=True`` runs it
through the usual crash recovery. A copy of a crashed run (its original
killed where the copy stands) or of a session moved away is taken over as
after a crash (store/copies.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import argus_lab as al
from argus_lab.cli import main as cli_main
from argus_lab.store.witness import Witness
from tests import crash_worker as cw
from tests.test_concurrency import open_slow, procs, sigkill, start_a  # noqa: F401
from tests.waiting import DEADLINE, wait_until


def starts(copy: Path) -> int:
    """Calls of `slow` the copy's files saw begin. The copy may be taken
    between the file's creation and its line (start_a waits for the file)."""
    return len(cw.read_lines(copy / "started.slow"))


def runs_as_after_a_crash(copy: Path) -> None:
    """The copy is taken over unasked; `slow`, idempotent, reruns once."""
    (copy / "release").touch()
    before = starts(copy)
    _, s = open_slow(copy)
    try:
        assert s.run().status == "succeeded"
        assert starts(copy) == before + 1
    finally:
        s.close()


def refused_as_a_copy(copy: Path) -> None:
    """Running the copy is refused as one, and nothing runs again."""
    before = starts(copy)
    _, s = open_slow(copy)
    try:
        with pytest.raises(al.ConcurrentSessionError, match="is a copy of"):
            s.run()
    finally:
        s.close()
    assert starts(copy) == before


def copy_while_running(
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],  # noqa: F811
) -> Path:
    """Copies A's workspace while A is blocked in `slow`, then lets A finish."""
    root = tmp_path / "ws"
    a = start_a(root, procs)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    (root / "release").touch()
    assert a.wait(timeout=DEADLINE) == 0
    (copy / "release").touch()  # what `slow` waits for, when the copy runs it
    return copy


def test_a_copy_made_during_a_run_is_refused_then_runs_when_accepted(
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],  # noqa: F811
) -> None:
    copy = copy_while_running(tmp_path, procs)
    before = starts(copy)
    _, s = open_slow(copy)
    try:
        assert s.record("slow").status == "running"  # as the copy caught it
        with pytest.raises(al.ConcurrentSessionError, match="is a copy of") as e:
            s.run()
        assert "accept_copy=True" in str(e.value)
        assert s.record("slow").status == "running"
        assert starts(copy) == before  # nothing ran again
    finally:
        s.close()

    _, s = open_slow(copy, accept_copy=True)
    try:
        assert s.run().status == "succeeded"
        # `slow` is idempotent: crash recovery reran it once, same key.
        assert starts(copy) == before + 1
    finally:
        s.close()
    # Accepted once: the copy's run gave its lease back, nothing is refused.
    _, s = open_slow(copy)
    try:
        assert s.run().status == "succeeded"
    finally:
        s.close()


def test_argus_resume_says_so_and_accept_copy_goes_on(
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    copy = copy_while_running(tmp_path, procs)
    before = starts(copy)
    tools = str(Path(cw.__file__))
    argv = ["--workspace", str(copy), "resume", "slow", "--tools", tools, "--yes"]
    assert cli_main(argv) != 0
    err = capsys.readouterr().err
    assert "is a copy of" in err and "--accept-copy" in err
    assert starts(copy) == before
    assert cli_main([*argv, "--accept-copy"]) == 0
    assert starts(copy) == before + 1


@pytest.mark.parametrize("original", ["killed", "gone"])
def test_a_copy_whose_original_did_not_go_on_runs_as_after_a_crash(
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],  # noqa: F811
    original: str,
) -> None:
    """A copy of a crashed run's files (its original killed where the copy
    stands), or whose original is gone (a move), is taken over unasked."""
    root = tmp_path / "ws"
    a = start_a(root, procs)
    sigkill(a)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    if original == "gone":
        shutil.rmtree(root)
    runs_as_after_a_crash(copy)


def test_lease_renewals_after_the_copy_are_no_progress(
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],  # noqa: F811
) -> None:
    """A copy made while `slow` ran, whose original only renewed its lease
    (heartbeats while the same call went on) and then died, stopped where the
    copy did: it is taken over as after a crash."""
    root = tmp_path / "ws"
    a = start_a(root, procs, "--lease-ttl", "1.5")  # a heartbeat every 0.5 s
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    (d,) = (copy / "sessions").iterdir()
    copied = Witness(d, fsync=False).read()
    original = Witness(root / "sessions" / d.name, fsync=False)
    assert copied is not None
    wait_until(lambda: (original.read() or 0) > copied, "a heartbeat", gone=None)
    sigkill(a)
    runs_as_after_a_crash(copy)


def test_the_origin_is_kept_in_the_witness_not_a_file_of_its_own(
    tmp_path: Path,
) -> None:
    """The folder a lease was committed from is written into the witness, in
    place: no file is created for it (a kill could leave a half-made one)."""
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=al.Plan(goal="g", tasks=[al.Task(id="a", tool="echo", args={})]),
        tools=[al.tool(lambda: "x", name="echo")],
    )
    assert s.run().status == "succeeded"
    s.close()
    (folder,) = (tmp_path / "ws" / "sessions").iterdir()
    assert sorted(p.name for p in folder.iterdir() if "origin" in p.name) == []
    witness = Witness(folder, fsync=False)
    assert witness.origin() == os.path.realpath(folder)
    assert witness.read() is not None  # the witness line reads as before
    ws.close()


def test_a_copy_whose_origin_an_older_version_wrote_is_still_refused(
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],  # noqa: F811
) -> None:
    """Files an older argus-lab wrote name their origin in a file `origin`."""
    copy = copy_while_running(tmp_path, procs)
    (d,) = (copy / "sessions").iterdir()
    there = Witness(d, fsync=False).origin()
    assert there == os.path.realpath(tmp_path / "ws" / "sessions" / d.name)
    os.truncate(d / "witness", 32)  # the older witness: its line alone,
    journal = (d / "journal").read_bytes().split(b"\n")  # and no origin line
    (d / "journal").write_bytes(b"\n".join(x for x in journal if b"origin" not in x))
    (d / "origin").write_text(there, encoding="utf-8")
    refused_as_a_copy(copy)


@pytest.mark.parametrize("how", ["deleted", "emptied", "origin damaged"])
def test_a_copy_whose_witness_is_lost_or_damaged_is_still_refused(
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],  # noqa: F811
    how: str,
) -> None:
    """The journal names the origin too: a bad copy of the witness does not
    switch the copy check off (nor, then, the loss check: witness.py)."""
    copy = copy_while_running(tmp_path, procs)
    (d,) = (copy / "sessions").iterdir()
    witness = d / "witness"
    if how == "deleted":
        witness.unlink()
    elif how == "emptied":
        os.truncate(witness, 0)
    else:
        data = bytearray(witness.read_bytes())
        data[40] ^= 0x01  # inside the folder's path
        witness.write_bytes(bytes(data))
    refused_as_a_copy(copy)
