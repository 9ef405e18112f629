"""Load, check and describe the penguins table: pure functions, no tool machinery.

Everything here is a plain function of a file, a DataFrame or a Series; the
descriptions come back as JSON-ready dicts (floats rounded, NaN turned into None). The
unit tests check them against hand-verified numbers, and the tools in
:mod:`argus_lab.demo.tools` stay thin. Tests and models live in
:mod:`argus_lab.demo.stats`.

pandas is imported inside function bodies so that importing this module stays cheap
(``import argus_lab.demo`` must not load pandas or numpy). The only Argus name used is
:class:`~argus_lab.errors.ToolError`, raised for a missing/changed file or a bad filter,
so a tool that calls these functions fails permanently with a message that says what
to rerun.
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab import ToolError

if TYPE_CHECKING:
    import pandas as pd

JSON = dict[str, Any]

COLUMNS = (
    "species",
    "island",
    "bill_length_mm",
    "bill_depth_mm",
    "flipper_length_mm",
    "body_mass_g",
    "sex",
    "year",
)
MEASURES = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")
LEVELS: dict[str, frozenset[str]] = {
    "species": frozenset({"Adelie", "Chinstrap", "Gentoo"}),
    "island": frozenset({"Biscoe", "Dream", "Torgersen"}),
    "sex": frozenset({"female", "male"}),
}
# Plausible bounds for adult Pygoscelis penguins, wide on purpose: they catch unit
# mix-ups (kg for g, cm for mm) and typos, not unusual birds.
RANGES: dict[str, tuple[float, float]] = {
    "bill_length_mm": (25.0, 70.0),
    "bill_depth_mm": (10.0, 25.0),
    "flipper_length_mm": (150.0, 250.0),
    "body_mass_g": (2000.0, 7000.0),
    "year": (2007.0, 2009.0),
}


# --------------------------------------------------------------------- helpers


def _num(value: Any, digits: int = 6) -> float | None:
    """Return ``value`` as a rounded float, or None for NaN/None (results are JSON)."""
    if value is None:
        return None
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        return None
    return round(number, digits)


def file_sha256(path: str | Path) -> str:
    """Return the hex sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_table(path: str | Path, sha256: str | None = None) -> pd.DataFrame:
    """Read a penguins CSV, first checking that its content hash is ``sha256``.

    Raises:
        ToolError: The file is missing or its content changed since it was hashed.
    """
    import pandas as pd

    file = Path(path)
    if not file.is_file():
        raise ToolError(f"Dataset file {file} does not exist; rerun the load task.")
    # Parse the very bytes that were hashed, so a concurrent edit cannot slip in
    # between the check and the read.
    data = file.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if sha256 is not None and actual != sha256:
        raise ToolError(
            f"Dataset file {file} changed since it was loaded (sha256 {actual[:12]} "
            f"!= {sha256[:12]}); rerun the tasks upstream of this one."
        )
    return pd.read_csv(io.BytesIO(data))


def filter_rows(df: pd.DataFrame, where: Mapping[str, Any] | None) -> pd.DataFrame:
    """Keep the rows matching every entry of ``where``.

    A scalar value must be equal; a list value lists the allowed values (e.g.
    ``{"year": [2007, 2008]}``).
    """
    for column, value in (where or {}).items():
        if column not in df.columns:
            raise ToolError(f"Cannot filter on unknown column {column!r}.")
        if isinstance(value, list | tuple):
            df = df[df[column].isin(list(value))]
        else:
            df = df[df[column] == value]
    return df


def _where_label(where: Mapping[str, Any] | None) -> str:
    return ", ".join(
        "-".join(str(x) for x in v) if isinstance(v, list | tuple) else str(v)
        for v in (where or {}).values()
    )


# ------------------------------------------------------- describe the table


