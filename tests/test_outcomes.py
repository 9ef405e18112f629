"""Group commit of outcomes (argus_lab/runtime/outcomes.py): the successes of
tasks that settle in the same turn of the loop share one transaction, each
task's record and events inside it (invariant 1), and nothing is reported,
readied or remembered before that transaction is durable."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.runtime.outcomes import OutcomeBatch
from argus_lab.runtime.state import SessionState
from argus_lab.store.checkpoints import SessionStore
from tests.conftest import chain_plan
from tests.test_runtime_state import make_state, reader

N = 12


class Commits:
    """Every commit of a session's store, as (task ids of its records, kinds of
    its events with their task ids), in order; wraps the real commit."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[list[str], list[tuple[str, str | None]]]] = []
        real = SessionStore.commit

        def spy(store: SessionStore, *args: Any, **kwargs: Any) -> Any:
            head = real(store, *args, **kwargs)
            recs = [r.task_id for r in kwargs.get("records") or []]
            evs = [(e.kind, e.task_id) for e in kwargs.get("events") or []]
            self.log.append((recs, evs))
            return head

        monkeypatch.setattr(SessionStore, "commit", spy)

    def holding(self, kind: str, tid: str) -> int:
        """Index of the commit that wrote ``kind`` of ``tid`` (exactly one)."""
        found = [i for i, (_, evs) in enumerate(self.log) if (kind, tid) in evs]
        assert len(found) == 1, (kind, tid, found)
        return found[0]


def together_plan(n: int, *, join: bool = False) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = [
        {"id": f"f{i}", "tool": "meet", "args": {"i": i}} for i in range(n)
    ]
    if join:
        tasks.append(
            {
                "id": "join",
                "tool": "meet",
                "args": {"i": -1},
                "deps": [t["id"] for t in tasks],
            }
        )
    return {"goal": "fan-out", "tasks": tasks}


def meeting_tool(n: int) -> al.Tool:
    """An async tool whose first ``n`` calls all return in the same turn of the
    loop: each waits until all ``n`` have begun (no timing involved)."""
    state: dict[str, Any] = {"began": 0, "all": None}

    @al.tool
    async def meet(i: int) -> int:
        if state["all"] is None:
            state["all"] = asyncio.Event()
        everyone: asyncio.Event = state["all"]
        state["began"] += 1
        if state["began"] == n:
            everyone.set()
        await everyone.wait()
        return i

    return meet


def test_outcomes_of_tasks_ending_together_share_one_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = Commits(monkeypatch)
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=together_plan(N), tools=[meeting_tool(N)], name="fan", concurrency=N
    )
    assert s.run().status == "succeeded"
    ids = [f"f{i}" for i in range(N)]
    at = {commits.holding("task_succeeded", t) for t in ids}
    assert len(at) == 1, commits.log  # one transaction for all twelve
    recs, evs = commits.log[at.pop()]
    # Atomic per task: each one's record is in the commit holding its event.
    assert sorted(recs) == sorted(ids)
    assert Counter(k for k, _ in evs) == {"task_succeeded": N}
    # Stored whole: every task succeeded once, with its result.
    s.close()
    s = ws.open("fan", tools=[meeting_tool(N)])
    assert {t: (r.status, r.result) for t, r in s.records.items()} == {
        f"f{i}": ("succeeded", i) for i in range(N)
    }
    done = Counter(e.task_id for e in s.events() if e.kind == "task_succeeded")
    assert done == dict.fromkeys(ids, 1)
    s.close()
    ws.close()


def test_a_dependant_starts_only_after_the_batch_holding_its_deps_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = Commits(monkeypatch)
    seen: list[tuple[str, str]] = []
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=together_plan(N, join=True),
        tools=[meeting_tool(N)],
        name="join",
        concurrency=N,
    )

    def durable_first(ev: Any) -> None:
        # A subscriber hears of a success only once another reader sees it.
        if ev.kind == "task_succeeded":
            other = SessionStore(s.path, s.id)
            try:
                on_disk = other.load().records[ev.task_id].status
            finally:
                other.close()
            seen.append((ev.task_id, f"{on_disk}/{s.records[ev.task_id].status}"))

    s.subscribe(durable_first)
    assert s.run().status == "succeeded"
    batch = {commits.holding("task_succeeded", f"f{i}") for i in range(N)}
    assert len(batch) == 1
    assert commits.holding("task_started", "join") > batch.pop()
    # Subscribers saw each success stored and in memory already.
    ok = "succeeded/succeeded"
    assert sorted(seen) == sorted([(f"f{i}", ok) for i in range(N)] + [("join", ok)])
    s.close()
    ws.close()


