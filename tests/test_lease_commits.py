"""The runner lease rides on a run's own commits (invariant 6, runtime/state.py).

A call checks the lease when it starts and writes it with its first commit; a
run gives it back with its last. So a run of N quick steps makes no commit of
its own for the lease, and still: a live holder elsewhere refuses the call
before anything is written, a writer that slips in between the check and the
first commit makes that commit fail whole, and no tool runs before the lease
is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.runtime.ending import RunEnd
from argus_lab.store.checkpoints import SessionStore
from argus_lab.store.head import make_lease
from tests.test_concurrency import foreign_commit, head

CHAIN = {
    "goal": "three steps",
    "tasks": [
        {"id": "a", "tool": "echo", "args": {"x": 1}},
        {"id": "b", "tool": "echo", "args": {"x": 2}, "deps": ["a"]},
        {"id": "c", "tool": "echo", "args": {"x": 3}, "deps": ["b"]},
    ],
}


@al.tool
def echo(x: int) -> int:
    return x


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Records every transaction of a session store: ("commit", lease) or
    ("acquire", None)."""
    seen: list[tuple[str, Any]] = []
    commit, acquire = SessionStore.commit, SessionStore.acquire_lease

    def spy_commit(store: SessionStore, *a: Any, **kw: Any) -> Any:
        lease = kw.get("lease", "keep")
        seen.append(("commit", "fresh" if isinstance(lease, dict) else lease))
        return commit(store, *a, **kw)

    def spy_acquire(store: SessionStore, *a: Any, **kw: Any) -> Any:
        seen.append(("acquire", None))
        return acquire(store, *a, **kw)

    monkeypatch.setattr(SessionStore, "commit", spy_commit)
    monkeypatch.setattr(SessionStore, "acquire_lease", spy_acquire)
    return seen


def test_a_run_writes_the_lease_in_its_first_commit_and_frees_it_in_its_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(plan=CHAIN, tools=[echo], name="l", approvals=[])
    try:
        seen = _spy(monkeypatch)
        assert s.run().status == "succeeded"
        assert ("acquire", None) not in seen
        assert seen[0] == ("commit", "fresh")  # "running", with the lease
        assert seen[-1] == ("commit", None)  # "succeeded", lease given back
        # One commit per step (the first call's intent has one of its own, on
        # a thread), the run's start and its end: none for the lease alone.
        assert len(seen) == 3 + 1 + 2, seen
        assert head(s).lease is None

        seen.clear()
        assert s.run().status == "succeeded"  # nothing to do: nothing written
        assert seen == []
    finally:
        s.close()
        ws.close()


def test_a_live_holder_elsewhere_refuses_the_call_before_anything_is_written(
    tmp_path: Path,
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(plan=CHAIN, tools=[echo], name="l", approvals=[])
    try:
        h = head(s)
        foreign = {**make_lease("foreign", 60), "host": "elsewhere"}
        foreign_commit(s, h.version, "foreign", lease=foreign)
        with pytest.raises(al.ConcurrentSessionError, match=r"foreign|elsewhere"):
            s.run()
        after = head(s)
        assert after.version == h.version + 1  # only the foreign commit
        assert after.lease["holder"] == "foreign"
        assert s.record("a").status == "pending"
    finally:
        s.close()
        ws.close()


def test_a_writer_between_the_check_and_the_first_commit_fails_that_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(plan=CHAIN, tools=[echo], name="l", approvals=[])
    calls: list[int] = []

    @al.tool(name="echo")
    def echo_seen(x: int) -> int:
        calls.append(x)
        return x

    s.update_tools(echo_seen)
    real_start = RunEnd.start

    def start_after_a_foreign_write(end: RunEnd) -> bool:
        # The lease was checked (nobody held it) but not written yet: another
        # writer takes it now, as a second process could.
        foreign = {**make_lease("foreign", 60), "host": "elsewhere"}
        foreign_commit(s, head(s).version, "foreign", lease=foreign)
        return real_start(end)

    monkeypatch.setattr(RunEnd, "start", start_after_a_foreign_write)
    try:
        before = head(s).version
        with pytest.raises(al.ConcurrentSessionError):
            s.run()
        after = head(s)
        assert after.version == before + 1  # ours wrote nothing
        assert after.lease["holder"] == "foreign"
        assert calls == []  # no tool ran
    finally:
        s.close()
        ws.close()


def test_a_step_writes_the_lease_before_an_inline_call_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inline call's intent goes into its outcome's commit, after the call:
    the lease must be written before it (RunLoop.begin claims it)."""
    held: list[Any] = []

    @al.tool(name="echo", inline=True)
    def echo_inline(x: int) -> int:
        held.append(head(s).lease)
        return x

    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(plan=CHAIN, tools=[echo_inline], name="l", approvals=[])
    try:
        seen = _spy(monkeypatch)
        s.step()
        assert held and held[0] is not None and held[0]["holder"] != "foreign"
        assert seen[0] == ("commit", "fresh")
        assert head(s).lease is None  # released when the step ended
    finally:
        s.close()
        ws.close()
