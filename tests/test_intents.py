"""Group commit of intents (argus_lab/runtime/intents.py) over a real state and
store: tasks starting together share one transaction, each waits for it, and an
attempt cancelled before it is written leaves no intent behind."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.runtime.intents import IntentBatch
from argus_lab.runtime.state import SessionState
from argus_lab.store.checkpoints import SessionStore
from tests.test_runtime_state import make_state, reader


def intent(st: SessionState, tid: str) -> tuple[object, object]:
    rec = st.records[tid].model_copy(update={"status": "running", "attempts": 1})
    return rec, st.event("task_started", tid, attempt=1, tool="add")


def test_intents_queued_in_one_turn_share_one_commit(tmp_path: Path) -> None:
    st, store = make_state(tmp_path)
    batch = IntentBatch(st)
    before = st.version
    order: list[str] = []

    async def attempt(tid: str) -> None:
        rec, ev = intent(st, tid)
        await batch.commit(rec, ev, relaxed=True)  # type: ignore[arg-type]
        # Invariant 2: by now the intent is on disk, as another reader sees it.
        other = reader(st)
        try:
            assert other.load().records[tid].status == "running"
        finally:
            other.close()
        order.append(tid)

    async def main() -> None:
        await asyncio.gather(attempt("a"), attempt("b"))

    asyncio.run(main())
    assert st.version == before + 1  # one transaction for both
    assert sorted(order) == ["a", "b"]
    assert [e.kind for e in st.read_events()] == ["task_started", "task_started"]
    store.close()


def test_an_attempt_cancelled_before_the_batch_is_written_leaves_no_intent(
    tmp_path: Path,
) -> None:
    st, store = make_state(tmp_path)
    batch = IntentBatch(st)

    async def main() -> None:
        a = asyncio.create_task(batch.commit(*intent(st, "a"), relaxed=True))  # type: ignore[misc]
        b = asyncio.create_task(batch.commit(*intent(st, "b"), relaxed=True))  # type: ignore[misc]
        await asyncio.sleep(0)  # both queued; the flush is the next callback
        assert st.records["a"].status == "running"  # in flight, like a commit
        a.cancel()
        await asyncio.gather(a, b, return_exceptions=True)
        assert a.cancelled() and b.done() and b.exception() is None

    asyncio.run(main())
    other = reader(st)
    try:
        recs = other.load().records
    finally:
        other.close()
    assert recs["b"].status == "running" and "a" not in recs
    # In memory too: a is pending again (it showed running while queued).
    assert st.records["a"].status == "pending" and st.records["b"].status == "running"
    assert [e.task_id for e in st.read_events()] == ["b"]
    store.close()


def test_a_batch_that_fails_to_commit_runs_no_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Invariant 2 under grouped intents: when the transaction holding the
    intents is refused (here as by a second writer), no attempt of the batch
    calls its tool, none reads running, and a later run does each once."""
    calls: list[str] = []

    @al.tool(side_effect="write", idempotent=False)
    def pay(n: int) -> int:
        calls.append(f"pay{n}")
        return n

    @al.tool(inline=True)
    def look(n: int) -> int:
        calls.append(f"look{n}")
        return n

    plan = {
        "goal": "fan-out",
        "tasks": [
            *({"id": f"p{i}", "tool": "pay", "args": {"n": i}} for i in range(3)),
            *({"id": f"l{i}", "tool": "look", "args": {"n": i}} for i in range(2)),
        ],
    }
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(plan=plan, tools=[pay, look], name="b", approvals=())
    real = SessionStore.commit
    refused: list[int] = []

    def refuse_intents(store: SessionStore, *args: Any, **kwargs: Any) -> Any:
        kinds = {e.kind for e in kwargs.get("events") or []}
        if "task_started" in kinds and "task_succeeded" not in kinds:
            refused.append(len(kwargs.get("records") or []))
            raise al.ConcurrentSessionError("another writer (injected)")
        return real(store, *args, **kwargs)

    monkeypatch.setattr(SessionStore, "commit", refuse_intents)
    with pytest.raises(al.ConcurrentSessionError, match="injected"):
        s.run()
    assert refused and refused[0] == 3  # the three writes' intents, one batch
    assert not [c for c in calls if c.startswith("pay")], calls
    assert all(r.status != "running" for r in s.records.values()), s.records
    monkeypatch.setattr(SessionStore, "commit", real)
    s.close()
    s = ws.open("b", tools=[pay, look], approvals=())
    assert all(r.status != "running" for r in s.records.values())
    assert s.run().status == "succeeded"
    # Over both runs each tool ran once (an inline look may have finished in
    # the first, in the same turn as the refused batch).
    assert sorted(calls) == ["look0", "look1", "pay0", "pay1", "pay2"]
    assert {t: r.attempts for t, r in s.records.items()} == dict.fromkeys(
        [f"p{i}" for i in range(3)] + ["l0", "l1"], 1
    )
    s.close()
    ws.close()


def test_under_full_durability_each_write_call_follows_its_fsynced_intent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Invariant 2 with durability="full": whichever way a write runs (inline
    or on a thread, in a batch with side-effect-free intents or not), its
    intent was committed without relaxing the fsync before the call began."""
    commits: list[tuple[set[str], bool]] = []  # (task_started of, relaxed)
    order: list[str] = []
    checked: dict[str, bool] = {}

    def fsynced_before(tid: str) -> bool:
        return any(tid in tids and not relaxed for tids, relaxed in commits)

    @al.tool(side_effect="write", idempotent=True, inline=True)
    def put_inline(i: int, *, ctx: al.ToolContext) -> int:
        checked[ctx.task_id] = fsynced_before(ctx.task_id)
        return i

    @al.tool(side_effect="write", idempotent=False)
    def put(i: int, *, ctx: al.ToolContext) -> int:
        checked[ctx.task_id] = fsynced_before(ctx.task_id)
        return i

    @al.tool(inline=True)
    def look(i: int) -> int:
        order.append(f"l{i}")
        return i

    real = SessionStore.commit

    def spy(store: SessionStore, *args: Any, **kwargs: Any) -> Any:
        head = real(store, *args, **kwargs)
        tids = {
            e.task_id or ""
            for e in kwargs.get("events") or []
            if e.kind == "task_started"
        }
        commits.append((tids, bool(kwargs.get("relaxed"))))
        return head

    monkeypatch.setattr(SessionStore, "commit", spy)
    tools = [put_inline, put, look]
    tasks = [
        {"id": f"{k}{i}", "tool": k, "args": {"i": i}}
        for i in range(4)
        for k in ("put_inline", "put", "look")
    ]
    tasks += [
        {
            "id": f"after{i}",
            "tool": "put_inline",
            "args": {"i": i},
            "deps": [f"look{i}"],
        }
        for i in range(4)
    ]
    ws = al.Workspace(tmp_path / "ws", durability="full")
    s = ws.new_session(
        plan={"goal": "full", "tasks": tasks},
        tools=tools,
        name="full",
        approvals=(),
        concurrency=6,
    )
    assert s.run().status == "succeeded"
    writes = [t["id"] for t in tasks if t["tool"] != "look"]
    assert checked == dict.fromkeys(writes, True)
    assert len(order) == 4
    s.close()
    ws.close()
