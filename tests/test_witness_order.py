"""The witness never moves backwards, whatever order two writers' writes land in.

Each writer witnesses its commit after SQLite made it; a writer descheduled in
between (A commits v10, B commits v11 and writes 11, A writes 10) must not set
the witness back, or a later loss of v11 to a damaged WAL goes unreported.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from argus_lab.store.witness import Witness


def test_a_late_write_of_an_older_version_leaves_the_newer_one(tmp_path: Path) -> None:
    a, b = Witness(tmp_path, fsync=False), Witness(tmp_path, fsync=False)
    try:
        b.record(11, ["t11"])  # B committed v11 and witnessed it first
        a.record(10, ["t10"])  # A's write for v10 lands late
        assert Witness(tmp_path, fsync=False).read() == 11
        # Both commits are journaled all the same: a loss is named task by task.
        assert a.touched(9, 11) == {"t10", "t11"}
        a.record(12, ["t12"])
        assert Witness(tmp_path, fsync=False).read() == 12
        b.record(11, [])  # B's own line was overwritten by A's later one
        assert Witness(tmp_path, fsync=False).read() == 12
    finally:
        a.close()
        b.close()


def test_a_writer_that_wrote_before_does_not_trust_its_own_last_line(
    tmp_path: Path,
) -> None:
    a, b = Witness(tmp_path, fsync=False), Witness(tmp_path, fsync=False)
    try:
        a.record(9, [])
        b.record(11, [])
        a.record(10, [])
        assert b.read() == 11
    finally:
        a.close()
        b.close()


def test_a_damaged_witness_is_replaced_by_the_next_write(tmp_path: Path) -> None:
    (tmp_path / "witness").write_bytes(b"AW1 9999999999999999 00000000   \n")
    w = Witness(tmp_path, fsync=False)
    try:
        w.record(5, [])
        assert w._read_witness() == 5
    finally:
        w.close()


def test_only_an_accepted_loss_moves_it_back(tmp_path: Path) -> None:
    w = Witness(tmp_path, fsync=False)
    try:
        w.record(8, [])
        w.record(3, [], backwards=True)
        assert w.read() == 3
    finally:
        w.close()


def test_the_read_compare_write_holds_a_lock_other_writers_wait_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without it two writers could both read 9, then write 11 and 10."""
    w = Witness(tmp_path, fsync=False)
    other = os.open(tmp_path / "witness", os.O_RDWR | os.O_CREAT, 0o644)
    real = os.pread
    seen: list[bool] = []

    def pread(fd: int, n: int, offset: int) -> bytes:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            seen.append(True)  # held by the writer: another one would wait
        else:
            fcntl.flock(other, fcntl.LOCK_UN)
            seen.append(False)
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)
    try:
        w.record(1, [])
        w.record(2, [])
        assert seen == [True, True]
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released after
    finally:
        os.close(other)
        w.close()


def test_a_witness_line_keeps_its_documented_format() -> None:
    """``AW1 <version:016d> <crc32:08x>`` padded to 32 bytes: what a witness
    written by any earlier release holds, so each reads the other's."""
    import zlib

    from argus_lab.store.witness import _line, _parse

    for version in (0, 7, 123_456_789, 10**16 - 1):
        body = f"AW1 {version:016d}"
        want = f"{body} {zlib.crc32(body.encode()):08x}".ljust(31).encode() + b"\n"
        assert _line(version) == want
        assert _parse(want) == version


def test_the_origin_is_written_after_the_line_and_only_then(tmp_path: Path) -> None:
    w = Witness(tmp_path, fsync=False)
    assert not w.claim_origin("/a/long/folder")  # no line yet: no hole before it
    assert w.origin() is None
    w.record(3, ["t"])
    assert w.claim_origin("/a/long/folder")
    assert w.claim_origin("/b")  # shorter: what is left of the longer is ignored
    w.record(4, ["t"])
    assert (w.origin(), w.read()) == ("/b", 4)
    tail = (tmp_path / "witness").read_bytes()[32:]
    assert tail.startswith(b"origin ") and tail.split(b"\0")[0].endswith(b" /b")
    w.close()


def test_a_torn_origin_names_none_and_the_journal_answers(tmp_path: Path) -> None:
    """A kill inside the witness's origin write leaves no NUL after the new
    path: it is not read as a path (it would name a folder never claimed)."""
    w = Witness(tmp_path, fsync=False)
    w.record(1, ["t"])
    assert w.claim_origin("/srv/old-place/ws/sessions/S")
    w.close()
    with open(tmp_path / "witness", "r+b") as f:  # the new path's bytes, torn
        f.seek(32)
        f.write(b"origin 00000000 /srv/ws/sessions/S")
    assert Witness(tmp_path, fsync=False).origin() == "/srv/old-place/ws/sessions/S"
    (tmp_path / "journal").write_bytes(b"1 t\n")  # and no journal line either
    assert Witness(tmp_path, fsync=False).origin() is None


def test_an_unwritable_witness_is_claimed_once_not_at_every_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = Witness(tmp_path, fsync=False)
    w.record(1, ["t"])

    def full(*args: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    assert w.claim_origin("/x/y")  # given up on: the caller does not try again
    w.close()
