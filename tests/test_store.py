"""Checkpoints: checksums, corruption, migrations, no pickle, delta writes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import diskcache
import pytest

import argus_lab as al
from argus_lab.runtime import executor
from argus_lab.store._rows import RowWriter
from argus_lab.store.checkpoints import SessionStore
from argus_lab.store.envelope import SCHEMA_VERSION, JsonOnlyDisk, encode
from argus_lab.store.head import Head, make_lease
from tests.conftest import BASIC_TOOLS, add

CHAIN = {
    "goal": "chain",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1}},
        {"id": "b", "tool": "add", "args": {"a": "${a.result.sum}"}},
        {"id": "c", "tool": "add", "args": {"a": "${b.result.sum}"}},
    ],
}
FIXTURES = Path(__file__).parent / "fixtures"


def finished(ws: al.Workspace, name: str) -> al.Session:
    s = ws.new_session(plan=CHAIN, tools=BASIC_TOOLS, name=name)
    assert s.run().status == "succeeded"
    s.close()
    return s


def test_flipped_bytes_raise_corrupt_checkpoint_naming_session_and_key(
    ws: al.Workspace,
) -> None:
    bad = finished(ws, "bad")
    finished(ws, "good")
    db = ws.path / "sessions" / bad.id / "cache.db"
    data = db.read_bytes()
    # b's result {"sum": 3} is stored as text inside SQLite: change one digit.
    m = re.search(rb'"task_id":"b","status":"succeeded".{0,200}?"sum":3', data)
    assert m is not None
    db.write_bytes(data[: m.end() - 1] + b"7" + data[m.end() :])
    with pytest.raises(al.CorruptCheckpointError) as e:
        ws.open("bad")
    assert bad.id in e.value.message and "'t:b'" in e.value.message
    assert e.value.session_id == bad.id and e.value.key == "t:b"
    # The rest of the workspace stays readable and runnable.
    assert {i.name for i in ws.sessions()} >= {"good"}
    with ws.open("good", tools=BASIC_TOOLS) as g:
        assert g.result("c") == {"sum": 4}
        f = g.fork(at="b")
        assert f.run().status == "succeeded"
        f.close()


def test_a_well_wrapped_but_invalid_record_is_named_among_many(
    ws: al.Workspace,
) -> None:
    """Records are validated in one batch on opening; one invalid record (right
    checksum, wrong content) is still reported by its key."""
    bad = finished(ws, "invalid")
    store = SessionStore(ws.path / "sessions" / bad.id, bad.id)
    try:
        store.cache.set("t:b", encode('{"task_id": "b", "status": "exploded"}'))
    finally:
        store.close()
    with pytest.raises(al.CorruptCheckpointError) as e:
        ws.open("invalid")
    assert e.value.key == "t:b" and "invalid task record" in e.value.message


def test_a_database_that_is_not_sqlite_is_reported_not_crashed(
    ws: al.Workspace,
) -> None:
    bad = finished(ws, "garbage")
    finished(ws, "fine")
    (ws.path / "sessions" / bad.id / "cache.db").write_bytes(b"\x00garbage" * 512)
    with pytest.raises(al.CorruptCheckpointError, match=bad.id):
        ws.open(bad.id)
    assert [i.name for i in ws.sessions()] == ["fine"]


def test_v0_fixture_loads_through_registered_migrations(ws: al.Workspace) -> None:
    src = next((FIXTURES / "v0_session").iterdir())
    shutil.copytree(src, ws.path / "sessions" / src.name)
    with ws.open(src.name, tools=BASIC_TOOLS) as s:
        assert s.goal == "old goal" and s.name == "old"
        a = s.record("a")
        assert (a.status, a.attempts, a.result) == ("succeeded", 1, {"sum": 2})
        assert [e.kind for e in s.events()] == ["session_created", "task_succeeded"]
        # And it continues: b runs on a's migrated result.
        assert s.run().status == "succeeded"
        assert s.result("b") == {"sum": 3}


def test_newer_schema_is_refused_with_advice(ws: al.Workspace) -> None:
    s = finished(ws, "future")
    c = diskcache.Cache(str(ws.path / "sessions" / s.id), disk=JsonOnlyDisk)
    body = '{"task_id":"a","status":"succeeded"}'
    import zlib

    c.set("t:a", f"{SCHEMA_VERSION + 1}|{zlib.crc32(body.encode()):08x}|{body}")
    c.close()
    with pytest.raises(al.SchemaVersionError, match="upgrade argus-lab"):
        ws.open("future")


def test_store_refuses_to_pickle_and_to_unpickle(ws: al.Workspace) -> None:
    s = finished(ws, "nopickle")
    d = ws.path / "sessions" / s.id
    c = diskcache.Cache(str(d), disk=JsonOnlyDisk)
    with pytest.raises(TypeError, match="JSON text only"):
        c.set("t:a", {"task_id": "a"})
    c.close()
    # A pickled value planted by anything else is never unpickled.
    plain = diskcache.Cache(str(d))
    plain.set("t:a", {"task_id": "a", "status": "succeeded"})  # pickles
    plain.close()
    with pytest.raises(al.CorruptCheckpointError, match="pickled"):
        ws.open("nopickle")


def test_no_pickle_in_the_package_source() -> None:
    pkg = Path(al.__file__).parent
    pat = re.compile(
        r"^\s*(import|from)\s+(pickle|cPickle|dill|cloudpickle|marshal)\b"
        r"|\b(pickle|dill|cloudpickle|marshal)\.(loads?|dumps?)\(",
        re.M,
    )
    offenders = [str(p) for p in pkg.rglob("*.py") if pat.search(p.read_text())]
    assert offenders == []


@pytest.mark.parametrize("inline", [False, True])
def test_each_commit_writes_only_the_changed_record_and_new_events(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch, inline: bool
) -> None:
    """On a tool thread a step is two commits (intent, then outcome); inline on
    the loop (runtime/executor.py) it is one, holding both events."""
    n = 40
    tool = al.tool(name="add", inline=inline)(add.fn)
    plan = {
        "goal": "chain",
        "tasks": [
            {
                "id": f"t{i}",
                "tool": "add",
                "args": {"a": i},
                **({"deps": [f"t{i - 1}"]} if i else {}),
            }
            for i in range(n)
        ],
    }
    s = ws.new_session(plan=plan, tools=[tool], name="delta")
    writes: list[list[str]] = []
    real_commit = SessionStore.commit
    real_update, real_insert = RowWriter.update, RowWriter.insert
    real_update_if = RowWriter.update_if
    current: list[str] = []

    # Every row a commit writes goes through RowWriter (which hands what it
    # cannot write itself to Cache.set).
    def spy_update(rows: RowWriter, con: Any, key: str, value: str) -> None:
        current.append(key)
        real_update(rows, con, key, value)

    def spy_insert(rows: RowWriter, con: Any, key: str, value: str) -> None:
        if current[-1:] != [key]:  # update() falls back to insert() for new rows
            current.append(key)
        real_insert(rows, con, key, value)

    def spy_update_if(
        rows: RowWriter, con: Any, key: str, old: str, value: str
    ) -> bool:
        done = real_update_if(rows, con, key, old, value)
        if done:  # else the head is read and written by update()
            current.append(key)
        return done

    def spy_commit(store: SessionStore, *a: Any, **k: Any) -> Any:
        current.clear()
        out = real_commit(store, *a, **k)
        writes.append(list(current))
        return out

    # Every SessionStore and cache of this test is the session's own.
    monkeypatch.setattr(RowWriter, "update", spy_update)
    monkeypatch.setattr(RowWriter, "insert", spy_insert)
    monkeypatch.setattr(RowWriter, "update_if", spy_update_if)
    monkeypatch.setattr(SessionStore, "commit", spy_commit)
    assert s.run().status == "succeeded"
    s.close()
    task_commits = [w for w in writes if any(k.startswith("t:") for k in w)]
    per_step = 1 if inline else 2
    assert len(task_commits) == per_step * n  # (intent +) outcome per step
    for w in task_commits:
        # One record, one row of its event(s) (envelope.EVENT_VERSION), the head.
        assert len(w) == 3 and "head" in w
        assert sum(k.startswith("t:") for k in w) == 1
        assert sum(k.startswith("e:") for k in w) == 1
    assert max(len(w) for w in writes) <= 3


def test_envelope_round_trip_and_checksum(ws: al.Workspace) -> None:
    text = encode('{"x": 1}')
    assert text.startswith(f"{SCHEMA_VERSION}|")
    s = finished(ws, "env")
    store = SessionStore(s.path, s.id)
    try:
        assert store.decode("k", text, "task") == (SCHEMA_VERSION, '{"x": 1}')
        with pytest.raises(al.CorruptCheckpointError, match="checksum"):
            store.decode("k", text.replace("1}", "2}"), "task")
    finally:
        store.close()


def test_full_durability_relaxes_only_the_intent_of_tools_without_effects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    @al.tool(side_effect="write", idempotent=True)
    def save(x: int) -> int:
        return x

    # Every call on a thread, so each intent is a commit of its own (an
    # inline call's intent goes into its outcome's commit, never relaxed).
    monkeypatch.setattr(executor, "INLINE_AFTER", 10**9)
    ws = al.Workspace(tmp_path / "full", durability="full")
    plan = {
        **CHAIN,
        "tasks": [*CHAIN["tasks"], {"id": "w", "tool": "save", "args": {"x": 1}}],
    }
    s = ws.new_session(plan=plan, tools=[*BASIC_TOOLS, save], name="f", approvals=[])
    real = SessionStore.commit
    seen: list[tuple[str, bool, int]] = []
    intents: list[tuple[list[str], bool]] = []  # (tools whose intents, relaxed)

    def spy(store: SessionStore, *args: Any, **kwargs: Any) -> Any:
        head = real(store, *args, **kwargs)
        events = kwargs.get("events") or []
        kind = events[0].kind if events else "-"
        level = store.cache._sql("PRAGMA synchronous").fetchone()[0]
        seen.append((kind, bool(kwargs.get("relaxed")), level))
        tools = [e.tool for e in events if e.kind == "task_started"]
        if tools:
            intents.append((tools, bool(kwargs.get("relaxed"))))
        return head

    monkeypatch.setattr(SessionStore, "commit", spy)
    assert s.run().status == "succeeded"
    # Intents of tasks starting together share a commit: one holding the write
    # tool's intent is fsynced; those holding only add's intents are relaxed.
    assert sorted(t for tools, _ in intents for t in tools) == [
        "add",
        "add",
        "add",
        "save",
    ]
    for tools, relaxed in intents:
        assert relaxed == ("save" not in tools), intents
    assert all(not r for k, r, _ in seen if k != "task_started")
    assert {lvl for _, _, lvl in seen} == {2}  # FULL again after every commit
    s.close()


def test_head_json_follows_every_change_of_its_lease_and_usage() -> None:
    """The head keeps its lease's JSON between commits (store/head.py): any
    change of the lease, in place or replaced, shows in the next text."""
    lease = make_lease("holder-a", 30)
    head = Head(4, 9, lease, {"steps": 2.0})

    def expect() -> dict[str, Any]:
        return {
            "version": head.version,
            "last_seq": head.last_seq,
            "lease": head.lease,
            "usage": head.usage,
        }

    assert json.loads(head.to_json()) == expect()
    lease["expires"] += 15  # renewed in place
    head.usage["wall_s"] = 0.5
    assert json.loads(head.to_json()) == expect()
    head.lease = make_lease("holder-b", 30)
    assert json.loads(head.to_json()) == expect()
    head.lease = None
    assert json.loads(head.to_json()) == expect()


def test_head_row_reads_back_every_usage_value() -> None:
    """The head's JSON comes from pydantic-core (store/head.py): what
    ``json.loads`` reads back is what was written, NaN and infinities too, and
    a value pydantic-core cannot serialize goes through ``json.dumps``."""
    import numpy as np

    usage = {"steps": 3, "wall_s": 1e-05, "cost_usd": 0.1 + 0.2, "big": 1e22}
    for extra in ({}, {"nan": float("nan")}, {"inf": float("-inf")}):
        head = Head(7, 12, make_lease("h", 30), {**usage, **extra})
        row = head.row()
        assert row == encode(head.to_json())  # the same envelope, its checksum
        back = json.loads(head.to_json())
        assert back["version"] == 7 and back["last_seq"] == 12
        assert back["lease"] == head.lease
        assert json.dumps(back["usage"]) == json.dumps(head.usage)  # NaN == NaN
    head = Head(1, 0, None, {"wall_s": np.float64(0.25)})
    assert json.loads(head.to_json()) == {
        "version": 1,
        "last_seq": 0,
        "lease": None,
        "usage": {"wall_s": 0.25},
    }


def test_event_text_found_clean_is_scanned_again_once_a_secret_is_added() -> None:
    """An event's own text found clean is not scanned again (the redactor
    remembers it, ``Redactor.changes``), until the redactor learns a secret:
    then it is, and masked."""
    from argus_lab.events import make_event
    from argus_lab.redact import MASK, Redactor
    from argus_lab.store._commit import mask_events

    red = Redactor(environ={})
    scans: list[Any] = []
    value = red.value

    def counted(data: Any) -> Any:
        scans.append(data)
        return value(data)

    red.value = counted  # type: ignore[method-assign]

    def started() -> Any:
        return make_event(
            "task_started", session_id="s", ts=1.0, task_id="t", tool="fetch-k3y9x7q2"
        )

    for _ in range(3):
        ev = started()
        mask_events(red, [ev])
        assert ev.tool == "fetch-k3y9x7q2"
    assert scans == ["fetch-k3y9x7q2"]  # once, then remembered
    red.add("k3y9x7q2")  # read through ${env.NAME} mid-run, say
    ev = started()
    mask_events(red, [ev])
    assert ev.tool == f"fetch-{MASK}"
    assert len(scans) == 2


def test_masking_events_masks_as_the_redactor_does() -> None:
    """Remembering clean texts changes nothing the redactor would mask: a
    secret-named field, a secret shape, a known value, nested data, the same
    events twice (the second time partly from memory)."""
    from argus_lab.events import EventBase
    from argus_lab.redact import Redactor
    from argus_lab.store._commit import mask_events

    red = Redactor(["s3cr3t-value"], environ={})

    def events() -> list[EventBase]:
        fields: list[dict[str, Any]] = [
            {"tool": "noop", "bytes": 12, "cached": False},
            {"tool": "noop", "token": "abcdefgh"},
            {"note": "password=hunter22!", "tool": "noop"},
            {"note": "uses s3cr3t-value here", "n": 1.5},
            {"args": {"api_key": "zzzzzzzz", "q": ["x", "s3cr3t-value"]}},
            {"tool": "", "why": "plain text"},
        ]
        return [EventBase(kind="x", session_id="s", ts=1.0, **f) for f in fields]

    for _ in range(2):
        got, want = events(), events()
        mask_events(red, got)
        for ev in want:
            for k, v in red.changes(ev.own_fields()).items():
                setattr(ev, k, v)
        assert [e.own_fields() for e in got] == [e.own_fields() for e in want]
        assert "hunter22" not in str([e.own_fields() for e in got])


def test_rows_hold_what_model_dump_json_writes(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``write_rows`` dumps records and events through their pydantic-core
    serializers and sets each event's seq past pydantic's ``__setattr__``
    (store/_commit.py): the rows hold exactly what ``model_dump_json``
    writes, and every seq is set, numbered and marked set."""
    s = ws.new_session(plan=CHAIN, tools=BASIC_TOOLS, name="dumps")
    events: list[str] = []
    records: dict[str, str] = {}
    real_commit = SessionStore.commit

    def spy_commit(store: SessionStore, *a: Any, **k: Any) -> Any:
        head = real_commit(store, *a, **k)
        for ev in k.get("events") or []:
            assert "seq" in ev.model_fields_set
            events.append(ev.model_dump_json())
        for rec in k.get("records") or []:
            records[rec.task_id] = rec.model_dump_json(exclude_defaults=True)
        return head

    monkeypatch.setattr(SessionStore, "commit", spy_commit)
    assert s.run().status == "succeeded"
    s.close()
    store = SessionStore(s.path, s.id)
    try:
        stored = list(store.iter_event_json())
        assert stored[-len(events) :] == events
        seqs = [json.loads(e)["seq"] for e in stored]
        assert seqs == list(range(1, len(stored) + 1))
        assert set(records) == {"a", "b", "c"}
        for tid, text in records.items():
            row = store.cache.get("t:" + tid)
            assert store.decode("t:" + tid, row, "task") == (SCHEMA_VERSION, text)
    finally:
        store.close()


