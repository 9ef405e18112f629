"""A post-mortem a person can read in two minutes, in Jupyter, markdown or HTML.

``report(s)`` gathers the outcome, the timeline, the failures and what they
blocked, the retries, the decisions (HTN methods, replans, approvals, skips), the
critical path, the slowest tasks and the cost, as blocks that render both ways.
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.analysis._changes import COMPARE_COLUMNS, compare, decisions
from argus_lab.analysis._frames import Frames
from argus_lab.analysis._plots import cost_over_time, timeline
from argus_lab.analysis._postmortem import (
    RETRY_COLUMNS,
    cost_by,
    cost_columns,
    critical_path,
    failure_chains,
    one_session,
    retries_summary,
    slowest,
)
from argus_lab.analysis._schema import FRAME_COLUMNS
from argus_lab.analysis._values import fmt_duration, secs
from argus_lab.model import STATUSES

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from argus_lab.runtime.session import Session

__all__ = ["DURATIONS", "Report", "fmt_duration", "report"]


DURATIONS = frozenset(
    c.name
    for spec in (
        *FRAME_COLUMNS.values(),
        RETRY_COLUMNS,
        COMPARE_COLUMNS,
        cost_columns("task"),
    )
    for c in spec
    if c.dtype == "duration"
) | {"cum_duration"}
"""Columns the report shows as human durations (float64 seconds in the frames)."""


def _cell(v: Any, duration: bool = False) -> str:
    import pandas as pd

    if isinstance(v, list):
        return ", ".join(str(x) for x in v) or "—"
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return "—"
    if duration or isinstance(v, pd.Timedelta):
        return fmt_duration(secs(v))
    if isinstance(v, pd.Timestamp):
        return v.strftime("%Y-%m-%d %H:%M:%S UTC")
    if isinstance(v, float):
        return f"{v:.4f}"
    text = str(v)
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass
class _Block:
    kind: str  # "h2", "p", "ul", "table", "figure"
    text: str = ""
    items: list[str] = field(default_factory=list)
    table: Any = None
    figure: Any = None
    name: str = ""


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


class Report:
    """A rendered post-mortem: shows itself in Jupyter, saves as .md or .html.

    Attributes:
        title: The heading. blocks: The content, in order.
    """

    def __init__(self, title: str, blocks: list[_Block]) -> None:
        self.title = title
        self.blocks = blocks
        self._pngs: dict[str, bytes] = {}

    @property
    def figures(self) -> dict[str, Figure]:
        """The report's figures by name (``timeline``, ``cost``)."""
        return {b.name: b.figure for b in self.blocks if b.kind == "figure"}

    def _png_of(self, b: _Block) -> bytes:
        if b.name not in self._pngs:
            self._pngs[b.name] = _png(b.figure)
        return self._pngs[b.name]

    def to_markdown(self, image_dir: str | None = None) -> str:
        """Markdown text; figures inline as data URIs, or as links into image_dir."""
        out = [f"# {self.title}", ""]
        for b in self.blocks:
            if b.kind == "h2":
                out += [f"## {b.text}", ""]
            elif b.kind == "p":
                out += [b.text, ""]
            elif b.kind == "ul":
                out += [f"- {i}" for i in b.items] + [""]
            elif b.kind == "table":
                out += [_md_table(b.table), ""]
            elif b.kind == "figure":
                if image_dir is None:
                    data = base64.b64encode(self._png_of(b)).decode()
                    src = f"data:image/png;base64,{data}"
                else:
                    src = f"{image_dir}/{b.name}.png"
                out += [f"![{b.text}]({src})", ""]
        return "\n".join(out)

    def to_html(self) -> str:
        """A self-contained HTML fragment (figures embedded as PNG)."""
        e = html.escape
        out = [f'<div class="argus-report"><h1>{e(self.title)}</h1>']
        for b in self.blocks:
            if b.kind == "h2":
                out.append(f"<h2>{e(b.text)}</h2>")
            elif b.kind == "p":
                out.append(f"<p>{_md_inline_html(b.text)}</p>")
            elif b.kind == "ul":
                lis = "".join(f"<li>{_md_inline_html(i)}</li>" for i in b.items)
                out.append(f"<ul>{lis}</ul>")
            elif b.kind == "table":
                out.append(_html_table(b.table))
            elif b.kind == "figure":
                data = base64.b64encode(self._png_of(b)).decode()
                out.append(
                    f'<figure><img alt="{e(b.text)}" '
                    f'src="data:image/png;base64,{data}"/>'
                    f"<figcaption>{e(b.text)}</figcaption></figure>"
                )
        out.append("</div>")
        return "\n".join(out)

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def _repr_html_(self) -> str:
        return self.to_html()

    def __str__(self) -> str:
        return self.to_markdown(image_dir="(figure)")

    def save(self, path: str | Path) -> Path:
        """Writes the report: ``.md`` (figures as PNG files in ``<stem>_files/``
        beside it) or ``.html`` (one self-contained page). Returns the path."""
        p = Path(path)
        if p.suffix.lower() in (".html", ".htm"):
            page = (
                "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
                f"<title>{html.escape(self.title)}</title><style>{_CSS}</style>"
                f"</head><body>\n{self.to_html()}\n</body></html>\n"
            )
            p.write_text(page, encoding="utf-8")
            return p
        if p.suffix.lower() != ".md":
            raise ValueError(f"save a report as .md or .html, not {p.name!r}")
        files = p.with_name(p.stem + "_files")
        files.mkdir(parents=True, exist_ok=True)
        for b in self.blocks:
            if b.kind == "figure":
                (files / f"{b.name}.png").write_bytes(self._png_of(b))
        p.write_text(self.to_markdown(image_dir=files.name) + "\n", encoding="utf-8")
        return p


