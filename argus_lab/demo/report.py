"""The demo's markdown report, assembled from the upstream tasks' JSON results.

:func:`render_report` turns the results into markdown, embeds the figures (relative
links to ``figures/*.png``) and derives the headline findings from the numbers (none
are written in advance); :func:`simpson_pairs` finds the correlations whose sign
flips within every subgroup, :func:`replication_findings` what the held-out tests
confirmed. Nothing here reads files or imports pandas/numpy; the ``write_report``
tool writes the text to disk.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from argus_lab.demo.analysis import JSON, _where_label


def _fmt(value: Any) -> str:
    """Format a number for a markdown table (4 significant digits; '-' for None)."""
    if value is None:
        return "-"
    if isinstance(value, bool | str):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def simpson_pairs(correlations: Sequence[JSON]) -> list[JSON]:
    """Find pairs whose overall correlation has the opposite sign of every subgroup's.

    Args:
        correlations: ``correlation_matrix`` results; the one with no ``where`` is
            the overall one, the others are subgroups (e.g. one per species).

    Returns:
        One entry per reversed pair, with the overall r and the subgroups' r.
    """
    overall = next((c for c in correlations if not c.get("where")), None)
    subgroups = [c for c in correlations if c.get("where")]
    if overall is None or len(subgroups) < 2:
        return []
    found: list[JSON] = []
    for pair in overall["pairs"]:
        x, y, r = pair["x"], pair["y"], pair["r"]
        within = {
            _where_label(c["where"]): c["matrix"].get(x, {}).get(y) for c in subgroups
        }
        if r and all(v is not None and v * r < 0 for v in within.values()):
            found.append({"x": x, "y": y, "overall_r": r, "within_r": within})
    return found


def _mean_of(group: JSON, measure: str) -> float:
    return float(group["mean"][measure] or 0.0)


def replication_findings(relations: JSON, tests: JSON) -> list[str]:
    """Sentences on what the held-out tests confirmed, derived from the numbers.

    Args:
        relations: find_relations' result.
        tests: adjust_pvalues' result over the tests of those relations.
    """
    annotated = tests["tests"]
    if not annotated:
        return [
            f"No comparison reached |d| >= {relations['min_effect']} in the "
            "exploration years, so nothing was tested."
        ]
    years = ", ".join(str(y) for y in relations["confirm_years"])
    held = [t for t in annotated if t["significant"]]
    out = [
        f"{len(held)} of the {len(annotated)} relations found in "
        f"{_years(relations['explore_years'])} replicate in {years} "
        f"(Holm-adjusted, alpha = {tests['alpha']})."
    ]
    failed = [t for t in annotated if not t["significant"]]
    if failed:
        out.append(
            "Not replicated: "
            + "; ".join(f"{t['name']} (Holm p = {_fmt(t['p_holm'])})" for t in failed)
            + "."
        )
    measures = sorted({t["measure"] for t in annotated if t.get("family") == "sex"})
    dimorphic = [
        m
        for m in measures
        if sum(
            1
            for t in held
            if t.get("family") == "sex" and t["measure"] == m and t["difference"] > 0
        )
        == 3
    ]
    if dimorphic:
        out.append(
            f"Males exceed females in {', '.join(dimorphic)} in all three species "
            f"in the held-out year."
        )
    return out


def _years(years: Sequence[int]) -> str:
    return f"{min(years)}-{max(years)}" if len(years) > 1 else str(years[0])


def _figures(figures: Sequence[JSON], *prefixes: str) -> list[str]:
    """Markdown image lines for the figures whose name starts with a prefix."""
    md: list[str] = []
    for f in figures:
        if f["figure"].startswith(prefixes):
            md += [f"![{f['title']}]({f['file']})", ""]
    return md


def _tests_section(relations: JSON, tests: JSON) -> list[str]:
    explore = {r["id"]: r["explore"]["d"] for r in relations["relations"]}
    md = [
        "## Relations found, then tested on a held-out year",
        "",
        f"Screened {relations['screened']} comparisons (species pairs, sexes within "
        f"each species, islands within Adelie) on the "
        f"{relations['explore_rows']} penguins of "
        f"{_years(relations['explore_years'])}, keeping those with |Cohen's d| >= "
        f"{relations['min_effect']}: {len(relations['relations'])} relations. Each "
        f"was then tested on the {relations['confirm_rows']} penguins of "
        f"{_years(relations['confirm_years'])}, which the screen never saw, with a "
        f"two-sided permutation test; p-values are Holm-adjusted at alpha = "
        f"{tests['alpha']} over the {len(tests['tests'])} tests (with n "
        f"permutations the smallest p-value is 1/(n+1)).",
        "",
    ]
    md += _table(
        ["relation", "d found", "d held out", "n a", "n b", "p", "Holm p",
         "replicated"],
        [
            [t["name"], explore.get(t.get("relation")), t["cohens_d"], t["n_a"],
             t["n_b"], t["p_value"], t["p_holm"],
             "yes" if t["significant"] else "no"]
            for t in tests["tests"]
        ],
    )  # fmt: skip
    dropped = relations["dropped"]
    if dropped:
        md += [
            f"Screened out ({len(dropped)}, |d| below {relations['min_effect']}): "
            + ", ".join(f"{d['id']} ({_fmt(d['d'])})" for d in dropped)
            + ".",
            "",
        ]
    return md


def render_report(
    *,
    title: str,
    dataset: JSON,
    validation: JSON,
    profiles: Sequence[JSON],
    groups: Sequence[JSON],
    correlations: Sequence[JSON],
    relations: JSON,
    tests: JSON,
    regressions: Sequence[JSON],
    classifier: JSON,
    citation: JSON,
    figures: Sequence[JSON] = (),
) -> tuple[str, list[str]]:
    """Assemble the upstream results into a markdown report with its figures.

    Returns:
        The markdown text and the headline findings (one sentence each), which are
        derived from the numbers, not written in advance.
    """
    findings: list[str] = []
    md = [f"# {title}", ""]
    md += [
        "## Data",
        "",
        f"`{Path(dataset['path']).name}`: {dataset['rows']} rows x "
        f"{dataset['columns']} columns, sha256 `{dataset['sha256'][:16]}...`.",
        f"Validation: {'passed' if validation['ok'] else 'FAILED'}; "
        f"{validation['complete_rows']} complete rows, "
        f"{validation['complete_measurement_rows']} with all four measurements, "
        f"{validation['duplicate_rows']} duplicates.",
        "",
    ]
    md += [f"- problem: {p}" for p in validation["problems"]]
    md += ["## Columns", ""]
    md += _table(
        ["column", "kind", "n", "missing", "mean", "std", "min", "median", "max",
         "values"],
        [
            [p["column"], p["kind"], p["count"], p["missing"], p.get("mean"),
             p.get("std"), p.get("min"), p.get("median"), p.get("max"),
             ", ".join(f"{k} {v}" for k, v in p.get("counts", {}).items()) or "-"]
            for p in profiles
        ],
    )  # fmt: skip
    md += _figures(figures, "distribution_")
    md += ["## Groups", ""]
    for result in groups:
        by, measures = result["by"], result["measures"]
        md += [f"Mean per {' x '.join(by)}:", ""]
        md += _table(
            [*by, "n", *measures],
            [
                [*g["group"].values(), g["n"], *(g["mean"][m] for m in measures)]
                for g in result["groups"]
            ],
        )
        if by == ["species"]:
            for m in measures:
                top = max(result["groups"], key=lambda g: _mean_of(g, m))
                findings.append(
                    f"{top['group']['species']} has the largest mean {m} "
                    f"({_fmt(top['mean'][m])})."
                )
    md += ["## Correlations", ""]
    for corr in correlations:
        strongest = corr["pairs"][0]
        label = _where_label(corr.get("where")) or "all penguins"
        md.append(
            f"- {label} (n={corr['n']}): strongest pair {strongest['x']} ~ "
            f"{strongest['y']}, r = {_fmt(strongest['r'])}"
        )
    md.append("")
    for rev in simpson_pairs(correlations):
        within = ", ".join(f"{k} {_fmt(v)}" for k, v in rev["within_r"].items())
        sentence = (
            f"Simpson's paradox: {rev['x']} vs {rev['y']} correlate at r = "
            f"{_fmt(rev['overall_r'])} over all penguins but with the opposite sign "
            f"within every group ({within})."
        )
        findings.append(sentence)
        md += [sentence, ""]
    md += _figures(figures, "correlations", "scatter_bill_depth_mm")
    md += _tests_section(relations, tests)
    md += _figures(figures, "replication", "replicated_")
    findings += replication_findings(relations, tests)
    md += ["## Regressions", ""]
    md += _table(
        ["model", "n", "R^2", "adj R^2", "RMSE", "coefficients"],
        [
            [r["name"], r["n"], r["r2"], r["adj_r2"], r["rmse"],
             ", ".join(f"{k} {_fmt(v)}" for k, v in r["coefficients"].items())]
            for r in regressions
        ],
    )  # fmt: skip
    md += _figures(figures, "scatter_body_mass_g")
    # More predictors never lower R^2, so compare the all-penguin models on the
    # adjusted R^2 and set the best against the simplest.
    overall = [r for r in regressions if not r.get("where")]
    if overall:
        best = max(overall, key=lambda r: r["adj_r2"] or 0.0)
        simplest = min(overall, key=lambda r: len(r["x"]))
        findings.append(
            f"Body mass is best modelled by {best['name']} (adjusted R^2 = "
            f"{_fmt(best['adj_r2'])}); the simplest, {simplest['name']}, reaches "
            f"{_fmt(simplest['adj_r2'])}."
        )
    md += [
        "## Species classifier",
        "",
        f"Nearest centroid on standardised {', '.join(classifier['features'])}; "
        f"{classifier['n_train']} training / {classifier['n_test']} held-out rows; "
        f"accuracy {_fmt(classifier['accuracy'])}.",
        "",
    ]
    classes = classifier["classes"]
    md += _table(
        ["true \\ predicted", *classes],
        [[t, *(classifier["confusion"][t][p] for p in classes)] for t in classes],
    )
    findings.append(
        f"A nearest-centroid classifier identifies the species of "
        f"{_fmt(100 * classifier['accuracy'])}% of held-out penguins."
    )
    md += ["## Findings", ""] + [f"- {f}" for f in findings] + [""]
    md += [
        "## Source",
        "",
        f"{citation['citation']}",
        "",
        f"Data: {citation['data']}. Licence: {citation['licence']}.",
        "",
    ]
    return "\n".join(md), findings
