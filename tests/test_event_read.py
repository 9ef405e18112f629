"""The bulk event read (store/_event_read.py): pages, checks, and what it refuses.

Events are read a page at a time and every page's envelopes are checked together;
anything not plainly current (damage, an old schema, a value that is not text) goes
through the row-by-row decode, which names the key. These tests pin that the bulk
path returns exactly what the row-by-row path returns, and refuses what it refuses.
"""

from __future__ import annotations

import json
import zlib

import diskcache
import pytest

import argus_lab as al
from argus_lab.store import _event_read
from argus_lab.store.checkpoints import SessionStore
from argus_lab.store.envelope import JsonOnlyDisk, encode
from tests.conftest import BASIC_TOOLS

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
        c.set(key(6), text.replace('"seq":6', '"seq":7'))  # checksum now wrong
    finally:
        c.close()
    store = SessionStore(s.path, s.id)
    try:
        with pytest.raises(al.CorruptCheckpointError) as e:
            list(store.iter_event_json())
        assert e.value.key == key(6) and "checksum mismatch" in e.value.message
        # A read starting after it never meets it.
        assert json.loads(next(store.iter_event_json(6)))["seq"] == 7
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
        body = json.loads(c.get(key(1)).split("|", 2)[2])
        own = {k: body.pop(k) for k in ("name", "goal", "parent")}
        body["payload"] = own  # schema_version 1 kept a kind's fields here
        v1 = json.dumps(body)
        c.set(key(1), f"1|{zlib.crc32(v1.encode()):08x}|{v1}")
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