def outcome(st: SessionState, tid: str) -> tuple[Any, list[Any]]:
    rec = st.records[tid].model_copy(
        update={"status": "succeeded", "attempts": 1, "result": tid}
    )
    return rec, [st.event("task_succeeded", tid, attempt=1, duration=0.0, bytes=3)]


def stored(st: SessionState) -> dict[str, str]:
    other = reader(st)
    try:
        return {t: r.status for t, r in other.load().records.items()}
    finally:
        other.close()


def test_the_batch_is_durable_before_any_waiter_or_after_callback_runs(
    tmp_path: Path,
) -> None:
    st, store = make_state(tmp_path)
    batch = OutcomeBatch(st)
    before = st.version
    after: list[tuple[str, dict[str, str]]] = []
    back: list[tuple[str, dict[str, str]]] = []

    async def settle(tid: str) -> None:
        rec, evs = outcome(st, tid)
        await batch.commit(rec, evs, lambda: after.append((tid, stored(st))))
        back.append((tid, stored(st)))

    async def main() -> None:
        await asyncio.gather(settle("a"), settle("b"))

    asyncio.run(main())
    assert st.version == before + 1  # one transaction
    both = {"a": "succeeded", "b": "succeeded"}
    assert after == [("a", both), ("b", both)]
    assert sorted(back) == [("a", both), ("b", both)]
    assert [e.kind for e in st.read_events()] == ["task_succeeded"] * 2
    store.close()


def test_a_refused_batch_writes_nothing_and_every_waiter_hears_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st, store = make_state(tmp_path)
    batch = OutcomeBatch(st)
    after: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise al.ConcurrentSessionError("another writer (injected)")

    async def main() -> list[BaseException | None]:
        tasks = []
        for tid in ("a", "b"):
            rec, evs = outcome(st, tid)
            tasks.append(
                asyncio.create_task(
                    batch.commit(rec, evs, lambda t=tid: after.append(t))  # type: ignore[misc]
                )
            )
        await asyncio.sleep(0)  # both queued
        monkeypatch.setattr(SessionStore, "commit", refuse)
        await asyncio.gather(*tasks, return_exceptions=True)
        return [t.exception() for t in tasks]

    errors = asyncio.run(main())
    monkeypatch.undo()
    assert all(isinstance(e, al.ConcurrentSessionError) for e in errors), errors
    assert after == []  # nobody's dependants readied
    assert stored(st) == {}  # nothing written
    assert {t: r.status for t, r in st.records.items()} == {
        "a": "pending",
        "b": "pending",
    }
    store.close()


def test_a_waiter_cancelled_after_queueing_still_has_its_outcome_written(
    tmp_path: Path,
) -> None:
    """A queued outcome is written whatever becomes of its attempt: the call
    ended and its result is kept, and the scheduler hears of it (the task is
    never left "running" in memory while stored as succeeded)."""
    st, store = make_state(tmp_path)
    batch = OutcomeBatch(st)
    after: list[str] = []

    async def main() -> None:
        rec_a, evs_a = outcome(st, "a")
        rec_b, evs_b = outcome(st, "b")
        a = asyncio.create_task(batch.commit(rec_a, evs_a, lambda: after.append("a")))
        b = asyncio.create_task(batch.commit(rec_b, evs_b, lambda: after.append("b")))
        await asyncio.sleep(0)  # both queued; the flush is the next callback
        a.cancel()
        await asyncio.gather(a, b, return_exceptions=True)
        assert a.cancelled() and b.exception() is None

    asyncio.run(main())
    assert after == ["a", "b"]
    assert stored(st) == {"a": "succeeded", "b": "succeeded"}
    assert st.records["a"].status == "succeeded"
    store.close()


def test_an_outcome_that_cannot_be_written_holds_back_none_of_its_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch is refused as a whole (here b's row hits a full disk): each
    outcome is then tried alone, so a is kept and b's error names b."""
    import sqlite3

    from argus_lab.store._rows import RowWriter

    st, store = make_state(tmp_path)
    batch = OutcomeBatch(st)
    real = RowWriter.update

    def full_for_b(self: RowWriter, con: Any, key: str, value: str) -> None:
        if key == "t:b":
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, con, key, value)

    monkeypatch.setattr(RowWriter, "update", full_for_b)

    async def main() -> list[BaseException | None]:
        tasks = [
            asyncio.create_task(batch.commit(*outcome(st, t), lambda: None))
            for t in ("a", "b")
        ]
        await asyncio.gather(*tasks, return_exceptions=True)
        return [t.exception() for t in tasks]

    a_error, b_error = asyncio.run(main())
    monkeypatch.undo()
    assert a_error is None
    assert isinstance(b_error, al.StorageFullError) and b_error.task_id == "b"
    assert stored(st) == {"a": "succeeded"}
    assert [e.task_id for e in st.read_events()] == ["a"]
    store.close()


