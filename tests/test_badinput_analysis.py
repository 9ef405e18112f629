"""Trajectory frames over the workspaces a new user really has: empty ones,
sessions that never ran, one session written by a newer argus-lab among older
ones, and a path where a Workspace was meant."""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path

import diskcache
import pytest

import argus_lab as al
from argus_lab.store.envelope import SCHEMA_VERSION, JsonOnlyDisk

FIXTURES = Path(__file__).parent / "fixtures"
FRAMES = [
    "sessions_df",
    "tasks_df",
    "events_df",
    "llm_calls_df",
    "tool_calls_df",
    "approvals_df",
]


@al.tool
def one() -> int:
    return 1


def _finished(ws: al.Workspace, name: str) -> al.Session:
    s = ws.new_session(
        plan={"tasks": [{"id": "a", "tool": "one"}]}, tools=[one], name=name
    )
    assert s.run().status == "succeeded"
    s.close()
    return s


def _from_the_future(ws: al.Workspace) -> al.Session:
    s = _finished(ws, "future")
    c = diskcache.Cache(str(ws.path / "sessions" / s.id), disk=JsonOnlyDisk)
    body = '{"task_id":"a","status":"succeeded"}'
    c.set("t:a", f"{SCHEMA_VERSION + 1}|{zlib.crc32(body.encode()):08x}|{body}")
    c.close()
    return s


@pytest.mark.parametrize("frame", FRAMES)
def test_an_empty_workspace_gives_empty_frames_with_their_columns(
    tmp_path: Path, frame: str
) -> None:
    """What held: no rows, the documented columns, no error."""
    df = getattr(al.analysis, frame)(al.Workspace(tmp_path / "ws"))
    assert len(df) == 0 and "session_id" in df.columns


def test_a_session_that_never_ran_and_one_with_no_tasks(tmp_path: Path) -> None:
    """What held: pending rows, and a session with no tasks adds none."""
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(plan={"tasks": [{"id": "a", "tool": "one"}]}, tools=[one])
    ws.new_session(plan={"tasks": []}, name="nothing")
    tasks = al.analysis.tasks_df(ws)
    assert list(tasks["status"].astype(str)) == ["pending"]
    assert len(al.analysis.sessions_df(ws)) == 2
    assert al.analysis.critical_path(s)["status"].astype(str).tolist() == ["pending"]
    s.close()


@pytest.mark.parametrize("frame", ["sessions_df", "tasks_df", "tool_calls_df"])
def test_a_session_from_a_newer_version_says_how_to_read_the_others(
    tmp_path: Path, frame: str
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    _finished(ws, "older")
    future = _from_the_future(ws)
    old = next((FIXTURES / "v0_session").iterdir())  # schema 0, migrated on load
    shutil.copytree(old, ws.path / "sessions" / old.name)

    with pytest.raises(al.SchemaVersionError) as info:
        getattr(al.analysis, frame)(ws)
    assert info.value.message == (
        f"session {future.id}: record 't:a' has schema_version {SCHEMA_VERSION + 1}, "
        f"newer than this argus-lab understands ({SCHEMA_VERSION}); upgrade "
        "argus-lab to open it; to read the workspace's other sessions, pass "
        "strict=False (the skipped ones are logged)"
    )
    assert str(info.value) == info.value.message

    df = getattr(al.analysis, frame)(ws, strict=False)
    assert future.id not in set(df["session_id"])
    if frame != "tool_calls_df":  # the v0 fixture recorded no tool call events
        assert {old.name} <= set(df["session_id"])


@pytest.mark.parametrize("frame", FRAMES)
@pytest.mark.parametrize("kind", [str, Path])
def test_a_path_where_a_workspace_was_meant_says_what_to_pass(
    tmp_path: Path, frame: str, kind: type
) -> None:
    where = kind(tmp_path / "ws")
    with pytest.raises(TypeError) as info:
        getattr(al.analysis, frame)(where)
    assert (
        f"got {type(where).__name__} '{tmp_path / 'ws'}': pass "
        f"al.Workspace('{tmp_path / 'ws'}') for a workspace folder, or "
        "ws.open(name) for one session"
    ) in str(info.value)
    assert not (tmp_path / "ws").exists()  # nothing was made


def test_export_to_a_file_is_refused_and_leaves_it(tmp_path: Path) -> None:
    ws = al.Workspace(tmp_path / "ws")
    _finished(ws, "one")
    f = tmp_path / "frames.parquet"
    f.write_bytes(b"mine")
    with pytest.raises(NotADirectoryError) as info:
        al.analysis.export(ws, f)
    assert str(info.value) == (
        f"{f} is a file: export writes a folder of parquet files (one per frame) "
        "and a manifest; give a folder path"
    )
    assert f.read_bytes() == b"mine"


@pytest.mark.parametrize("what", ["missing", "empty", "file"])
def test_load_of_what_holds_no_export_says_how_to_make_one(
    tmp_path: Path, what: str
) -> None:
    """What held: a clear FileNotFoundError naming al.analysis.export."""
    target = tmp_path / what
    if what == "empty":
        target.mkdir()
    elif what == "file":
        target.write_text("x")
    with pytest.raises(FileNotFoundError, match=r"al\.analysis\.export\("):
        al.analysis.load(target)
