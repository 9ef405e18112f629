"""Reopening reads statuses, not records: what is checked on opening, what when
a record or a task is first read (store/records.py, store/stored_plan.py)."""

from __future__ import annotations

import json
import re
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import argus_lab as al
from argus_lab.model import STATUSES, TaskRecord
from argus_lab.runtime.scheduler import DONE, Scheduler
from argus_lab.store.checkpoints import SessionStore
from argus_lab.store.envelope import encode
from argus_lab.store.records import TaskRecords
from tests.conftest import BASIC_TOOLS

N = 40


def chain(n: int = N) -> dict[str, object]:
    tasks: list[dict[str, object]] = [{"id": "t0", "tool": "add", "args": {"a": 0}}]
    tasks += [
        {"id": f"t{i}", "tool": "add", "args": {"a": f"${{t{i - 1}.result.sum}}"}}
        for i in range(1, n)
    ]
    return {"goal": "chain", "tasks": tasks}


def half_run(ws: al.Workspace, name: str = "half") -> al.Session:
    """A chain whose first half succeeded; closed."""
    s = ws.new_session(plan=chain(), tools=BASIC_TOOLS, name=name)
    for _ in range(N // 2):
        s.step()
    s.close()
    return s


def store_of(ws: al.Workspace, s: al.Session) -> SessionStore:
    return SessionStore(ws.path / "sessions" / s.id, s.id)


def test_open_validates_no_record_and_reads_each_on_demand(ws: al.Workspace) -> None:
    s = half_run(ws)
    store = store_of(ws, s)
    try:
        loaded = store.load()
    finally:
        store.close()
    recs = loaded.records
    assert isinstance(recs, TaskRecords)
    assert len(recs) == N // 2 and recs.unread() == N // 2  # nothing validated
    assert set(recs.status.values()) == {"succeeded"}
    assert recs["t3"].result == {"sum": 4} and recs.unread() == N // 2 - 1
    # values() validates the rest in one call; the same records as one by one.
    direct = {t: TaskRecord.model_validate(r.model_dump()) for t, r in recs.items()}
    assert recs.unread() == 0 and direct == dict(recs.items())

    with ws.open("half", tools=BASIC_TOOLS) as again:
        assert again.counts()["succeeded"] == N // 2
        assert again.ready() == [f"t{N // 2}"]
        # The next step reads what it needs (its dependency's result) and runs.
        assert [r.status for r in again.step()] == ["succeeded"]
        assert again.result(f"t{N // 2}") == {"sum": N // 2 + 1}
        assert again.run().status == "succeeded"


def test_a_damaged_finished_record_still_fails_the_open(ws: al.Workspace) -> None:
    """Checksums are verified on opening for every record, finished ones too,
    although none is validated then: damage is reported where it always was."""
    s = half_run(ws, "damaged")
    db = ws.path / "sessions" / s.id / "cache.db"
    data = db.read_bytes()
    m = re.search(rb'"task_id":"t1","status":"succeeded".{0,200}?"sum":2', data)
    assert m is not None
    db.write_bytes(data[: m.end() - 1] + b"9" + data[m.end() :])
    with pytest.raises(al.CorruptCheckpointError) as e:
        ws.open("damaged", tools=BASIC_TOOLS)
    assert e.value.key == "t:t1" and "checksum mismatch" in e.value.message
    assert s.id in e.value.message


@pytest.mark.parametrize(
    "text",
    [
        '{"task_id": "t1", "status": "succeeded"}',  # not as model_dump_json writes
        '{"task_id":"t1","status":"exploded"}',  # an unknown status
        '{"task_id":"t1","status":"succeeded"',  # cut short
    ],
)
def test_a_record_whose_status_cannot_be_read_is_validated_on_open(
    ws: al.Workspace, text: str
) -> None:
    s = half_run(ws, "odd")
    store = store_of(ws, s)
    try:
        store.cache.set("t:t1", encode(text))
    finally:
        store.close()
    if "exploded" in text or not text.endswith("}"):
        with pytest.raises(al.CorruptCheckpointError) as e:
            ws.open("odd", tools=BASIC_TOOLS)
        assert e.value.key == "t:t1" and "invalid task record" in e.value.message
    else:  # valid, only spaced out: validated at once, and fine
        with ws.open("odd", tools=BASIC_TOOLS) as again:
            assert again.record("t1").status == "succeeded"


def test_statuses_are_read_as_the_writer_writes_them_and_only_so() -> None:
    """The scan relies on model_dump_json putting the id, then the status
    (left out when "pending"), first; a status anywhere else is validated."""
    from argus_lab.store.records import bulk_records, load_records

    def rec(**kw: object) -> str:
        return TaskRecord.model_validate(kw).model_dump_json(exclude_defaults=True)

    assert rec(task_id="x", status="failed", attempts=2).startswith(
        '{"task_id":"x","status":"failed",'
    )
    assert rec(task_id="x", attempts=2).startswith('{"task_id":"x","attempts":2')
    texts = {
        "a": rec(task_id="a", status="in_doubt"),
        "b": rec(task_id="b", result={"status": "failed"}),  # pending
        "c": '{"task_id":"c","attempts":1,"status":"failed"}',  # reordered
        "d": rec(task_id="d"),
    }
    eager: list[str] = []

    def parse_one(key: str, raw: str) -> TaskRecord:
        eager.append(key)
        return TaskRecord.model_validate_json(raw.split("|", 2)[2])

    recs = load_records(
        [(f"t:{t}", 1, None, encode(x)) for t, x in texts.items()],
        lambda *a: pytest.fail("no row needs fetching"),
        lambda key, raw: (True, raw.split("|", 2)[2]),
        parse_one,
        lambda t, body: TaskRecord.model_validate_json(body),
    )
    assert recs.status == {
        "a": "in_doubt",
        "b": "pending",
        "c": "failed",
        "d": "pending",
    }
    assert eager == ["t:b", "t:c"]  # "status" after the id: validated at once
    assert {t: r.status for t, r in recs.items()} == recs.status

    # The bulk check (every row at once) takes the plain rows, and gives up on
    # the whole read for anything else, which load_records then reads row by row.
    def bulk(*tids: str) -> dict[str, str] | None:
        got = bulk_records([encode(texts[t]) for t in tids], parse)
        return None if got is None else got.status

    def parse(t: str, body: str) -> TaskRecord:
        return TaskRecord.model_validate_json(body)

    assert bulk("a", "d") == {"a": "in_doubt", "d": "pending"}
    assert bulk() == {}
    assert bulk("a", "b") is None and bulk("c") is None
    damaged = encode(texts["a"]).replace("in_doubt", "in_d0ubt")
    assert bulk_records([damaged], parse) is None  # the checksum
    assert bulk_records([None, b"x"], parse) is None  # in a file; bytes


def test_a_wrong_field_behind_a_good_status_is_reported_when_read(
    ws: al.Workspace,
) -> None:
    """A record with the right checksum and status but an invalid field (only a
    faulty writer makes one) opens, and raises the corruption error, naming its
    key, as soon as it is read."""
    s = half_run(ws, "late")
    store = store_of(ws, s)
    try:
        store.cache.set(
            "t:t2", encode('{"task_id":"t2","status":"succeeded","attempts":"x"}')
        )
    finally:
        store.close()
    with ws.open("late", tools=BASIC_TOOLS) as again:
        assert again.counts()["succeeded"] == N // 2  # statuses only
        for read in (lambda: again.record("t2"), lambda: again.records):
            with pytest.raises(al.CorruptCheckpointError) as e:
                read()
            assert e.value.key == "t:t2" and "invalid task record" in e.value.message
        assert again.record("t1").status == "succeeded"  # the others still read


def test_a_plan_task_is_validated_when_first_read(ws: al.Workspace) -> None:
    s = half_run(ws, "plan")
    store = store_of(ws, s)
    try:
        plan = json.loads(store.cache.get("plan").split("|", 2)[2])
        plan["tasks"][-1]["retries"] = -1  # the last task, not read on opening
        store.cache.set("plan", encode(json.dumps(plan)))
    finally:
        store.close()
    with ws.open("plan", tools=BASIC_TOOLS) as again:
        assert again.ready() == [f"t{N // 2}"]
        with pytest.raises(al.CorruptCheckpointError) as e:
            _ = again.plan
        assert e.value.key == "plan" and "invalid plan record" in e.value.message
    # A plan without the shape the scheduler needs fails the open.
    store = store_of(ws, s)
    try:
        plan["tasks"][0]["deps"] = "t1"
        store.cache.set("plan", encode(json.dumps(plan)))
    finally:
        store.close()
    with pytest.raises(al.CorruptCheckpointError, match="invalid plan record"):
        ws.open("plan", tools=BASIC_TOOLS)


def test_a_record_read_on_one_thread_never_replaces_a_newer_commit() -> None:
    """Validating a record's stored text and caching it is not atomic: if the
    loop thread commits a newer record in between, the newer one stays."""
    text = '{"task_id":"a","status":"succeeded","attempts":1}'
    gate, go = threading.Event(), threading.Event()

    def slow_parse(task_id: str, body: str) -> TaskRecord:
        gate.set()
        assert go.wait(10)
        return TaskRecord.model_validate_json(body)

    recs = TaskRecords({"a": text}, {"a": "succeeded"}, slow_parse)
    got: list[TaskRecord] = []
    reader = threading.Thread(target=lambda: got.append(recs["a"]))
    reader.start()
    assert gate.wait(10)
    newer = TaskRecord(task_id="a", status="pending", generation=1)
    recs["a"] = newer  # the commit, while the reader validates the old text
    go.set()
    reader.join(10)
    assert got[0].status == "succeeded"  # the reader got what it read ...
    assert recs["a"] is newer and recs.status["a"] == "pending"  # ... not cached


def test_reading_all_validates_the_rest_in_order_and_keeps_newer_commits() -> None:
    def text(t: str, n: int) -> str:
        return TaskRecord(task_id=t, status="succeeded", attempts=n).model_dump_json(
            exclude_defaults=True
        )

    def parse(task_id: str, body: str) -> TaskRecord:
        return TaskRecord.model_validate_json(body)

    entries: dict[str, TaskRecord | str | None] = {
        "a": text("a", 1),
        "b": None,  # no stored record: a fresh pending one
        "c": text("c", 3),
        "d": TaskRecord(task_id="d", status="failed"),
    }
    statuses = {"a": "succeeded", "b": "pending", "c": "succeeded", "d": "failed"}
    recs = TaskRecords(entries, statuses, parse)
    assert recs.unread() == 3 and recs.where("failed")[0][1].status == "failed"
    assert [(t, r.status, r.attempts) for t, r in recs.items()] == [
        ("a", "succeeded", 1),
        ("b", "pending", 0),
        ("c", "succeeded", 3),
        ("d", "failed", 0),
    ]
    assert recs.unread() == 0
    # A value made from an entry that changed meanwhile is not cached.
    recs2 = TaskRecords({"x": text("x", 1), "y": text("y", 2)}, {}, parse)
    newer = TaskRecord(task_id="y", status="pending")
    old_y = recs2._d["y"]
    recs2["y"] = newer
    made = [parse("x", text("x", 1)), TaskRecord(task_id="y")]
    recs2._keep(["x", "y"], [recs2._d["x"], old_y], made)
    assert recs2["y"] is newer and recs2["x"].attempts == 1
    # Nor one made for a task a plan patch removed meanwhile (on the loop
    # thread, while another thread read every record): it stays removed.
    recs3 = TaskRecords({"x": text("x", 1), "gone": None}, {}, parse)
    recs3.status.update({"x": "succeeded", "gone": "pending"})
    del recs3["gone"]
    x = parse("x", text("x", 1))
    recs3._keep(["x", "gone"], [recs3._d["x"], None], [x, made[1]])
    assert "gone" not in recs3 and recs3["x"] is x
    assert recs3.keys() == recs3.status.keys()


# -- the scheduler, built from statuses: same answers as counting afresh -------


def naive_ready(deps: dict[str, list[str]], status: dict[str, str]) -> set[str]:
    return {
        t
        for t, ds in deps.items()
        if status[t] == "pending" and all(status[d] in DONE for d in ds)
    }


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_scheduler_from_any_statuses_agrees_with_counting_afresh(
    data: st.DataObject,
) -> None:
    n = data.draw(st.integers(1, 12))
    deps = {
        f"n{i}": [f"n{d}" for d in sorted(data.draw(st.sets(st.integers(0, i - 1))))]
        if i
        else []
        for i in range(n)
    }
    status = {t: data.draw(st.sampled_from(STATUSES)) for t in deps}
    s = Scheduler(deps, status)
    assert set(s.peek_all()) == naive_ready(deps, status)
    for _ in range(data.draw(st.integers(0, 15))):
        t = data.draw(st.sampled_from(sorted(deps)))
        new = data.draw(st.sampled_from(STATUSES))
        before = naive_ready(deps, status)
        status[t] = new
        newly = s.set(t, new)
        after = naive_ready(deps, status)
        assert set(newly) <= after and set(newly) >= (after - before - {t})
        queued = set(s.peek_all())
        assert after <= queued  # stale heap entries are skipped by pop()
    expected, popped = naive_ready(deps, status), []
    while (t := s.pop()) is not None:
        popped.append(t)
        s.set(t, "running")
    assert set(popped) == expected
    ranks = [s.rank_of(t) for t in popped]
    assert ranks == sorted(ranks, reverse=True)  # longest path first


def test_ranks_of_a_long_chain_need_no_recursion() -> None:
    n = 20_000
    deps = {f"t{i}": [f"t{i - 1}"] if i else [] for i in range(n)}
    s = Scheduler(deps, dict.fromkeys(deps, "pending"))
    assert s.peek_all() == ["t0"] and s.rank_of("t0") == n
    done = dict.fromkeys(deps, "succeeded") | {f"t{n - 1}": "pending"}
    s2 = Scheduler(deps, done)
    assert s2.peek_all() == [f"t{n - 1}"] and len(s2.remaining) == 1


def test_a_finished_task_made_pending_again_counts_its_dependencies() -> None:
    deps = {"a": [], "b": ["a"], "c": ["b"]}
    s = Scheduler(deps, dict.fromkeys(deps, "succeeded"))
    assert s.peek_all() == [] and s.remaining == {}
    assert s.set("b", "pending") == [] and s.peek_all() == ["b"]  # a is done
    s.set("a", "pending")  # now b waits for a again
    assert s.pop() == "a" and s.pop() is None
    s.set("a", "succeeded")
    assert s.pop() == "b"
