"""Group commit of intents (argus_lab/runtime/intents.py) over a real state and
store: tasks starting together share one transaction, each waits for it, and an
attempt cancelled before it is written leaves no intent behind."""

from __future__ import annotations

import asyncio
from pathlib import Path

from argus_lab.runtime.intents import IntentBatch
from argus_lab.runtime.state import SessionState
from tests.test_runtime_state import make_state, reader


def intent(st: SessionState, tid: str) -> tuple[object, object]:
    rec = st.records[tid].model_copy(update={"status": "running", "attempts": 1})
    return rec, st.event("task_started", tid, attempt=1, payload={"tool": "add"})


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
