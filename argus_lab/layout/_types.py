"""What a layout is made of: task specs in, node and group boxes out, and the
metrics (sizes and gaps); ``crossings`` counts edge crossings of a result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypedDict

__all__ = [
    "GROUP_PREFIX",
    "METRICS",
    "Layout",
    "LayoutGroup",
    "LayoutNode",
    "Metrics",
    "TaskSpec",
    "crossings",
]

GROUP_PREFIX = "#group:"
"""Prefix of a group's node id ('#' cannot occur in a task id)."""


class TaskSpec(NamedTuple):
    """What the layout needs to know about one task."""

    id: str
    label: str
    deps: Sequence[str]
    parent: str | None = None


class LayoutNode(TypedDict):
    """A drawn node: a task, or a collapsed group (``kind == "group"``)."""

    id: str
    label: str
    kind: str
    x: float
    y: float
    w: float
    h: float
    group: str | None


class LayoutGroup(TypedDict):
    """An HTN subtree's box (expanded, collapsed, or dissolved into an outline)."""

    id: str
    key: str
    label: str
    x: float
    y: float
    w: float
    h: float
    members: list[str]
    collapsed: bool
    dissolved: bool


class Layout(TypedDict):
    """Everything the front end draws; plain JSON."""

    width: float
    height: float
    nodes: list[LayoutNode]
    groups: list[LayoutGroup]
    edges: list[list[str]]


@dataclass(frozen=True)
class Metrics:
    """Sizes in SVG user units."""

    node_w: float = 150.0
    node_h: float = 32.0
    col_gap: float = 56.0
    row_gap: float = 12.0
    pad: float = 16.0
    group_pad: float = 10.0
    group_header: float = 22.0
    sweeps: int = 4
    """Down-and-up barycentre sweeps for crossing reduction."""


METRICS = Metrics()


def crossings(layout: Layout) -> int:
    """Edge crossings between nodes in adjacent columns (a quality measure)."""
    by_id = {n["id"]: n for n in layout["nodes"]}
    buckets: dict[tuple[float, float], list[tuple[float, float]]] = {}
    for a, b in layout["edges"]:
        na, nb = by_id.get(a), by_id.get(b)
        if na is None or nb is None:
            continue
        key = (na["x"], nb["x"])
        buckets.setdefault(key, []).append((na["y"], nb["y"]))
    total = 0
    for segs in buckets.values():
        segs.sort()
        for i in range(len(segs)):
            for j in range(i + 1, len(segs)):
                if segs[i][0] < segs[j][0] and segs[i][1] > segs[j][1]:
                    total += 1
    return total
