"""What a step writes under durability "full": the witness rides the page cache,
relaxed commits are not witnessed, a session's database uses 512-byte pages."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import argus_lab as al
from argus_lab.store._rows import PAGE_SIZE, SESSION_PAGE_SIZE
from argus_lab.store.checkpoints import SessionStore
from argus_lab.store.witness import Witness
from tests.conftest import BASIC_TOOLS

CHAIN = {
    "goal": "chain",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1}},
        {"id": "b", "tool": "add", "args": {"a": "${a.result.sum}"}},
        {"id": "c", "tool": "add", "args": {"a": "${b.result.sum}"}},
    ],
}


@pytest.fixture
def full_ws(tmp_path: Path) -> Iterator[al.Workspace]:
    w = al.Workspace(tmp_path / "ws", durability="full")
    yield w
    w.close()


def _finished(ws: al.Workspace) -> tuple[Path, str]:
    s = ws.new_session(plan=CHAIN, tools=BASIC_TOOLS, name="chain")
    assert s.run().status == "succeeded"
    s.close()
    return ws.path / "sessions" / s.id, s.id


def test_the_witness_is_fdatasynced_once_at_close_never_per_commit(
    full_ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite fsyncs each commit before its witness is written, so a lost
    witness write only leaves it behind the head (module docstring): a flush per
    commit bought nothing and cost 6-9 KB of page writes a step."""
    flushed: list[str] = []
    real = os.fdatasync

    def spy(fd: int) -> None:
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if name in ("witness", "journal"):
            flushed.append(name)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", spy)
    s = full_ws.new_session(plan=CHAIN, tools=BASIC_TOOLS, name="chain")
    assert s.run().status == "succeeded"
    assert flushed == []  # 3 steps, several commits: none flushed the witness
    s.close()
    assert sorted(flushed) == ["journal", "witness"]
    folder = full_ws.path / "sessions" / s.id
    store = SessionStore(folder, s.id)
    head = store.read_head()
    store.close()
    assert head is not None and Witness(folder, fsync=False).read() == head.version


def test_a_relaxed_commit_is_journaled_but_not_witnessed(
    full_ws: al.Workspace,
) -> None:
    """A commit that skipped its fsync may be lost to a power cut; that loss
    only reruns work, so the witness must not name it (it would be reported as
    lost commits). The next fsynced commit is witnessed, and covers it."""
    folder, sid = _finished(full_ws)
    store = SessionStore(folder, sid, durability="full")
    try:
        head = store.read_head()
        assert head is not None and store.witness.read() == head.version
        v = head.version
        relaxed = store.commit(v, "tester", relaxed=True)
        assert relaxed.version == v + 1
        assert store.witness.read() == v  # not witnessed
        assert store.witness.touched(v, v + 1) == set()  # but journaled
        fsynced = store.commit(v + 1, "tester")
        assert store.witness.read() == fsynced.version == v + 2
    finally:
        store.close()
    with full_ws.open(sid, tools=BASIC_TOOLS) as s:  # no loss to report
        assert s.result("c") == {"sum": 4}


def test_under_normal_durability_every_commit_is_witnessed(ws: al.Workspace) -> None:
    """ "relaxed" means nothing under "normal" (no commit is fsynced): a power
    cut that keeps the witness but drops WAL frames is a real loss, reported."""
    folder, sid = _finished(ws)
    store = SessionStore(folder, sid, durability="normal")
    try:
        head = store.read_head()
        assert head is not None
        after = store.commit(head.version, "tester", relaxed=True)
        assert store.witness.read() == after.version
    finally:
        store.close()


