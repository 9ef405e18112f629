"""HTN planning inside a Session: lazy expansion, backtracking, decision events."""

from __future__ import annotations

import argus_lab as al
from argus_lab.plan.htn import HTNPlanner
from tests import htn_domains as d


def test_lazy_expansion_and_backtracking_happen_in_the_run(ws: al.Workspace) -> None:
    planner = HTNPlanner(d.trip)
    plan = planner.plan("trip", "alice", "home", "paris", 2)
    assert any(t.tool == "htn:expand" for t in plan.tasks)  # lodging waits for hotels
    log: list[str] = []
    s = ws.new_session(
        plan=plan,
        tools=d.trip_tools(log, taxi_strike=True),
        name="trip",
        planner=planner,
    )
    res = s.run()
    assert res.status == "succeeded", res
    # The taxi failed for good; the subtree switched to the train; lodging expanded.
    assert "ride_taxi" in log and {"buy_ticket", "ride_train", "book_hotel"} <= set(log)
    ids = [t.id for t in s.plan.tasks]
    assert (
        "trip/to_airport/ride_train" in ids and "trip/to_airport/ride_taxi" not in ids
    )
    assert not any(t.tool == "htn:expand" for t in s.plan.tasks)
    assert s.info.plan_version == 3  # expansion + backtrack
    patches = [e.details() for e in s.events() if e.kind == "plan_patched"]
    assert {p["compound"] for p in patches} == {"trip/lodging", "trip/to_airport"}
    back = next(p for p in patches if p["compound"] == "trip/to_airport")
    assert back["method"] == "by_train" and back["version"] in (2, 3)
    assert "trip/to_airport/ride_taxi" in back["removed"]
    # The finished taxi call stays, untouched.
    assert s.record("trip/to_airport/call_taxi").attempts == 1
    hotel = next(t for t in s.plan.tasks if t.tool == "book_hotel")
    assert s.record(hotel.id).status == "succeeded"

    events = s.events()
    decisions = [e.details() for e in events if e.kind == "htn_decision"]
    assert any(x["decision"] == "chosen" and x["phase"] == "plan" for x in decisions)
    assert any(x["decision"] == "backtracked" for x in decisions)
    assert any(x["phase"] == "expand" for x in decisions)
    failed = next(e for e in events if e.kind == "task_failed")
    assert failed.backtracked == "trip/to_airport"
    df = s.events_df()  # and they are rows of the trajectory DataFrame
    assert (df["kind"] == "htn_decision").sum() == len(decisions)


def test_the_plan_and_its_version_survive_a_restart(ws: al.Workspace) -> None:
    planner = HTNPlanner(d.trip)
    plan = planner.plan("trip", "bob", "home", "rome", 1)
    log: list[str] = []
    s = ws.new_session(plan=plan, tools=d.trip_tools(log), name="t2", planner=planner)
    assert s.run().status == "succeeded"
    ids = [t.id for t in s.plan.tasks]
    s.close()
    with ws.open("t2") as again:
        assert [t.id for t in again.plan.tasks] == ids
        assert again.info.plan_version == 2
        assert again.status == "succeeded"


def test_a_placeholder_without_a_planner_fails_clearly_then_expands(
    ws: al.Workspace,
) -> None:
    planner = HTNPlanner(d.trip)
    plan = planner.plan("trip", "carol", "home", "oslo", 3)
    tools = d.trip_tools([])
    s = ws.new_session(plan=plan, tools=tools, name="t3")  # no planner handed in
    res = s.run()
    assert res.status == "failed"
    assert (
        "open the session with planner=HTNPlanner(domain)" in res.failed["trip/lodging"]
    )
    s.close()
    with ws.open("t3", tools=tools, planner=HTNPlanner(d.trip)) as again:
        again.retry("trip/lodging")
        assert again.run().status == "succeeded"
        assert any(t.tool == "book_hotel" for t in again.plan.tasks)
