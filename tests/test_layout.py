"""The widget's layout: layers, crossing reduction, groups, and no overlaps."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

import pytest

import argus_lab as al
from argus_lab.layout import (
    GROUP_PREFIX,
    Layout,
    LayoutNode,
    Metrics,
    TaskSpec,
    crossings,
    layout_graph,
    layout_plan,
)


def spec(tid: str, *deps: str, parent: str | None = None) -> TaskSpec:
    return TaskSpec(tid, tid, deps, parent)


def by_id(layout: Layout) -> dict[str, LayoutNode]:
    return {n["id"]: n for n in layout["nodes"]}


def random_dag(n: int, seed: int = 7, groups: bool = False) -> list[TaskSpec]:
    """Layers of random width; each task depends on 1-3 of the layer above;
    with ``groups``, runs of tasks in a layer share an HTN parent."""
    rng = random.Random(seed)
    tasks: list[TaskSpec] = []
    prev: list[str] = []
    i = 0
    while i < n:
        size = min(n - i, rng.randint(1, 25))
        layer = [f"t{i + k}" for k in range(size)]
        i += size
        for k, t in enumerate(layer):
            deps = rng.sample(prev, min(len(prev), rng.randint(1, 3))) if prev else []
            parent = f"g{i}-{k // 4}" if groups and rng.random() < 0.5 else None
            tasks.append(TaskSpec(t, t, deps, parent))
        prev = layer
    return tasks


def overlaps(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def test_empty_graph() -> None:
    lay = layout_graph([])
    assert lay["nodes"] == [] and lay["edges"] == [] and lay["groups"] == []


def test_chain_runs_left_to_right_on_one_line() -> None:
    lay = layout_graph([spec("a"), spec("b", "a"), spec("c", "b")])
    n = by_id(lay)
    assert n["a"]["x"] < n["b"]["x"] < n["c"]["x"]
    assert n["a"]["y"] == n["b"]["y"] == n["c"]["y"]
    assert lay["edges"] == [["a", "b"], ["b", "c"]]
    assert lay["width"] >= n["c"]["x"] + n["c"]["w"]


def test_fan_out_is_centred_on_its_source() -> None:
    lay = layout_graph([spec("root"), *(spec(f"c{i}", "root") for i in range(4))])
    n = by_id(lay)
    centres = [n[f"c{i}"]["y"] + n[f"c{i}"]["h"] / 2 for i in range(4)]
    root_centre = n["root"]["y"] + n["root"]["h"] / 2
    assert root_centre == pytest.approx(sum(centres) / 4)
    assert len({n[f"c{i}"]["x"] for i in range(4)}) == 1


def test_crossing_reduction_untangles_a_swapped_pair() -> None:
    tasks = [spec("a1"), spec("a2"), spec("b1", "a2"), spec("b2", "a1")]
    untouched = layout_graph(tasks, metrics=Metrics(sweeps=0))
    assert crossings(untouched) == 1
    assert crossings(layout_graph(tasks)) == 0


def test_crossing_reduction_helps_on_a_random_dag() -> None:
    tasks = random_dag(300)
    assert crossings(layout_graph(tasks)) < 0.8 * crossings(
        layout_graph(tasks, metrics=Metrics(sweeps=0))
    )


@pytest.mark.parametrize("grouped", [False, True])
def test_no_overlaps_and_edges_point_right(grouped: bool) -> None:
    lay = layout_graph(random_dag(400, groups=grouped))
    nodes = lay["nodes"]
    assert len(nodes) == 400
    ordered = sorted(nodes, key=lambda n: (n["x"], n["y"]))
    for a, b in pairwise(ordered):
        assert not overlaps(a, b), (a, b)
    n = by_id(lay)
    for src, dst in lay["edges"]:
        assert n[src]["x"] + n[src]["w"] < n[dst]["x"]
    for node in nodes:  # inside the canvas
        assert node["x"] >= 0 and node["y"] >= 0
        assert node["x"] + node["w"] <= lay["width"]
        assert node["y"] + node["h"] <= lay["height"]


def test_groups_contain_their_members_and_nothing_else() -> None:
    lay = layout_graph(random_dag(300, seed=3, groups=True))
    boxes = [g for g in lay["groups"] if not g["dissolved"]]
    assert boxes
    for g in boxes:
        box = g
        members = set(g["members"])
        for node in lay["nodes"]:
            if node["id"] in members:
                assert g["x"] <= node["x"] and node["x"] + node["w"] <= g["x"] + g["w"]
                assert g["y"] <= node["y"] and node["y"] + node["h"] <= g["y"] + g["h"]
                assert node["group"] == g["key"]
            else:
                assert not overlaps(box, node), (g["key"], node["id"])


def test_collapsed_group_is_one_node_with_rerouted_edges() -> None:
    tasks = [
        spec("a"),
        spec("b1", "a", parent="B"),
        spec("b2", "b1", parent="B"),
        spec("b3", "a", parent="B"),
        spec("c", "b2", "b3"),
    ]
    open_ = layout_graph(tasks)
    assert {n["id"] for n in open_["nodes"]} == {"a", "b1", "b2", "b3", "c"}
    (g,) = open_["groups"]
    assert (g["key"], g["collapsed"], g["members"]) == ("B", False, ["b1", "b2", "b3"])

    shut = layout_graph(tasks, collapsed=["B", "not-a-group"])
    ids = {n["id"] for n in shut["nodes"]}
    assert ids == {"a", GROUP_PREFIX + "B", "c"}
    assert shut["edges"] == [["a", GROUP_PREFIX + "B"], [GROUP_PREFIX + "B", "c"]]
    node = by_id(shut)[GROUP_PREFIX + "B"]
    assert node["kind"] == "group" and node["label"] == "B (3)"
    assert shut["groups"][0]["collapsed"] is True


def test_group_that_would_make_a_cycle_is_dissolved() -> None:
    # x1 -> y -> x2 with x1, x2 in X: X as one box would need X -> y -> X.
    tasks = [spec("x1", parent="X"), spec("y", "x1"), spec("x2", "y", parent="X")]
    lay = layout_graph(tasks, collapsed=["X"])
    (g,) = lay["groups"]
    assert g["dissolved"] and not g["collapsed"]
    n = by_id(lay)
    assert n["x1"]["x"] < n["y"]["x"] < n["x2"]["x"]
    for t in ("x1", "x2"):  # the outline still surrounds its members
        assert g["x"] <= n[t]["x"] and n[t]["x"] + n[t]["w"] <= g["x"] + g["w"]


def test_cycle_is_an_error() -> None:
    with pytest.raises(ValueError, match="cycle"):
        layout_graph([spec("a", "b"), spec("b", "a")])


def test_layout_plan_labels_with_titles() -> None:
    plan = al.Plan.from_dict(
        {"tasks": [{"id": "a", "title": "Load the data"}, {"id": "b", "deps": ["a"]}]}
    )
    n = by_id(layout_plan(plan))
    assert n["a"]["label"] == "Load the data"
    assert n["b"]["label"] == "b"


def test_thousand_nodes_lay_out_fast() -> None:
    tasks = random_dag(1000, groups=True)
    t0 = time.perf_counter()
    lay = layout_graph(tasks)
    took = time.perf_counter() - t0
    assert len(lay["nodes"]) == 1000
    # The benchmark pins <= 200 ms; this guards against accidental quadratic
    # behaviour with slack for a loaded CI machine.
    assert took < 1.0, took


def inside(inner: Mapping[str, Any], outer: Mapping[str, Any]) -> bool:
    return (
        outer["x"] <= inner["x"]
        and inner["x"] + inner["w"] <= outer["x"] + outer["w"]
        and outer["y"] <= inner["y"]
        and inner["y"] + inner["h"] <= outer["y"] + outer["h"]
    )


HTN_TRIP = [  # the shape an HTN planner produces: compound ids are paths
    spec("trip/to_airport/call_taxi", parent="trip/to_airport"),
    spec("trip/to_airport/ride", "trip/to_airport/call_taxi", parent="trip/to_airport"),
    spec("trip/flight", parent="trip"),
    spec("trip/board", "trip/to_airport/ride", "trip/flight", parent="trip"),
    spec("trip/hotel", "trip/board", parent="trip"),
    spec("report", "trip/hotel"),
]


def test_htn_subtrees_nest_by_path() -> None:
    lay = layout_graph(HTN_TRIP)
    g = {x["key"]: x for x in lay["groups"]}
    assert set(g) == {"trip", "trip/to_airport"}
    assert inside(g["trip/to_airport"], g["trip"])
    assert g["trip/to_airport"]["label"] == "to_airport"
    assert [x["key"] for x in lay["groups"]] == ["trip", "trip/to_airport"]
    assert set(g["trip"]["members"]) == {t.id for t in HTN_TRIP[:5]}
    n = by_id(lay)
    for t in ("trip/to_airport/call_taxi", "trip/to_airport/ride"):
        assert inside(n[t], g["trip/to_airport"])
        assert n[t]["group"] == "trip/to_airport"
    assert not overlaps(n["trip/flight"], g["trip/to_airport"])
    assert not inside(n["report"], g["trip"])
    for src, dst in lay["edges"]:
        assert n[src]["x"] + n[src]["w"] < n[dst]["x"]


def test_collapsing_nested_groups() -> None:
    inner = layout_graph(HTN_TRIP, collapsed=["trip/to_airport"])
    ids = {n["id"] for n in inner["nodes"]}
    assert GROUP_PREFIX + "trip/to_airport" in ids
    assert "trip/to_airport/ride" not in ids and "trip/board" in ids
    assert [GROUP_PREFIX + "trip/to_airport", "trip/board"] in inner["edges"]
    outer = layout_graph(HTN_TRIP, collapsed=["trip", "trip/to_airport"])
    assert {n["id"] for n in outer["nodes"]} == {GROUP_PREFIX + "trip", "report"}
    assert outer["edges"] == [[GROUP_PREFIX + "trip", "report"]]
    assert [g["key"] for g in outer["groups"]] == ["trip"]
