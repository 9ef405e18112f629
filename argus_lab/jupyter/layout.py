"""Layered layout of a plan DAG, computed in Python for the widget and static views.

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

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypedDict

if TYPE_CHECKING:
    from argus_lab.model import Plan

__all__ = [
    "GROUP_PREFIX",
    "Layout",
    "LayoutGroup",
    "LayoutNode",
    "Metrics",
    "TaskSpec",
    "crossings",
    "layout_graph",
    "layout_plan",
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


def layout_plan(
    plan: Plan, *, collapsed: Collection[str] = (), metrics: Metrics = METRICS
) -> Layout:
    """Lays out a plan's tasks (labels: title, else id; groups: ``parent``).

    Args:
        plan: The plan.
        collapsed: Group keys (``parent`` values) drawn as a single node.
        metrics: Node sizes and gaps.
    """
    specs = [TaskSpec(t.id, t.title or t.id, t.deps, t.parent) for t in plan.tasks]
    return layout_graph(specs, collapsed=collapsed, metrics=metrics)


def layout_graph(
    tasks: Sequence[TaskSpec],
    *,
    collapsed: Collection[str] = (),
    metrics: Metrics = METRICS,
) -> Layout:
    """Lays out a DAG given as task specs (see the module docstring).

    Groups nest by path: the group ``trip/to_airport`` sits inside ``trip`` when
    both are ``parent`` values (HTN compound ids are paths).

    Raises:
        ValueError: the graph has a cycle.
    """
    return _Layouter(tasks, collapsed, metrics).run()


def _enclosing(key: str, keys: Collection[str]) -> str | None:
    parts = key.split("/")
    for i in range(len(parts) - 1, 0, -1):
        cand = "/".join(parts[:i])
        if cand in keys:
            return cand
    return None


class _Layouter:
    """One layout computation: nested groups placed inside out, recursively."""

    def __init__(
        self, tasks: Sequence[TaskSpec], collapsed: Collection[str], m: Metrics
    ) -> None:
        self.m = m
        self.tasks = tasks
        index = {t.id: i for i, t in enumerate(tasks)}
        self.index = index
        self.deps = {
            t.id: [d for d in dict.fromkeys(t.deps) if d in index] for t in tasks
        }
        self.parent = {t.id: t.parent for t in tasks if t.parent}
        keys = set(self.parent.values())
        self.keys = keys
        self.outer_of = {k: _enclosing(k, keys) for k in keys}
        self.collapsed = set(collapsed)
        self.dissolved: set[str] = set()
        self._rebuild()

    def _up(self, g: str | None) -> str | None:
        while g is not None and g in self.dissolved:
            g = self.outer_of[g]
        return g

    def _rebuild(self) -> None:
        """Chains of live (not dissolved) groups around each task, innermost first,
        and what each container holds."""
        self.chain: dict[str, list[str]] = {}
        self.desc: dict[str | None, list[str]] = {None: []}
        self.child_groups: dict[str | None, list[str]] = {None: []}
        self.child_tasks: dict[str | None, list[str]] = {None: []}
        for t in self.tasks:
            chain: list[str] = []
            g = self._up(self.parent.get(t.id))
            while g is not None:
                chain.append(g)
                g = self._up(self.outer_of[g])
            self.chain[t.id] = chain
            self.desc[None].append(t.id)
            for g in chain:
                self.desc.setdefault(g, []).append(t.id)
            self.child_tasks.setdefault(chain[0] if chain else None, []).append(t.id)
        for g in self.desc:
            if g is not None:
                self.child_groups.setdefault(self._up(self.outer_of[g]), []).append(g)

    def _item(self, t: str, container: str | None) -> str:
        chain = self.chain[t]
        pos = len(chain) if container is None else chain.index(container)
        return t if pos == 0 else GROUP_PREFIX + chain[pos - 1]

    def _level(
        self, c: str | None
    ) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
        """The items directly inside container c and the edges between them,
        dissolving child groups until that graph is acyclic."""
        while True:
            inside = set(self.desc.get(c, ()))
            first: dict[str, int] = {}
            for t in self.desc.get(c, ()):
                first.setdefault(self._item(t, c), self.index[t])
            items = sorted(first, key=first.__getitem__)
            preds: dict[str, dict[str, None]] = {i: {} for i in items}
            succs: dict[str, dict[str, None]] = {i: {} for i in items}
            for t in self.desc.get(c, ()):
                b = self._item(t, c)
                for d in self.deps[t]:
                    if d in inside:
                        a = self._item(d, c)
                        if a != b:
                            preds[b][a] = None
                            succs[a][b] = None
            p = {k: list(v) for k, v in preds.items()}
            s = {k: list(v) for k, v in succs.items()}
            stuck = _cyclic(items, p, s)
            if not stuck:
                return items, p, s
            bad = {i[len(GROUP_PREFIX) :] for i in stuck if i.startswith(GROUP_PREFIX)}
            if not bad:
                raise ValueError(f"the graph has a cycle through {sorted(stuck)[:10]}")
            self.dissolved |= bad
            self._rebuild()

    def _place_in(
        self, c: str | None
    ) -> tuple[
        dict[str, tuple[float, float]], dict[str, tuple[float, ...]], float, float
    ]:
        """Node positions and group boxes inside container c, relative to it."""
        m = self.m
        items, preds, succs = self._level(c)
        size: dict[str, tuple[float, float]] = {}
        inner: dict[
            str, tuple[dict[str, tuple[float, float]], dict[str, tuple[float, ...]]]
        ] = {}
        top = m.group_header + m.group_pad
        for item in items:
            key = item[len(GROUP_PREFIX) :] if item.startswith(GROUP_PREFIX) else None
            if key is None or key in self.collapsed:
                size[item] = (m.node_w, m.node_h)
                continue
            sub_pos, sub_boxes, w, h = self._place_in(key)
            inner[item] = (sub_pos, sub_boxes)
            size[item] = (w + 2 * m.group_pad, h + top + m.group_pad)
        placed, (w, h) = _place(items, preds, succs, size, m)
        nodes: dict[str, tuple[float, float]] = {}
        boxes: dict[str, tuple[float, ...]] = {}
        for item in items:
            x, y = placed[item]
            if item not in inner:
                nodes[item] = (x, y)
                if item.startswith(GROUP_PREFIX):  # collapsed
                    boxes[item[len(GROUP_PREFIX) :]] = (x, y, *size[item])
                continue
            boxes[item[len(GROUP_PREFIX) :]] = (x, y, *size[item])
            pos, sub = inner[item]
            ox, oy = x + m.group_pad, y + top
            for k, (px, py) in pos.items():
                nodes[k] = (px + ox, py + oy)
            for k, (bx, by, bw, bh) in sub.items():
                boxes[k] = (bx + ox, by + oy, bw, bh)
        return nodes, boxes, w, h

    def run(self) -> Layout:
        m = self.m
        pos, boxes, _, _ = self._place_in(None)
        folded = {g for g in boxes if g in self.collapsed}
        nodes: list[LayoutNode] = []
        groups: list[LayoutGroup] = []
        label = {t.id: t.label for t in self.tasks}
        for key, (x, y, w, h) in boxes.items():
            outer = self._up(self.outer_of[key])
            short = (
                key[len(outer) + 1 :] if outer and key.startswith(outer + "/") else key
            )
            members = list(self.desc[key])
            groups.append(
                LayoutGroup(
                    id=GROUP_PREFIX + key,
                    key=key,
                    label=short,
                    x=x,
                    y=y,
                    w=w,
                    h=h,
                    members=members,
                    collapsed=key in folded,
                    dissolved=False,
                )
            )
            if key in folded:
                nodes.append(
                    LayoutNode(
                        id=GROUP_PREFIX + key,
                        label=f"{short} ({len(members)})",
                        kind="group",
                        x=x,
                        y=y,
                        w=w,
                        h=h,
                        group=outer,
                    )
                )
        for t in self.tasks:
            if t.id not in pos:
                continue  # inside a collapsed group
            x, y = pos[t.id]
            chain = self.chain[t.id]
            nodes.append(
                LayoutNode(
                    id=t.id,
                    label=label[t.id],
                    kind="task",
                    x=x,
                    y=y,
                    w=m.node_w,
                    h=m.node_h,
                    group=chain[0] if chain else None,
                )
            )
        # Outer boxes first, so that inner ones are drawn on top of them.
        groups.sort(key=lambda g: g["key"].count("/"))
        groups += _outlines(self.dissolved, self._members_of, nodes, m)

        min_y = min([0.0, *(n["y"] for n in nodes), *(g["y"] for g in groups)])
        min_x = min([0.0, *(n["x"] for n in nodes), *(g["x"] for g in groups)])
        dx, dy = m.pad - min_x, m.pad - min_y
        for n in nodes:
            n["x"] += dx
            n["y"] += dy
        for g in groups:
            g["x"] += dx
            g["y"] += dy
        width = max([0.0, *(n["x"] + n["w"] for n in nodes)]) + m.pad
        width = max([width, *(g["x"] + g["w"] + m.pad for g in groups)])
        height = max([0.0, *(n["y"] + n["h"] for n in nodes)]) + m.pad
        height = max([height, *(g["y"] + g["h"] + m.pad for g in groups)])

        def visible(t: str) -> str:
            for g in reversed(self.chain[t]):  # the outermost collapsed group
                if g in folded:
                    return GROUP_PREFIX + g
            return t

        edges: dict[tuple[str, str], None] = {}
        for t in self.tasks:
            b = visible(t.id)
            for d in self.deps[t.id]:
                a = visible(d)
                if a != b:
                    edges[(a, b)] = None
        return Layout(
            width=round(width, 1),
            height=round(height, 1),
            nodes=nodes,
            groups=groups,
            edges=[[a, b] for a, b in edges],
        )

    @property
    def _members_of(self) -> dict[str, list[str]]:
        """Every task under each group key, dissolved groups included."""
        out: dict[str, list[str]] = {}
        for t in self.tasks:
            g = self.parent.get(t.id)
            while g is not None:
                out.setdefault(g, []).append(t.id)
                g = self.outer_of[g]
        return out


def _cyclic(
    items: Sequence[str],
    preds: Mapping[str, list[str]],
    succs: Mapping[str, list[str]],
) -> set[str]:
    """Items on a cycle or between cycles: what is left after peeling off sources
    (Kahn) and then sinks."""
    left = set(items)
    for first, second in ((preds, succs), (succs, preds)):
        deg = {i: sum(1 for p in first[i] if p in left) for i in left}
        queue = [i for i, d in deg.items() if d == 0]
        while queue:
            i = queue.pop()
            left.discard(i)
            for s in second[i]:
                if s in left:
                    deg[s] -= 1
                    if deg[s] == 0:
                        queue.append(s)
    return left


def _layers(
    items: Sequence[str], preds: Mapping[str, list[str]], succs: Mapping[str, list[str]]
) -> dict[str, int]:
    """Topological generation: 0 for sources, else 1 + the deepest predecessor."""
    deg = {i: len(preds[i]) for i in items}
    layer = dict.fromkeys(items, 0)
    queue = [i for i in items if deg[i] == 0]
    head = 0
    while head < len(queue):
        i = queue[head]
        head += 1
        for s in succs[i]:
            if layer[s] < layer[i] + 1:
                layer[s] = layer[i] + 1
            deg[s] -= 1
            if deg[s] == 0:
                queue.append(s)
    return layer


def _order(
    columns: list[list[str]],
    preds: Mapping[str, list[str]],
    succs: Mapping[str, list[str]],
    sweeps: int,
) -> None:
    """Barycentre crossing reduction, in place. Positions are normalised to
    [0, 1] per column so that long edges (no dummy nodes) compare fairly."""
    if all(len(col) < 2 for col in columns):
        return  # nothing to reorder (chains, single nodes: most small groups)
    pos: dict[str, float] = {}

    def renumber(col: list[str]) -> None:
        n = len(col)
        for k, item in enumerate(col):
            pos[item] = (k + 0.5) / n

    for col in columns:
        renumber(col)
    for _ in range(sweeps):
        for direction in (preds, succs):
            seq = columns[1:] if direction is preds else columns[-2::-1]
            for col in seq:
                key: dict[str, float] = {}
                for item in col:
                    ns = direction[item]
                    key[item] = sum(pos[n] for n in ns) / len(ns) if ns else pos[item]
                col.sort(key=key.__getitem__)
                renumber(col)


def _place(
    items: Sequence[str],
    preds: Mapping[str, list[str]],
    succs: Mapping[str, list[str]],
    size: Mapping[str, tuple[float, float]],
    m: Metrics,
) -> tuple[dict[str, tuple[float, float]], tuple[float, float]]:
    """Layers, orders and places items; returns top-left corners and the extent."""
    layer = _layers(items, preds, succs)
    n_cols = max(layer.values(), default=-1) + 1
    columns: list[list[str]] = [[] for _ in range(n_cols)]
    for item in items:
        columns[layer[item]].append(item)
    _order(columns, preds, succs, m.sweeps)

    xs: list[float] = []
    x = 0.0
    for col in columns:
        xs.append(x)
        x += max(size[i][0] for i in col) + m.col_gap
    centre: dict[str, float] = {}
    out: dict[str, tuple[float, float]] = {}
    for c, col in enumerate(columns):
        wanted: list[float | None] = []
        for item in col:
            ps = preds[item]
            wanted.append(
                sum(centre[p] for p in ps) / len(ps) - size[item][1] / 2 if ps else None
            )
        tops = _fit(wanted, [size[i][1] for i in col], m.row_gap)
        for item, top in zip(col, tops, strict=True):
            centre[item] = top + size[item][1] / 2
            out[item] = (xs[c], top)
    if not out:
        return out, (0.0, 0.0)
    min_top = min(y for _, y in out.values())
    out = {i: (px, py - min_top) for i, (px, py) in out.items()}
    width = max(px + size[i][0] for i, (px, _) in out.items())
    height = max(py + size[i][1] for i, (_, py) in out.items())
    return out, (width, height)


def _fit(wanted: list[float | None], heights: list[float], gap: float) -> list[float]:
    """Tops as close as possible (least squares) to the wanted ones, in order,
    each at least ``gap`` below the previous item: isotonic regression (pool
    adjacent violators) on tops minus their minimal offsets."""
    n = len(wanted)
    offset = [0.0] * n
    for k in range(1, n):
        offset[k] = offset[k - 1] + heights[k - 1] + gap
    # Items with no wish sit right after the previous one (or before the next).
    z: list[float | None] = [
        None if w is None else w - offset[k] for k, w in enumerate(wanted)
    ]
    weight = [0.01 if w is None else 1.0 for w in z]
    last: float | None = None
    for k in range(n):
        if z[k] is None:
            z[k] = last
        last = z[k]
    nxt: float | None = None
    for k in range(n - 1, -1, -1):
        if z[k] is None:
            z[k] = nxt
        nxt = z[k]
    vals = [0.0 if v is None else v for v in z]
    # blocks: [weighted sum, weight, count]
    blocks: list[list[float]] = []
    for v, w in zip(vals, weight, strict=True):
        blocks.append([v * w, w, 1.0])
        while len(blocks) > 1 and (
            blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]
        ):
            s, wt, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += wt
            blocks[-1][2] += c
    fitted: list[float] = []
    for s, wt, c in blocks:
        fitted += [s / wt] * int(c)
    return [f + o for f, o in zip(fitted, offset, strict=True)]


def _outlines(
    dissolved: Iterable[str],
    members: Mapping[str, list[str]],
    nodes: Sequence[LayoutNode],
    m: Metrics,
) -> list[LayoutGroup]:
    by_id = {n["id"]: n for n in nodes}
    out: list[LayoutGroup] = []
    for key in sorted(dissolved):
        ns = [by_id[t] for t in members[key] if t in by_id]
        if not ns:
            continue
        x0 = min(n["x"] for n in ns) - m.group_pad
        y0 = min(n["y"] for n in ns) - m.group_pad - m.group_header
        x1 = max(n["x"] + n["w"] for n in ns) + m.group_pad
        y1 = max(n["y"] + n["h"] for n in ns) + m.group_pad
        out.append(
            LayoutGroup(
                id=GROUP_PREFIX + key,
                key=key,
                label=key,
                x=x0,
                y=y0,
                w=x1 - x0,
                h=y1 - y0,
                members=list(members[key]),
                collapsed=False,
                dissolved=True,
            )
        )
    return out


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
