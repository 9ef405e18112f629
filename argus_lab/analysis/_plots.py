"""Plots of a session: a Gantt timeline of attempts, cumulative cost, cost per task.

Each function returns a ``matplotlib.figure.Figure`` built with the object API (no
pyplot, no global state, nothing shown): Jupyter displays a returned Figure, and
``fig.savefig(path)`` writes it anywhere, headless included. matplotlib is
imported on first call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from argus_lab.analysis._frames import Frames
from argus_lab.analysis._postmortem import cost_by, one_session
from argus_lab.analysis._values import secs

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from argus_lab.runtime.session import Session

__all__ = ["OUTCOME_COLORS", "cost_over_time", "cost_per_task", "timeline"]

OUTCOME_COLORS = {
    "succeeded": "#2e7d32",
    "retried": "#f9a825",
    "failed": "#c62828",
    "interrupted": "#6a1b9a",
    "running": "#1565c0",
}
"""Bar colour of an attempt, by its outcome."""
_NOT_RUN = "#9e9e9e"
_WAIT = "#90caf9"


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _unit(span_s: float) -> tuple[float, str]:
    if span_s < 120:
        return 1.0, "seconds"
    if span_s < 7200:
        return 60.0, "minutes"
    return 3600.0, "hours"


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def timeline(src: Session | Frames, *, max_tasks: int = 60) -> Figure:
    """A Gantt chart: one row per task, one bar per attempt, coloured by outcome.

    Retried attempts are hatched and followed by a dotted line for the backoff;
    waits for approval are pale blue; tasks that never ran are listed in grey
    with their status.

    Args:
        src: A Session or the Frames of one session.
        max_tasks: Show at most this many tasks (those that started first).
    """
    import pandas as pd
    from matplotlib.patches import Patch

    f = one_session(src)
    t, a, ap = f.tasks, f.attempts, f.approvals
    name, status = f.sessions["name"].iloc[0], f.sessions["status"].iloc[0]
    starts = pd.concat([a["started"], ap["requested"]]).dropna()
    first = a.groupby("task_id", sort=False)["started"].min()
    order = list(t["task_id"])
    order.sort(key=lambda x: (pd.isna(first.get(x)), first.get(x, pd.NaT) or 0))
    order = order[:max_tasks]
    row = {tid: i for i, tid in enumerate(order)}
    fig = _figure(9.0, 1.2 + 0.32 * max(len(order), 3))
    ax = fig.add_subplot()
    ax.set_title(f"{name}: {status}")
    if starts.empty:
        _empty(ax, "no attempt has started yet")
        return fig
    t0 = starts.min()
    ends = pd.concat([a["ended"], ap["decided"], starts]).dropna()
    scale, unit = _unit((ends.max() - t0).total_seconds())
    span = max((ends.max() - t0).total_seconds() / scale, 1e-9)

    def x(ts: Any) -> float:
        return float((ts - t0).total_seconds()) / scale

    r: Any
    for r in ap.itertuples(index=False):
        if r.task_id in row and not pd.isna(r.requested):
            end = r.decided if not pd.isna(r.decided) else ends.max()
            ax.barh(
                row[r.task_id],
                x(end) - x(r.requested),
                left=x(r.requested),
                height=0.5,
                color=_WAIT,
                alpha=0.6,
            )
    for r in a.itertuples(index=False):
        if r.task_id not in row:
            continue
        y, left = row[r.task_id], x(r.started)
        width = x(r.ended) - left if not pd.isna(r.ended) else span * 0.01
        outcome = str(r.outcome)
        ax.barh(
            y,
            max(width, span * 0.004),
            left=left,
            height=0.6,
            color=OUTCOME_COLORS.get(outcome, _NOT_RUN),
            edgecolor="black",
            linewidth=0.4,
            hatch="//" if outcome == "retried" else None,
        )
        if int(r.attempt) > 1:
            ax.text(left, y - 0.38, f"#{int(r.attempt)}", fontsize=7, va="bottom")
        delay = secs(r.retry_delay)
        if delay and not pd.isna(r.ended):
            ax.plot(
                [x(r.ended), x(r.ended) + delay / scale],
                [y, y],
                ":",
                color="black",
                linewidth=1,
            )
    statuses = dict(zip(t["task_id"], t["status"].astype(str), strict=True))
    for tid, reused in zip(t["task_id"], t["reused"].fillna(False), strict=True):
        if reused:
            statuses[tid] = "reused from the parent"
    ran = set(first.index)
    for tid in order:
        if tid not in ran:
            ax.text(
                0,
                row[tid],
                f"  {statuses[tid]}",
                va="center",
                fontsize=8,
                color=_NOT_RUN,
            )
    ax.set_yticks(range(len(order)), order, fontsize=8)
    ax.set_ylim(len(order) - 0.5, -0.5)
    ax.set_xlabel(f"{unit} since the first attempt")
    ax.grid(axis="x", alpha=0.3)
    legend = [
        Patch(color=c, label=k)
        for k, c in OUTCOME_COLORS.items()
        if k in set(a["outcome"].astype(str))
    ]
    if len(ap):
        legend.append(Patch(color=_WAIT, label="awaiting approval"))
    if (a["outcome"] == "retried").any():
        legend.append(
            Patch(
                facecolor="white",
                edgecolor="black",
                hatch="//",
                label="retried (dots: backoff)",
            )
        )
    if legend:
        ax.legend(
            handles=legend, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7
        )
    return fig


def cost_over_time(src: Session | Frames) -> Figure:
    """Cumulative model cost (left axis) and tokens (right axis) over the run.

    Args:
        src: A Session or the Frames of one session.
    """
    f = one_session(src)
    c = f.llm_calls.sort_values("ts", kind="stable")
    fig = _figure(8.0, 3.6)
    ax = fig.add_subplot()
    ax.set_title(f"{f.sessions['name'].iloc[0]}: cumulative model usage")
    if c.empty:
        _empty(ax, "no model calls recorded")
        return fig
    t0 = (
        min(c["ts"].min(), f.attempts["started"].min())
        if len(f.attempts)
        else c["ts"].min()
    )
    secs = (c["ts"] - t0).dt.total_seconds()
    scale, unit = _unit(float(secs.max()))
    xs = list(secs / scale)
    cost = list(c["cost_usd"].fillna(0.0).cumsum())
    tokens = list((c["input_tokens"].fillna(0) + c["output_tokens"].fillna(0)).cumsum())
    ax.step([0.0, *xs], [0.0, *cost], where="post", color="#c62828", label="cost (USD)")
    ax.set_ylabel("USD")
    ax.set_xlabel(f"{unit} since the first attempt")
    ax2 = ax.twinx()
    ax2.step(
        [0.0, *xs],
        [0, *tokens],
        where="post",
        color="#1565c0",
        linestyle="--",
        label="tokens (in + out)",
    )
    ax2.set_ylabel("tokens")
    lines = ax.get_lines() + ax2.get_lines()
    ax.legend(
        lines, [str(ln.get_label()) for ln in lines], loc="upper left", fontsize=8
    )
    return fig


def cost_per_task(src: Session | Frames, *, n: int = 20) -> Figure:
    """Horizontal bars of model cost per task, most expensive on top.

    Args:
        src: A Session or the Frames of one session.
        n: Show at most this many tasks.
    """
    f = one_session(src)
    c = cost_by(f, "task")
    c = c[c["cost_usd"] > 0].head(n)
    fig = _figure(8.0, 1.2 + 0.3 * max(len(c), 3))
    ax = fig.add_subplot()
    ax.set_title(f"{f.sessions['name'].iloc[0]}: model cost per task")
    if c.empty:
        _empty(ax, "no model calls recorded")
        return fig
    ids = [str(v) for v in c["task_id"]]
    ax.barh(range(len(c)), list(c["cost_usd"]), color="#c62828")
    ax.set_yticks(range(len(c)), ids, fontsize=8)
    ax.set_ylim(len(c) - 0.5, -0.5)
    ax.set_xlabel("USD")
    for i, (cost, tin, tout) in enumerate(
        zip(c["cost_usd"], c["input_tokens"], c["output_tokens"], strict=True)
    ):
        ax.text(
            cost,
            i,
            f" ${cost:.4f} · {int(tin) + int(tout):,} tok",
            va="center",
            fontsize=7,
        )
    ax.margins(x=0.25)
    return fig