def test_a_forked_child_gets_its_own_connection(tmp_path: Path) -> None:
    """Transactions take the thread's connection from its thread-local and
    notice a fork by counting forks, not by asking for the pid (_rows.py,
    _thread_con): a child never writes through its parent's."""
    import os

    from argus_lab.store._rows import Transaction
    from argus_lab.store.envelope import open_cache

    cache = open_cache(tmp_path, "normal")
    try:
        with Transaction(cache) as con:
            con.execute("UPDATE Settings SET value = value WHERE key = 'count'")
        with Transaction(cache) as again:
            assert again is con  # the same thread: the kept connection
        parent = id(con)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without pytest's cleanup
            code = 1
            try:
                with Transaction(cache) as child:
                    fresh = id(child) != parent and child is not con
                cache.set("from-child", "1")
                code = 0 if fresh else 2
            finally:
                os.write(w, bytes([code]))
                os._exit(code)
        os.close(w)
        assert os.read(r, 1) == b"\x00"
        os.close(r)
        assert os.waitpid(pid, 0)[1] == 0
        with Transaction(cache) as after:
            assert after is con  # the parent's own stays its own
        assert cache.get("from-child") == "1"
    finally:
        cache.close()


def _triggers(cache: Any) -> dict[str, str]:
    rows = cache._con.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
    ).fetchall()
    return dict(rows)


