"""Static views: an inline SVG of the plan plus a summary table, no JavaScript.

These are what nbconvert, GitHub and nbval show where no live front end runs
(``Session._repr_html_`` delegates to :func:`session_html`; the widget puts the
same HTML in its MIME bundle). The palette and the summary here are also what
the live widget uses, so both views agree.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from argus_lab.layout import Layout, layout_plan
from argus_lab.model import STATUSES

if TYPE_CHECKING:
    from argus_lab.plan import Plan
    from argus_lab.runtime.session import Session

__all__ = [
    "STATUS_CODES",
    "STATUS_COLORS",
    "PlanView",
    "graph_svg",
    "plan_html",
    "session_html",
    "session_summary",
    "session_svg",
]

STATUS_COLORS: dict[str, str] = {
    "pending": "#e9ecef",
    "running": "#8ecae6",
    "awaiting_approval": "#f6c85f",
    "succeeded": "#7ccfb0",
    "failed": "#f4a582",
    "skipped": "#f7f7f7",
    "blocked": "#bdbdbd",
    "in_doubt": "#d9a6c9",
}
"""Fill colour of a node per task status in light themes: Okabe-Ito hues, safe
for colour-blind readers (widgets/graph.css holds the same values and the dark
ones; every status also has a glyph there)."""

STATUS_CODES: dict[str, str] = {
    "pending": "p",
    "running": "r",
    "awaiting_approval": "a",
    "succeeded": "s",
    "failed": "f",
    "skipped": "k",
    "blocked": "b",
    "in_doubt": "d",
}
"""One character per status: the widget sends statuses as one short string."""

STATUS_GLYPHS: dict[str, str] = {
    "pending": "○",
    "running": "▶",
    "awaiting_approval": "?",
    "succeeded": "✓",
    "failed": "✕",
    "skipped": "↷",
    "blocked": "⊘",
    "in_doubt": "!",
}
"""One glyph per status, so no status is told by colour alone (as in the widget)."""

assert set(STATUS_COLORS) == set(STATUSES) == set(STATUS_CODES) == set(STATUS_GLYPHS)

_SHOWN_COLORS = {**STATUS_COLORS, "interrupted": "#d6e9f3"}
_SHOWN_GLYPHS = {**STATUS_GLYPHS, "interrupted": "‖"}
"""With "interrupted", drawn only (no stored status): a task stored as running
while nobody runs the session (``session_summary``); widgets/graph.css too."""

MAX_STATIC_NODES = 1500
"""Above this many tasks the static view shows the table only (the SVG would be
megabytes of markup nobody can read at that scale)."""

_DONE = ("succeeded", "skipped")


def session_summary(
    session: Session, committed: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The numbers of the summary bar: done/total, running, failed, cost, tokens,
    elapsed, budget left, the session's status and why it stopped.

    While nobody runs the session, its tasks stored as running are counted as
    ``interrupted`` instead: intents a closed, paused or dead run left.

    Cost and tokens add up the task records; budget left is the session budget
    (``s.set_budget``, ``%%argus --max-cost``) minus what the session counted
    against it, per limit set: ``cost``, ``tokens``, ``wall_s``, ``steps``.
    ``committed`` (``Workspace.progress``, for a session another process runs)
    gives the status, counts and reason instead of this object's records.
    """
    if committed is None and session.status == "running" and not session.running:
        # Stored as running, not run by this object: another live process, or
        # one that died mid-run ("interrupted", as argus ls says).
        from argus_lab.jupyter._elsewhere import run_elsewhere

        committed = run_elsewhere(session)  # head first, then what changed
    counts = session.counts()
    if committed is not None:
        counts = dict.fromkeys(counts, 0) | dict(committed["counts"])
    total = sum(counts.values())
    recs = session.records
    cost = sum(r.cost_usd for r in recs.values())
    tokens = sum(r.tokens for r in recs.values())
    started: float | None = None
    ended: float | None = None
    # A fork's kept results ran in its parent, before the fork existed: they do
    # not count towards its elapsed time (nor does the idle time since).
    since = session.info.created if session.info.parent else None
    for r in recs.values():
        if since is not None and (r.started is None or r.started < since):
            continue
        if r.started is not None and (started is None or r.started < started):
            started = r.started
        last = r.ended if r.ended is not None else r.started
        if last is not None and (ended is None or last > ended):
            ended = last
    if session.status == "running" and started is not None:
        ended = time.time()
    elapsed = (ended - started) if started is not None and ended is not None else 0.0
    status: str = session.status
    reason = session.reason or ""
    if committed is not None:
        status, reason = committed["status"], committed["reason"] or ""
    if not (session.running or status == "running"):
        # Nobody runs it: those are intents a closed, paused or dead run left,
        # decided by the next run (the widget marks them "interrupted").
        counts["interrupted"] = counts.pop("running")
    return {
        "name": session.name,
        "status": status,
        "reason": reason,
        "total": total,
        "done": sum(counts[s] for s in _DONE),
        "counts": {k: v for k, v in counts.items() if v},
        "running": counts.get("running", 0),
        "interrupted": counts.get("interrupted", 0),
        "failed": counts["failed"],
        "cost": round(cost, 6),
        "tokens": tokens,
        "elapsed": round(elapsed, 3),
        "budget_left": _budget_left(session),
    }


