"""``layout_plan`` and ``layout_graph``: the layout of a plan DAG, item by item
(see the package docstring)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from argus_lab.plan import Plan

from argus_lab.layout._steps import cyclic, outlines, place
from argus_lab.layout._types import (
    GROUP_PREFIX,
    METRICS,
    Layout,
    LayoutGroup,
    LayoutNode,
    Metrics,
    TaskSpec,
)

__all__ = ["layout_graph", "layout_plan"]


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
            stuck = cyclic(items, p, s)
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
        placed, (w, h) = place(items, preds, succs, size, m)
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
        groups += outlines(self.dissolved, self._members_of, nodes, m)

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