def test_calls_in_flight_stay_within_the_concurrency_while_outcomes_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt whose success waits for its group commit gives its slot to
    the next task (its call is over), but calls in flight never exceed the
    session's concurrency, and every outcome is still written once."""
    commits = Commits(monkeypatch)
    live = {"now": 0, "most": 0}

    @al.tool
    async def hop(i: int) -> int:
        live["now"] += 1
        live["most"] = max(live["most"], live["now"])
        for _ in range(i % 3 + 1):  # calls of different lengths, in turns
            await asyncio.sleep(0)
        live["now"] -= 1
        return i

    n = 40
    plan = {
        "goal": "waves",
        "tasks": [{"id": f"h{i}", "tool": "hop", "args": {"i": i}} for i in range(n)],
    }
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(plan=plan, tools=[hop], name="waves", concurrency=4)
    assert s.run().status == "succeeded"
    assert live["most"] == 4
    for i in range(n):
        commits.holding("task_succeeded", f"h{i}")  # exactly once each
    assert {t: r.result for t, r in s.records.items()} == {f"h{i}": i for i in range(n)}
    # Grouped: fewer outcome commits than outcomes.
    outcome_commits = [
        evs for _, evs in commits.log if any(k == "task_succeeded" for k, _ in evs)
    ]
    assert len(outcome_commits) < n
    s.close()
    ws.close()


@al.tool(name="quick", inline=True)
def quick_inline(i: int) -> int:
    return i


def test_inline_steps_commit_alone_in_a_chain_and_together_in_a_fan_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quick call on the loop settles without a Task (AttemptRunner.begin):
    alone (a chain: nothing else ready) its step is one commit of its own,
    intent and outcome; beside tasks ready to start (a fan-out) its success
    joins their group commit, its intent in the same transaction as its own
    record. Either way each task's record and both its events share a commit."""
    commits = Commits(monkeypatch)
    ws = al.Workspace(tmp_path / "ws")
    chain = chain_plan(6, "quick", prefix="c")
    s = ws.new_session(plan=chain, tools=[quick_inline], name="chain")
    assert s.run().status == "succeeded"
    s.close()
    for i in range(6):
        at = commits.holding("task_succeeded", f"c{i}")
        assert commits.holding("task_started", f"c{i}") == at
        assert commits.log[at][0] == [f"c{i}"]  # alone in its commit
    commits.log.clear()
    fan = {
        "goal": "fan",
        "tasks": [{"id": f"f{i}", "tool": "quick", "args": {"i": i}} for i in range(N)],
    }
    s = ws.new_session(plan=fan, tools=[quick_inline], name="fan", concurrency=4)
    assert s.run().status == "succeeded"
    s.close()
    ids = [f"f{i}" for i in range(N)]
    at = {t: commits.holding("task_succeeded", t) for t in ids}
    for t in ids:
        assert commits.holding("task_started", t) == at[t]
        assert t in commits.log[at[t]][0]
    assert len(set(at.values())) < N  # successes shared transactions
    ws.close()


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_waiting_outcome_frees_its_slot_only_if_a_crash_would_rerun_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, idempotent: bool
) -> None:
    """A non-idempotent write whose success waits for its commit keeps its
    slot: were the next call started beside it, a crash before the batch
    would leave two tasks in doubt at concurrency 1. An idempotent one (rerun
    after a crash) hands its slot on, so the next intent may precede it."""
    commits = Commits(monkeypatch)

    @al.tool(side_effect="write", idempotent=idempotent)
    async def put(i: int) -> int:
        await asyncio.sleep(0)
        return i

    n = 8
    plan = {
        "goal": "writes",
        "tasks": [{"id": f"w{i}", "tool": "put", "args": {"i": i}} for i in range(n)],
    }
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=plan,
        tools=[put],
        name="writes",
        concurrency=1,
        approvals=[al.ApprovalPolicy("approve")],
    )
    assert s.run().status == "succeeded"
    before = [
        commits.holding("task_started", f"w{i}")
        < commits.holding("task_succeeded", f"w{i - 1}")
        for i in range(1, n)
    ]
    if idempotent:
        assert any(before)
    else:
        assert not any(before)
    s.close()
    ws.close()
