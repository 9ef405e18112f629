"""Typed state transactions (store/state.py, store/state_log.py) in one process.

The concurrency, crash and multi-process tests are in test_state_processes.py.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as stg
from pydantic import BaseModel, Field, ValidationError

import argus_lab as al
from argus_lab.store.state import InvariantViolation


class Portfolio(BaseModel):
    cash: float = 1000.0
    positions: dict[str, int] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


def test_created_with_defaults_then_loaded(ws: al.Workspace) -> None:
    st = ws.state("trader-1", model=Portfolio)
    assert st.version == 1 and st.get() == Portfolio()
    with st.transaction() as s:
        s.cash -= 100
        s.positions["A"] = 1
    st.close()
    again = ws.state("trader-1", model=Portfolio)
    assert again.version == 2
    assert again.get() == Portfolio(cash=900.0, positions={"A": 1})
    assert ws.states() == ["trader-1"]


def test_get_returns_a_copy(ws: al.Workspace) -> None:
    st = ws.state("p", model=Portfolio)
    s = st.get()
    s.cash = 0
    s.positions["X"] = 5
    assert st.get() == Portfolio() and st.version == 1


def test_exception_rolls_back_and_nothing_is_written(ws: al.Workspace) -> None:
    st = ws.state("p", model=Portfolio)
    with pytest.raises(RuntimeError, match="boom"), st.transaction() as s:
        s.cash = 1.0
        raise RuntimeError("boom")
    assert st.version == 1 and st.get() == Portfolio()
    assert list(st.history()["version"]) == [1]


def test_model_validation_refuses_a_bad_commit(ws: al.Workspace) -> None:
    st = ws.state("p", model=Portfolio)
    with pytest.raises(ValidationError), st.transaction() as s:
        s.positions["A"] = "many"  # type: ignore[assignment]
    assert st.version == 1 and st.get() == Portfolio()


def test_invariant_violation_writes_nothing(ws: al.Workspace) -> None:
    st = ws.state("p", model=Portfolio)

    @st.invariant
    def solvent(s: Portfolio) -> bool:
        return s.cash >= 0

    @st.invariant
    def small(s: Portfolio) -> None:
        assert len(s.positions) < 3, "too many positions"

    with pytest.raises(InvariantViolation, match="solvent"), st.transaction() as s:
        s.cash = -1
    with pytest.raises(InvariantViolation, match="too many"), st.transaction() as s:
        s.positions.update(a=1, b=2, c=3)
    assert st.version == 1 and st.get() == Portfolio()


def test_an_empty_transaction_makes_no_version(ws: al.Workspace) -> None:
    st = ws.state("p", model=Portfolio)
    with st.transaction():
        pass
    assert st.version == 1


def test_optimistic_conflict_then_update_retries(ws: al.Workspace) -> None:
    st = ws.state("p", model=Portfolio)
    other = ws.state("p", model=Portfolio)  # a second writer (own connection)
    with pytest.raises(al.ConflictError) as err, st.transaction() as s:
        s.cash = 1
        other.update(lambda o: setattr(o, "cash", 2.0))
    assert err.value.state == "p" and err.value.version == 2
    assert st.get().cash == 2.0  # the other writer's commit stands

    calls = []

    def add(s: Portfolio) -> None:
        calls.append(s.cash)
        if len(calls) == 1:  # someone else commits while we work
            other.update(lambda o: setattr(o, "cash", o.cash + 10))
        s.cash += 1

    out = st.update(add, retries=2)
    assert calls == [2.0, 12.0] and out.cash == 13.0 and st.version == 4
    assert other.get().cash == 13.0


def test_update_may_return_a_new_state(ws: al.Workspace) -> None:
    st = ws.state("p", model=Portfolio)
    out = st.update(lambda s: Portfolio(cash=5))
    assert out == Portfolio(cash=5) and st.version == 2
    with pytest.raises(TypeError, match="returned a float"):
        st.update(lambda s: s.cash)
    assert st.version == 2


def test_lock_refuses_other_writers_until_released(ws: al.Workspace) -> None:
    st = ws.state("p", model=Portfolio)
    other = ws.state("p", model=Portfolio)
    with st.transaction(lock=True) as s:
        s.cash = 1
        with pytest.raises(al.ConflictError, match="locked"):
            other.update(lambda o: setattr(o, "cash", 2.0), retries=0)
        import threading

        def contend() -> None:  # another thread waits out its timeout
            with (
                pytest.raises(al.ConflictError, match="not free"),
                other.transaction(lock=True, timeout=0.05),
            ):
                pass
            waited.set()

        waited = threading.Event()
        t = threading.Thread(target=contend)
        t.start()
        t.join(timeout=30)
        assert waited.is_set()
    assert st.get().cash == 1.0
    other.update(lambda o: setattr(o, "cash", 2.0), retries=0)  # released
    assert st.get().cash == 2.0
    # A locked block that fails releases the lock too, writing nothing.
    with pytest.raises(ValidationError), st.transaction(lock=True) as s:
        s.positions["A"] = "x"  # type: ignore[assignment]
    other.update(lambda o: setattr(o, "cash", 3.0), retries=0)
    assert st.get().cash == 3.0 and st.version == 4


def test_a_dead_holders_lock_is_taken_over(ws: al.Workspace) -> None:
    from argus_lab.store.checkpoints import make_lease

    st = ws.state("p", model=Portfolio)
    lease = make_lease("ghost", 3600) | {"pid": 2**22 + 12345}  # no such process
    assert st._log.set_lease("ghost", lease) is not None
    with st.transaction(lock=True, timeout=1) as s:
        s.cash = 3
    assert st.get().cash == 3.0


def test_history_at_and_fork(ws: al.Workspace) -> None:
    st = ws.state("p", model=Portfolio, snapshot_every=3)
    for i in range(6):
        with st.transaction(caller="tester") as s:
            s.positions[f"k{i}"] = i
    h = st.history()
    assert list(h["version"]) == list(range(1, 8))
    assert list(h.columns) == [
        "version",
        "time",
        "kind",
        "size",
        "changed",
        "caller",
        "snapshot",
    ]
    assert h["changed"].iloc[3] == ["positions"] and h["caller"].iloc[3] == "tester"
    assert h["size"].is_monotonic_increasing
    assert h["snapshot"].sum() >= 2  # every 3 versions at least
    assert st.at(4).positions == {"k0": 0, "k1": 1, "k2": 2}
    with pytest.raises(KeyError):
        st.at(99)
    f = st.fork(at=3, name="p-branch")
    assert f.get().positions == {"k0": 0, "k1": 1} and f.version == 1
    f.update(lambda s: s.positions.update(z=9))
    assert "z" not in st.get().positions and sorted(ws.states()) == ["p", "p-branch"]
    with pytest.raises(al.ArgusError, match="already exists"):
        st.fork(at=3, name="p-branch")


def test_small_change_to_a_big_state_stores_a_patch(ws: al.Workspace) -> None:
    st = ws.state("big", model=Portfolio)
    st.update(lambda s: s.positions.update({f"s{i:05d}": i for i in range(5000)}))
    st.update(lambda s: s.positions.update(s00007=-1))
    rec = st._log.record(3)
    assert "patch" in rec and len(json.dumps(rec["patch"])) < 100
    assert rec["patch"] == [{"op": "replace", "path": "/positions/s00007", "value": -1}]


class V1(BaseModel):
    name: str = "x"


class V2(BaseModel):
    first: str = "x"
    last: str = ""


def test_schema_migration_on_load(ws: al.Workspace) -> None:
    old = ws.state("person", model=V1)
    old.update(lambda s: setattr(s, "name", "Ada Lovelace"))
    old.close()
    st = ws.state("person", model=V2, schema_version=2)

    with pytest.raises(al.SchemaVersionError, match="from_version=1"):
        st.get()

    @st.migration(from_version=1)
    def split(d: dict[str, str]) -> dict[str, str]:
        first, _, last = d.pop("name").partition(" ")
        return {"first": first, "last": last}

    assert st.get() == V2(first="Ada", last="Lovelace")
    st.update(lambda s: setattr(s, "last", "King"))
    assert st.at(2) == V2(first="Ada", last="Lovelace")  # old versions migrate too
    assert st.history()["kind"].iloc[-1] == "migrate"
    assert [e["kind"] for e in st.events()] == ["state_migrated"]
    with pytest.raises(al.SchemaVersionError, match="newer"):
        ws.state("person", model=V1).get()


def test_size_watch_warns_and_calls_the_hook(
    ws: al.Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    st = ws.state("grow", model=Portfolio, max_size=300, growth_window=3)
    seen: list[str] = []
    st.on_size_warning(lambda ev: seen.append(ev["payload"]["reason"]))
    with caplog.at_level(logging.WARNING, logger="argus_lab.state"):
        for i in range(20):
            st.update(lambda s, i=i: s.notes.append(f"note number {i:04d}"))
    assert seen.count("grew past 300 bytes") == 1
    assert seen.count("grew at each of the last 3 commits") >= 4
    assert {e["kind"] for e in st.events()} == {"state_size_warning"}
    assert "grew past 300 bytes" in caplog.text


def test_compact_runs_cleanup_hooks(ws: al.Workspace) -> None:
    st = ws.state("c", model=Portfolio, snapshot_every=100)
    for i in range(5):
        st.update(lambda s, i=i: s.notes.append("derived " * 20 + str(i)))

    @st.on_checkpoint
    def drop_notes(s: Portfolio) -> None:
        s.notes.clear()

    v = st.compact()
    assert v == 7 and st.get().notes == [] and st._log.record(7).get("snapshot")
    assert len(st.at(6).notes) == 5  # history kept
    ev = st.events()[-1]
    assert ev["kind"] == "state_compacted" and ev["payload"]["after"] < 200
    st.compact(keep_history=False)
    assert list(st.history()["version"]) == [8] and st.get().notes == []


def test_untyped_state_validates_against_the_stored_schema(ws: al.Workspace) -> None:
    ws.state("typed", model=Portfolio).close()
    raw = ws.state("typed")  # e.g. `argus serve`, which has no model class
    v, doc = raw.get_json()
    assert v == 1 and doc["cash"] == 1000.0
    raw.patch([{"op": "replace", "path": "/cash", "value": 5}], expected=1, caller="t")
    with pytest.raises(Exception, match="not of type"):
        raw.patch(
            [{"op": "replace", "path": "/cash", "value": "x"}], expected=2, caller="t"
        )
    with pytest.raises(al.ConflictError):
        raw.patch([{"op": "remove", "path": "/notes"}], expected=1, caller="t")
    assert ws.state("typed", model=Portfolio).get().cash == 5.0
    branch = raw.fork()  # keeps the schema it validates against
    with pytest.raises(Exception, match="not of type"):
        branch.patch(
            [{"op": "replace", "path": "/cash", "value": "x"}], expected=1, caller="t"
        )


def test_damaged_record_names_the_state_and_key(ws: al.Workspace) -> None:
    st = ws.state("d", model=Portfolio)
    st.update(lambda s: setattr(s, "cash", 1.0))
    raw = st._log.cache.get("v:000000000002")
    st._log.cache.set("v:000000000002", raw.replace("1.0", "2.0"))
    with pytest.raises(al.CorruptCheckpointError, match="v:000000000002") as info:
        st.at(2)
    assert info.value.message.startswith("state d: version 2 ")
    assert info.value.state == "d" and info.value.version == 2  # type: ignore[attr-defined]
    with pytest.raises(al.CorruptCheckpointError, match="state d: version 2 "):
        ws.state("d", model=Portfolio).get()  # a fresh reader replays it too
    assert st.at(1) == Portfolio()  # the rest stays readable


def test_bad_names_and_models_are_refused(ws: al.Workspace, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="state name"):
        ws.state("../escape", model=Portfolio)
    with pytest.raises(TypeError, match="pydantic"):
        ws.state("x", model=dict)


# -- property: random transaction sequences ----------------------------------------


class Doc(BaseModel):
    cash: int = 100
    items: dict[str, int] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    rows: list[dict[str, int]] = Field(default_factory=list)


keys = stg.sampled_from(["a", "b", "c", "d/e", "f~g"])
small = stg.integers(-5, 50)
op = stg.one_of(
    stg.tuples(stg.just("cash"), stg.integers(-20, 200)),
    stg.tuples(stg.just("item"), keys, small),
    stg.tuples(stg.just("del"), keys),
    stg.tuples(stg.just("tag"), stg.integers(0, 6), stg.text("xyz", max_size=3)),
    stg.tuples(stg.just("untag"), stg.integers(0, 6)),
    stg.tuples(stg.just("row"), stg.integers(0, 4), keys, small),
    stg.tuples(stg.just("raise"), small),
)


def apply(s: Doc, o: tuple[object, ...]) -> None:
    kind = o[0]
    if kind == "cash":
        s.cash = o[1]  # type: ignore[assignment]
    elif kind == "item":
        s.items[o[1]] = o[2]  # type: ignore[index]
    elif kind == "del":
        s.items.pop(o[1], None)  # type: ignore[call-overload]
    elif kind == "tag":
        s.tags.insert(o[1], o[2])  # type: ignore[arg-type]
    elif kind == "untag" and s.tags:
        s.tags.pop(o[1] % len(s.tags))  # type: ignore[operator]
    elif kind == "row":
        if o[1] >= len(s.rows):  # type: ignore[operator]
            s.rows.append({})
        s.rows[o[1] % len(s.rows)][o[2]] = o[3]  # type: ignore[index,operator]
    elif kind == "raise":
        s.cash = -999
        raise LookupError("the agent changed its mind")


@pytest.mark.slow
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    txs=stg.lists(stg.lists(op, min_size=1, max_size=4), max_size=25),
    every=stg.sampled_from([1, 2, 3, 64]),
)
def test_random_transactions_replay_exactly(
    tmp_path: Path, txs: list[list[tuple[object, ...]]], every: int
) -> None:
    import uuid

    ws = al.Workspace(tmp_path / uuid.uuid4().hex)
    st = ws.state("prop", model=Doc, snapshot_every=every)

    @st.invariant
    def solvent(s: Doc) -> bool:
        return s.cash >= 0 and all(v >= -5 for v in s.items.values())

    expected = {1: Doc()}
    for tx in txs:
        before_v, before = st.version, st.get()
        model = before.model_copy(deep=True)
        try:
            for o in tx:
                apply(model, o)
            ok = model.cash >= 0
        except LookupError:
            ok = False
        try:
            with st.transaction() as s:
                for o in tx:
                    apply(s, o)
        except (LookupError, InvariantViolation):
            assert not ok
            assert st.version == before_v and st.get() == before  # nothing changed
            continue
        assert ok
        if model != before:
            expected[st.version] = model
        assert st.version == max(expected)
        assert st.get() == model
    # The stored history replays to the same states, and invariants hold at each.
    for v, want in expected.items():
        got = st.at(v)
        assert got == want and solvent(got)
    assert list(st.history()["version"]) == sorted(expected)
    reopened = ws.state("prop", model=Doc, snapshot_every=every)
    assert reopened.get() == expected[max(expected)]
    reopened.close()
    st.close()
    ws.close()


def test_diff_is_type_exact_for_scalars_and_snapshots_what_it_cannot_see(
    ws: al.Workspace,
) -> None:
    from typing import Any

    from argus_lab.store.state_diff import diff

    assert diff({"r": 1}, {"r": 1.0}) == [{"op": "replace", "path": "/r", "value": 1.0}]
    assert diff({"r": True}, {"r": 1}) != []

    class Loose(BaseModel):
        data: Any = None

    st = ws.state("loose", model=Loose, initial=Loose(data=[1]))
    st.update(lambda s: setattr(s, "data", [1.0]))
    assert st.version == 2 and repr(st.at(2).data) == "[1.0]"
    assert repr(st.at(1).data) == "[1]"


def test_the_readme_state_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    code = next(
        c for c in re.findall(r"```python\n(.*?)```", readme, re.S) if "ws.state(" in c
    )
    monkeypatch.chdir(tmp_path)
    ns: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), ns)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "4 906.0 900.0"
    ns["st"].close()  # type: ignore[attr-defined]
    ns["branch"].close()  # type: ignore[attr-defined]


def test_a_copy_never_shares_containers_with_the_stored_state(ws: al.Workspace) -> None:
    from typing import Any

    class Typed(BaseModel):
        rows: list[dict[str, list[int]]] = Field(default_factory=list)

    class Loose(BaseModel):
        rows: Any = None

    for model in (Typed, Loose):  # validated from the cache, or parsed again
        st = ws.state(f"share-{model.__name__}", model=model, initial=model(rows=[]))
        st.update(lambda s: s.rows.append({"a": [1]}))
        a = st.get()
        a.rows[0]["a"].append(2)  # changing a copy in place...
        with st.transaction() as s:
            s.rows[0]["a"].append(3)
        assert st.get().rows == [{"a": [1, 3]}]  # ...changed nothing stored
        assert st.at(2).rows == [{"a": [1]}] and st.version == 3


# -- hardening (issue 17, second pass) ---------------------------------------------


def test_a_full_disk_is_not_called_damage_and_loses_nothing(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import sqlite3

    import diskcache

    st = ws.state("p", model=Portfolio)
    st.update(lambda s: setattr(s, "cash", 2.0))
    real = diskcache.Cache.set

    def full(self: diskcache.Cache, key: str, value: object, *a: object) -> object:
        if key.startswith("v:"):
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, key, value, *a)

    monkeypatch.setattr(diskcache.Cache, "set", full)
    with pytest.raises(al.StorageFullError) as info:
        st.update(lambda s: setattr(s, "cash", 3.0))
    e = info.value
    assert isinstance(e, OSError) and e.errno == errno.ENOSPC
    assert e.message.startswith("state p: the disk is full")
    assert "Nothing committed was lost" in e.message and "damaged" not in e.message
    monkeypatch.setattr(diskcache.Cache, "set", real)
    assert st.version == 2 and st.get().cash == 2.0  # the failed commit left nothing
    st.update(lambda s: setattr(s, "cash", 3.0))  # and writing goes on once freed
    assert st.version == 3 and st.at(2).cash == 2.0


def test_a_long_locked_transaction_keeps_its_lease(ws: al.Workspace) -> None:
    import threading
    import time

    st = ws.state("p", model=Portfolio, lock_ttl=0.3)
    other = ws.state("p", model=Portfolio, lock_ttl=0.3)
    tick = threading.Event()
    refused = 0
    with st.transaction(lock=True) as s:
        s.cash = 1.0
        end = time.monotonic() + 1.5  # five lifetimes of the lease
        while time.monotonic() < end:
            with pytest.raises(al.ConflictError, match="locked"):
                other.update(lambda o: setattr(o, "cash", 2.0), retries=0)
            refused += 1
            tick.wait(0.05)  # time passing is the point here, not a sync
    assert refused >= 5 and st.version == 2 and st.get().cash == 1.0
    other.update(lambda o: setattr(o, "cash", 2.0), retries=0)  # released at exit
    assert st.get().cash == 2.0


def test_a_nested_locked_transaction_fails_at_once(ws: al.Workspace) -> None:
    import time

    st = ws.state("p", model=Portfolio)
    again = ws.state("p", model=Portfolio)
    t0 = time.monotonic()
    with st.transaction(lock=True) as s:
        s.cash = 5.0
        for inner in (st, again):
            with (
                pytest.raises(al.ArgusError, match="would wait for itself"),
                inner.transaction(lock=True),
            ):
                pass
    assert time.monotonic() - t0 < 5  # not the 30 s lease wait
    assert st.get().cash == 5.0 and st.version == 2
    with st.transaction(lock=True) as s:  # and the lock is free again
        s.cash = 6.0
    assert st.version == 3


class Named(BaseModel):
    name: str = "x"
    age: int = 0


class Renamed(BaseModel):  # `name` became `full_name`, same schema version
    full_name: str = "x"
    age: int = 0


class Dropping(BaseModel):
    model_config = {"extra": "ignore"}  # said out loud: unknown fields may go
    age: int = 0


def test_a_renamed_field_without_a_migration_is_not_dropped_silently(
    ws: al.Workspace,
) -> None:
    ws.state("who", model=Named).update(lambda s: setattr(s, "name", "Ada"))
    st = ws.state("who", model=Renamed)
    assert st.get().age == 0  # reading works
    with (
        pytest.raises(al.SchemaVersionError, match=r"\['name'\].*migration"),
        st.transaction() as s,
    ):
        s.age = 36
    assert st.version == 2 and ws.state("who", model=Named).get().name == "Ada"
    # Bumping the schema with a migration carries the value over.
    st2 = ws.state("who", model=Renamed, schema_version=2)

    @st2.migration(from_version=1)
    def rename(d: dict[str, object]) -> None:  # changing in place is enough
        d["full_name"] = d.pop("name")

    st2.update(lambda s: setattr(s, "age", 36))
    assert st2.get() == Renamed(full_name="Ada", age=36)
    # A model that says extra="ignore" may drop what it does not know.
    ws.state("who2", model=Named).close()
    d = ws.state("who2", model=Dropping)
    d.update(lambda s: setattr(s, "age", 1))
    assert ws.state("who2").get_json()[1] == {"age": 1}


def test_a_migration_that_raises_writes_nothing_and_says_which(
    ws: al.Workspace,
) -> None:
    ws.state("m", model=Named).update(lambda s: setattr(s, "name", "Ada"))
    st = ws.state("m", model=Renamed, schema_version=2)

    @st.migration(from_version=1)
    def broken(d: dict[str, object]) -> dict[str, object]:
        raise KeyError("full")

    with pytest.raises(al.SchemaVersionError, match="migration from schema version 1"):
        st.update(lambda s: setattr(s, "age", 1))
    with pytest.raises(al.SchemaVersionError, match="broken"):
        st.get()
    assert ws.state("m", model=Named).get().name == "Ada" and st.version == 2


def test_history_dtypes_and_pages(ws: al.Workspace) -> None:
    st = ws.state("h", model=Portfolio)
    for i in range(4):
        st.update(lambda s, i=i: setattr(s, "cash", float(i)))
    full = st.history()
    empty = st.history(since=99)
    assert len(empty) == 0 and list(empty.dtypes) == list(full.dtypes)
    assert str(full["time"].dtype) == "datetime64[ns, UTC]"
    assert full["version"].dtype == "int64" and full["snapshot"].dtype == bool
    assert list(st.history(since=2, limit=2)["version"]) == [3, 4]


def test_a_reference_kept_after_the_block_changes_nothing(ws: al.Workspace) -> None:
    st = ws.state("p", model=Portfolio)
    with st.transaction() as kept:
        kept.positions["A"] = 1
    kept.positions["A"] = 99  # after the commit: a private copy
    kept.cash = -5
    assert st.get() == Portfolio(positions={"A": 1}) and st.version == 2
    with st.transaction() as s:
        s.notes.append("next")
    assert st.get().positions == {"A": 1} and st.at(3).cash == 1000.0


def test_a_nested_optimistic_transaction_wins_and_the_outer_one_conflicts(
    ws: al.Workspace,
) -> None:
    st = ws.state("p", model=Portfolio)
    with pytest.raises(al.ConflictError), st.transaction() as outer:
        outer.cash = 1.0
        with st.transaction() as inner:
            inner.cash = 2.0
    assert st.get().cash == 2.0 and st.version == 2


def test_versions_dropped_by_compaction_say_so(ws: al.Workspace) -> None:
    st = ws.state("p", model=Portfolio, snapshot_every=2)
    for i in range(5):
        st.update(lambda s, i=i: s.notes.append(str(i)))
    assert st.at(3).notes == ["0", "1"]  # across snapshots
    v = st.compact(keep_history=False)
    assert v == 7 and st.get().notes == [str(i) for i in range(5)]
    for old in (3, 6):
        with pytest.raises(KeyError, match=r"compact\(keep_history=False\).*7"):
            st.at(old)
        with pytest.raises(KeyError, match="compact"):
            st.fork(at=old)
    with pytest.raises(KeyError, match="has no version 8"):
        st.at(8)
    st.update(lambda s: s.notes.clear())
    f = st.fork(at=7, name="p-after")
    f.update(lambda s: s.notes.append("fork"))
    assert st.get().notes == [] and f.get().notes[-1] == "fork"
    assert f.at(1).notes == st.at(7).notes


class Grown(BaseModel):  # Named plus a field, same schema version
    name: str = "x"
    age: int = 0
    city: str = "Lyon"


def test_a_field_added_without_a_migration_takes_its_default(ws: al.Workspace) -> None:
    ws.state("g", model=Named).update(lambda s: setattr(s, "name", "Ada"))
    st = ws.state("g", model=Grown)
    assert st.get() == Grown(name="Ada")
    st.update(lambda s: setattr(s, "age", 36))
    assert st.get() == Grown(name="Ada", age=36) and st.version == 3
    assert st.history()["changed"].iloc[-1] == ["age", "city"]
    assert ws.state("g").at(2) == {"name": "Ada", "age": 0}  # history as stored


def test_a_lease_lost_while_stalled_is_reported_and_nothing_written(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys
    import threading

    sys.path.insert(0, str(Path(__file__).parent))
    from waiting import wait_until

    from argus_lab.store import state_lease as state_core

    resume, b_in, b_go = threading.Event(), threading.Event(), threading.Event()
    seen: list[state_core._Renewer] = []
    real_run = state_core._Renewer._run

    def stalled(self: state_core._Renewer) -> None:  # this process stops a while
        seen.append(self)
        resume.wait(30)
        real_run(self)

    monkeypatch.setattr(state_core._Renewer, "_run", stalled)
    st = ws.state("p", model=Portfolio, lock_ttl=0.2)
    other = ws.state("p", model=Portfolio, lock_ttl=30)

    def takes_over() -> None:
        with other.transaction(lock=True, timeout=30) as o:
            b_in.set()
            b_go.wait(30)
            o.cash = 2.0

    b = threading.Thread(target=takes_over)
    with (
        pytest.raises(al.ConflictError, match="expired"),
        st.transaction(lock=True) as s,
    ):
        s.cash = 1.0
        b.start()
        assert b_in.wait(30)  # our lease ran out; another writer holds it
        resume.set()
        wait_until(lambda: seen[0].lost, "the renewal to find the lease taken")
    b_go.set()
    b.join(timeout=30)
    assert st.get().cash == 2.0 and st.version == 2


def test_of_racing_creates_exactly_one_makes_the_state(tmp_path: Path) -> None:
    """Eight threads create one state at once with create_only: one succeeds,
    seven get ConflictError, and the history holds one create."""
    ws = al.Workspace(tmp_path)
    start = threading.Barrier(8)
    made: list[int] = []
    refused: list[int] = []

    def create(i: int) -> None:
        start.wait(timeout=30)
        try:
            ws.state("race", initial={"by": i}, create_only=True).close()
            made.append(i)
        except al.ConflictError:
            refused.append(i)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(made) == 1 and len(refused) == 7
    st = ws.state("race")
    assert st.get() == {"by": made[0]}
    assert list(st.history()["kind"]) == ["create"]
    st.close()
