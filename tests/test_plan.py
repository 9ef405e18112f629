"""Plans: YAML/dict round trips and PlanError messages that name what is wrong."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import argus_lab as al
from tests.conftest import BASIC_TOOLS

TOOLS = {t.name: t for t in BASIC_TOOLS}

SALON = """
goal: Plan a three-day tech salon
constraints: [budget under 20k EUR]
tasks:
  - id: pick_city
    tool: add
    args: {a: 1}
  - id: book_venue
    tool: add
    args: {a: "${pick_city.result.sum}", b: 3}
    deps: [pick_city]
    retries: 2
  - id: invite
    title: Invite speakers
    tool: echo
    args: {value: "venue ${book_venue.result.sum} in city ${pick_city.result.sum}"}
"""


def plan_of(*tasks: dict[str, object]) -> al.Plan:
    return al.Plan.model_validate({"goal": "g", "tasks": list(tasks)})


def problems(plan: al.Plan, tools: dict[str, al.Tool] | None = TOOLS) -> str:
    with pytest.raises(al.PlanError) as e:
        plan.validate_against(tools)
    return e.value.message


def test_yaml_round_trip_and_implied_deps(tmp_path: Path) -> None:
    plan = al.Plan.from_yaml(SALON)
    assert plan.goal == "Plan a three-day tech salon"
    assert plan.constraints == ["budget under 20k EUR"]
    # A reference implies the dependency.
    assert plan.task("invite").deps == ["book_venue", "pick_city"]
    again = al.Plan.from_yaml(plan.to_yaml())
    assert again == plan
    assert al.Plan.from_dict(plan.to_dict()) == plan
    f = tmp_path / "salon.yaml"
    f.write_text(SALON)
    assert al.Plan.from_yaml(f) == plan
    assert al.Plan.from_yaml(str(f)) == plan


def test_graph_is_a_networkx_dag() -> None:
    g = al.Plan.from_yaml(SALON).graph
    assert set(g.edges) == {
        ("pick_city", "book_venue"),
        ("book_venue", "invite"),
        ("pick_city", "invite"),
    }
    assert g.nodes["invite"]["title"] == "Invite speakers"
    assert g.graph["goal"] == "Plan a three-day tech salon"


def test_duplicate_id() -> None:
    msg = problems(
        plan_of(
            {"id": "a", "tool": "add", "args": {"a": 1}},
            {"id": "a", "tool": "add", "args": {"a": 2}},
        )
    )
    assert "duplicate task id 'a'" in msg


def test_missing_dependency_names_both_tasks() -> None:
    msg = problems(
        plan_of({"id": "a", "tool": "add", "args": {"a": 1}, "deps": ["ghost"]})
    )
    assert "'a' depends on 'ghost'" in msg


def test_cycle_names_tasks_in_order() -> None:
    msg = problems(
        plan_of(
            {"id": "a", "tool": "add", "args": {"a": 1}, "deps": ["c"]},
            {"id": "b", "tool": "add", "args": {"a": 1}, "deps": ["a"]},
            {"id": "c", "tool": "add", "args": {"a": 1}, "deps": ["b"]},
        )
    )
    cycle = msg.split("cycle: ")[1].split("\n")[0]
    names = cycle.split(" -> ")
    assert names[0] == names[-1] and sorted(names[:-1]) == ["a", "b", "c"]
    # each arrow reads "runs before": consecutive pairs are real dependencies
    deps = {("c", "a"), ("a", "b"), ("b", "c")}
    assert all(pair in deps for pair in itertools.pairwise(names))


def test_unknown_tool_lists_known_tools() -> None:
    msg = problems(plan_of({"id": "a", "tool": "teleport"}))
    assert "'teleport'" in msg and "known tools: add, boom, echo" in msg


def test_args_failing_the_signature_name_the_field() -> None:
    msg = problems(plan_of({"id": "a", "tool": "add", "args": {"b": 2}}))
    assert "missing argument 'a'" in msg
    msg = problems(plan_of({"id": "a", "tool": "add", "args": {"a": 1, "c": 2}}))
    assert "unknown argument 'c'" in msg and "accepts: a, b" in msg
    msg = problems(plan_of({"id": "a", "tool": "add", "args": {"a": "many"}}))
    assert "argument 'a' of tool 'add'" in msg and "integer" in msg


def test_bad_references() -> None:
    msg = problems(plan_of({"id": "a", "tool": "echo", "args": {"value": "${a.b}"}}))
    assert "bad reference ${a.b}" in msg
    msg = problems(
        plan_of({"id": "a", "tool": "echo", "args": {"value": "${nope.result.x}"}})
    )
    assert "'a' references ${nope.result.x}" in msg and "no task 'nope'" in msg
    msg = problems(
        plan_of({"id": "a", "tool": "echo", "args": {"value": "${a.result}"}})
    )
    assert "references its own result" in msg


def test_reference_args_are_not_type_checked_until_run() -> None:
    plan = plan_of(
        {"id": "x", "tool": "echo", "args": {"value": 1}},
        {"id": "y", "tool": "add", "args": {"a": "${x.result}"}},
    )
    assert plan.validate_against(TOOLS).task("y").deps == ["x"]


def test_structural_errors_name_the_task_and_field() -> None:
    with pytest.raises(al.PlanError, match=r"task 'a'\.retries"):
        al.Plan.from_dict({"goal": "g", "tasks": [{"id": "a", "retries": -1}]})
    with pytest.raises(al.PlanError, match="'tasks' list"):
        al.Plan.from_dict({"goal": "g"})
    with pytest.raises(al.PlanError, match="not valid YAML"):
        al.Plan.from_yaml("goal: [unclosed\ntasks: x\n")
    with pytest.raises(al.PlanError, match="does not exist"):
        al.Plan.from_yaml("missing-plan.yaml")
    with pytest.raises(al.PlanError, match="mapping"):
        al.Plan.from_yaml("- just\n- a list\n")


def test_every_problem_is_reported_at_once() -> None:
    msg = problems(
        plan_of(
            {"id": "a", "tool": "nope", "deps": ["ghost"]}, {"id": "a", "tool": "add"}
        )
    )
    assert msg.count("\n- ") >= 3