def validate_table(df: pd.DataFrame) -> JSON:
    """Check schema, dtypes, category levels, value ranges and duplicates.

    Missing values are counted but are not problems: the raw table is known to have
    them, and ``clean_dataset`` deals with them.
    """
    from pandas.api.types import is_numeric_dtype

    problems: list[str] = []
    missing_columns = [c for c in COLUMNS if c not in df.columns]
    extra_columns = [c for c in df.columns if c not in COLUMNS]
    if missing_columns:
        problems.append(f"missing columns: {', '.join(missing_columns)}")
    if extra_columns:
        problems.append(f"unexpected columns: {', '.join(map(str, extra_columns))}")
    dtypes = {str(c): str(df[c].dtype) for c in df.columns}
    unknown_levels: dict[str, list[str]] = {}
    for column, levels in LEVELS.items():
        if column in df.columns:
            seen = {str(v) for v in df[column].dropna().unique()}
            if bad := sorted(seen - levels):
                unknown_levels[column] = bad
                problems.append(f"{column} has unknown levels: {', '.join(bad)}")
    out_of_range: dict[str, int] = {}
    for column, (low, high) in RANGES.items():
        if column not in df.columns:
            continue
        if not is_numeric_dtype(df[column]):
            problems.append(f"{column} is not numeric (dtype {df[column].dtype})")
            continue
        values = df[column].dropna()
        count = int(((values < low) | (values > high)).sum())
        out_of_range[column] = count
        if count:
            problems.append(f"{column}: {count} values outside [{low}, {high}]")
    duplicates = int(df.duplicated().sum())
    if duplicates:
        problems.append(f"{duplicates} duplicate rows")
    present = [c for c in MEASURES if c in df.columns]
    return {
        "rows": len(df),
        "missing": {str(c): int(n) for c, n in df.isna().sum().items()},
        "complete_rows": int(df.notna().all(axis=1).sum()),
        "complete_measurement_rows": int(df[present].notna().all(axis=1).sum()),
        "duplicate_rows": duplicates,
        "dtypes": dtypes,
        "unknown_levels": unknown_levels,
        "out_of_range": out_of_range,
        "problems": problems,
        "ok": not problems,
    }


def profile_series(series: pd.Series[Any]) -> JSON:
    """Describe one column: quartiles for numbers, level counts for categories.

    Numeric columns with at most 10 distinct values (``year``) also get counts,
    because their distribution is more telling than their quartiles.
    """
    from pandas.api.types import is_numeric_dtype

    values = series.dropna()
    profile: JSON = {
        "column": str(series.name),
        "count": len(values),
        "missing": int(series.isna().sum()),
        "distinct": int(values.nunique()),
    }
    if is_numeric_dtype(series):
        quartiles = values.quantile([0.25, 0.5, 0.75])
        profile |= {
            "kind": "numeric",
            "mean": _num(values.mean()),
            "std": _num(values.std()),
            "min": _num(values.min()),
            "q1": _num(quartiles[0.25]),
            "median": _num(quartiles[0.5]),
            "q3": _num(quartiles[0.75]),
            "max": _num(values.max()),
        }
        if profile["distinct"] > 10:
            return profile
    else:
        profile["kind"] = "categorical"
    counts = values.value_counts().sort_index()
    profile["counts"] = {str(k): int(v) for k, v in counts.items()}
    profile["mode"] = str(values.mode().sort_values().iloc[0]) if len(values) else None
    return profile


def group_table(df: pd.DataFrame, by: Sequence[str], measures: Sequence[str]) -> JSON:
    """Count, mean and standard deviation of ``measures`` per group of ``by``.

    Rows whose group key is missing (e.g. unknown sex) are left out of every group.
    """
    groups: list[JSON] = []
    for key, part in df.groupby(list(by), dropna=True, sort=True):
        keys = key if isinstance(key, tuple) else (key,)
        groups.append(
            {
                "group": {col: _plain(k) for col, k in zip(by, keys, strict=True)},
                "n": len(part),
                "mean": {m: _num(part[m].mean()) for m in measures},
                "std": {m: _num(part[m].std()) for m in measures},
            }
        )
    return {"by": list(by), "measures": list(measures), "groups": groups}


def _plain(value: Any) -> Any:
    """Turn a numpy scalar into the Python value JSON expects."""
    return value.item() if hasattr(value, "item") else value


def correlation_table(df: pd.DataFrame, columns: Sequence[str]) -> JSON:
    """Pearson correlations between ``columns`` over rows complete in all of them."""
    complete = df[list(columns)].dropna()
    matrix = complete.corr(method="pearson")
    pairs: list[JSON] = [
        {"x": a, "y": b, "r": _num(matrix.loc[a, b])}
        for i, a in enumerate(columns)
        for b in columns[i + 1 :]
    ]
    pairs.sort(key=lambda p: -abs(p["r"] or 0.0))
    return {
        "n": len(complete),
        "columns": list(columns),
        "matrix": {a: {b: _num(matrix.loc[a, b]) for b in columns} for a in columns},
        "pairs": pairs,
    }
