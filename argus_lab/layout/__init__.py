"""Layered layout of a plan DAG (pure: task specs in, coordinates out), computed in
Python for the widget and the static views (argus_lab.jupyter), and usable alone.

The widget's ES module only draws what this returns. The algorithm is a small
Sugiyama-style layout, linear in the graph apart from the sorts:

1. HTN subtrees (tasks sharing a ``parent``) become *items*: a group is one box
   in the outer graph, either expanded (its members laid out inside it) or
   collapsed (one node). Groups whose condensation would create a cycle (a path
   leaves the group and comes back) are *dissolved*: their members are laid out
   as plain tasks and the group is drawn as an outline around them.
2. Layers by topological generation (longest path from a source), for the outer
   items and, inside each group, for its members.
3. Crossing reduction: alternate down and up sweeps ordering every layer by the
   barycentre of each item's neighbours.
4. Coordinates: layers are columns, left to right; within a column items keep
   their order and are pulled towards the centre of their predecessors by an
   isotonic regression with a minimum gap (pool adjacent violators), so chains
   run straight and fans stay centred without overlapping.
"""

from argus_lab.layout._layouter import layout_graph, layout_plan
from argus_lab.layout._types import (
    GROUP_PREFIX,
    METRICS,
    Layout,
    LayoutGroup,
    LayoutNode,
    Metrics,
    TaskSpec,
    crossings,
)

__all__ = [
    "GROUP_PREFIX",
    "METRICS",
    "Layout",
    "LayoutGroup",
    "LayoutNode",
    "Metrics",
    "TaskSpec",
    "crossings",
    "layout_graph",
    "layout_plan",
]
