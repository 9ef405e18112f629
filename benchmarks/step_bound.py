"""The least CPU a step that keeps Argus's promises could cost: a lower bound.

A child of ``bench_step.py --bound`` (run through ``bench_vs_langgraph.py
--child``). It is not Argus and is not meant to become Argus: it is every
step's obligatory work written as one straight loop, with nothing general
around it, so that ``bench_step.py`` can show how much of a step is storage and
promises and how much is Argus's machinery (scheduler, policies, budgets,
approvals, event objects, settle path). Issue 18 asks for Argus within 2x of the
bare diskcache floor; this says what the best possible Python could reach.

What it does, as Argus does for a quick call of a tool without side effects:

- a run's start and end: a commit taking the lease with an event, a commit
  writing the session's status and releasing it;
- per step: the input hash and idempotency key (Argus's own functions), the
  call, timed; the task record and two events as JSON (msgspec, the fastest
  encoder on PyPI, instead of pydantic); one secret scan of each row's text
  (Argus's ``Redactor.needed``); the checksummed envelope; one transaction with
  the head's compare-and-swap update, the record's upsert and the events' row
  (Argus's ``RowWriter`` and ``Transaction``, the statements Argus runs); the
  witness and journal (Argus's ``Witness``);
- the records kept in memory as dicts, the next task found by index.

What it leaves out, and a real step cannot: events as objects for subscribers
(the widget), failure policies and retries, budgets beyond a step counter,
approvals, the lease's renewal, group commits, shutdown. So Argus at this
bound is not attainable; the gap between the two is the most a faster
runtime could win.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

RESULT_TEXT = "x" * 256
SID = "20261130-000000-0b4dbeb9"


def noop(i: int) -> str:
    """The benchmark's tool (bench_runtime.noop)."""
    return RESULT_TEXT


def child_bound(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs an N-step chain the bound's way; returns timings as the others do."""
    import bench_runtime as rt
    import msgspec

    from argus_lab.redact import Redactor
    from argus_lab.runtime.options import idempotency_key, input_hash
    from argus_lab.store._rows import SESSION_PAGE_SIZE, RowWriter, Transaction
    from argus_lab.store.envelope import EVENT_VERSION, encode, open_cache
    from argus_lab.store.head import Head, make_lease
    from argus_lab.store.witness import Witness

    n, durability = spec["n"], spec["durability"]
    root = Path(spec["dir"])
    io0 = rt._read_io()
    cache = open_cache(root / "bound", durability, page_size=SESSION_PAGE_SIZE)
    witness = Witness(root / "bound", fsync=durability == "full")
    rows, redactor = RowWriter(cache), Redactor()
    to_json = msgspec.json.Encoder().encode
    tasks = [{"id": f"t{i}", "tool": "noop", "args": {"i": i}} for i in range(n)]
    records: dict[str, dict[str, Any]] = {}
    head = Head(version=0, last_seq=0, lease=None, usage={})
    head_text: list[str | None] = [None]

    def commit(
        rows_of: list[tuple[str, str, bool]], n_events: int, lease: Any, tids: list[str]
    ) -> None:
        """One transaction: the head's compare-and-swap, then the rows."""
        head.version += 1
        head.last_seq += n_events
        head.lease = lease
        text = encode(head.to_json())
        with Transaction(cache) as con:
            if head_text[0] is None:
                rows.update(con, "head", text)
            elif not rows.update_if(con, "head", head_text[0], text):
                raise RuntimeError("head moved")
            for key, value, new in rows_of:
                (rows.insert if new else rows.update)(con, key, value)
        head_text[0] = text
        witness.record(head.version, tids)

    def checked(text: str) -> str:
        if redactor.needed(text):
            text = redactor.text(text)
        return text

    def event(kind: str, seq: int, **fields: Any) -> str:
        return checked(
            to_json({"kind": kind, "session_id": SID, "seq": seq, **fields}).decode()
        )

    c0, t0 = time.process_time(), time.perf_counter()
    lease = make_lease("x" * 32, 60.0)
    ev = event("resumed", head.last_seq + 1, ts=time.time())
    commit(
        [(f"e:{head.last_seq + 1:012d}", encode(ev, EVENT_VERSION), True)], 1, lease, []
    )
    for steps, task in enumerate(tasks, 1):
        tid, args = task["id"], task["args"]
        head.usage["steps"] = steps
        in_hash = input_hash("noop", args)
        key = idempotency_key(SID, tid, 0)
        started = time.time()
        t_call = time.perf_counter()
        out = noop(**args)
        duration = time.perf_counter() - t_call
        rec = {
            "task_id": tid,
            "status": "succeeded",
            "attempts": 1,
            "result": out,
            "started": started,
            "ended": time.time(),
            "idempotency_key": key,
            "input_hash": in_hash,
            "tool_hash": "4be4828efe0fa3b7",
        }
        rec_text = checked(to_json(rec).decode())
        seq = head.last_seq + 1
        e1 = event("task_started", seq, ts=started, task_id=tid, attempt=1, tool="noop")
        e2 = event(
            "task_succeeded",
            seq + 1,
            ts=rec["ended"],
            task_id=tid,
            attempt=1,
            duration=duration,
            bytes=len(out) + 2,
        )
        commit(
            [
                ("t:" + tid, encode(rec_text), False),
                (f"e:{seq:012d}", encode(e1 + "\n" + e2, EVENT_VERSION), True),
            ],
            2,
            lease,
            [tid],
        )
        records[tid] = rec
    meta = to_json({"id": SID, "status": "succeeded", "n_tasks": n}).decode()
    ev = event("session_succeeded", head.last_seq + 1, ts=time.time())
    commit(
        [
            ("meta", encode(meta), False),
            (f"e:{head.last_seq + 1:012d}", encode(ev, EVENT_VERSION), True),
        ],
        1,
        None,
        [],
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    witness.close()
    cache.close()
    return rt.timed_result(n, wall, cpu, root, io0)
