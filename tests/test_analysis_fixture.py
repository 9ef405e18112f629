"""The committed trajectory fixture, analysed: snapshot, export/load, plots, report.

tests/fixtures/trajectory/ws is a workspace written by a real run
(tests/fixtures/make_trajectory.py: a transient retry, a failure that blocks two
tasks, an approval with edited arguments, model calls, a fork that fixes the
failure). snapshot.json holds the analysis columns that do not vary between
regenerations; this file checks the analysis still gives exactly those, then
checks the rest by hand.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest
from matplotlib.figure import Figure

import argus_lab as al
from argus_lab import analysis as an

HERE = Path(__file__).parent / "fixtures"


def _maker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_trajectory", HERE / "make_trajectory.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MAKER = _maker()


@pytest.fixture
def fixture_ws(tmp_path: Path) -> al.Workspace:
    # A copy: opening SQLite files may touch them, and the fixture is committed.
    shutil.copytree(MAKER.WS, tmp_path / "ws")
    w = al.Workspace(tmp_path / "ws")
    yield w
    w.close()


@pytest.fixture
def fr(fixture_ws: al.Workspace) -> an.Frames:
    return an.frames(fixture_ws)


def test_analysis_of_the_fixture_matches_its_snapshot(fixture_ws: al.Workspace) -> None:
    want = json.loads(MAKER.SNAPSHOT.read_text())
    got = json.loads(json.dumps(MAKER.snapshot(fixture_ws), sort_keys=True))
    for key in want:
        assert got[key] == want[key], key
    assert set(got) == set(want)


def test_the_fixture_has_what_the_acceptance_asks_for(fr: an.Frames) -> None:
    parent = fr.session(MAKER.PARENT)
    fork = fr.session(MAKER.FORK)
    assert parent.attempts["outcome"].astype(str).tolist().count("retried") == 1
    assert list(parent.tasks.query("status == 'failed'")["task_id"]) == ["units"]
    fc = an.failure_chains(parent)
    assert fc["blocked"].iloc[0] == ["summary", "final"]
    ap = parent.approvals.iloc[0]
    assert (ap["decision"], ap["by"]) == ("granted", "reviewer")
    assert json.loads(ap["edited_args"])["channel"] == "#penguins"
    assert fork.sessions["parent_id"].iloc[0] == parent.sessions["session_id"].iloc[0]
    changed = an.compare(parent, fork)
    assert list(changed["task_id"]) == ["units", "summary", "final"]
    assert fork.tasks.set_index("task_id")["reused"].to_dict() == {
        "load": True, "counts": True, "reference": True, "units": False,
        "notes": True, "summary": False, "final": False, "publish": True,
    }  # fmt: skip
    assert len(fr.llm_calls) == 4 and fr.llm_calls["cost_usd"].sum() == pytest.approx(
        0.0201
    )
    # Linked ids: every LLM call and attempt belongs to a task of its session.
    keys = set(zip(fr.tasks["session_id"], fr.tasks["task_id"], strict=True))
    for frame in (fr.attempts, fr.llm_calls, fr.approvals):
        assert set(zip(frame["session_id"], frame["task_id"], strict=True)) <= keys
    seqs = set(zip(fr.events["session_id"], fr.events["seq"], strict=True))
    assert (
        set(zip(fr.llm_calls["session_id"], fr.llm_calls["seq"], strict=True)) <= seqs
    )


@pytest.mark.parametrize("backend", ["numpy_nullable", "pyarrow"])
def test_export_then_load_round_trips_every_frame(
    fixture_ws: al.Workspace, tmp_path: Path, backend: an.DtypeBackend
) -> None:
    fr = an.frames(fixture_ws, dtype_backend=backend)
    out = an.export(fixture_ws, tmp_path / "out", dtype_backend=backend)
    back = an.load(out)
    for name, df in fr.items():
        pd.testing.assert_frame_equal(back[name], df, check_exact=True)
        assert back[name].dtypes.to_dict() == df.dtypes.to_dict()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["frames"]["events"]["rows"] == len(fr.events)
    assert sorted(p.name for p in out.glob("*.parquet")) == sorted(
        f"{n}.parquet" for n in an.FRAME_NAMES
    )


def test_loaded_frames_answer_post_mortem_questions_without_the_workspace(
    fr: an.Frames, tmp_path: Path
) -> None:
    back = an.load(an.export(fr, tmp_path / "share"))
    a, b = fr.session(MAKER.PARENT), back.session(MAKER.PARENT)
    for fn in (an.critical_path, an.failure_chains, an.retries_summary, an.decisions):
        pd.testing.assert_frame_equal(fn(b), fn(a))
    pd.testing.assert_frame_equal(an.cost_by(b, "model"), an.cost_by(a, "model"))


def test_load_explains_a_folder_without_an_export(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no manifest\.json"):
        an.load(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="unknown format"):
        an.load(tmp_path)


def test_plots_are_figures_with_the_run_drawn(fr: an.Frames) -> None:
    parent = fr.session(MAKER.PARENT)
    tl = an.timeline(parent)
    assert isinstance(tl, Figure)
    ax = tl.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert sorted(labels) == sorted(parent.tasks["task_id"])
    assert len(ax.patches) == len(parent.attempts) + len(parent.approvals)
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 1  # the one retried attempt
    texts = {t.get_text().strip() for t in ax.texts}
    assert {"blocked", "#2"} <= texts
    cost = an.cost_over_time(parent)
    ys = cost.axes[0].get_lines()[0].get_ydata()
    assert ys[-1] == pytest.approx(0.004)
    fork_texts = {
        t.get_text().strip() for t in an.timeline(fr.session(MAKER.FORK)).axes[0].texts
    }
    assert fork_texts == {"reused from the parent"}
    per = an.cost_per_task(fr.session(MAKER.FORK))
    assert [t.get_text() for t in per.axes[0].get_yticklabels()] == ["final"]


def test_plots_of_a_session_with_nothing_run(ws: al.Workspace) -> None:
    plan = {"tasks": [{"id": "a", "tool": "noop"}]}

    @al.tool
    def noop() -> None:
        return None

    with ws.new_session(plan=plan, tools=[noop], name="idle") as s:
        for fig in (an.timeline(s), an.cost_over_time(s), an.cost_per_task(s)):
            assert isinstance(fig, Figure)
            assert any("no " in t.get_text() for t in fig.axes[0].texts)
        md = an.report(s).to_markdown(image_dir="img")
    assert "Critical path (—): —" in md and "No task has finished" in md
    assert "No model calls were recorded." in md and "No task failed." in md


def test_report_renders_and_saves(fr: an.Frames, tmp_path: Path) -> None:
    parent, fork = fr.session(MAKER.PARENT), fr.session(MAKER.FORK)
    r = an.report(parent)
    md = r._repr_markdown_()
    for heading in ("## Outcome", "## Timeline", "## Failures and what they blocked",
                    "## Retries", "## Decisions", "## Cost"):  # fmt: skip
        assert heading in md
    assert (
        "**FAILED**" in md
        and "5/8 succeeded; 1 failed, 2 blocked" in md
        and "(1 transient retry)" in md
    )
    row = "| units | ValueError | body_mass_g is missing in 2 rows | 1 | 2 |"
    assert row + " summary, final |" in md
    assert "| approval | publish | granted | reviewer |" in md
    assert md.count("data:image/png;base64,") == 2
    html = r._repr_html_()
    assert html.startswith('<div class="argus-report">') and "<table>" in html
    assert set(r.figures) == {"timeline", "cost"}
    page = r.save(tmp_path / "pm.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<img") == 2
    saved = r.save(tmp_path / "pm.md")
    text = saved.read_text()
    assert "](pm_files/timeline.png)" in text and "base64" not in text
    png = tmp_path / "pm_files" / "timeline.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fr_md = an.report(fork, parent=parent).to_markdown()
    assert f"Forked from `{MAKER.PARENT}` at `units`; reused 5" in fr_md
    assert (
        "## Changed from the parent" in fr_md
        and "| final | blocked | succeeded" in fr_md
    )
    with pytest.raises(ValueError, match=r"\.md or \.html"):
        r.save(tmp_path / "pm.pdf")


def test_report_of_a_live_session(fixture_ws: al.Workspace) -> None:
    with fixture_ws.open(MAKER.PARENT) as s:
        md = an.report(s).to_markdown(image_dir="img")
    assert md.startswith(f"# Post-mortem: {MAKER.PARENT}")
    assert "![Attempts per task, coloured by outcome](img/timeline.png)" in md