def test_size_triggers_and_expiry_index_skip_rows_that_never_expire(
    tmp_path: Path,
) -> None:
    """The caches Argus opens keep diskcache's size triggers with a WHEN
    clause and its expiry index partial (store/_opening.py): new databases
    and old ones alike; diskcache's size and count bookkeeping stays exact
    and expired values still expire."""
    import time

    from argus_lab.store.envelope import open_cache

    old = diskcache.Cache(str(tmp_path / "old"), disk=JsonOnlyDisk)  # diskcache's
    assert "WHEN" not in _triggers(old)["Settings_size_insert"]
    old.set("kept", "before")
    old.set("brief", "gone soon", expire=0.001)
    old.close()
    for folder in ("new", "old"):
        cache = open_cache(tmp_path / folder, "normal")
        try:
            trig = _triggers(cache)
            assert "WHEN NEW.size IS NOT 0 " in trig["Settings_size_insert"]
            assert "WHEN NEW.size IS NOT OLD.size " in trig["Settings_size_update"]
            assert "WHEN" not in trig["Settings_count_insert"]
            size0, count0 = _size(cache), len(cache)
            big = "y" * (cache.disk_min_file_size + 10)  # kept in a file
            cache.set("big", big)
            cache.set("small", "z")
            assert len(cache) == count0 + 2
            assert _size(cache) == size0 + len(big)
            cache.set("big", big + "more")  # an update that changes the size
            assert _size(cache) == size0 + len(big) + 4
            cache.set("big", "now small")  # and back inside SQLite
            assert _size(cache) == size0
            cache.delete("small")
            assert len(cache) == count0 + 1
            ((index,),) = cache._con.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'Cache_expire_time'"
            ).fetchall()
            assert index.endswith("WHERE expire_time IS NOT NULL")
            cache.set("brief2", "gone soon too", expire=0.001)
            assert cache.expire(time.time() + 60) == (folder == "old") + 1
            assert cache.get("brief") is None and cache.get("brief2") is None
            assert len(cache) == count0 + 1 - (folder == "old")
        finally:
            cache.close()
    again = diskcache.Cache(str(tmp_path / "old"), disk=JsonOnlyDisk)
    try:  # diskcache creates its triggers only if missing: it keeps these
        assert "WHEN" in _triggers(again)["Settings_size_update"]
        plan = again._con.execute(
            "EXPLAIN QUERY PLAN SELECT rowid FROM Cache"
            " WHERE ? < expire_time AND expire_time < ? ORDER BY expire_time",
            (0, 1),
        ).fetchall()
        assert "Cache_expire_time" in str(plan)  # the partial index serves it
        assert again.get("kept") == "before"
    finally:
        again.close()


