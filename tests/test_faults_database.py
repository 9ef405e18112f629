"""A session whose database file itself is damaged says so, with advice that works.

A cut-short or overwritten ``cache.db`` (no WAL left: the session closed) made
SQLite report "database disk image is malformed". Argus called that a damaged
*record* and advised to "fork from an earlier task", which is impossible: a
session that cannot be read cannot be forked either. And ``argus rm`` refused
to remove it (it read the runner lease first, and that read failed too).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

import argus_lab as al
from tests.conftest import BASIC_TOOLS


@pytest.mark.parametrize("how", ["truncate", "overwrite", "row"])
def test_a_damaged_database_file_is_named_with_what_to_do(
    ws: al.Workspace, how: str
) -> None:
    plan = {
        "goal": "g",
        "tasks": [{"id": f"a{i}", "tool": "add", "args": {"a": i}} for i in range(300)],
    }
    s = ws.new_session(plan=plan, tools=BASIC_TOOLS, name="s")
    assert s.run().status == "succeeded"
    s.close()  # the WAL is copied into cache.db and removed
    other = ws.new_session(plan=plan, tools=BASIC_TOOLS, name="other")
    other.close()
    db = ws.path / "sessions" / s.id / "cache.db"
    assert not Path(f"{db}-wal").exists()
    size = db.stat().st_size
    if how == "truncate":
        os.truncate(db, size // 2)
    elif how == "row":
        # Bytes inside one record's text, not the file's structure: the row
        # reads back as no UTF-8 (where "overwrite" lands decides which of
        # the two it hits; CI once hit this one).
        data = db.read_bytes()
        at = data.index(b'"task_id":"a150"')
        with db.open("r+b") as f:
            f.seek(at)
            f.write(b"\xff" * 8)
    else:
        with db.open("r+b") as f:
            f.seek(size // 3)
            f.write(b"\xff" * 4096)

    with (
        pytest.raises(al.CorruptCheckpointError) as info,
        ws.open("s", tools=BASIC_TOOLS) as again,
    ):
        again.records.values()  # every record read
    msg = info.value.message
    assert f"its database {db} is damaged (" in msg
    assert "fork from an earlier task" not in msg
    assert f"argus rm {s.id}" in msg and ".recover" in msg
    assert info.value.session_id == s.id
    # The rest of the workspace still opens.
    with ws.open("other", tools=BASIC_TOOLS) as o:
        assert o.counts()["pending"] == 300

    # The advice works as printed: argus rm removes the damaged session.
    from argus_lab.cli import main

    assert main(["-w", str(ws.path), "rm", s.id, "--yes"]) == 0
    assert not db.parent.exists()
    assert [i.name for i in ws.sessions()] == ["other"]
    assert ws.damaged_sessions() == {}


def _truncate_half(db: Path) -> None:
    # Everything into cache.db first (connections of other threads may still
    # hold the WAL open): the damage is to the database file itself.
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    con.close()
    wal = Path(f"{db}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    os.truncate(db, db.stat().st_size // 2)


def test_a_state_whose_database_file_is_damaged_says_so(ws: al.Workspace) -> None:
    st = ws.state("st")
    for i in range(100):
        st.update(lambda d, i=i: d.update({f"k{i}": "x" * 50}))
    st.close()
    db = ws.path / "states" / "st" / "cache.db"
    _truncate_half(db)
    with pytest.raises(al.CorruptCheckpointError) as info:
        ws.state("st").get()
    msg = info.value.message
    assert msg.startswith(f"state st: its database {db} is damaged (")
    assert "st.fork(at=" not in msg and ".recover" in msg


def test_a_thread_whose_database_file_is_damaged_says_so(ws: al.Workspace) -> None:
    from tests.test_faults_full import CFG, _app

    saver, app = _app(ws, 2000)
    for _ in range(30):
        app.invoke({"log": []}, CFG)
    saver.close()
    (folder,) = (ws.path / "sessions").glob("lg-*")
    _truncate_half(folder / "cache.db")
    saver, app = _app(ws, 2000)
    with pytest.raises(al.CorruptCheckpointError) as info:
        app.get_state(CFG)
    msg = info.value.message
    assert msg.startswith("LangGraph thread 't' (session lg-t-")
    assert f"its database {folder / 'cache.db'} is damaged (" in msg
    assert "saver.delete_thread('t')" in msg and "earlier checkpoint" not in msg
    saver.close()
