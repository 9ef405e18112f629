"""The bulk event read (store/_event_read.py): pages, checks, and what it refuses.

Events are read a page at a time and every page's envelopes are checked together;
anything not plainly current (damage, an old schema, a value that is not text) goes
through the row-by-row decode, which names the key. These tests pin that the bulk
path returns exactly what the row-by-row path returns, and refuses what it refuses.
"""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import diskcache
import pytest

import argus_lab as al
from argus_lab.events import EventBase, make_event
from argus_lab.store import _commit, _event_read
from argus_lab.store.checkpoints import SessionStore
from argus_lab.store.envelope import EVENT_VERSION, JsonOnlyDisk, encode
from tests.conftest import BASIC_TOOLS, chain_plan

TRAJECTORY = Path(__file__).parent / "fixtures" / "trajectory" / "ws"
PARENT = "penguin-review"  # a session of it (tests/fixtures/make_trajectory.py)

CHAIN = {
    "goal": "chain",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1}},
        {"id": "b", "tool": "add", "args": {"a": "${a.result.sum}"}},
        {"id": "c", "tool": "add", "args": {"a": "${b.result.sum}"}},
    ],
}


def finished(ws: al.Workspace, name: str) -> al.Session:
    s = ws.new_session(plan=CHAIN, tools=BASIC_TOOLS, name=name)
    assert s.run().status == "succeeded"
    s.close()
    return s


def key(seq: int) -> str:
    return f"e:{seq:012d}"


