"""A damaged artifact says how to repair it, and rerunning its task repairs it.

Artifacts are named by the sha256 of their bytes, and storing content that
is already there wrote nothing: so once a file was cut short or bit-flipped,
rerunning the task that made it produced the same bytes, found the name taken,
and kept the damaged file: the result could never be read again.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import argus_lab as al

BLOB = b"x" * 300_000


@al.tool
def blob(n: int) -> bytes:
    """Bytes large enough to be stored as an artifact."""
    return BLOB + str(n).encode()


def _artifact(ws: al.Workspace) -> Path:
    (p,) = [p for p in (ws.path / "artifacts").rglob("*") if p.is_file()]
    return p


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_rerunning_the_task_repairs_a_damaged_artifact(
    ws: al.Workspace, how: str
) -> None:
    plan = {"goal": "g", "tasks": [{"id": "a", "tool": "blob", "args": {"n": 1}}]}
    s = ws.new_session(plan=plan, tools=[blob], name="s")
    assert s.run().status == "succeeded"
    s.close()
    path = _artifact(ws)
    if how == "truncate":
        os.truncate(path, 1000)
    else:
        data = bytearray(path.read_bytes())
        data[1000] ^= 0x01
        path.write_bytes(bytes(data))

    s = ws.open("s", tools=[blob])
    with pytest.raises(al.CorruptCheckpointError) as info:
        s.result("a")
    assert str(path) in info.value.message
    assert 's.fork(at=TASK, reuse="none").run()' in info.value.message

    f = s.fork(at="a", reuse="none")
    assert f.run().status == "succeeded"
    assert f.result("a") == BLOB + b"1"
    assert s.result("a") == BLOB + b"1"  # the same file, repaired
    f.close()
    s.close()
