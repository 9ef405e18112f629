"""The sessions folder as it is found, not as it was left: every entry that is
not a readable session is listed as damaged with why, and the rest normally.

Not tested: a session folder the user may not read. Tests run as root, who
reads it anyway; the scan treats its OSError like any other unreadable entry.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.store.index import IndexRebuiltWarning


@al.tool
def one() -> int:
    return 1


def _workspace(
    root: Path, names: tuple[str, ...] = ("alpha", "beta")
) -> dict[str, Any]:
    ws = al.Workspace(root)
    ids = {}
    for name in names:
        with ws.new_session(
            plan={"goal": name, "tasks": [{"id": "t", "tool": "one"}]},
            tools=[one],
            name=name,
        ) as s:
            s.run()
            ids[name] = s.id
    ws.close()
    return ids


def _names(ws: al.Workspace) -> list[str]:
    return [i.name for i in ws.sessions()]


def test_a_zero_byte_index_is_rebuilt(tmp_path: Path) -> None:
    ids = _workspace(tmp_path)
    for f in (tmp_path / "index").glob("cache.db*"):
        f.unlink()
    (tmp_path / "index" / "cache.db").write_bytes(b"")  # SQLite takes it as empty
    ws = al.Workspace(tmp_path)
    with pytest.warns(IndexRebuiltWarning, match="was empty; rebuilt it from"):
        s = ws.open("alpha")
    assert s.id == ids["alpha"]
    s.close()


def test_a_name_the_index_lost_is_found_in_the_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = _workspace(tmp_path)
    # Sessions made a moment ago are taken for creates in progress: age them.
    monkeypatch.setattr("argus_lab.store.names.CREATING_S", 0.0)
    ws = al.Workspace(tmp_path)
    ws._names.cache.delete("name:beta")  # e.g. written by a process that crashed
    with pytest.warns(IndexRebuiltWarning, match="did not know 'beta'"):
        s = ws.open("beta")
    assert s.id == ids["beta"]
    s.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # written back: no second warning
        ws.open("beta").close()


def test_entries_that_are_not_sessions_are_listed_as_damaged(tmp_path: Path) -> None:
    ids = _workspace(tmp_path, ("alpha", "beta", "gamma", "delta", "eps"))
    sessions = tmp_path / "sessions"
    a, b, c, d = (sessions / ids[n] for n in ("alpha", "beta", "gamma", "delta"))
    for f in a.glob("cache.db*"):
        f.unlink()  # the records are gone, the witness is not
    shutil.rmtree(b)
    shutil.copytree(c, b)  # beta's folder holds gamma's records
    shutil.rmtree(d)
    d.write_text("a file")
    os.symlink(sessions / "loop", sessions / "loop")
    os.symlink(tmp_path / "gone" / "x", sessions / "dangling")  # owned: never there
    (sessions / "creating").mkdir()  # empty: a session being made, not damage
    ws = al.Workspace(tmp_path)
    assert _names(ws) == ["gamma", "eps"]
    assert ws.damaged_sessions() == {
        ids["alpha"]: f"session {ids['alpha']}: its records (cache.db) are missing "
        "from its folder",
        ids["beta"]: f"session {ids['beta']}: its folder holds the records of "
        f"session {ids['gamma']} ('gamma'), copied or moved there; move it back",
        ids["delta"]: f"session {ids['delta']}: {d} is a file, not a session folder",
        "dangling": f"session dangling: {sessions / 'dangling'} is a symbolic link "
        "to nothing",
        "loop": f"session loop: {sessions / 'loop'} cannot be read: Too many "
        "levels of symbolic links",
    }
    with pytest.raises(al.CorruptCheckpointError, match=r"\(cache\.db\) are missing"):
        ws.open("alpha")
    assert not (a / "cache.db").exists()  # opening did not make an empty one
    with pytest.raises(al.CorruptCheckpointError, match="holds the records of"):
        ws.open(ids["beta"])
    assert ws.open("gamma").id == ids["gamma"]


_RACER = """
import sys, warnings
import argus_lab as al
warnings.simplefilter("ignore")
ws = al.Workspace(sys.argv[1])
sys.stdout.write(",".join(sorted(i.name for i in ws.sessions())) + "|")
for n in ("alpha", "beta", "gamma"):
    with ws.open(n) as s:
        sys.stdout.write(s.name + ",")
"""


@pytest.mark.slow
def test_processes_rebuilding_the_index_at_once(tmp_path: Path) -> None:
    _workspace(tmp_path, ("alpha", "beta", "gamma"))
    for f in (tmp_path / "index").glob("cache.db*"):
        f.unlink()
    (tmp_path / "index" / "cache.db").write_bytes(b"not a database " * 300)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert (p.returncode, out) == (0, "alpha,beta,gamma|alpha,beta,gamma,"), err
    ws = al.Workspace(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one good index is left behind
        assert [ws.open(n).name for n in ("alpha", "beta", "gamma")] == [
            "alpha",
            "beta",
            "gamma",
        ]


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".", "..", "\x00", "x" * 10_000])
def test_names_that_cannot_be_sessions_are_just_missing(
    tmp_path: Path, name: str
) -> None:
    ws = al.Workspace(tmp_path)
    with pytest.raises(KeyError, match="no session"):
        ws.open(name)
    with pytest.raises(KeyError, match="no session"):
        ws.progress(name)


@pytest.mark.parametrize("name", [None, 123, b"alpha"])
def test_a_name_that_is_not_text(tmp_path: Path, name: Any) -> None:
    ws = al.Workspace(tmp_path)
    with pytest.raises(TypeError) as info:
        ws.open(name)
    assert str(info.value) == (
        f"a session name or id is text, got {type(name).__name__}: {name!r}"
    )


def test_an_index_rebuilt_with_no_readable_session_is_not_rebuilt_again(
    tmp_path: Path,
) -> None:
    ids = _workspace(tmp_path, ("alpha",))
    (tmp_path / "sessions" / ids["alpha"] / "cache.db").write_bytes(b"junk" * 1000)
    shutil.rmtree(tmp_path / "index")
    with pytest.warns(IndexRebuiltWarning, match="0 session"):
        al.Workspace(tmp_path).sessions()
        al.Workspace(tmp_path)._names.cache  # noqa: B018 - opens (rebuilds) the index
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ws = al.Workspace(tmp_path)
            assert ws._names.cache is not None and _names(ws) == []
            ws.close()
    assert len(list(tmp_path.glob("index.damaged-*"))) == 0


def test_a_reader_between_a_create_s_folder_and_its_index_entry(tmp_path: Path) -> None:
    """A create writes its folder, then its index entry. A reader in between
    finds the folder without a warning, and the create still succeeds."""
    ids = _workspace(tmp_path)
    ws = al.Workspace(tmp_path)
    ws._names.cache.delete("name:beta")  # the moment between folder and entry
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = ws.open("beta")  # a second kernel polling for the session
    assert s.id == ids["beta"]
    s.close()
    # The creator's own entry now finds the reader's: the same id, no conflict.
    assert ws._names.cache.get("name:beta") == ids["beta"]
    assert ws._names.cache.add("name:beta", ids["beta"]) is False
