"""SessionState (argus_lab/runtime/state.py) on its own, over a real store: the
one writer, what it keeps in memory, and when it tells subscribers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.events import EventBase
from argus_lab.model import SessionInfo
from argus_lab.redact import MASK
from argus_lab.runtime.lease import Lease
from argus_lab.runtime.options import SessionOptions
from argus_lab.runtime.state import SessionState
from argus_lab.store.artifacts import ArtifactStore
from argus_lab.store.checkpoints import Loaded, SessionStore, make_lease
from tests.conftest import BASIC_TOOLS

PLAN = al.Plan.from_dict(
    {
        "goal": "two steps",
        "tasks": [
            {"id": "a", "tool": "add", "args": {"a": 1}},
            {"id": "b", "tool": "add", "args": {"a": 2}, "deps": ["a"]},
        ],
    }
)
T0 = 1_750_000_000.0


def make_state(
    folder: Path, *, ttl: float = 30.0, **options: Any
) -> tuple[SessionState, SessionStore]:
    store = SessionStore(folder / "s1", "s1")
    meta = SessionInfo(id="s1", name="one", created=T0, updated=T0, n_tasks=2)
    head = store.create(meta, PLAN, [], [])
    loaded = Loaded(head=head, meta=meta, plan=PLAN)
    state = SessionState(
        store,
        loaded,
        tools={t.name: t for t in BASIC_TOOLS},
        options=SessionOptions(lease_ttl=ttl, **options),
        lease=Lease(ttl),
        artifacts=ArtifactStore(folder / "artifacts"),
        clock=lambda: T0 + 5,
    )
    return state, store


@pytest.fixture
def state(tmp_path: Path) -> Iterator[SessionState]:
    st, store = make_state(tmp_path)
    yield st
    store.close()


def reader(st: SessionState) -> SessionStore:
    """The same session's store as another process would open it."""
    return SessionStore(st.path, "s1")


def test_a_commit_lands_whole_and_only_then_in_memory(state: SessionState) -> None:
    seen: list[tuple[str, str]] = []
    # A subscriber sees the state already updated (the widget reads it).
    state.subscribers.append(
        lambda ev: seen.append((ev.kind, state.records["a"].status))
    )
    rec = state.records["a"].model_copy(update={"status": "succeeded", "result": 2})
    before = state.version
    state.commit([rec], [state.event("task_succeeded", "a", attempt=1)])
    assert state.version == before + 1
    assert state.records["a"].result == 2
    assert seen == [("task_succeeded", "succeeded")]
    other = reader(state)
    try:
        loaded = other.load()
        assert loaded.records["a"].result == 2
        assert [e.kind for e in other.read_events()] == ["task_succeeded"]
        assert other.read_events()[0].ts == T0 + 5  # the state's clock
    finally:
        other.close()


def test_a_refused_commit_changes_nothing_in_memory(state: SessionState) -> None:
    other = reader(state)
    try:  # another writer got there first
        head = other.read_head()
        assert head is not None
        other.commit(head.version, "someone-else", lease=None)
    finally:
        other.close()
    seen: list[EventBase] = []
    state.subscribers.append(seen.append)
    rec = state.records["a"].model_copy(update={"status": "succeeded"})
    with pytest.raises(al.ConcurrentSessionError):
        state.commit([rec], [state.event("task_succeeded", "a")])
    assert state.records["a"].status == "pending"
    assert seen == []


def test_secrets_leave_records_and_events_before_they_land(tmp_path: Path) -> None:
    st, store = make_state(tmp_path, secrets=("hunter2",))
    try:
        rec = st.records["a"].model_copy(
            update={"status": "failed", "error": "login hunter2 refused"}
        )
        ev = st.event("task_failed", "a", error="hunter2 again")
        # Typed fields nested in dicts and lists are masked too, and so is a
        # value under a secret-looking key.
        call = st.event(
            "tool_call",
            "a",
            tool="login",
            args={"user": "bob", "pw": ["x", "hunter2"], "api_key": "k-123"},
            ok=False,
        )
        st.commit([rec], [ev, call])
        assert call.args == {"user": "bob", "pw": ["x", MASK], "api_key": MASK}
        assert call.tool == "login" and ev.error == f"{MASK} again"
        assert "hunter2" not in (st.records["a"].error or "")
        for text in [*store.iter_event_json(), st.records["a"].model_dump_json()]:
            assert "hunter2" not in text
    finally:
        store.close()


def test_a_held_lease_is_renewed_by_a_commit_past_half_its_life(
    tmp_path: Path,
) -> None:
    st, store = make_state(tmp_path, ttl=10.0)
    try:
        st.commit()  # not held: the stored lease is left as it is
        head = store.read_head()
        assert head is not None and head.lease is None
        st.lease.active = 1  # a public call holds it ...
        st.lease.expires = make_lease(st.lease.holder, 10.0)["expires"] - 9.0
        st.clock = time.time  # ... and it is past half its life
        st.commit()
        head = store.read_head()
        assert head is not None and head.lease is not None
        assert head.lease["holder"] == st.lease.holder
        assert head.lease["expires"] == st.lease.expires
        assert st.lease.expires > st.now() + 5.0
        st.commit(lease=None)  # released
        assert st.lease.expires == 0.0
    finally:
        store.close()


def test_a_plan_patch_retires_removed_tasks_and_reschedules(
    state: SessionState,
) -> None:
    new = al.Plan.from_dict(
        {
            "goal": "two steps",
            "tasks": [
                {"id": "a", "tool": "add", "args": {"a": 1}},
                {"id": "c", "tool": "add", "args": {"a": 3}, "deps": ["a"]},
            ],
        }
    )
    done = state.records["a"].model_copy(update={"status": "succeeded"})
    state.commit([done], plan=new)
    state.adopt_plan(new, removed=["b"])
    assert set(state.records) == {"a", "c"}
    assert set(state.retired) == {"b"}
    assert state.sched.peek_all() == ["c"]  # a is done, so c is ready
    assert state.counts()["succeeded"] == 1 and state.counts()["pending"] == 1