def _budget_left(session: Session) -> dict[str, float | int]:
    """What is left of each limit of the session's own budget."""
    budget = session.info.budgets.get("session")
    if budget is None:
        return {}
    # The session's usage counters (what its budget checks count); read from
    # the private attribute until Session has a public read-only ``usage``.
    used = session.usage
    left: dict[str, float | int] = {}
    if budget.max_cost_usd is not None:
        left["cost"] = round(budget.max_cost_usd - used.get("cost_usd", 0.0), 6)
    if budget.max_tokens is not None:
        left["tokens"] = budget.max_tokens - int(used.get("tokens", 0))
    if budget.max_wall_s is not None:
        left["wall_s"] = round(budget.max_wall_s - used.get("wall_s", 0.0), 3)
    if budget.max_steps is not None:
        left["steps"] = budget.max_steps - int(used.get("steps", 0))
    return left


def graph_svg(
    layout: Layout,
    statuses: Mapping[str, str],
    *,
    stale: frozenset[str] = frozenset(),
) -> str:
    """An SVG of a layout at full size, nodes filled and marked by status (no
    script); HTML views put it in a scrolling box."""
    esc = html.escape
    by_id = {n["id"]: n for n in layout["nodes"]}
    w, h = layout["width"], layout["height"]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w:g} {h:g}" '
        f'width="{w:g}" height="{h:g}" style="max-width:none;'
        'font-family:system-ui,sans-serif;font-size:12px" role="img">'
    ]
    for g in layout["groups"]:
        if g["collapsed"]:
            continue
        dash = ' stroke-dasharray="4 3"' if g["dissolved"] else ""
        out.append(
            f'<g><rect x="{g["x"]:g}" y="{g["y"]:g}" width="{g["w"]:g}" '
            f'height="{g["h"]:g}" rx="6" fill="#f6f8fa" stroke="#afb8c1"{dash}/>'
            f'<text x="{g["x"] + 8:g}" y="{g["y"] + 15:g}" fill="#57606a">'
            f"{esc(g['label'])}</text></g>"
        )
    for a, b in layout["edges"]:
        na, nb = by_id.get(a), by_id.get(b)
        if na is None or nb is None:
            continue
        out.append(f'<path d="{_edge_path(na, nb)}" fill="none" stroke="#8c959f"/>')
    members = {g["id"]: g["members"] for g in layout["groups"]}
    for n in layout["nodes"]:
        if n["kind"] == "group":
            status = _group_status(
                [statuses.get(t, "pending") for t in members[n["id"]]]
            )
        else:
            status = statuses.get(n["id"], "pending")
        fill = _SHOWN_COLORS.get(status, STATUS_COLORS["pending"])
        extra = ' stroke-dasharray="3 2"' if n["id"] in stale else ""
        label = n["label"] if len(n["label"]) <= 20 else n["label"][:19] + "…"
        label = f"{_SHOWN_GLYPHS.get(status, '')} {label}"
        out.append(
            f'<g data-id="{esc(n["id"])}" data-status="{status}">'
            f"<title>{esc(n['id'])}: {status}</title>"
            f'<rect x="{n["x"]:g}" y="{n["y"]:g}" width="{n["w"]:g}" '
            f'height="{n["h"]:g}" rx="5" fill="{fill}" stroke="#57606a"{extra}/>'
            f'<text x="{n["x"] + 8:g}" y="{n["y"] + n["h"] / 2 + 4:g}" '
            f'fill="#1f2328">{esc(label)}</text></g>'
        )
    out.append("</svg>")
    return "".join(out)


def session_svg(session: Session) -> str:
    """A standalone SVG file's text of a session's graph, coloured by status
    with a glyph per status (what ``s.graph_svg()`` and ``argus show --svg``
    write, for papers and issue reports). Drawn whatever the plan's size."""
    statuses = _shown_statuses(session, session_summary(session)["interrupted"])
    lay = layout_plan(session.plan)
    h = lay["height"]
    legend, legend_w = _svg_legend(statuses.values(), y=h + 6)
    # Room for the legend below the graph (and beside it, for a narrow graph).
    bigger: Layout = {**lay, "height": h + 28, "width": max(lay["width"], legend_w)}
    svg = graph_svg(bigger, statuses, stale=frozenset(session.stale()))
    title = f"<title>{html.escape(session.name)}: {html.escape(session.goal)}</title>"
    head, sep, rest = svg.partition(">")
    body, _, _ = rest.rpartition("</svg>")
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n{head}{sep}{title}{body}'
        f"{legend}</svg>\n"
    )


