"""The workspace index is a cache: damaged or missing, it is rebuilt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import argus_lab as al
from argus_lab.cli import main
from argus_lab.store.index import IndexRebuiltWarning


@al.tool
def one() -> int:
    return 1


def _workspace(root: Path) -> tuple[al.Workspace, dict[str, str]]:
    ws = al.Workspace(root)
    ids = {}
    for name in ("alpha", "beta"):
        with ws.new_session(
            plan={"goal": name, "tasks": [{"id": "t", "tool": "one"}]},
            tools=[one],
            name=name,
        ) as s:
            s.run()
            ids[name] = s.id
    ws.close()
    return al.Workspace(root), ids


def _damage_index(root: Path) -> None:
    for f in (root / "index").glob("cache.db*"):
        f.unlink()
    (root / "index" / "cache.db").write_bytes(b"not a database " * 300)


def test_a_damaged_index_is_rebuilt_and_opening_by_id_never_reads_it(
    tmp_path: Path,
) -> None:
    ws, ids = _workspace(tmp_path / "ws")
    _damage_index(ws.path)
    # By id: no warning (warnings are errors here), no index involved.
    with ws.open(ids["alpha"], tools=[one]) as s:
        assert s.name == "alpha"
    with pytest.warns(IndexRebuiltWarning) as caught:
        s = ws.open("beta", tools=[one])
    s.close()
    (w,) = caught
    text = str(w.message)
    assert text.startswith(
        f"the workspace index {ws.path / 'index'} was damaged (file is not a "
        "database); rebuilt it from the session folders: 2 session(s) (alpha, beta); "
        f"the old index was moved to {ws.path}/index.damaged-"
    )
    (aside,) = ws.path.glob("index.damaged-*")
    assert (aside / "cache.db").read_bytes().startswith(b"not a database")
    # The rebuilt index works for new names too.
    with ws.new_session(
        plan={"tasks": [{"id": "t", "tool": "one"}]}, tools=[one], name="gamma"
    ) as s:
        assert s.run().status == "succeeded"
    assert [i.name for i in ws.sessions()] == ["alpha", "beta", "gamma"]


def test_a_missing_index_is_rebuilt(tmp_path: Path) -> None:
    ws, _ = _workspace(tmp_path / "ws")
    for f in (ws.path / "index").iterdir():
        f.unlink()
    (ws.path / "index").rmdir()
    with pytest.warns(IndexRebuiltWarning, match=r"index .* was missing; rebuilt"):
        ws.open("alpha", tools=[one]).close()


def test_a_bad_page_in_the_index_is_rebuilt(tmp_path: Path) -> None:
    ws, _ = _workspace(tmp_path / "ws")
    db = ws.path / "index" / "cache.db"
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big") or 65536  # the header says (1 KiB now)
    assert len(data) >= 2 * size
    for page in range(1, len(data) // size):  # every b-tree page but the header's
        data[size * page : size * page + 12] = b"\xff" * 12
    db.write_bytes(bytes(data))
    with pytest.warns(IndexRebuiltWarning, match="was damaged"):
        ws.open("beta", tools=[one]).close()


def test_a_damaged_session_is_listed_as_damaged_and_the_rest_normally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws, ids = _workspace(tmp_path / "ws")
    folder = ws.path / "sessions" / ids["alpha"]
    for f in folder.glob("cache.db*"):
        f.unlink()
    (folder / "cache.db").write_bytes(b"x" * 5000)
    assert [i.name for i in ws.sessions()] == ["beta"]
    damaged = ws.damaged_sessions()
    assert list(damaged) == [ids["alpha"]]
    assert "is damaged (file is not a database)" in damaged[ids["alpha"]]
    assert main(["-w", str(ws.path), "--json", "ls"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r.get("name") for r in rows] == ["beta", None]
    assert rows[1]["status"] == "damaged" and rows[1]["id"] == ids["alpha"]
    assert main(["-w", str(ws.path), "ls"]) == 0
    out = capsys.readouterr().out
    assert "beta" in out and "damaged" in out and ids["alpha"] in out
