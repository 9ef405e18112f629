"""A full disk says so (StorageFullError), loses nothing, and the session resumes.

The error is injected at each write site (records and WAL, artifacts, memory,
the index, the witness); as root, a real 3 MiB tmpfs is filled too.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.store import artifacts as artifacts_mod
from argus_lab.store._rows import RowWriter

CALLS: list[int] = []


@al.tool
def small(n: int) -> int:
    CALLS.append(n)
    return n


@al.tool
def big(n: int) -> str:
    CALLS.append(n)
    return "x" * 200_000 + str(n)


@al.tool
def blob(n: int) -> bytes:
    CALLS.append(n)
    return b"x" * 200_000 + str(n).encode()  # bytes become an artifact at once


def _plan(tool: str, n: int = 6) -> dict[str, Any]:
    return {
        "goal": "fill the disk",
        "tasks": [{"id": f"t{i}", "tool": tool, "args": {"n": i}} for i in range(n)],
    }


def _assert_full(e: al.StorageFullError, s: al.Session, task: str | None) -> None:
    assert isinstance(e, OSError) and e.errno == errno.ENOSPC
    assert e.session_id == s.id
    assert e.task_id == task
    msg = e.message
    assert msg.startswith(f"session {s.name!r} ({s.id}): the disk is full: ")
    assert "Nothing committed was lost" in msg
    assert f"ws.open({s.id!r}) or `argus resume {s.id}`" in msg
    assert "damaged" not in msg and "delete this session" not in msg
    assert e.path and e.path in msg


def _resume(ws: al.Workspace, name: str, n: int = 6) -> None:
    with ws.open(name, tools=[small, big, blob]) as s:
        res = s.run()
        assert res.status == "succeeded", res
        assert s.result("t0") in (0, "x" * 200_000 + "0", b"x" * 200_000 + b"0")
        assert s.counts()["succeeded"] == n


@pytest.fixture(autouse=True)
def _calls() -> Iterator[None]:
    CALLS.clear()
    yield


def test_records_full(ws: al.Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    s = ws.new_session(plan=_plan("small"), tools=[small], name="records")
    real = RowWriter.update

    def set_(self: RowWriter, con: Any, key: str, value: str) -> None:
        if key == "t:t3" and '"succeeded"' in str(value):
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, con, key, value)

    monkeypatch.setattr(RowWriter, "update", set_)
    with pytest.raises(al.StorageFullError) as info:
        s.run()
    _assert_full(info.value, s, "t3")
    assert "committing to " in info.value.message and "cache.db for task 't3'" in (
        info.value.message
    )
    s.close()
    monkeypatch.setattr(RowWriter, "update", real)
    _resume(ws, "records")


def test_wal_io_error_on_a_full_disk(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite reports a WAL it cannot grow as an I/O error; with no space left
    # that is a full disk, not damage.
    from argus_lab.store import space

    s = ws.new_session(plan=_plan("small"), tools=[small], name="wal")
    real = RowWriter.update

    def set_(self: RowWriter, con: Any, key: str, value: str) -> None:
        # Its success commit (intents are grouped: that commit names several tasks).
        if key == "t:t2" and '"succeeded"' in value:
            raise sqlite3.OperationalError("disk I/O error")
        return real(self, con, key, value)

    monkeypatch.setattr(RowWriter, "update", set_)
    monkeypatch.setattr(space, "_free", lambda path: 0)
    with pytest.raises(al.StorageFullError) as info:
        s.run()
    _assert_full(info.value, s, "t2")
    s.close()
    monkeypatch.setattr(RowWriter, "update", real)
    monkeypatch.undo()
    _resume(ws, "wal")


def test_an_io_error_with_space_left_is_not_called_damage(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = ws.new_session(plan=_plan("small"), tools=[small], name="io")
    real = RowWriter.update

    def set_(self: RowWriter, con: Any, key: str, value: str) -> None:
        if key == "t:t2":
            raise sqlite3.OperationalError("disk I/O error")
        return real(self, con, key, value)

    monkeypatch.setattr(RowWriter, "update", set_)
    with pytest.raises(al.CorruptCheckpointError) as info:
        s.run()
    assert "could not read or write 'cache.db'" in info.value.message
    assert "Nothing is known to be damaged" in info.value.message
    assert "is damaged" not in info.value.message
    s.close()


@pytest.mark.parametrize("tool", ["big", "blob"])  # stored at settle / in the call
def test_artifact_full(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    s = ws.new_session(plan=_plan(tool), tools=[big, blob], name="artifacts")
    real = os.replace
    seen: list[str] = []

    def replace(src: str, dst: str) -> None:
        seen.append(dst)
        if len(seen) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(artifacts_mod.os, "replace", replace)
    with pytest.raises(al.StorageFullError) as info:
        s.run()
    _assert_full(info.value, s, "t2")
    assert "writing a 200,00" in info.value.message
    assert not list((ws.path / "artifacts").rglob(".tmp-*"))  # no half file left
    s.close()
    monkeypatch.setattr(artifacts_mod.os, "replace", real)
    _resume(ws, "artifacts")
    assert CALLS.count(2) == 2  # the interrupted read-only attempt ran again


@pytest.mark.slow  # LanceDB's first import and table
def test_memory_full(ws: al.Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    mem = ws.memory
    mem.add("kept", kind="note")
    import lancedb.merge

    def full(*a: Any, **k: Any) -> Any:
        raise OSError("LanceError(IO): No space left on device (os error 28)")

    monkeypatch.setattr(lancedb.merge.LanceMergeInsertBuilder, "execute", full)
    with pytest.raises(al.StorageFullError) as info:
        mem.add("lost", kind="note", session_id="s1", task_id="t1")
    e = info.value
    assert e.session_id == "s1" and e.task_id == "t1" and e.errno == errno.ENOSPC
    assert f"writing 1 memory record(s) to {mem.path} for task 't1' failed" in (
        e.message
    )
    monkeypatch.undo()
    assert [h.text for h in mem.search("kept")] == ["kept"]


def test_index_full_is_not_rebuilt(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws.new_session(plan=_plan("small"), tools=[small], name="ix").close()
    ws.close()
    from argus_lab.store import index

    def full(*a: Any, **k: Any) -> Any:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(index, "open_cache", full)
    again = al.Workspace(ws.path)
    with pytest.raises(al.StorageFullError, match="the disk is full: writing "):
        again.open("ix")
    assert not list(ws.path.glob("index.damaged-*"))


def test_witness_full_keeps_the_commit(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from argus_lab.store import witness

    def full(*a: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    s = ws.new_session(plan=_plan("small"), tools=[small], name="w")
    monkeypatch.setattr(witness.os, "pwrite", full)
    assert s.run().status == "succeeded"
    s.close()
    monkeypatch.undo()
    assert "could not update" in caplog.text
    _resume(ws, "w")


def _mount_tmpfs(path: Path) -> bool:
    if os.geteuid() != 0:
        return False
    path.mkdir()
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(path)],
        capture_output=True,
    )
    return p.returncode == 0


@pytest.mark.parametrize("tool", ["small", "big"])
def test_a_real_full_tmpfs(tmp_path: Path, tool: str) -> None:
    mnt = tmp_path / "small-disk"
    if not _mount_tmpfs(mnt):
        pytest.skip("needs root and tmpfs (the injection tests above run anyway)")
    ws = None
    try:
        ws = al.Workspace(mnt / "ws")
        # More small steps than 150 KB hold whatever the WAL traffic (group
        # commits write little of it): the data alone is over 1 KB a step.
        # 8 artifacts of 200 KB fit in 3 MiB.
        n = 400 if tool == "small" else 8
        s = ws.new_session(plan=_plan(tool, n), tools=[small, big], name="real")
        filler = mnt / "filler"
        free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
        filler.write_bytes(b"f" * max(0, free - 150_000))
        with pytest.raises(al.StorageFullError) as info:
            s.run()
        assert info.value.task_id is not None
        _assert_full(info.value, s, info.value.task_id)
        s.close()
        try:  # still full: opening may need no space, or say the disk is full
            ws.open("real", tools=[small, big]).close()
        except al.StorageFullError as e:
            assert "the disk is full: opening " in e.message
        filler.unlink()
        _resume(ws, "real", n)
    finally:
        if ws is not None:
            ws.close()
        # Lazy: a handle still open (a crashed assertion above) cannot keep the
        # mount, and with it the tmp folder, behind.
        subprocess.run(["umount", "-l", str(mnt)], check=True)
