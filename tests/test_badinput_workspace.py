"""Bad workspace paths a new user passes: each gets a clear error, nothing is made."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import argus_lab as al


@pytest.mark.parametrize("path", ["", "   "])
def test_an_empty_path_is_refused_not_taken_for_the_current_folder(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Path("") is ".": an unset variable (os.environ.get("X", "")) would turn
    # the folder the user stands in into a workspace.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="workspace path is empty") as info:
        al.Workspace(path)
    assert "None for the default" in str(info.value)
    assert os.listdir(tmp_path) == []


def _can_mount_read_only() -> bool:
    # A private user+mount namespace: the read-only bind lives and dies with
    # the child, and needs no privilege on the host.
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "true"], capture_output=True, timeout=30, check=False
    )
    return probe.returncode == 0


_CHILD = """
import json, sys
import argus_lab as al
try:
    ws = al.Workspace(sys.argv[1])
except al.ArgusError as e:
    print(json.dumps({"error": type(e).__name__, "message": e.message}))
else:
    print(json.dumps({"sessions": [i.name for i in ws.sessions()]}))
"""


@pytest.mark.skipif(
    not _can_mount_read_only(), reason="needs unshare -rm (user namespaces)"
)
def test_a_workspace_on_a_read_only_mount_is_refused_not_listed_as_empty(
    tmp_path: Path,
) -> None:
    # Root ignores file modes, so chmod cannot make this case: a read-only bind.
    @al.tool
    def one() -> int:
        return 1

    root = tmp_path / "ws"
    ws = al.Workspace(root)
    s = ws.new_session(plan={"tasks": [{"id": "a", "tool": "one"}]}, tools=[one])
    s.run()
    s.close()
    ws.close()
    script = (
        f"mount --bind {root} {root} && mount -o remount,bind,ro {root} && "
        f'exec {sys.executable} -c "$0" {root}'
    )
    out = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, _CHILD],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
        check=False,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    # Before: Workspace() succeeded, ws.sessions() was [] and ws.open() an OSError.
    assert got["error"] == "StorageError"
    assert got["message"] == (
        f"workspace {root} is read-only here (a read-only mount, or no write "
        "permission): Argus writes lock files and SQLite journals even to read "
        f"a session; copy it to a folder you can write to (cp -a {root} "
        "/tmp/argus-copy) and open the copy"
    )
    again = al.Workspace(root)  # writable again outside the child's namespace
    assert [i.status for i in again.sessions()] == ["succeeded"]


def _one_session(root: Path) -> str:
    @al.tool
    def one() -> int:
        return 1

    ws = al.Workspace(root)
    s = ws.new_session(plan={"tasks": [{"id": "a", "tool": "one"}]}, tools=[one])
    s.run()
    s.close()
    ws.close()
    return s.id


@pytest.mark.parametrize("inner", ["sessions", "memory"])
def test_a_folder_of_a_workspace_is_not_taken_for_a_workspace(
    tmp_path: Path, inner: str
) -> None:
    # Before: a new empty workspace was made inside it; the sessions looked lost.
    root = tmp_path / "ws"
    _one_session(root)
    (root / "memory").mkdir(exist_ok=True)
    before = sorted(p.name for p in (root / inner).iterdir())
    with pytest.raises(al.ArgusError) as info:
        al.Workspace(root / inner)
    assert info.value.message == (
        f"{root / inner} is the {inner} folder of the workspace at {root}, not a "
        f"workspace: use al.Workspace('{root}')"
    )
    assert sorted(p.name for p in (root / inner).iterdir()) == before


def test_a_session_folder_is_not_taken_for_a_workspace(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    sid = _one_session(root)
    with pytest.raises(al.ArgusError) as info:
        al.Workspace(root / "sessions" / sid)
    assert info.value.message == (
        f"{root / 'sessions' / sid} is the folder of one session, not a workspace: "
        f"open it with al.Workspace('{root}').open('{sid}')"
    )
    assert not (root / "sessions" / sid / "sessions").exists()


def test_a_workspace_a_user_named_sessions_still_opens(tmp_path: Path) -> None:
    """What holds: a folder called "sessions" that is not inside a workspace."""
    ws = al.Workspace(tmp_path / "sessions")
    assert ws.path == tmp_path / "sessions"
    assert al.Workspace(tmp_path / "sessions").path == ws.path


@pytest.mark.parametrize("name", ["sessions", "memory"])
def test_a_workspace_beside_a_users_own_index_folder_still_opens(
    tmp_path: Path, name: str
) -> None:
    # The check took any folder named index beside it for a workspace's name
    # index: a project with its own index/ (a search index, a site) could not
    # keep its workspace in ./memory or ./sessions.
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "terms.txt").write_text("a\nb\n")
    ws = al.Workspace(tmp_path / name)
    assert ws.path == tmp_path / name and ws.sessions() == []
