"""Tests of the demo's tools and pure functions: dataset, statistics, figures, report.

Expected values were checked by hand or against published results for this table
(e.g. R's ``lm(body_mass_g ~ flipper_length_mm)`` on palmerpenguins gives intercept
-5780.83, slope 49.69, R^2 0.759), so a wrong formula fails here, not just a change.
The HTN domain and whole runs are tested in test_demo.py.
"""

from __future__ import annotations

import csv
import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.demo import analysis, dataset_path, stats
from argus_lab.demo import output_tools as out
from argus_lab.demo import tools as demo
from argus_lab.demo.report import simpson_pairs
from argus_lab.errors import ToolError, TransientError

PENGUINS_SHA256 = "f204db2c753b0937caac3cb35258562c14f073e4bbc76be24b4c51ce22767a93"


def make_ctx(workdir: Path, attempt: int = 1) -> al.ToolContext:
    return al.ToolContext(
        session_id="test-session",
        task_id="test-task",
        attempt=attempt,
        idempotency_key="test-key",
        workspace=workdir,
        workdir=workdir,
    )


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    result: dict[str, Any] = demo.load_dataset()
    return result


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, raw: dict[str, Any]) -> Any:
    workdir = tmp_path_factory.mktemp("clean")
    return demo.clean_dataset(
        raw["path"], raw["sha256"], True, 342, ctx=make_ctx(workdir)
    )


def csv_column(name: str) -> list[str]:
    """The raw strings of one column, read without pandas (an independent check)."""
    with dataset_path().open(newline="") as f:
        return [row[name] for row in csv.DictReader(f)]


# ---------------------------------------------------------------- the dataset


def test_dataset_is_the_published_file_with_its_readme() -> None:
    path = dataset_path()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == PENGUINS_SHA256
    readme = (path.parent / "README.md").read_text(encoding="utf-8")
    for needle in ("CC0", "Gorman", "Horst", "palmerpenguins", PENGUINS_SHA256):
        assert needle in readme