def _page_size(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return int(con.execute("PRAGMA page_size").fetchone()[0])
    finally:
        con.close()


def test_a_session_database_has_512_byte_pages_other_stores_1_kib(
    ws: al.Workspace,
) -> None:
    folder, _ = _finished(ws)
    assert _page_size(folder / "cache.db") == SESSION_PAGE_SIZE == 512
    assert _page_size(ws.path / "index" / "cache.db") == PAGE_SIZE == 1024


def test_an_existing_session_database_keeps_its_page_size(ws: al.Workspace) -> None:
    """Sessions made with 1 KiB pages (before this change) open and run as they
    are: the page size only applies to a database that does not exist yet."""
    folder, sid = _finished(ws)
    con = sqlite3.connect(folder / "cache.db")
    con.execute("PRAGMA journal_mode = delete")
    con.execute("PRAGMA page_size = 1024")
    con.execute("VACUUM")
    con.execute("PRAGMA journal_mode = wal")
    con.close()
    with ws.open(sid, tools=BASIC_TOOLS) as s:
        assert s.result("c") == {"sum": 4}
        f = s.fork(at="b")
        assert f.run().status == "succeeded"
        f.close()
    assert _page_size(folder / "cache.db") == 1024


def _wal_commits(wal: Path, page_size: int) -> int:
    """How many transactions the WAL file holds (frames that end one)."""
    import struct

    data = wal.read_bytes()
    n, off, frame = 0, 32, 24 + page_size
    while off + frame <= len(data):
        n += struct.unpack(">I", data[off + 4 : off + 8])[0] != 0
        off += frame
    return n


@pytest.mark.parametrize("durability", ["normal", "full"])
def test_opening_a_cache_is_one_commit_and_checkpoints_nothing(
    tmp_path: Path, durability: str
) -> None:
    """diskcache's opening (settings, tables, triggers) was ~30-45 autocommits,
    each fsynced under "full", then a close that checkpointed the new WAL."""
    from argus_lab.store.envelope import open_cache

    folder = tmp_path / "c"
    watcher = None
    for round_ in range(2):  # a new database, then an existing one
        cache = open_cache(folder, durability, page_size=512)  # type: ignore[arg-type]
        wal = folder / "cache.db-wal"
        assert _wal_commits(wal, 512) == 2 * round_ + 1
        con = cache._con
        want = 2 if durability == "full" else 1
        assert con.execute("PRAGMA synchronous").fetchone()[0] == want
        assert not con.in_transaction and cache._timeout == 60
        cache.set("k", f"v{round_}")
        assert _wal_commits(wal, 512) == 2 * round_ + 2
        if watcher is None:  # keeps the WAL when the cache closes
            watcher = sqlite3.connect(folder / "cache.db")
            watcher.execute("SELECT count(*) FROM Cache").fetchall()
        cache.close()
    assert watcher is not None
    assert watcher.execute("SELECT value FROM Cache WHERE key = 'k'").fetchone() == (
        "v1",
    )
    watcher.close()


@pytest.mark.parametrize("durability", ["normal", "full"])
def test_the_wal_is_checkpointed_every_4000_frames_under_normal_300_under_full(
    tmp_path: Path, durability: str
) -> None:
    """SQLite's 1,000: under "normal" a checkpoint (~1.2 ms) each ~95 steps;
    under "full" a WAL growing into new blocks for most of a short run."""
    from argus_lab.store.envelope import WAL_AUTOCHECKPOINT, open_cache

    want = WAL_AUTOCHECKPOINT[durability]
    assert want == (4000 if durability == "normal" else 300)
    cache = open_cache(tmp_path / "c", durability, page_size=512)  # type: ignore[arg-type]
    seen: list[int] = []

    def look() -> None:  # a thread's own connection gets it too
        seen.append(cache._con.execute("PRAGMA wal_autocheckpoint").fetchone()[0])

    look()
    t = threading.Thread(target=look)
    t.start()
    t.join()
    assert seen == [want, want]
    frame = 24 + 512
    for i in range(150):  # ~2,000 frames: past 1,000, short of 4,000
        with cache.transact():
            cache.set(f"k{i}", "x" * 4000)
    frames = ((tmp_path / "c" / "cache.db-wal").stat().st_size - 32) // frame
    if durability == "normal":
        assert frames > 1500  # never sent back to its start
    else:
        assert frames < 400  # checkpointed at 300, then reused from the start
    cache.close()


def _open_in_thread(folder: Path) -> tuple[threading.Thread, dict[str, object]]:
    from argus_lab.store.envelope import open_cache

    out: dict[str, object] = {}

    def go() -> None:
        try:
            cache = open_cache(folder, "full", page_size=SESSION_PAGE_SIZE)
            cache.set("k", "v")
            out["value"] = cache.get("k")
            cache.close()
        except Exception as e:  # reported to the test below
            out["error"] = e

    t = threading.Thread(target=go)
    t.start()
    return t, out


def test_a_database_another_process_is_creating_right_now_opens(
    tmp_path: Path,
) -> None:
    """Two processes opening a fresh database at once (a new workspace's
    index): one finds ``cache.db`` already there but still empty (the other
    has connected, not yet written) or locked by the other's first write. It
    must wait and open it, in WAL with small pages, not fail with "cannot
    change into wal mode from within a transaction" or "database is locked"."""
    folder = tmp_path / "fresh"
    folder.mkdir()
    other = sqlite3.connect(folder / "cache.db", isolation_level=None)
    # The other process's first transaction, creating the file as argus does.
    other.execute(f"PRAGMA page_size = {SESSION_PAGE_SIZE}")
    other.execute("BEGIN EXCLUSIVE")
    t, out = _open_in_thread(folder)
    t.join(1.0)  # a chance to meet the lock (the result is checked either way)
    other.execute("COMMIT")
    other.close()
    t.join(60)
    assert not t.is_alive()
    assert out == {"value": "v"}, out
    con = sqlite3.connect(folder / "cache.db")
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("PRAGMA page_size").fetchone()[0] == SESSION_PAGE_SIZE
    finally:
        con.close()


def test_an_artifact_and_its_new_folders_are_flushed_before_the_commit(
    full_ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under "full" the commit pointing to an artifact is fsynced; the file's
    bytes were, but not its name in its folder (nor a new folder's name): a
    power cut could keep the commit and lose the file."""
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    ref = full_ws.artifacts.put_bytes(b"x" * 1000)  # the workspace's first
    path, root = full_ws.artifacts.path(ref), full_ws.artifacts.root
    assert synced[0].startswith(str(path.parent) + "/.tmp-")  # the bytes, first
    assert sorted(synced[1:]) == sorted(map(str, (path.parent, root, root.parent)))
    synced.clear()
    again = full_ws.artifacts.path(full_ws.artifacts.put_bytes(b"y" * 1000))
    assert synced[0].startswith(str(again.parent) + "/.tmp-")
    assert str(again.parent) in synced[1:] and str(root.parent) not in synced


def test_a_new_sessions_folder_is_flushed_before_its_name_is_claimed(
    full_ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's commit is fsynced inside its new folder; the folder's own
    name in sessions/ was not, before the name index (fsynced) pointed to it:
    a power cut could leave a claimed name and no session."""
    from argus_lab.store.names import SessionNames

    order: list[str] = []
    real_fsync, real_claim = os.fsync, SessionNames.claim

    def spy(fd: int) -> None:
        order.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def claim(self: SessionNames, name: str, sid: str) -> bool:
        order.append(f"claim {name}")
        return real_claim(self, name, sid)

    monkeypatch.setattr(os, "fsync", spy)
    monkeypatch.setattr(SessionNames, "claim", claim)
    s = full_ws.new_session(plan=CHAIN, tools=BASIC_TOOLS, name="chain")
    s.close()
    sessions = str(full_ws.path / "sessions")
    assert sessions in order and order.index(sessions) < order.index("claim chain")


@pytest.mark.parametrize("kind", ["state", "thread"])
def test_a_new_state_or_threads_folder_is_flushed_in_its_parent(
    full_ws: al.Workspace, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A state's or LangGraph thread's folder whose name a power cut dropped
    was not reported anywhere: the state was made again from its defaults,
    the thread started over and reran its nodes."""
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    if kind == "state":
        full_ws.state("tally").close()
        assert str(full_ws.path / "states") in synced
    else:
        from tests.test_faults_full import CFG, _app

        saver, app = _app(full_ws, 1)
        app.invoke({"log": []}, CFG)
        saver.close()
        assert str(full_ws.path / "sessions") in synced


def test_the_intent_of_an_llm_task_that_may_write_is_fsynced(
    full_ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An intent of a tool without side effects skips its fsync (a power cut
    that drops it only reruns the task). An LLM task's tool has none, but its
    model may call a write that is not idempotent: a dropped intent made that
    write run again, unseen."""
    from argus_lab.llm.testing import FunctionModel

    intents: list[bool] = []
    real = SessionStore.commit

    def spy(self: SessionStore, *args: object, **kw: object) -> object:
        events = kw.get("events") or ()
        if any(e.kind == "task_started" for e in events):  # type: ignore[attr-defined]
            intents.append(bool(kw.get("relaxed")))
        return real(self, *args, **kw)  # type: ignore[arg-type]

    @al.tool(side_effect="write", idempotent=False)
    def send(to: str) -> str:
        """Sends (not idempotent)."""
        return "sent"

    monkeypatch.setattr(SessionStore, "commit", spy)
    plan = {"tasks": [{"id": "think", "kind": "llm", "llm_tools": ["send"]}]}
    model = FunctionModel(lambda req: "nothing to send", name="m")
    with full_ws.new_session(
        plan=plan, tools=[send], name="w", models=model, approvals=()
    ) as s:
        assert s.run().status == "succeeded"
    assert intents == [False]
    plain = {"tasks": [{"id": "think", "kind": "llm"}]}  # no tools: relaxed
    with full_ws.new_session(plan=plain, name="r", models=model) as s:
        assert s.run().status == "succeeded"
    assert intents == [False, True]
