"""A file size limit (RLIMIT_FSIZE, EFBIG: like a quota) is not damage.

SQLite hides the errno: it reports a write past the limit as a plain I/O
error (SQLITE_IOERR_SHMSIZE, _WRITE, ...), which the workspace index used to
take for damage: it moved the index aside and let the raw sqlite3 error out.
Each test sets a real limit in a child process (Python ignores SIGXFSZ, so
the write fails with EFBIG as under a quota).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r"""
import json, resource, sys
import argus_lab as al
root, limit, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]

@al.tool
def small(n: int) -> int:
    return n

plan = {"goal": "g", "tasks": [{"id": f"t{i}", "tool": "small", "args": {"n": i}}
                               for i in range(3)]}
if limit:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
out = {}
try:
    ws = al.Workspace(root)
    if what == "new":
        s = ws.new_session(plan=plan, tools=[small], name="c")
    else:
        s = ws.open(what, tools=[small])
    out["status"] = s.run().status
    s.close()
except BaseException as e:
    out = {"type": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__],
           "message": str(e), "errno": getattr(e, "errno", None)}
print(json.dumps(out))
"""


def _child(root: Path, limit: int, what: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), str(limit), what],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    out: dict[str, object] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def _assert_limit(out: dict[str, object]) -> None:
    assert out.get("type") == "StorageFullError", out
    msg = str(out["message"])
    assert "file size limit" in msg and "ulimit -f" in msg, msg
    assert "Nothing committed was lost" in msg
    assert "damaged" not in msg
    assert "OSError" in out["mro"]  # type: ignore[operator]


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE as on Linux")
def test_a_file_size_limit_at_a_new_workspace_s_index_is_no_damage(
    tmp_path: Path,
) -> None:
    out = _child(tmp_path / "ws", 20_000, "new")
    _assert_limit(out)
    assert not list((tmp_path / "ws").glob("index.damaged-*"))
    # Without the limit the same workspace works, nothing lost or set aside.
    assert _child(tmp_path / "ws", 0, "new") == {"status": "succeeded"}
    assert not list((tmp_path / "ws").glob("index.damaged-*"))


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE as on Linux")
def test_a_file_size_limit_at_an_existing_index_and_session_is_no_damage(
    tmp_path: Path,
) -> None:
    assert _child(tmp_path / "ws", 0, "new") == {"status": "succeeded"}
    out = _child(tmp_path / "ws", 20_000, "c")
    _assert_limit(out)
    assert not list((tmp_path / "ws").glob("index.damaged-*"))
    assert _child(tmp_path / "ws", 0, "c") == {"status": "succeeded"}
