"""Tools of the bundled demo: a real, offline analysis of the Palmer Penguins table.

Tasks hand each other JSON, never DataFrames, so every tool reads the CSV by path and
checks the content hash its upstream task reported: a task never analyses another
file than its inputs describe, and the hash makes the file's content part of the
task's inputs (an edited file makes results stale; re-reading 15 KB takes ~1 ms).

Each tool is a thin wrapper over a pure, unit-tested function of ``analysis`` (load,
validate, describe), ``relations`` (the screen), ``stats`` (tests, models); the
figure, report and publishing tools are in :mod:`argus_lab.demo.output_tools`.
They import pandas and numpy lazily, so importing this module stays cheap.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import argus_lab as al
from argus_lab import ToolError, TransientError
from argus_lab.demo import dataset_path
from argus_lab.demo.analysis import (
    JSON,
    MEASURES,
    _num,
    _where_label,
    correlation_table,
    file_sha256,
    filter_rows,
    group_table,
    profile_series,
    read_table,
    validate_table,
)
from argus_lab.demo.output_tools import OUTPUT_TOOLS
from argus_lab.demo.relations import screen_relations
from argus_lab.demo.stats import holm, nearest_centroid, ols, permutation_pvalue


@al.tool
def load_dataset(path: str | None = None) -> JSON:
    """Load the penguins table and describe it.

    Args:
        path: CSV to load; defaults to the bundled Palmer Penguins file.

    Returns:
        The absolute path, a sha256 of the bytes (downstream tasks check it), the
        row and column counts and the column names.
    """
    file = Path(path) if path else dataset_path()
    df = read_table(file)
    return {
        "path": str(file.resolve()),
        "sha256": file_sha256(file),
        "rows": len(df),
        "columns": len(df.columns),
        "column_names": [str(c) for c in df.columns],
    }


@al.tool
def validate_dataset(path: str, sha256: str) -> JSON:
    """Check the table's schema, dtypes, levels, value ranges and duplicates.

    Args:
        path: CSV to check.
        sha256: Expected content hash (from load_dataset).
    """
    return validate_table(read_table(path, sha256))


@al.tool
def profile_column(path: str, sha256: str, column: str) -> JSON:
    """Profile one column: quartiles for a measure, level counts for a category.

    Args:
        path: CSV to read.
        sha256: Expected content hash (from load_dataset).
        column: The column to profile.
    """
    df = read_table(path, sha256)
    if column not in df.columns:
        raise ToolError(f"No column {column!r}; the table has {list(df.columns)}.")
    return profile_series(df[column])


@al.tool
def clean_dataset(
    path: str,
    sha256: str,
    valid: bool = True,
    expected_rows: int | None = None,
    *,
    ctx: al.ToolContext,
) -> JSON:
    """Drop rows lacking any measurement, restore integer dtypes, write a clean CSV.

    Rows with unknown sex are kept: only the tests that split by sex need it. The
    CSV goes to the session's own folder (its sandbox), so no approval is needed.

    Args:
        path: Raw CSV.
        sha256: Expected content hash of the raw CSV (from load_dataset).
        valid: validate_dataset's verdict; a table that failed it is not cleaned,
            since every analysis downstream would inherit its problems.
        expected_rows: Rows validation said would survive; a mismatch fails the
            task rather than analysing a table nobody checked.

    Returns:
        The clean file's path, sha256, row count and the number of dropped rows.
    """
    if not valid:
        raise ToolError(
            "The raw table failed validation; see the validate task's problems, fix "
            "the data, then rerun."
        )
    raw = read_table(path, sha256)
    clean = raw.dropna(subset=list(MEASURES)).reset_index(drop=True)
    if expected_rows is not None and len(clean) != expected_rows:
        raise ToolError(
            f"Cleaning kept {len(clean)} rows but validation expected "
            f"{expected_rows}; rerun validate_dataset."
        )
    # The NAs forced these integer columns to float; without them they are ints again.
    clean = clean.astype({"flipper_length_mm": "int64", "body_mass_g": "int64"})
    target = Path(ctx.workdir) / "penguins_clean.csv"
    # Write-then-rename: a crash mid-write never leaves a half file that a rerun
    # (this tool is idempotent, so it may rerun) or a reader would trust.
    data = clean.to_csv(index=False, na_rep="NA", lineterminator="\n").encode()
    partial = target.with_suffix(".csv.partial")
    partial.write_bytes(data)
    partial.replace(target)
    return {
        "path": str(target),
        "sha256": hashlib.sha256(data).hexdigest(),
        "rows": len(clean),
        "dropped_rows": len(raw) - len(clean),
    }


@al.tool
def group_stats(
    path: str, sha256: str, by: list[str], measures: list[str] | None = None
) -> JSON:
    """Count, mean and standard deviation of the measures per group.

    Args:
        path: CSV to read.
        sha256: Expected content hash.
        by: Columns to group by, e.g. ``[species]`` or ``[species, sex]``.
        measures: Numeric columns to summarise; defaults to the four measurements.
    """
    return group_table(read_table(path, sha256), by, measures or list(MEASURES))


@al.tool
def correlation_matrix(
    path: str,
    sha256: str,
    columns: list[str] | None = None,
    where: dict[str, Any] | None = None,
) -> JSON:
    """Pearson correlation matrix of the measures, overall or within a subgroup.

    Args:
        path: CSV to read.
        sha256: Expected content hash.
        columns: Numeric columns; defaults to the four measurements.
        where: Keep only rows matching these column values, e.g. one species.
    """
    df = filter_rows(read_table(path, sha256), where)
    return {"where": where or {}} | correlation_table(df, columns or list(MEASURES))


@al.tool
def permutation_test(
    path: str,
    sha256: str,
    measure: str,
    group_column: str,
    group_a: str,
    group_b: str,
    where: dict[str, Any] | None = None,
    n_permutations: int = 9999,
    seed: int = 0,
    relation: str | None = None,
    family: str | None = None,
) -> JSON:
    """Two-sided permutation test: does ``measure`` differ between two groups?

    Args:
        path: CSV to read.
        sha256: Expected content hash.
        measure: Numeric column compared.
        group_column: Column holding the group labels (e.g. ``sex``).
        group_a: First group's label.
        group_b: Second group's label.
        where: Keep only rows matching these column values first (a list value
            lists allowed values, e.g. ``{"year": [2009]}``).
        n_permutations: Random relabellings drawn.
        seed: Seed of the random generator, so the p-value is reproducible.
        relation: Id of the relation tested (from find_relations), echoed back.
        family: Family of that relation, echoed back.
    """
    df = filter_rows(read_table(path, sha256), where)
    a = df.loc[df[group_column] == group_a, measure].dropna().to_numpy(float)
    b = df.loc[df[group_column] == group_b, measure].dropna().to_numpy(float)
    label = _where_label(where)
    name = f"{measure}: {group_a} vs {group_b}" + (f" ({label})" if label else "")
    result = permutation_pvalue(a, b, n_permutations=n_permutations, seed=seed)
    tagged = {"relation": relation, "family": family} if relation else {}
    return (
        {"name": name, "measure": measure, "where": where or {}}
        | tagged
        | {"group_column": group_column, "group_a": group_a, "group_b": group_b}
        | result
    )


@al.tool
def find_relations(
    path: str,
    sha256: str,
    explore_years: list[int],
    confirm_years: list[int],
    min_effect: float = 0.5,
) -> JSON:
    """Screen every comparison on some years; describe the tests for the others.

    Args:
        path: CSV to read (the clean table).
        sha256: Expected content hash.
        explore_years: Years the screen looks at.
        confirm_years: Held-out years the relations found are tested on.
        min_effect: Smallest |Cohen's d| that counts as a relation.

    Returns:
        See :func:`argus_lab.demo.relations.screen_relations`.
    """
    return screen_relations(
        read_table(path, sha256),
        explore_years=explore_years,
        confirm_years=confirm_years,
        min_effect=min_effect,
    )


@al.tool
def adjust_pvalues(tests: list[dict[str, Any]], alpha: float = 0.05) -> JSON:
    """Holm-Bonferroni correction over a family of tests.

    Args:
        tests: permutation_test results (each needs ``p_value``).
        alpha: Family-wise error rate.

    Returns:
        The tests with ``p_holm`` and ``significant`` added, and the count rejected.
    """
    adjusted, rejected = holm([t["p_value"] for t in tests], alpha)
    annotated = [
        t | {"p_holm": _num(p), "significant": r}
        for t, p, r in zip(tests, adjusted, rejected, strict=True)
    ]
    return {"alpha": alpha, "tests": annotated, "rejected": sum(rejected)}


@al.tool
def fit_ols(
    path: str,
    sha256: str,
    y: str,
    x: list[str],
    where: dict[str, Any] | None = None,
) -> JSON:
    """Ordinary least squares of ``y`` on ``x`` (with intercept), R^2 and errors.

    Args:
        path: CSV to read.
        sha256: Expected content hash.
        y: Response column.
        x: Predictor columns.
        where: Keep only rows matching these column values first.
    """
    import numpy as np

    df = filter_rows(read_table(path, sha256), where)[[y, *x]].dropna()
    fit = ols(df[y].to_numpy(np.float64), df[list(x)].to_numpy(np.float64))
    label = _where_label(where)
    name = f"{y} ~ {' + '.join(x)}" + (f" ({label})" if label else "")
    return {
        "name": name,
        "y": y,
        "x": list(x),
        "where": where or {},
        "n": fit["n"],
        "intercept": _num(fit["beta"][0]),
        "coefficients": {c: _num(b) for c, b in zip(x, fit["beta"][1:], strict=True)},
        "std_errors": {
            c: _num(s) for c, s in zip(x, fit["std_errors"][1:], strict=True)
        },
        "r2": _num(fit["r2"]),
        "adj_r2": _num(fit["adj_r2"]),
        "rmse": _num(fit["rmse"]),
    }


@al.tool
def classify_species(
    path: str,
    sha256: str,
    features: list[str] | None = None,
    test_fraction: float = 0.3,
    seed: int = 0,
) -> JSON:
    """Predict species from body measurements with a nearest-centroid classifier.

    Args:
        path: CSV to read.
        sha256: Expected content hash.
        features: Numeric columns used; defaults to the four measurements.
        test_fraction: Share of each species held out for scoring.
        seed: Seed of the stratified train/test split.
    """
    df = read_table(path, sha256)
    return nearest_centroid(
        df,
        features or list(MEASURES),
        "species",
        test_fraction=test_fraction,
        seed=seed,
    )


@al.tool
def fetch_citation(
    dataset: str | None = None, fail_attempts: int = 1, *, ctx: al.ToolContext
) -> JSON:
    """Fetch the dataset's citation and licence from a (simulated) flaky service.

    The demo runs offline, so the "service" is the README shipped beside the CSV;
    the first ``fail_attempts`` attempts time out on purpose, deterministically, so
    a run shows a transient failure being retried.

    Args:
        dataset: The CSV whose README is read; defaults to the bundled one.
        fail_attempts: How many attempts fail before one succeeds.
    """
    if ctx.attempt <= fail_attempts:
        raise TransientError(
            f"citation service timed out (simulated, attempt {ctx.attempt} of the "
            f"{fail_attempts} that fail on purpose)"
        )
    readme = Path(dataset or dataset_path()).parent / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    return {
        "citation": (
            "Gorman KB, Williams TD, Fraser WR (2014). Ecological Sexual Dimorphism "
            "and Environmental Variability within a Community of Antarctic Penguins "
            "(Genus Pygoscelis). PLoS ONE 9(3): e90081. "
            "https://doi.org/10.1371/journal.pone.0090081"
        ),
        "data": (
            "Palmer Station Antarctica LTER and K. Gorman, via the palmerpenguins "
            "package (Horst, Hill & Gorman 2020)"
        ),
        # Read, not assumed: the README quotes the licence the package states.
        "licence": "CC0" if "CC0" in text else "unknown (README missing)",
        "attempt": ctx.attempt,
    }


TOOLS = [
    load_dataset,
    validate_dataset,
    profile_column,
    clean_dataset,
    group_stats,
    correlation_matrix,
    find_relations,
    permutation_test,
    adjust_pvalues,
    fit_ols,
    classify_species,
    fetch_citation,
    *OUTPUT_TOOLS,
]