_CSS = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;"
    "padding:0 1rem}table{border-collapse:collapse;font-size:.9em}"
    "td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left}"
    "img{max-width:100%}"
)


def _md_inline_html(text: str) -> str:
    # Only **bold** and `code` are used in the generated text.
    import re

    t = html.escape(text)
    t = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", t)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", t)


def _md_table(df: pd.DataFrame) -> str:
    dur = [str(c) in DURATIONS for c in df.columns]

    def esc(v: Any, d: bool) -> str:
        return _cell(v, d).replace("|", "\\|").replace("\n", " ")

    head = "| " + " | ".join(str(c) for c in df.columns) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = [
        "| " + " | ".join(esc(v, d) for v, d in zip(r, dur, strict=True)) + " |"
        for r in df.itertuples(index=False)
    ]
    return "\n".join([head, sep, *rows])


def _html_table(df: pd.DataFrame) -> str:
    e = html.escape
    dur = [str(c) in DURATIONS for c in df.columns]
    head = "".join(f"<th>{e(str(c))}</th>" for c in df.columns)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{e(_cell(v, d))}</td>" for v, d in zip(r, dur, strict=True))
        + "</tr>"
        for r in df.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _outcome(f: Frames) -> list[_Block]:
    s = f.sessions.iloc[0]
    t = f.tasks
    counts = t["status"].astype(str).value_counts()
    rest = ", ".join(
        f"{counts[st]} {st.replace('_', ' ')}"
        for st in STATUSES
        if st != "succeeded" and counts.get(st, 0)
    )
    done = f"{counts.get('succeeded', 0)}/{len(t)} succeeded" + (
        f"; {rest}" if rest else ""
    )
    head = f"**{str(s['status']).upper()}**" + (
        f" — {s['reason']}" if isinstance(s["reason"], str) and s["reason"] else ""
    )
    cp = critical_path(f)
    cp = cp[cp["duration"].notna()]
    chain = " → ".join(str(x) for x in cp["task_id"])
    total = secs(cp["cum_duration"].iloc[-1]) if len(cp) else None
    items = [
        f"Tasks: {done}",
        f"Wall time: {fmt_duration(secs(s['duration']))} from the first attempt to "
        "the last result",
        f"Critical path ({fmt_duration(total)}): {chain or '—'}",
        f"Attempts: {s['n_attempts']} ("
        + _plural(int(s["n_retries"]), "transient retry", "transient retries")
        + ")",
        f"Model usage: ${float(s['cost_usd']):.4f}; {int(s['input_tokens']):,} input + "
        f"{int(s['output_tokens']):,} output tokens in {s['n_llm_calls']} calls",
    ]
    if isinstance(s["parent_id"], str):
        reused = int(t["reused"].fillna(False).sum())
        forked = f.events[f.events["kind"] == "forked"]["details"]
        parent = json.loads(forked.iloc[0]).get("parent_name") if len(forked) else None
        at = s["forked_at"]
        where = f"at `{at}`" if isinstance(at, str) and at else "keeping every result"
        items.append(
            f"Forked from `{parent or s['parent_id']}` {where}; "
            f"reused {reused} finished task(s) from it"
        )
    return [_Block("p", head), _Block("ul", items=items)]


