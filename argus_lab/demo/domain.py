"""The research demo as an HTN domain: how a study of the penguins decomposes.

The goal (:func:`study_tasks`) is a list of top-level steps, so task ids stay short
(``load``, ``profile/species``, ``hypotheses/holm``, ``write_up/publish``)::

    load ─┬─ validate ── clean ─┬─ groups/*          (3 group tables)
          │                     ├─ correlations/*    (overall + per species)
          │                     ├─ relations ── hypotheses/*  (lazy: a test per
          │                     │                relation found, then Holm)
          │                     ├─ models/*          (5 regressions, a classifier)
          │                     └─ figures/*         (distributions, scatters, heatmap)
          ├─ profile/*          (lazy: one profile per column the file has)
          └─ citation           (a flaky service: fails once, retried)
    everything ── write_up/*    (lazy: figures of what replicated, the report,
                                 and publishing it outside the session: asks first)

Three compound tasks are **lazy**: they stay one placeholder task until their inputs
exist, then the session's planner decomposes them with those results in hand.
``profile`` fans out over the columns ``load`` found; ``hypotheses`` plans one
permutation test per relation that ``relations`` found in 2007-2008 (tested on the
held-out 2009 birds) and a Holm correction over them, or, by its second method,
nothing to test; ``write_up`` draws one figure per family of relations that
replicated, then writes and publishes the report. How many tasks the study has is
known only as it runs (62 on the bundled data).

Methods refer to results by task id (``${clean.result.path}``); a reference makes
the dependency, so each task starts as soon as what it reads exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from argus_lab.demo.relations import FAMILIES
from argus_lab.plan.htn import HTNContext, HTNDomain, Subtask

__all__ = [
    "CONFIRM_YEARS",
    "DOMAIN",
    "EXPLORE_YEARS",
    "GOAL",
    "ROOT",
    "TITLE",
    "study_tasks",
]

GOAL = (
    "Analyse the Palmer Penguins measurements: check the data, profile every "
    "column, find relations in 2007-2008 and test them on the held-out 2009 birds, "
    "model body mass, draw the figures, and publish a report with its sources."
)
TITLE = "Palmer Penguins - an Argus Lab research demo"
ROOT = "load"
"""The task every other task descends from (a cached rerun forks here)."""
EXPLORE_YEARS = [2007, 2008]
CONFIRM_YEARS = [2009]
MEASURES = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")
SPECIES = ("Adelie", "Chinstrap", "Gentoo")

RAW: dict[str, Any] = {"path": "${load.result.path}", "sha256": "${load.result.sha256}"}
"""Arguments reading the raw table (and depending on ``load``)."""
DATA: dict[str, Any] = {
    "path": "${clean.result.path}",
    "sha256": "${clean.result.sha256}",
}
"""Arguments reading the clean table (and depending on ``clean``)."""

DOMAIN = HTNDomain("penguin_study")
for _name, _what in {
    "load_dataset": "Load the table and hash it",
    "validate_dataset": "Check schema, levels, ranges and duplicates",
    "profile_column": "Profile one column",
    "clean_dataset": "Drop rows lacking measurements",
    "group_stats": "Means and deviations per group",
    "correlation_matrix": "Pearson correlations",
    "find_relations": "Screen comparisons on the exploration years",
    "permutation_test": "Test one relation on the held-out year",
    "adjust_pvalues": "Holm correction over the tests",
    "fit_ols": "Least-squares regression",
    "classify_species": "Nearest-centroid species classifier",
    "plot_distribution": "Histogram by species",
    "plot_scatter": "Scatter with fits by species",
    "plot_correlations": "Correlation heatmap",
    "plot_family": "Box plots of a family's replicated differences",
    "plot_replication": "Effect sizes found vs held out",
    "write_report": "Write report.md with its figures",
    "publish_report": "Copy the report outside the session (asks first)",
}.items():
    DOMAIN.operator(_name, description=_what)
DOMAIN.operator(
    "fetch_citation",
    retries=2,
    description="Citation and licence from a flaky service (fails once)",
)
DOMAIN.compound(
    "profile_columns", lazy=True, description="One profile per column of the file"
)
DOMAIN.compound(
    "test_hypotheses",
    lazy=True,
    description="A held-out test per relation found, then a Holm correction",
)
DOMAIN.compound(
    "write_up",
    lazy=True,
    description="Figures of what replicated, the report, publishing it",
)


def study_tasks(out: str, *, title: str = TITLE) -> list[Subtask]:
    """The goal: the study's top-level steps, to plan with ``HTNPlanner.plan``.

    Args:
        out: Folder the report is published to (outside the session).
        title: The report's heading.
    """
    return [
        Subtask("load_dataset", id="load"),
        Subtask("validate_dataset", **RAW, id="validate"),
        Subtask("profile_columns", "${load.result}", id="profile", deps=["load"]),
        Subtask(
            "clean_dataset",
            **RAW,
            valid="${validate.result.ok}",
            expected_rows="${validate.result.complete_measurement_rows}",
            id="clean",
            deps=["validate"],
        ),
        Subtask("describe_groups", id="groups", deps=["clean"]),
        Subtask("correlate", id="correlations", deps=["clean"]),
        Subtask(
            "find_relations",
            **DATA,
            explore_years=EXPLORE_YEARS,
            confirm_years=CONFIRM_YEARS,
            min_effect=0.5,
            id="relations",
            deps=["clean"],
        ),
        Subtask(
            "test_hypotheses",
            "${relations.result.relations}",
            id="hypotheses",
            deps=["relations"],
        ),
        Subtask("fit_models", id="models", deps=["clean"]),
        Subtask("draw_figures", id="figures", deps=["correlations"]),
        Subtask(
            "fetch_citation",
            dataset="${load.result.path}",
            fail_attempts=1,
            id="citation",
            deps=["load"],
        ),
        Subtask(
            "write_up",
            title,
            out,
            id="write_up",
            deps=[
                "load",
                "validate",
                "profile",
                "groups",
                "correlations",
                "relations",
                "hypotheses",
                "models",
                "figures",
                "citation",
            ],
        ),
    ]


# -- eager compounds: their shape does not depend on results -------------------


@DOMAIN.method("describe_groups")
def per_species_island_and_sex(ctx: HTNContext) -> list[Subtask]:
    """Group tables by species, by island, and by species and sex."""
    return [
        Subtask("group_stats", **DATA, by=by, id="_".join(by), deps=[])
        for by in (["species"], ["island"], ["species", "sex"])
    ]


@DOMAIN.method("correlate")
def overall_and_within_species(ctx: HTNContext) -> list[Subtask]:
    """Correlations over all penguins and within each species (Simpson's check)."""
    return [Subtask("correlation_matrix", **DATA, id="all", deps=[])] + [
        Subtask("correlation_matrix", **DATA, where={"species": s}, id=s, deps=[])
        for s in SPECIES
    ]


@DOMAIN.method("fit_models")
def body_mass_models_and_a_classifier(ctx: HTNContext) -> list[Subtask]:
    """Body mass on flipper length (overall, per species), on all lengths; species.

    All start at once, as soon as the clean table exists (``deps=[]``).
    """
    flipper = ["flipper_length_mm"]
    lengths = ["flipper_length_mm", "bill_length_mm", "bill_depth_mm"]

    def fit(x: list[str], id: str, **where: str) -> Subtask:
        scope: dict[str, Any] = {"where": where} if where else {}
        return Subtask("fit_ols", **DATA, y="body_mass_g", x=x, **scope, id=id, deps=[])

    return [
        fit(flipper, "ols_flipper"),
        fit(lengths, "ols_all"),
        *(fit(flipper, f"ols_flipper_{s}", species=s) for s in SPECIES),
        Subtask(
            "classify_species",
            **DATA,
            test_fraction=0.3,
            seed=0,
            id="classify",
            deps=[],
        ),
    ]


@DOMAIN.method("draw_figures")
def distributions_scatters_heatmap(ctx: HTNContext) -> list[Subtask]:
    """A histogram per measure, two scatters, and the correlation heatmap."""
    figs = [
        Subtask("plot_distribution", **DATA, measure=m, id=f"dist_{m}", deps=[])
        for m in MEASURES
    ]
    figs += [
        Subtask(
            "plot_scatter",
            **DATA,
            x="bill_length_mm",
            y="bill_depth_mm",
            id="scatter_bill",
            deps=[],
        ),
        Subtask(
            "plot_scatter",
            **DATA,
            x="flipper_length_mm",
            y="body_mass_g",
            id="scatter_mass",
            deps=[],
        ),
        Subtask(
            "plot_correlations",
            correlations="${correlations/all.result}",
            id="heatmap",
            deps=[],
        ),
    ]
    return figs


# -- lazy compounds: decomposed at run time, from their inputs' results --------


@DOMAIN.method("profile_columns")
def one_profile_per_column(ctx: HTNContext, dataset: Mapping[str, Any]) -> list[Any]:
    """One profile task per column of the loaded file (a fan-out of its width)."""
    columns = list(dataset["column_names"])
    if not columns:
        ctx.reject("the loaded table has no columns")
    return [Subtask("profile_column", **RAW, column=c, id=c, deps=[]) for c in columns]


@DOMAIN.method("test_hypotheses")
def one_test_per_relation(
    ctx: HTNContext, relations: Sequence[Mapping[str, Any]]
) -> list[Subtask]:
    """A permutation test of each relation on the held-out year, then Holm."""
    if not relations:
        ctx.reject("the screen found no relation to test")
    ids = [str(r["id"]) for r in relations]
    tests = [
        Subtask("permutation_test", **DATA, **r["test"], id=rid, deps=[])
        for rid, r in zip(ids, relations, strict=True)
    ]
    holm = Subtask(
        "adjust_pvalues",
        tests=[f"${{{rid}.result}}" for rid in ids],
        alpha=0.05,
        id="holm",
        deps=ids,
    )
    return [*tests, holm]


@DOMAIN.method("test_hypotheses")
def nothing_to_test(
    ctx: HTNContext, relations: Sequence[Mapping[str, Any]]
) -> list[Subtask]:
    """No relation was found: an empty family, so the report can say so."""
    return [Subtask("adjust_pvalues", tests=[], alpha=0.05, id="holm", deps=[])]


def _ref(task_id: str, path: str = "") -> str:
    return "${" + task_id + ".result" + (f".{path}" if path else "") + "}"


def _members(results: Mapping[str, Any], compound: str) -> list[str]:
    """Ids among ``results`` (the write-up's inputs) of a compound's subtree."""
    return [t for t in results if t.startswith(compound + "/")]


@DOMAIN.method("write_up")
def report_what_was_found(ctx: HTNContext, title: str, out: str) -> list[Subtask]:
    """Figures for each family of relations that replicated, the report, publish.

    Its inputs are the results of every analysis step (``ctx.results``), so it
    knows which relations replicated before it decides which figures to draw.
    """
    results = ctx.results
    holm = next(
        (t for t in _members(results, "hypotheses") if t.endswith("/holm")), None
    )
    if holm is None or "load" not in results:
        ctx.reject("the tests' Holm correction or the loaded table is missing")
    tests = results[holm]["tests"]
    new_figures = [
        Subtask(
            "plot_family",
            **DATA,
            family=f,
            tests=_ref(holm, "tests"),
            id=f"fig_{f}",
            deps=[],
        )
        for f in FAMILIES
        if any(t.get("family") == f and t.get("significant") for t in tests)
    ]
    if tests:
        new_figures.append(
            Subtask(
                "plot_replication",
                relations=_ref("relations", "relations"),
                tests=_ref(holm, "tests"),
                id="fig_replication",
                deps=[],
            )
        )
    columns = list(results["load"]["column_names"])
    profiles = sorted(
        _members(results, "profile"),
        key=lambda t: (
            columns.index(t.split("/", 1)[1])
            if t.split("/", 1)[1] in columns
            else len(columns)
        ),
    )
    models = _members(results, "models")
    report = Subtask(
        "write_report",
        title=title,
        dataset=_ref("load"),
        validation=_ref("validate"),
        profiles=[_ref(t) for t in profiles],
        groups=[_ref(t) for t in _members(results, "groups")],
        correlations=[_ref(t) for t in _members(results, "correlations")],
        relations=_ref("relations"),
        tests=_ref(holm),
        regressions=[_ref(t) for t in models if "/ols_" in t],
        classifier=_ref(next(t for t in models if t.endswith("/classify"))),
        citation=_ref("citation"),
        figures=[_ref(t) for t in _members(results, "figures")]
        + [_ref(str(s.id)) for s in new_figures],
        id="report",
        deps=[str(s.id) for s in new_figures],
    )
    publish = Subtask("publish_report", report=_ref("report"), dest=out, id="publish")
    return [*new_figures, report, publish]