def _svg_legend(statuses: Iterable[str], *, y: float) -> tuple[str, float]:
    """One swatch with its glyph per status present, left to right; the
    markup and the width it needs."""
    present = [s for s in _SHOWN_COLORS if s in set(statuses)]
    out, x = ['<g class="legend">'], 16.0
    for s in present:
        label = s.replace("_", " ")
        out.append(
            f'<rect x="{x:g}" y="{y:g}" width="16" height="16" rx="3" '
            f'fill="{_SHOWN_COLORS[s]}" stroke="#57606a"/>'
            f'<text x="{x + 3:g}" y="{y + 12:g}" fill="#1f2328">'
            f"{_SHOWN_GLYPHS[s]}</text>"
            f'<text x="{x + 21:g}" y="{y + 12:g}" fill="#1f2328">{label}</text>'
        )
        x += 30 + 7 * len(label)
    out.append("</g>")
    return "".join(out), x + 16


def _edge_path(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    x1, y1 = a["x"] + a["w"], a["y"] + a["h"] / 2
    x2, y2 = b["x"], b["y"] + b["h"] / 2
    mid = (x1 + x2) / 2
    return f"M{x1:g},{y1:g} C{mid:g},{y1:g} {mid:g},{y2:g} {x2:g},{y2:g}"


def _group_status(statuses: list[str]) -> str:
    """The status a collapsed group shows: the most urgent of its members'."""
    for s in ("failed", "in_doubt", "awaiting_approval", "running", "blocked"):
        if s in statuses:
            return s
    if statuses and all(s in _DONE for s in statuses):
        return "succeeded" if "succeeded" in statuses else "skipped"
    return "pending"


def _table(rows: list[tuple[str, str]]) -> str:
    cells = "".join(
        f'<tr><th style="text-align:left;padding-right:1em">{html.escape(k)}</th>'
        f'<td style="text-align:left">{html.escape(v)}</td></tr>'
        for k, v in rows
    )
    return f"<table>{cells}</table>"


def _legend(counts: Mapping[str, int]) -> str:
    parts = []
    for s, n in counts.items():
        if n:
            parts.append(
                f'<span style="display:inline-block;margin-right:1em">'
                f'<span style="display:inline-block;width:.9em;height:.9em;'
                f"background:{_SHOWN_COLORS[s]};border:1px solid #57606a;"
                f'vertical-align:middle"></span> {html.escape(s)} {n}</span>'
            )
    return "".join(parts)


def session_html(session: Session) -> str:
    """Static HTML for a session: summary table, status legend and plan SVG."""
    summ = session_summary(session)
    cost, tokens = summ["cost"], summ["tokens"]
    rows = [
        ("session", f"{session.name} ({summ['status']})"),
        ("goal", session.goal or "—"),
        ("done", f"{summ['done']}/{summ['total']}"),
        ("running / failed", f"{summ['running']} / {summ['failed']}"),
    ]
    if summ["reason"]:
        rows.append(("reason", summ["reason"]))
    if tokens or cost:
        rows.append(("cost / tokens", f"${cost:.4f} / {tokens}"))
    body = _graph_or_note(session.plan, _shown_statuses(session, summ["interrupted"]))
    return (
        '<div class="argus-static" style="font-family:system-ui,sans-serif">'
        f"{_table(rows)}<div>{_legend(summ['counts'])}</div>{body}</div>"
    )


def _shown_statuses(session: Session, interrupted: int) -> dict[str, str]:
    """Each task's status as drawn: "interrupted" for one stored as running
    while nobody runs the session (``interrupted``: session_summary's count)."""
    statuses: dict[str, str] = {t: r.status for t, r in session.records.items()}
    if not interrupted:
        return statuses
    return {t: "interrupted" if st == "running" else st for t, st in statuses.items()}


def plan_html(plan: Plan) -> str:
    """Static HTML for a plan that has not run: its goal, size and SVG."""
    rows = [("goal", plan.goal or "—"), ("tasks", str(len(plan.tasks)))]
    body = _graph_or_note(plan, {})
    return (
        '<div class="argus-static" style="font-family:system-ui,sans-serif">'
        f"{_table(rows)}{body}</div>"
    )


def _graph_or_note(plan: Plan, statuses: Mapping[str, str]) -> str:
    if len(plan.tasks) > MAX_STATIC_NODES:
        return (
            f"<p>(the graph of {len(plan.tasks)} tasks is drawn by the live widget "
            "only)</p>"
        )
    # Drawn at full size (labels 12 px) in a scrolling box, never shrunk to fit.
    return (
        '<div style="overflow:auto;max-height:480px;max-width:100%">'
        f"{graph_svg(layout_plan(plan), statuses)}</div>"
    )


class PlanView:
    """A plan shown statically (what ``%%argus --plan-only`` returns).

    Attributes:
        plan: The plan.
    """

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __repr__(self) -> str:
        return f"<Plan {self.plan.goal!r}: {len(self.plan.tasks)} tasks>"

    def _repr_html_(self) -> str:
        return plan_html(self.plan)
