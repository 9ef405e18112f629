"""The scheduler (pure) and a property test of the runtime over random DAGs."""

from __future__ import annotations

import tempfile
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import argus_lab as al
from argus_lab.runtime.scheduler import Scheduler


def test_ready_set_by_incremental_in_degrees_and_critical_path() -> None:
    deps = {"a": [], "b": ["a"], "c": ["b"], "x": [], "y": ["a", "x"]}
    s = Scheduler(deps, dict.fromkeys(deps, "pending"))
    assert {t: s.rank_of(t) for t in deps} == {"a": 3, "b": 2, "c": 1, "x": 2, "y": 1}
    assert s.peek_all() == ["a", "x"]
    assert s.pop() == "a"
    s.set("a", "running")
    assert s.set("a", "succeeded") == ["b"]  # y still waits for x
    assert s.pop() == "b" and s.pop() == "x" and s.pop() is None
    s.set("x", "succeeded")
    assert s.pop() == "y"
    assert s.descendants("a") == ["b", "y", "c"]


def test_skipped_counts_as_done_and_undoing_it_does_not() -> None:
    deps = {"a": [], "b": ["a"]}
    s = Scheduler(deps, {"a": "skipped", "b": "pending"})
    assert s.peek_all() == ["b"]
    s.set("a", "pending")
    assert s.remaining["b"] == 1


@st.composite
def dags(draw: st.DrawFn) -> tuple[int, list[list[int]], list[int], int]:
    n = draw(st.integers(1, 14))
    deps = [
        sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else []
        for i in range(n)
    ]
    # transient failures before success; 3 > retries (2) means it fails for good
    fails = draw(st.lists(st.sampled_from([0, 0, 0, 1, 2, 3]), min_size=n, max_size=n))
    conc = draw(st.integers(1, 4))
    return n, deps, fails, conc


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
@pytest.mark.slow
def test_random_dags_with_transient_failures(
    case: tuple[int, list[list[int]], list[int], int],
) -> None:
    n, deps, fails, conc = case
    lock = threading.Lock()
    tries: dict[int, int] = {}

    @al.tool(retries=2)
    def node(i: int, inputs: list[int]) -> dict[str, int]:
        with lock:
            tries[i] = tries.get(i, 0) + 1
            k = tries[i]
        if k <= fails[i]:
            raise al.TransientError(f"flaky {i}")
        return {"sum": i + sum(inputs)}

    tasks = [
        {
            "id": f"n{i}",
            "tool": "node",
            "args": {"i": i, "inputs": [f"${{n{d}.result.sum}}" for d in deps[i]]},
        }
        for i in range(n)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        ws = al.Workspace(tmp)
        s = ws.new_session(
            plan={"goal": "prop", "tasks": tasks},
            tools=[node],
            name="p",
            concurrency=conc,
            backoff=(0.0005, 0.002),
        )
        s.run()
        events = s.events()
        recs = s.records
        s.close()
        ws.close()

    # A task fails for good if it fails 3 times and no ancestor failed first;
    # everything downstream of a failure is blocked and never starts.
    failed: set[int] = set()
    doomed: set[int] = set()
    for i in range(n):
        if any(d in failed or d in doomed for d in deps[i]):
            doomed.add(i)
        elif fails[i] > 2:
            failed.add(i)
    expect: dict[int, int] = {}
    for i in range(n):
        expect[i] = i + sum(expect[d] for d in deps[i])
    started: dict[str, list[int]] = {}
    succeeded: dict[str, list[int]] = {}
    for e in events:
        if e.kind == "task_started":
            started.setdefault(str(e.task_id), []).append(e.seq)
        elif e.kind == "task_succeeded":
            succeeded.setdefault(str(e.task_id), []).append(e.seq)
    for i in range(n):
        t = f"n{i}"
        r = recs[t]
        if i in failed:
            assert r.status == "failed" and r.attempts == 3
        elif i in doomed:
            assert r.status == "blocked" and t not in started
        else:
            assert r.status == "succeeded"
            assert r.result == {"sum": expect[i]}  # results flow through references
            assert len(succeeded[t]) == 1  # succeeded exactly once ...
            assert max(started[t]) < succeeded[t][0]  # ... and never ran after that
            assert r.attempts == fails[i] + 1
            for d in deps[i]:  # dependency order
                assert succeeded[f"n{d}"][0] < min(started[t])
