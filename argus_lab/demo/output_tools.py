"""The demo's output tools: figures, the markdown report, and publishing it.

Figures and the report are written inside the session's own folder
(``ctx.workdir``), which is the session's sandbox: no approval is needed, and a
rerun replaces the files whole (write-then-rename), so these tools are safe to
repeat. Each figure's PNG is also returned as a ``Path``, which the runtime stores
as a content-addressed artifact: the checkpoint keeps the exact pixels the report
showed, even if the session folder is cleaned.

:func:`publish_report` is different: it copies the report and its figures to a
folder *outside* the session (``./argus-report`` by default), a side effect on the
user's files, so it is declared ``side_effect="write"`` and the demo's approval
policy asks before it runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import argus_lab as al
from argus_lab import ToolError
from argus_lab.demo.analysis import JSON, read_table
from argus_lab.demo.figures import (
    RENDER_LOCK,
    correlation_figure,
    distribution_figure,
    family_figure,
    replication_figure,
    save_png,
    scatter_figure,
)
from argus_lab.demo.report import render_report

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["OUTPUT_TOOLS"]


def _figure_result(
    name: str, title: str, draw: Callable[[], Figure], ctx: al.ToolContext
) -> JSON:
    target = Path(ctx.workdir) / "figures" / f"{name}.png"
    with RENDER_LOCK:
        data = save_png(draw(), target)
    return {
        "figure": name,
        "title": title,
        "file": f"figures/{name}.png",
        "path": str(target),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "png": target,  # stored by the runtime as a content-addressed artifact
    }


@al.tool
def plot_distribution(
    path: str, sha256: str, measure: str, *, ctx: al.ToolContext
) -> JSON:
    """Histogram of one measurement by species, saved as a PNG.

    Args:
        path: CSV to read.
        sha256: Expected content hash.
        measure: The measurement drawn.
    """
    df = read_table(path, sha256)
    if measure not in df.columns:
        raise ToolError(f"No column {measure!r}; the table has {list(df.columns)}.")
    return _figure_result(
        f"distribution_{measure}",
        f"Distribution of {measure} by species",
        lambda: distribution_figure(df, measure),
        ctx,
    )


@al.tool
def plot_scatter(
    path: str, sha256: str, x: str, y: str, *, ctx: al.ToolContext
) -> JSON:
    """Scatter of two measurements by species with least-squares lines, as a PNG.

    Args:
        path: CSV to read.
        sha256: Expected content hash.
        x: Measurement on the horizontal axis.
        y: Measurement on the vertical axis.
    """
    df = read_table(path, sha256)
    return _figure_result(
        f"scatter_{y}_vs_{x}",
        f"{y} vs {x}, per species and overall",
        lambda: scatter_figure(df, x, y),
        ctx,
    )


@al.tool
def plot_correlations(correlations: dict[str, Any], *, ctx: al.ToolContext) -> JSON:
    """Heatmap of a correlation matrix (a correlation_matrix result), as a PNG.

    Args:
        correlations: The correlation_matrix result to draw.
    """
    return _figure_result(
        "correlations",
        "Correlation matrix, all penguins",
        lambda: correlation_figure(correlations),
        ctx,
    )


@al.tool
def plot_family(
    path: str,
    sha256: str,
    family: str,
    tests: list[dict[str, Any]],
    *,
    ctx: al.ToolContext,
) -> JSON:
    """Box plots of a family's replicated differences on the held-out rows.

    Args:
        path: CSV to read (the clean table).
        sha256: Expected content hash.
        family: species, sex or island.
        tests: Holm-annotated test results (adjust_pvalues' ``tests``).
    """
    chosen = [t for t in tests if t.get("family") == family and t.get("significant")]
    if not chosen:
        raise ToolError(f"No significant {family!r} test to draw.")
    df = read_table(path, sha256)
    return _figure_result(
        f"replicated_{family}",
        f"Replicated {family} differences ({len(chosen)} tests)",
        lambda: family_figure(df, family, tests),
        ctx,
    )


@al.tool
def plot_replication(
    relations: list[dict[str, Any]],
    tests: list[dict[str, Any]],
    *,
    ctx: al.ToolContext,
) -> JSON:
    """Effect sizes in the exploration years vs the held-out year, as a PNG.

    Args:
        relations: find_relations' ``relations``.
        tests: Holm-annotated test results of those relations.
    """
    return _figure_result(
        "replication",
        "Effect sizes: exploration years vs held-out year",
        lambda: replication_figure(relations, tests),
        ctx,
    )


@al.tool
def write_report(
    title: str,
    dataset: dict[str, Any],
    validation: dict[str, Any],
    profiles: list[dict[str, Any]],
    groups: list[dict[str, Any]],
    correlations: list[dict[str, Any]],
    relations: dict[str, Any],
    tests: dict[str, Any],
    regressions: list[dict[str, Any]],
    classifier: dict[str, Any],
    citation: dict[str, Any],
    figures: list[dict[str, Any]],
    *,
    ctx: al.ToolContext,
) -> JSON:
    """Write the markdown report of the whole analysis, with its figures.

    The report goes to ``report.md`` in the session's folder, beside the
    ``figures/`` it links to (relative links, so the folder can be moved).

    Args:
        title: The report's heading.
        dataset: load_dataset's result.
        validation: validate_dataset's result.
        profiles: profile_column results, one per column.
        groups: group_stats results.
        correlations: correlation_matrix results (one overall, others per group).
        relations: find_relations' result.
        tests: adjust_pvalues' result over the held-out tests.
        regressions: fit_ols results.
        classifier: classify_species' result.
        citation: fetch_citation's result.
        figures: Figure results (``file`` and ``title`` of each).

    Returns:
        The report's path, size, sha256, figure files and headline findings.
    """
    workdir = Path(ctx.workdir)
    missing = [f["file"] for f in figures if not (workdir / f["file"]).is_file()]
    if missing:
        raise ToolError(
            f"Figures {missing} are missing from {workdir}; rerun their tasks."
        )
    text, findings = render_report(
        title=title,
        dataset=dataset,
        validation=validation,
        profiles=profiles,
        groups=groups,
        correlations=correlations,
        relations=relations,
        tests=tests,
        regressions=regressions,
        classifier=classifier,
        citation=citation,
        figures=figures,
    )
    data = text.encode("utf-8")
    target = workdir / "report.md"
    partial = target.with_suffix(".md.partial")
    partial.write_bytes(data)
    partial.replace(target)
    return {
        "path": str(target),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "figures": [f["file"] for f in figures],
        "findings": findings,
    }


@al.tool(side_effect="write", idempotent=True)
def publish_report(report: dict[str, Any], dest: str, *, ctx: al.ToolContext) -> JSON:
    """Copy the report and its figures to ``dest``, outside the session's folder.

    Files are written whole (write-then-rename) and overwrite earlier copies, so
    publishing twice gives the same folder.

    Args:
        report: write_report's result (``path`` and ``figures``).
        dest: The folder to publish to (created if missing).

    Returns:
        The folder, the files copied (relative to it) and their total bytes.
    """
    source = Path(report["path"])
    names = ["report.md", *report.get("figures", [])]
    files = [(source.parent / n, n) for n in names]
    missing = [n for p, n in files if not p.is_file()]
    if missing:
        raise ToolError(
            f"Cannot publish: {missing} missing from {source.parent}; rerun the "
            "write_report task and the figures it lists."
        )
    folder = Path(dest).expanduser().resolve()
    total = 0
    for path, name in files:
        data = path.read_bytes()
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        partial.write_bytes(data)
        partial.replace(target)
        total += len(data)
    return {
        "folder": str(folder),
        "report": str(folder / "report.md"),
        "files": names,
        "bytes": total,
    }


OUTPUT_TOOLS = [
    plot_distribution,
    plot_scatter,
    plot_correlations,
    plot_family,
    plot_replication,
    write_report,
    publish_report,
]
