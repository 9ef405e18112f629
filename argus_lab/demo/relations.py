"""Find relations worth testing on some years of the table, to test them on others.

Screening and testing on the same rows would make every screened relation look
significant (the garden of forking paths). So the demo splits the table by study
year: :func:`screen_relations` looks for sizeable differences in the *exploration*
years (2007-2008) and describes, for each one it keeps, the test to run on the
*confirmation* year (2009), which it has not seen. The HTN domain then plans one
test task per relation found (a lazily expanded subtree: how many tests there are
is known only once this screen has run).

Three families of comparisons are screened, each a difference in means of one
measurement between two groups:

- ``species``: every pair of species;
- ``sex``: males vs females within each species (the sexual dimorphism that
  Gorman, Williams & Fraser 2014 studied);
- ``island``: every pair of islands within Adelie, the only species found on all
  three islands.

Pure functions of a DataFrame, returning JSON-ready dicts; pandas and numpy are
imported lazily.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from argus_lab import ToolError
from argus_lab.demo.analysis import JSON, MEASURES, _num, filter_rows
from argus_lab.demo.stats import cohens_d

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FAMILIES", "candidate_comparisons", "screen_relations"]

SPECIES = ("Adelie", "Chinstrap", "Gentoo")
ISLANDS = ("Biscoe", "Dream", "Torgersen")
FAMILIES = ("species", "sex", "island")
"""The families of comparisons, in the order relations are listed."""


def candidate_comparisons() -> list[JSON]:
    """Every comparison the screen considers, in a fixed order.

    Returns:
        Dicts with ``id``, ``family``, ``measure``, ``group_column``, ``group_a``,
        ``group_b`` and ``scope`` (the rows compared, e.g. one species).
    """
    out: list[JSON] = []

    def add(
        family: str, measure: str, column: str, a: str, b: str, scope: JSON
    ) -> None:
        where = "-".join(str(v) for v in scope.values())
        rid = "-".join(x for x in (family, measure, a, b, where) if x)
        if family == "sex":  # "male-female" adds nothing: name the species only
            rid = f"sex-{measure}-{where}"
        out.append(
            {
                "id": rid,
                "family": family,
                "measure": measure,
                "group_column": column,
                "group_a": a,
                "group_b": b,
                "scope": scope,
            }
        )

    for measure in MEASURES:
        for a, b in itertools.combinations(SPECIES, 2):
            add("species", measure, "species", a, b, {})
    for measure in MEASURES:
        for species in SPECIES:
            add("sex", measure, "sex", "male", "female", {"species": species})
    for measure in MEASURES:
        for a, b in itertools.combinations(ISLANDS, 2):
            add("island", measure, "island", a, b, {"species": "Adelie"})
    return out


def _values(df: pd.DataFrame, cmp: JSON, group: str) -> Any:
    rows = filter_rows(df, cmp["scope"])
    return rows[rows[cmp["group_column"]] == group][cmp["measure"]].dropna()


def screen_relations(
    df: pd.DataFrame,
    *,
    explore_years: Sequence[int],
    confirm_years: Sequence[int],
    min_effect: float = 0.5,
) -> JSON:
    """Keep the comparisons whose effect size in the exploration years is large.

    Args:
        df: The clean table (with a ``year`` column).
        explore_years: Years the screen looks at.
        confirm_years: Held-out years the kept relations are to be tested on;
            must not overlap ``explore_years``.
        min_effect: Smallest ``|Cohen's d|`` kept (0.5: a "medium" effect).

    Returns:
        The years and row counts, how many comparisons were screened, the kept
        ``relations`` (each with its exploration statistics and the ``test``
        arguments of a permutation test on the confirmation years) and the
        ``dropped`` ones with their effect sizes.

    Raises:
        ToolError: The year sets overlap or one of them selects no rows.
    """
    if set(explore_years) & set(confirm_years):
        raise ToolError(
            f"Exploration years {list(explore_years)} and confirmation years "
            f"{list(confirm_years)} overlap: a relation would be tested on the "
            "rows that suggested it."
        )
    explore = filter_rows(df, {"year": list(explore_years)})
    confirm = filter_rows(df, {"year": list(confirm_years)})
    if explore.empty or confirm.empty:
        raise ToolError(
            f"No rows for years {list(explore_years)} or {list(confirm_years)}; "
            f"the table has {sorted(int(y) for y in df['year'].unique())}."
        )
    kept: list[JSON] = []
    dropped: list[JSON] = []
    candidates = candidate_comparisons()
    for cmp in candidates:
        a, b = (
            _values(explore, cmp, cmp["group_a"]),
            _values(explore, cmp, cmp["group_b"]),
        )
        d = cohens_d(a.to_numpy(float), b.to_numpy(float))
        if d is None or abs(d) < min_effect:
            dropped.append({"id": cmp["id"], "d": _num(d, 3)})
            continue
        kept.append(
            cmp
            | {
                "explore": {
                    "n_a": len(a),
                    "n_b": len(b),
                    "mean_a": _num(a.mean()),
                    "mean_b": _num(b.mean()),
                    "d": _num(d, 4),
                },
                "test": {
                    "measure": cmp["measure"],
                    "group_column": cmp["group_column"],
                    "group_a": cmp["group_a"],
                    "group_b": cmp["group_b"],
                    "where": cmp["scope"] | {"year": list(confirm_years)},
                    "relation": cmp["id"],
                    "family": cmp["family"],
                },
            }
        )
    return {
        "explore_years": list(explore_years),
        "confirm_years": list(confirm_years),
        "explore_rows": len(explore),
        "confirm_rows": len(confirm),
        "min_effect": min_effect,
        "screened": len(candidates),
        "relations": kept,
        "dropped": dropped,
    }