def test_importing_the_demo_does_not_import_pandas() -> None:
    code = (
        "import sys, argus_lab.demo\n"
        "assert 'pandas' not in sys.modules, 'import argus_lab.demo'\n"
        "from argus_lab.demo import DOMAIN, TOOLS\n"
        "heavy = {'pandas', 'numpy', 'matplotlib'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
        "assert len(TOOLS) == 19\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_dataset_path_prefers_the_installed_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argus_lab.demo as demo_pkg

    installed, repo = tmp_path / "installed.csv", tmp_path / "repo.csv"
    monkeypatch.setattr(demo_pkg, "_CANDIDATES", (installed, repo))
    with pytest.raises(FileNotFoundError, match="Reinstall argus-lab"):
        dataset_path()
    repo.write_text("x\n")
    assert dataset_path() == repo
    installed.write_text("x\n")
    assert dataset_path() == installed


# ------------------------------------------------------------- load, validate


def test_load_dataset(raw: dict[str, Any]) -> None:
    assert raw["rows"] == 344
    assert raw["columns"] == 8
    assert raw["column_names"] == list(analysis.COLUMNS)
    assert raw["sha256"] == PENGUINS_SHA256


def test_validate_dataset_counts_missing_values(raw: dict[str, Any]) -> None:
    result = demo.validate_dataset(raw["path"], raw["sha256"])
    assert result["ok"] is True
    assert result["problems"] == []
    assert result["missing"] == {
        "species": 0,
        "island": 0,
        "bill_length_mm": 2,
        "bill_depth_mm": 2,
        "flipper_length_mm": 2,
        "body_mass_g": 2,
        "sex": 11,
        "year": 0,
    }
    assert result["complete_rows"] == 333
    assert result["complete_measurement_rows"] == 342
    assert result["duplicate_rows"] == 0


def test_validate_table_flags_bad_data(raw: dict[str, Any]) -> None:
    import pandas as pd

    df = analysis.read_table(raw["path"]).head(5).drop(columns=["year"])
    df.loc[0, "body_mass_g"] = 3.75  # kilograms where grams belong
    df.loc[1, "species"] = "Emperor"
    df = pd.concat([df, df.iloc[[2]]], ignore_index=True)
    result = analysis.validate_table(df)
    assert result["ok"] is False
    assert result["unknown_levels"] == {"species": ["Emperor"]}
    assert result["out_of_range"]["body_mass_g"] == 1
    assert result["duplicate_rows"] >= 1
    assert any("missing columns: year" in p for p in result["problems"])


def test_a_changed_file_is_refused(tmp_path: Path, raw: dict[str, Any]) -> None:
    copy = tmp_path / "penguins.csv"
    copy.write_bytes(dataset_path().read_bytes() + b"Adelie,Dream,1,1,1,1,male,2009\n")
    with pytest.raises(ToolError, match="changed since it was loaded"):
        demo.validate_dataset(str(copy), raw["sha256"])


# -------------------------------------------------------------------- profiles


def test_profile_numeric_column_matches_a_hand_computation(raw: dict[str, Any]) -> None:
    result = demo.profile_column(raw["path"], raw["sha256"], "bill_length_mm")
    values = [float(v) for v in csv_column("bill_length_mm") if v != "NA"]
    assert result["kind"] == "numeric"
    assert result["count"] == len(values) == 342
    assert result["missing"] == 2
    assert result["mean"] == pytest.approx(sum(values) / len(values), abs=1e-6)
    assert result["mean"] == pytest.approx(43.92193, abs=1e-5)
    assert result["std"] == pytest.approx(5.459584, abs=1e-5)
    assert (result["min"], result["max"]) == (32.1, 59.6)
    assert (result["q1"], result["median"], result["q3"]) == (39.225, 44.45, 48.5)


def test_profile_categorical_columns(raw: dict[str, Any]) -> None:
    species = demo.profile_column(raw["path"], raw["sha256"], "species")
    assert species["kind"] == "categorical"
    assert species["counts"] == {"Adelie": 152, "Chinstrap": 68, "Gentoo": 124}
    assert species["mode"] == "Adelie"
    sex = demo.profile_column(raw["path"], raw["sha256"], "sex")
    assert sex["counts"] == {"female": 165, "male": 168}
    assert sex["missing"] == 11
    year = demo.profile_column(raw["path"], raw["sha256"], "year")
    assert year["counts"] == {"2007": 110, "2008": 114, "2009": 120}


def test_profile_unknown_column_fails(raw: dict[str, Any]) -> None:
    with pytest.raises(ToolError, match="No column 'beak'"):
        demo.profile_column(raw["path"], raw["sha256"], "beak")


# ----------------------------------------------------------------------- clean


def test_clean_dataset_drops_unmeasured_rows(clean: dict[str, Any]) -> None:
    path = Path(clean["path"])
    assert clean["rows"] == 342
    assert clean["dropped_rows"] == 2
    assert clean["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    lines = path.read_text().splitlines()
    assert len(lines) == 343
    # Integer columns are integers again (no "3750.0"), missing sex stays "NA".
    assert lines[1] == "Adelie,Torgersen,39.1,18.7,181,3750,male,2007"
    assert sum(line.endswith(",NA,2007") for line in lines) >= 1


def test_clean_dataset_refuses_unvalidated_or_unexpected(
    tmp_path: Path, raw: dict[str, Any]
) -> None:
    ctx = make_ctx(tmp_path)
    with pytest.raises(ToolError, match="failed validation"):
        demo.clean_dataset(raw["path"], raw["sha256"], False, ctx=ctx)
    with pytest.raises(ToolError, match="kept 342 rows but validation expected 344"):
        demo.clean_dataset(raw["path"], raw["sha256"], True, 344, ctx=ctx)
    assert not (tmp_path / "penguins_clean.csv").exists()


# ---------------------------------------------------------- groups, correlations


def test_group_stats_per_species(clean: dict[str, Any]) -> None:
    result = demo.group_stats(clean["path"], clean["sha256"], ["species"])
    by_species = {g["group"]["species"]: g for g in result["groups"]}
    assert {k: g["n"] for k, g in by_species.items()} == {
        "Adelie": 151,
        "Chinstrap": 68,
        "Gentoo": 123,
    }
    assert by_species["Gentoo"]["mean"]["body_mass_g"] == pytest.approx(5076.0163, 1e-6)
    assert by_species["Adelie"]["mean"]["bill_length_mm"] == pytest.approx(38.791391)
    assert by_species["Chinstrap"]["mean"]["flipper_length_mm"] == pytest.approx(
        195.823529
    )


def test_group_stats_by_two_columns_leaves_out_unknown_sex(
    clean: dict[str, Any],
) -> None:
    result = demo.group_stats(clean["path"], clean["sha256"], ["species", "sex"])
    assert len(result["groups"]) == 6
    assert sum(g["n"] for g in result["groups"]) == 333
    first = result["groups"][0]
    assert first["group"] == {"species": "Adelie", "sex": "female"}
    assert first["n"] == 73


def test_correlations_and_simpsons_paradox(clean: dict[str, Any]) -> None:
    path, sha = clean["path"], clean["sha256"]
    overall = demo.correlation_matrix(path, sha)
    assert overall["n"] == 342
    matrix = overall["matrix"]
    assert matrix["flipper_length_mm"]["body_mass_g"] == pytest.approx(0.871202, 1e-5)
    assert matrix["bill_length_mm"]["bill_depth_mm"] == pytest.approx(-0.235053, 1e-5)
    assert matrix["body_mass_g"]["body_mass_g"] == pytest.approx(1.0)
    assert overall["pairs"][0]["x"] == "flipper_length_mm"
    per_species = [
        demo.correlation_matrix(path, sha, where={"species": s})
        for s in ("Adelie", "Chinstrap", "Gentoo")
    ]
    assert [c["n"] for c in per_species] == [151, 68, 123]
    for c in per_species:
        assert c["matrix"]["bill_length_mm"]["bill_depth_mm"] > 0.3
    reversed_pairs = {(p["x"], p["y"]) for p in simpson_pairs([overall, *per_species])}
    assert ("bill_length_mm", "bill_depth_mm") in reversed_pairs
    assert ("flipper_length_mm", "body_mass_g") not in reversed_pairs


# ------------------------------------------------------------ hypothesis tests


def test_permutation_pvalue_matches_the_exact_distribution() -> None:
    # All 20 splits of 6 values into 3+3 are equally likely; only the observed one
    # and its mirror are as extreme, so the exact two-sided p-value is 2/20.
    result = stats.permutation_pvalue([1, 2, 3], [10, 11, 12], seed=1)
    assert result["difference"] == -9.0
    assert result["p_value"] == pytest.approx(0.1, abs=0.015)


def test_permutation_pvalue_is_one_for_identical_groups_and_reproducible() -> None:
    assert stats.permutation_pvalue([1, 2, 3, 4], [1, 2, 3, 4])["p_value"] == 1.0
    a, b = [5.0, 6.5, 7.1, 4.9, 6.0], [5.5, 7.9, 8.1, 6.6, 7.0]
    first = stats.permutation_pvalue(a, b, n_permutations=999, seed=7)
    assert first == stats.permutation_pvalue(a, b, n_permutations=999, seed=7)
    assert 0.001 <= first["p_value"] <= 1.0


def test_permutation_pvalue_needs_two_values_per_group() -> None:
    with pytest.raises(ToolError, match=">= 2 values"):
        stats.permutation_pvalue([1.0], [1.0, 2.0])


def test_permutation_tests_on_penguins(clean: dict[str, Any]) -> None:
    path, sha = clean["path"], clean["sha256"]
    sex = demo.permutation_test(
        path, sha, "body_mass_g", "sex", "male", "female", where={"species": "Gentoo"}
    )
    assert sex["name"] == "body_mass_g: male vs female (Gentoo)"
    assert (sex["n_a"], sex["n_b"]) == (61, 58)
    assert sex["difference"] == pytest.approx(805.094686)
    assert sex["p_value"] == pytest.approx(1 / 10_000)  # the smallest possible
    islands = demo.permutation_test(
        path,
        sha,
        "body_mass_g",
        "island",
        "Dream",
        "Torgersen",
        where={"species": "Adelie"},
    )
    assert islands["p_value"] > 0.5
    assert abs(islands["cohens_d"]) < 0.1


def test_holm_adjustment_by_hand() -> None:
    # Sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, max(0.06, 0.04*1)=0.06.
    adjusted, rejected = stats.holm([0.01, 0.04, 0.03, 0.005], alpha=0.05)
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert rejected == [True, False, False, True]
    assert stats.holm([0.5, 0.9])[0] == [1.0, 1.0]


def test_adjust_pvalues_annotates_each_test() -> None:
    tests = [{"name": "a", "p_value": 0.001}, {"name": "b", "p_value": 0.2}]
    result = demo.adjust_pvalues(tests)
    assert result["rejected"] == 1
    assert [t["p_holm"] for t in result["tests"]] == [0.002, 0.2]
    assert [t["significant"] for t in result["tests"]] == [True, False]


# ----------------------------------------------------------- models, classifier


def test_ols_recovers_an_exact_line() -> None:
    import numpy as np

    x = np.arange(10, dtype=np.float64).reshape(-1, 1)
    fit = stats.ols(3.0 + 2.0 * x[:, 0], x)
    assert fit["beta"] == pytest.approx([3.0, 2.0])
    assert fit["r2"] == pytest.approx(1.0)
    assert fit["rmse"] == pytest.approx(0.0, abs=1e-9)


def test_fit_ols_body_mass_on_flipper_length(clean: dict[str, Any]) -> None:
    fit = demo.fit_ols(
        clean["path"], clean["sha256"], "body_mass_g", ["flipper_length_mm"]
    )
    assert fit["n"] == 342
    assert fit["intercept"] == pytest.approx(-5780.83, abs=0.01)
    assert fit["coefficients"]["flipper_length_mm"] == pytest.approx(49.6856, abs=1e-4)
    assert fit["std_errors"]["flipper_length_mm"] == pytest.approx(1.518, abs=1e-3)
    assert fit["r2"] == pytest.approx(0.759, abs=5e-4)
    # R^2 of a one-predictor fit is the squared correlation.
    assert fit["r2"] == pytest.approx(0.871202**2, abs=1e-5)


def test_classify_species(clean: dict[str, Any]) -> None:
    result = demo.classify_species(clean["path"], clean["sha256"], seed=0)
    # round(0.3 * n) held out per species: 45 + 20 + 37.
    assert result["n_test"] == 102
    assert result["n_train"] == 240
    assert result["accuracy"] > 0.9
    confusion = result["confusion"]
    assert [sum(confusion[c].values()) for c in result["classes"]] == [45, 20, 37]
    correct = sum(confusion[c][c] for c in result["classes"])
    assert result["accuracy"] == pytest.approx(correct / 102, abs=1e-6)
    assert result == demo.classify_species(clean["path"], clean["sha256"], seed=0)


# ---------------------------------------------------------- citation, report


def test_fetch_citation_fails_then_succeeds(tmp_path: Path) -> None:
    with pytest.raises(TransientError, match="attempt 1"):
        demo.fetch_citation(fail_attempts=1, ctx=make_ctx(tmp_path, attempt=1))
    result = demo.fetch_citation(fail_attempts=1, ctx=make_ctx(tmp_path, attempt=2))
    assert result["licence"] == "CC0"
    assert "Gorman KB, Williams TD, Fraser WR (2014)" in result["citation"]
    assert demo.fetch_citation(fail_attempts=0, ctx=make_ctx(tmp_path))["attempt"] == 1
    # The licence is read from the README beside the dataset, not assumed.
    lonely = tmp_path / "data" / "penguins.csv"
    lonely.parent.mkdir()
    lonely.write_text("x\n")
    again = demo.fetch_citation(str(lonely), fail_attempts=0, ctx=make_ctx(tmp_path))
    assert again["licence"] == "unknown (README missing)"


def test_results_are_json_without_nan(clean: dict[str, Any]) -> None:
    import json

    path, sha = clean["path"], clean["sha256"]
    for result in (
        demo.validate_dataset(path, sha),
        demo.profile_column(path, sha, "sex"),
        demo.group_stats(path, sha, ["island"]),
        demo.correlation_matrix(path, sha),
        demo.classify_species(path, sha),
        demo.find_relations(path, sha, [2007, 2008], [2009]),
    ):
        json.dumps(result, allow_nan=False)


def test_filter_rows_takes_lists_as_allowed_values(clean: dict[str, Any]) -> None:
    df = analysis.read_table(clean["path"], clean["sha256"])
    assert len(analysis.filter_rows(df, {"year": [2007, 2008]})) == 223
    assert len(analysis.filter_rows(df, {"year": [2009], "species": "Gentoo"})) == 43
    with pytest.raises(ToolError, match="unknown column 'colour'"):
        analysis.filter_rows(df, {"colour": "blue"})


def test_held_out_permutation_test_is_tagged_with_its_relation(
    clean: dict[str, Any],
) -> None:
    result = demo.permutation_test(
        clean["path"],
        clean["sha256"],
        "body_mass_g",
        "sex",
        "male",
        "female",
        where={"species": "Chinstrap", "year": [2009]},
        relation="sex-body_mass_g-Chinstrap",
        family="sex",
    )
    assert result["name"] == "body_mass_g: male vs female (Chinstrap, 2009)"
    assert (result["n_a"], result["n_b"]) == (12, 12)
    assert result["relation"] == "sex-body_mass_g-Chinstrap"
    assert result["family"] == "sex"
    assert result["p_value"] < 0.01
    assert stats.cohens_d([1.0, 2.0], [1.0]) is None
    assert stats.cohens_d([1.0, 1.0], [1.0, 1.0]) is None
    assert stats.cohens_d([1.0, 3.0], [0.0, 2.0]) == pytest.approx(1 / 2**0.5)


# ------------------------------------------------------------ report, publish


def _figure(tmp_path: Path, name: str) -> dict[str, Any]:
    (tmp_path / "figures").mkdir(exist_ok=True)
    (tmp_path / "figures" / f"{name}.png").write_bytes(b"png " + name.encode())
    return {"figure": name, "title": f"Figure {name}", "file": f"figures/{name}.png"}


@pytest.fixture(scope="module")
def family_tests(clean: dict[str, Any]) -> dict[str, Any]:
    found = demo.find_relations(clean["path"], clean["sha256"], [2007, 2008], [2009])
    tests = [
        demo.permutation_test(
            clean["path"], clean["sha256"], **r["test"], n_permutations=999
        )
        for r in found["relations"]
    ]
    return {"relations": found, "tests": demo.adjust_pvalues(tests)}


def test_write_report(
    tmp_path: Path,
    raw: dict[str, Any],
    clean: dict[str, Any],
    family_tests: dict[str, Any],
) -> None:
    path, sha = clean["path"], clean["sha256"]
    figures = [_figure(tmp_path, n) for n in ("correlations", "replication")]
    result = out.write_report(
        "Test report",
        raw,
        demo.validate_dataset(raw["path"], raw["sha256"]),
        [demo.profile_column(raw["path"], raw["sha256"], c) for c in analysis.COLUMNS],
        [demo.group_stats(path, sha, ["species"])],
        [demo.correlation_matrix(path, sha)]
        + [
            demo.correlation_matrix(path, sha, where={"species": s})
            for s in ("Adelie", "Chinstrap", "Gentoo")
        ],
        family_tests["relations"],
        family_tests["tests"],
        [demo.fit_ols(path, sha, "body_mass_g", ["flipper_length_mm"])],
        demo.classify_species(path, sha),
        demo.fetch_citation(fail_attempts=0, ctx=make_ctx(tmp_path)),
        figures,
        ctx=make_ctx(tmp_path),
    )
    report = tmp_path / "report.md"
    assert result["path"] == str(report)
    data = report.read_bytes()
    assert result["bytes"] == len(data)
    assert result["sha256"] == hashlib.sha256(data).hexdigest()
    assert result["figures"] == ["figures/correlations.png", "figures/replication.png"]
    text = data.decode()
    assert text.startswith("# Test report\n")
    assert "| Gentoo | 123 | 47.5 | 14.98 | 217.2 | 5076 |" in text
    assert "![Figure correlations](figures/correlations.png)" in text
    assert "keeping those with |Cohen's d| >= 0.5: 23 relations" in text
    # d by hand (csv + statistics module): 2.5917 in 2007-2008, 3.2757 in 2009.
    assert (
        "| body_mass_g: male vs female (Gentoo, 2009) | 2.592 | 3.276 | 21 | 20 |"
        in text
    )
    assert any(
        "Simpson's paradox: bill_length_mm vs bill_depth_mm" in f
        for f in result["findings"]
    )
    assert "Gentoo has the largest mean body_mass_g (5076)." in result["findings"]
    assert not list(tmp_path.glob("*.partial"))
    # A figure the report links to must exist.
    (tmp_path / "figures" / "replication.png").unlink()
    with pytest.raises(ToolError, match=r"figures/replication.png.*missing"):
        out.write_report.fn(
            "t",
            raw,
            {},
            [],
            [],
            [],
            {},
            {},
            [],
            {},
            {},
            figures,
            ctx=make_ctx(tmp_path),
        )


def test_publish_report_copies_report_and_figures_outside(tmp_path: Path) -> None:
    session = tmp_path / "session"
    session.mkdir()
    figures = [_figure(session, "a"), _figure(session, "b")]
    (session / "report.md").write_text("# r\n![a](figures/a.png)\n")
    report = {
        "path": str(session / "report.md"),
        "figures": [f["file"] for f in figures],
    }
    dest = tmp_path / "elsewhere" / "out"
    result = out.publish_report(report, str(dest), ctx=make_ctx(session))
    assert result["folder"] == str(dest.resolve())
    assert result["files"] == ["report.md", "figures/a.png", "figures/b.png"]
    assert (dest / "figures" / "b.png").read_bytes() == b"png b"
    assert result["bytes"] == sum((dest / f).stat().st_size for f in result["files"])
    # Publishing again gives the same folder (it is idempotent).
    assert out.publish_report(report, str(dest), ctx=make_ctx(session)) == result
    assert out.publish_report.side_effect == "write"
    (session / "figures" / "a.png").unlink()
    with pytest.raises(ToolError, match=r"figures/a.png.*missing"):
        out.publish_report(report, str(tmp_path / "other"), ctx=make_ctx(session))
    assert not (tmp_path / "other").exists()  # nothing half-published
