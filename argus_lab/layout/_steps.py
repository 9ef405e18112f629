"""The steps of the layered layout: cycles, layers, crossing reduction, placement
and group outlines (see the package docstring)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from argus_lab.layout._types import GROUP_PREFIX, LayoutGroup, LayoutNode, Metrics

__all__ = ["cyclic", "outlines", "place"]


def cyclic(
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


def place(
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


def outlines(
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
