"""The demo's figures: pure functions from data (or results) to matplotlib Figures.

Built with the object-oriented ``matplotlib.figure.Figure`` API, never pyplot, so
nothing touches a global figure manager or a GUI backend, and saved as PNG by the
Agg renderer (:func:`save_png`). Tools run in a thread pool, and matplotlib's text
rendering shares font objects between figures, so the tools draw and save under
:data:`RENDER_LOCK`, one figure at a time. Saving strips the "Software" metadata,
so the same figure gives the same bytes on every run (and a content-addressed
artifact is stored once).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.demo.analysis import JSON, filter_rows

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "RENDER_LOCK",
    "correlation_figure",
    "distribution_figure",
    "family_figure",
    "replication_figure",
    "save_png",
    "scatter_figure",
]

RENDER_LOCK = threading.Lock()
"""Held while a figure is drawn and saved (matplotlib is not thread-safe)."""

SPECIES_COLORS = {"Adelie": "#ff8c00", "Chinstrap": "#a034f0", "Gentoo": "#159090"}
"""The palmerpenguins palette: darkorange, purple, cyan4."""
FAMILY_COLORS = {"species": "#1f77b4", "sex": "#d62728", "island": "#7f7f7f"}
LABELS = {
    "bill_length_mm": "bill length (mm)",
    "bill_depth_mm": "bill depth (mm)",
    "flipper_length_mm": "flipper length (mm)",
    "body_mass_g": "body mass (g)",
}


def _figure(width: float = 6.4, height: float = 4.0) -> Figure:
    from matplotlib.figure import Figure

    # Fixed margins (subplots_adjust) rather than a layout engine: the
    # constrained layout would more than double the time to draw each figure.
    return Figure(figsize=(width, height), dpi=100)


def save_png(fig: Figure, path: Path) -> bytes:
    """Save ``fig`` as a PNG at ``path`` (write-then-rename) and return the bytes."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".png.partial")
    partial.write_bytes(data)
    partial.replace(path)
    return data


def distribution_figure(df: pd.DataFrame, measure: str) -> Figure:
    """Histogram of one measurement, one outline per species."""
    fig = _figure()
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.13, top=0.9)
    ax = fig.add_subplot()
    values = df[measure].dropna()
    edges = _edges(float(values.min()), float(values.max()), 24)
    for species, color in SPECIES_COLORS.items():
        part = df.loc[df["species"] == species, measure].dropna()
        ax.hist(part, bins=edges, histtype="stepfilled", alpha=0.35, color=color)
        ax.hist(part, bins=edges, histtype="step", color=color, label=species)
    ax.set_xlabel(LABELS.get(measure, measure))
    ax.set_ylabel("penguins")
    ax.set_title(f"{LABELS.get(measure, measure).capitalize()} by species")
    ax.legend(frameon=False)
    return fig


def _edges(low: float, high: float, n: int) -> list[float]:
    step = (high - low) / n or 1.0
    return [low + i * step for i in range(n + 1)]


def _fit_line(ax: Axes, x: Any, y: Any, **style: Any) -> float:
    """Draw the least-squares line of y on x over x's range; return its slope."""
    import numpy as np

    slope, intercept = np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)
    xs = np.array([float(np.min(x)), float(np.max(x))])
    ax.plot(xs, intercept + slope * xs, **style)
    return float(slope)


def scatter_figure(df: pd.DataFrame, x: str, y: str) -> Figure:
    """Scatter of two measurements by species, with per-species and overall fits.

    When the overall slope has the opposite sign of every species' slope, the
    title says so: that is Simpson's paradox, visible at a glance.
    """
    fig = _figure()
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.13, top=0.9)
    ax = fig.add_subplot()
    data = df[[x, y, "species"]].dropna()
    signs = []
    for species, color in SPECIES_COLORS.items():
        part = data[data["species"] == species]
        ax.scatter(part[x], part[y], s=12, alpha=0.6, color=color, label=species)
        signs.append(_fit_line(ax, part[x], part[y], color=color, linewidth=2))
    overall = _fit_line(
        ax, data[x], data[y], color="black", linestyle="--", label="all penguins"
    )
    ax.set_xlabel(LABELS.get(x, x))
    ax.set_ylabel(LABELS.get(y, y))
    flipped = all(s * overall < 0 for s in signs)
    ax.set_title(
        f"{LABELS.get(y, y).capitalize()} vs {LABELS.get(x, x)}"
        + (": the trend reverses within species" if flipped else "")
    )
    ax.legend(frameon=False, fontsize="small")
    return fig