def report(src: Session | Frames, *, parent: Session | Frames | None = None) -> Report:
    """Builds the post-mortem of one session.

    Args:
        src: A Session or the Frames of one session.
        parent: For a fork, its parent: adds what changed (``compare``).
    """
    f = one_session(src)
    name = str(f.sessions["name"].iloc[0])
    goal = f.sessions["goal"].iloc[0]
    blocks: list[_Block] = []
    if isinstance(goal, str) and goal:
        blocks.append(_Block("p", f"Goal: {goal}"))
    blocks += [_Block("h2", "Outcome"), *_outcome(f)]
    blocks += [
        _Block("h2", "Timeline"),
        _Block(
            "figure",
            "Attempts per task, coloured by outcome",
            figure=timeline(f),
            name="timeline",
        ),
    ]
    # Every "attempts" in the report counts attempts started in this session in
    # all generations, as the Outcome's total does (a record counts only its
    # current generation's).
    started = f.attempts.groupby("task_id").size()

    def all_attempts(df: Any) -> Any:
        if df.empty or "attempts" not in df:
            return df
        n = df["task_id"].map(started).fillna(0).astype("int64")
        return df.assign(attempts=n)

    fc = all_attempts(failure_chains(f))
    blocks.append(_Block("h2", "Failures and what they blocked"))
    if fc.empty:
        blocks.append(_Block("p", "No task failed."))
    else:
        blocks.append(
            _Block(
                "table",
                table=fc[
                    [
                        "task_id",
                        "error_type",
                        "error",
                        "attempts",
                        "n_blocked",
                        "blocked",
                    ]
                ],
            )
        )
    rs = retries_summary(f)
    if not rs.empty:
        blocks += [
            _Block("h2", "Retries"),
            _Block("table", table=rs.drop(columns="tool")),
        ]
    dec = decisions(f)
    blocks.append(_Block("h2", "Decisions"))
    if dec.empty:
        blocks.append(
            _Block(
                "p",
                "No HTN choices, replans, approvals, skips or "
                "manual retries were recorded.",
            )
        )
    else:
        blocks.append(
            _Block("table", table=dec[["kind", "subject", "decision", "by", "detail"]])
        )
    if parent is not None:
        ch = compare(parent, f)
        blocks.append(_Block("h2", "Changed from the parent"))
        blocks.append(
            _Block("p", "Nothing changed.") if ch.empty else _Block("table", table=ch)
        )
    blocks += [
        _Block("h2", "Slowest tasks"),
    ]
    slow = all_attempts(
        slowest(f, 5)[["task_id", "tool", "status", "attempts", "duration", "busy"]]
    )
    blocks.append(
        _Block("p", "No task has finished in this session.")
        if slow.empty
        else _Block("table", table=slow)
    )
    blocks.append(_Block("h2", "Cost"))
    by_task = cost_by(f, "task")
    by_task = by_task[by_task["n_llm_calls"] > 0]
    if by_task.empty:
        blocks.append(_Block("p", "No model calls were recorded."))
    else:
        cols = ["cost_usd", "input_tokens", "output_tokens", "n_llm_calls"]
        blocks += [
            _Block("table", table=by_task[["task_id", *cols]].head(10)),
            _Block("table", table=cost_by(f, "model")[["model", *cols]]),
            _Block(
                "figure",
                "Cumulative cost and tokens",
                figure=cost_over_time(f),
                name="cost",
            ),
        ]
    return Report(f"Post-mortem: {name}", blocks)