def test_pages_return_what_the_row_by_row_decode_returns(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = finished(ws, "paged")
    monkeypatch.setattr(_event_read, "PAGE", 3)  # many pages, a short last one
    store = SessionStore(s.path, s.id)
    try:
        careful = list(store._read.decode_events(key(1), "e;"))
        n = len(careful)
        assert n > 7  # several pages of 3
        for since in range(n + 2):
            got = list(store.iter_event_json(since))
            assert got == careful[since:]
            assert store._read.event_texts(since) == careful[since:]
        assert [json.loads(t)["seq"] for t in careful] == list(range(1, n + 1))
    finally:
        store.close()


def test_a_damaged_event_is_named_by_its_key_in_every_read(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = finished(ws, "damaged")
    monkeypatch.setattr(_event_read, "PAGE", 4)
    c = diskcache.Cache(str(s.path), disk=JsonOnlyDisk)
    try:
        text = c.get(key(6))
        # The row of seq 6 may hold the events after it in the same commit.
        last = max(
            json.loads(line)["seq"] for line in text.split("|", 2)[2].split("\n")
        )
        c.set(key(6), text.replace('"seq":6', '"seq":70'))  # checksum now wrong
    finally:
        c.close()
    store = SessionStore(s.path, s.id)
    try:
        with pytest.raises(al.CorruptCheckpointError) as e:
            list(store.iter_event_json())
        assert e.value.key == key(6) and "checksum mismatch" in e.value.message
        with pytest.raises(al.CorruptCheckpointError):  # wants an event of it
            next(store.iter_event_json(last - 1))
        # A read starting after its last event never meets it.
        assert json.loads(next(store.iter_event_json(last)))["seq"] == last + 1
    finally:
        store.close()
    with pytest.raises(al.CorruptCheckpointError, match=key(6)):
        al.analysis.events_df(ws)
    ev = al.analysis.events_df(ws, strict=False)
    assert "checksum mismatch" in ev.attrs["skipped"][s.id]


def test_an_old_schema_event_among_current_ones_is_migrated(
    ws: al.Workspace,
) -> None:
    s = finished(ws, "mixed")
    before = [e.model_dump() for e in s.events()]
    c = diskcache.Cache(str(s.path), disk=JsonOnlyDisk)
    try:
        # The session's first commit wrote its events in one row (version 3):
        # the first becomes a row of its own in schema 1, the rest stay one.
        first, *rest = c.get(key(1)).split("|", 2)[2].split("\n")
        assert rest
        body = json.loads(first)
        own = {k: body.pop(k) for k in ("name", "goal", "parent")}
        body["payload"] = own  # schema_version 1 kept a kind's fields here
        v1 = json.dumps(body)
        c.set(key(1), f"1|{zlib.crc32(v1.encode()):08x}|{v1}")
        c.set(key(2), encode("\n".join(rest), EVENT_VERSION))
    finally:
        c.close()
    with ws.open("mixed", tools=BASIC_TOOLS) as again:
        assert [e.model_dump() for e in again.events()] == before
        assert al.analysis.events_df(again)["kind"].iloc[0] == "session_created"


def test_a_pickled_or_non_text_event_value_is_refused(ws: al.Workspace) -> None:
    s = finished(ws, "pickled")
    plain = diskcache.Cache(str(s.path))
    try:
        plain.set(key(2), {"kind": "plan_created"})  # diskcache pickles a dict
    finally:
        plain.close()
    store = SessionStore(s.path, s.id)
    try:
        with pytest.raises(al.CorruptCheckpointError, match="pickled"):
            store._read.event_texts()
    finally:
        store.close()


def test_an_envelope_with_a_valid_checksum_of_other_text_is_refused(
    ws: al.Workspace,
) -> None:
    """The bulk check compares whole envelopes, so a right checksum on the wrong
    body (or a body cut short) is caught like any other mismatch."""
    s = finished(ws, "swapped")
    c = diskcache.Cache(str(s.path), disk=JsonOnlyDisk)
    try:
        other = encode('{"kind":"x"}')
        text = c.get(key(3))
        c.set(key(3), other[:11] + text[11:])
    finally:
        c.close()
    store = SessionStore(s.path, s.id)
    try:
        with pytest.raises(al.CorruptCheckpointError, match="checksum"):
            store._read.event_texts()
    finally:
        store.close()


def _anomalies(sid: str, n: int, what: str) -> list[EventBase]:
    return [
        make_event("anomaly", session_id=sid, ts=1.0, what=what, detail=str(i))
        for i in range(n)
    ]


def _row_versions(path: Path) -> dict[str, str]:
    c = diskcache.Cache(str(path), disk=JsonOnlyDisk)
    try:
        return {k: c.get(k)[0] for k in c.iterkeys() if k.startswith("e:")}
    finally:
        c.close()


def test_an_old_layout_store_reads_on_with_rows_of_several_events_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written one event a row (schema 1: the committed fixture; then
    schema 2, as argus-lab wrote before rows of several events) goes on with
    rows of a commit's events (version 3): every read from every seq returns
    each event once, in order, through pages that split rows."""
    shutil.copytree(TRAJECTORY, tmp_path / "ws")
    ws = al.Workspace(tmp_path / "ws")
    s = ws.open(PARENT)
    path, sid = s.path, s.id
    s.close()
    ws.close()
    old = _row_versions(path)
    assert set(old.values()) == {"1"}  # schema 1, one event a row
    store = SessionStore(path, sid)
    try:
        head = store.read_head()
        assert head is not None
        v = head.version
        # The writer as it was: schema 2, one event a row.
        monkeypatch.setattr(_commit, "EVENT_VERSION", 2)
        monkeypatch.setattr(_commit, "EVENTS_PER_ROW", 1)
        for n in (2, 1):
            v = store.commit(v, "test", events=_anomalies(sid, n, f"old{n}")).version
        old = _row_versions(path)
        assert sorted(old.values()).count("2") == 3
        before = store._read.event_texts()
        assert len(before) == len(old)
        # Three commits: 3 events, 1 event, 5 events in rows of 2 at most.
        monkeypatch.setattr(_commit, "EVENT_VERSION", EVENT_VERSION)
        monkeypatch.setattr(_commit, "EVENTS_PER_ROW", 2)
        for n in (3, 1, 5):
            v = store.commit(v, "test", events=_anomalies(sid, n, f"batch{n}")).version
        careful = list(store._read.decode_events(key(1), "e;"))
        new = {k: sv for k, sv in _row_versions(path).items() if k not in old}
        assert sorted(new.values()) == ["3"] * 6  # rows of 2+1, 1, 2+2+1 events
        assert careful[: len(before)] == before
        seqs = [json.loads(t)["seq"] for t in careful]
        assert seqs == list(range(1, len(before) + 10))
        assert [json.loads(t)["detail"] for t in careful[len(before) :]] == [
            "0", "1", "2", "0", "0", "1", "2", "3", "4",
        ]  # fmt: skip
        monkeypatch.setattr(_event_read, "PAGE", 3)  # pages that cut rows
        for since in range(len(careful) + 2):
            assert list(store.iter_event_json(since)) == careful[since:], since
            assert store._read.event_texts(since) == careful[since:], since
        assert [e.seq for e in store.read_events(len(before) + 1)] == seqs[
            len(before) + 1 :
        ]
    finally:
        store.close()


def test_a_chain_writes_one_row_per_commit_and_reads_back_every_event(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    @al.tool(inline=True)
    def quick(i: int) -> int:
        return i

    s = ws.new_session(plan=chain_plan(6, "quick"), tools=[quick], name="rows")
    assert s.run().status == "succeeded"
    events = [e.model_dump() for e in s.events()]
    s.close()
    versions = _row_versions(s.path)
    assert set(versions.values()) == {"3"}
    assert len(versions) < len(events)  # each step's two events share a row
    kinds = [e["kind"] for e in events]
    assert kinds.count("task_started") == kinds.count("task_succeeded") == 6
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    monkeypatch.setattr(_event_read, "PAGE", 2)
    with ws.open("rows", tools=[quick]) as again:
        for since in range(len(events) + 1):
            assert [e.model_dump() for e in again.events(since)] == events[since:]
        df = al.analysis.events_df(again)
        assert list(df["seq"]) == [e["seq"] for e in events]


def test_a_damaged_row_of_several_events_is_named_and_a_newer_one_refused(
    ws: al.Workspace,
) -> None:
    s = finished(ws, "rowdamage")
    c = diskcache.Cache(str(s.path), disk=JsonOnlyDisk)
    try:
        text = c.get(key(1))  # the session's first commit: its events in one row
        assert text.startswith("3|") and "\n" in text
        c.set(key(1), text.replace("\n", "\n\n", 1))  # checksum now wrong
    finally:
        c.close()
    store = SessionStore(s.path, s.id)
    try:
        with pytest.raises(al.CorruptCheckpointError) as e:
            store._read.event_texts()
        assert e.value.key == key(1) and "checksum mismatch" in e.value.message
        body = text.split("|", 2)[2]
        c = diskcache.Cache(str(s.path), disk=JsonOnlyDisk)
        try:
            c.set(key(1), encode(body, EVENT_VERSION + 1))
        finally:
            c.close()
        with pytest.raises(al.SchemaVersionError, match="newer than this"):
            store._read.event_texts()
    finally:
        store.close()