def _size(cache: Any) -> int:
    return int(cache.reset("size", update=False))


def test_an_event_row_is_scanned_once_and_masked_event_by_event(
    ws: al.Workspace,
) -> None:
    """A commit's events row is scanned for secret values as a whole
    (store/_commit.py): without one it is the events' JSON in the envelope,
    checksummed from the bytes already made; with one, each event is masked
    on its own and the row still parses line by line."""
    from argus_lab.events import EventBase
    from argus_lab.redact import MASK, Redactor

    s = finished(ws, "evrow")
    store = SessionStore(s.path, s.id)
    try:
        store.redactor = Redactor(["s3cr3t-value-1"], environ={})
        head = store.read_head()
        assert head is not None

        def events(note: str) -> list[EventBase]:
            return [
                EventBase(kind="x", session_id=s.id, ts=1.0, note="plain"),
                EventBase(kind="x", session_id=s.id, ts=2.0, note=note),
            ]

        clean = events("nothing to hide")
        head = store.commit(head.version, "h", events=clean, fields_redacted=True)
        row = store.cache.get("e:" + str(head.last_seq - 1).zfill(12))
        assert row == encode("\n".join(e.model_dump_json() for e in clean), 3)
        head = store.commit(
            head.version,
            "h",
            events=events("uses s3cr3t-value-1 here"),
            fields_redacted=True,
        )
        got = [json.loads(t) for t in store.iter_event_json(head.last_seq - 2)]
        assert [e["note"] for e in got] == ["plain", f"uses {MASK} here"]
        assert [e["seq"] for e in got] == [head.last_seq - 1, head.last_seq]
    finally:
        store.close()