def correlation_figure(correlations: JSON) -> Figure:
    """Heatmap of a ``correlation_matrix`` result, each cell labelled with r."""
    columns = list(correlations["columns"])
    matrix = [[correlations["matrix"][a][b] or 0.0 for b in columns] for a in columns]
    fig = _figure(5.8, 4.6)
    fig.subplots_adjust(left=0.2, right=0.9, bottom=0.16, top=0.92)
    ax = fig.add_subplot()
    image = ax.imshow(matrix, cmap="RdBu_r", vmin=-1, vmax=1)
    names = [LABELS.get(c, c).replace(" (", "\n(") for c in columns]
    ax.set_xticks(range(len(columns)), names, fontsize="small")
    ax.set_yticks(range(len(columns)), names, fontsize="small")
    for i, row in enumerate(matrix):
        for j, r in enumerate(row):
            color = "white" if abs(r) > 0.6 else "black"
            ax.text(j, i, f"{r:.2f}", ha="center", va="center", color=color)
    fig.colorbar(image, ax=ax, label="Pearson r")
    ax.set_title(f"Correlations, all penguins (n={correlations['n']})")
    return fig


def family_figure(df: pd.DataFrame, family: str, tests: Sequence[JSON]) -> Figure:
    """One box plot per replicated test of a family, on the rows it was tested on.

    Args:
        df: The clean table.
        family: Which family to draw (``species``, ``sex`` or ``island``).
        tests: Holm-annotated test results; only this family's significant ones
            are drawn.
    """
    chosen = [t for t in tests if t.get("family") == family and t.get("significant")]
    cols = min(4, max(1, len(chosen)))
    rows = max(1, math.ceil(len(chosen) / cols))
    fig = _figure(3.0 * cols, 2.6 * rows + 0.6)
    fig.subplots_adjust(
        left=0.08, right=0.98, bottom=0.06, top=1 - 0.8 / (2.6 * rows + 0.6),
        wspace=0.35, hspace=0.75,
    )  # fmt: skip
    for k, test in enumerate(chosen):
        ax = fig.add_subplot(rows, cols, k + 1)
        part = filter_rows(df, test["where"])
        groups = [test["group_a"], test["group_b"]]
        column = test["group_column"]
        data = [part.loc[part[column] == g, test["measure"]].dropna() for g in groups]
        box = ax.boxplot(data, patch_artist=True, widths=0.6)
        ax.set_xticks([1, 2], groups)
        for patch, group in zip(box["boxes"], groups, strict=True):
            patch.set_facecolor(SPECIES_COLORS.get(group, "#cccccc"))
        scope = ", ".join(str(v) for key, v in test["where"].items() if key != "year")
        ax.set_title(
            f"{LABELS.get(test['measure'], test['measure'])}"
            + (f"\n{scope}" if scope else "")
            + f" (Holm p={test['p_holm']:.2g})",
            fontsize="small",
        )
        ax.tick_params(labelsize="small")
    years = sorted({y for t in chosen for y in _years(t["where"])})
    fig.suptitle(
        f"Replicated {family} differences, tested on {', '.join(map(str, years))}"
    )
    return fig


def _years(where: JSON) -> list[int]:
    value = where.get("year", [])
    return [int(v) for v in (value if isinstance(value, list) else [value])]


def replication_figure(relations: Sequence[JSON], tests: Sequence[JSON]) -> Figure:
    """Effect size found in the exploration years vs in the held-out year.

    Each relation is a point: filled if it stays significant after the Holm
    correction, hollow if not. Points near the diagonal replicated their size.
    """
    by_id = {t.get("relation"): t for t in tests}
    fig = _figure(5.6, 5.0)
    fig.subplots_adjust(left=0.13, right=0.97, bottom=0.11, top=0.93)
    ax = fig.add_subplot()
    lim = 1.0
    for family, color in FAMILY_COLORS.items():
        points = [
            (
                r["explore"]["d"],
                by_id[r["id"]]["cohens_d"],
                by_id[r["id"]]["significant"],
            )
            for r in relations
            if r["family"] == family and r["id"] in by_id
        ]
        for label, sig in ((f"{family}", True), (f"{family} (not replicated)", False)):
            xs = [p[0] for p in points if p[2] is sig]
            ys = [p[1] for p in points if p[2] is sig]
            if xs:
                ax.scatter(
                    xs,
                    ys,
                    s=36,
                    label=label,
                    edgecolors=color,
                    facecolors=color if sig else "none",
                )
                lim = max(lim, *(abs(v) for v in xs + ys))
    lim = math.ceil(lim + 0.25)
    ax.plot([-lim, lim], [-lim, lim], color="grey", linewidth=0.8, linestyle=":")
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.axvline(0, color="grey", linewidth=0.5)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_xlabel("Cohen's d, exploration years")
    ax.set_ylabel("Cohen's d, held-out year")
    ax.set_title("Do the relations found replicate?")
    ax.legend(frameon=False, fontsize="small")
    return fig
