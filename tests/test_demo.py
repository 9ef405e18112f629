"""The research demo as an HTN domain: its plan, its lazy subtrees, a whole run.

One run of the study (module fixture) is stopped part way, reopened from its
checkpoint, paused for the publishing approval, approved and finished; the tests
read what it left behind. The relation screen, the lazy methods and the figures
are also checked on their own.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.demo import DOMAIN, TOOLS, runner
from argus_lab.demo import tools as demo
from argus_lab.demo.domain import ROOT, report_what_was_found, study_tasks
from argus_lab.demo.figures import distribution_figure, save_png
from argus_lab.errors import ToolError
from argus_lab.plan.domain import HTNContext, Subtask
from argus_lab.plan.graph import EXPAND_TOOL

STOP_AFTER = 15


def descendants(plan: al.Plan, root: str) -> set[str]:
    down: dict[str, set[str]] = {}
    for t in plan.tasks:
        for d in t.deps:
            down.setdefault(d, set()).add(t.id)
    seen, todo = set(), [root]
    while todo:
        for child in down.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


# -------------------------------------------------------------- the plan


def test_the_domain_plans_a_dag_with_three_lazy_compounds(tmp_path: Path) -> None:
    planner = runner.new_planner()
    plan = planner.plan(study_tasks(str(tmp_path / "out")))
    ids = [t.id for t in plan.tasks]
    assert len(ids) == 28 and len(set(ids)) == 28
    lazy = [t.id for t in plan.tasks if t.tool == EXPAND_TOOL]
    assert lazy == ["profile", "hypotheses", "write_up"]
    # Every operator is a demo tool, and every demo tool is an operator.
    assert {op.tool for op in DOMAIN.operators.values()} == {t.name for t in TOOLS}
    assert {t.tool for t in plan.tasks} - {EXPAND_TOOL} <= {t.name for t in TOOLS}
    # One root: a fork there reruns everything (what `argus demo --again` does).
    assert [t.id for t in plan.tasks if not t.deps] == [ROOT]
    assert descendants(plan, ROOT) == set(ids) - {ROOT}
    # The write-up waits for every analysis; the tests wait for the screen.
    by_id = {t.id: t for t in plan.tasks}
    assert by_id["hypotheses"].deps == ["relations"]
    assert {"hypotheses", "profile", "citation", "figures/heatmap"} <= set(
        by_id["write_up"].deps
    )
    assert by_id["citation"].retries == 2
    assert runner.is_demo_plan(plan)
    other = al.Plan.from_dict({"goal": "g", "tasks": [{"id": "a", "tool": "x"}]})
    assert not runner.is_demo_plan(other)


def test_screening_keeps_large_effects_and_holds_out_a_year(
    clean_table: dict[str, Any],
) -> None:
    found = demo.find_relations(
        clean_table["path"], clean_table["sha256"], [2007, 2008], [2009]
    )
    assert found["screened"] == 36
    assert (found["explore_rows"], found["confirm_rows"]) == (223, 119)
    kept = {r["id"]: r for r in found["relations"]}
    assert len(kept) == 23 and len(found["dropped"]) == 13
    assert {r["family"] for r in kept.values()} == {"species", "sex", "island"}
    gentoo = kept["sex-body_mass_g-Gentoo"]
    assert gentoo["explore"]["d"] == pytest.approx(2.5917, abs=1e-4)  # by hand
    assert gentoo["test"]["where"] == {"species": "Gentoo", "year": [2009]}
    assert gentoo["test"]["relation"] == "sex-body_mass_g-Gentoo"
    assert all(abs(r["explore"]["d"]) >= 0.5 for r in kept.values())
    assert all(abs(d["d"]) < 0.5 for d in found["dropped"])
    assert "island-body_mass_g-Biscoe-Dream-Adelie" in {
        d["id"] for d in found["dropped"]
    }
    assert found == demo.find_relations(
        clean_table["path"], clean_table["sha256"], [2007, 2008], [2009]
    )
    with pytest.raises(ToolError, match="overlap"):
        demo.find_relations(clean_table["path"], clean_table["sha256"], [2008], [2008])
    with pytest.raises(ToolError, match="No rows for years"):
        demo.find_relations(clean_table["path"], clean_table["sha256"], [1999], [2009])


def test_nothing_found_means_an_empty_family_by_the_second_method(
    tmp_path: Path,
) -> None:
    planner = runner.new_planner()
    plan = planner.plan(study_tasks(str(tmp_path)))
    patch = planner.expand(plan, "hypotheses", {"relations": {"relations": []}})
    assert [t.id for t in patch.added] == ["hypotheses/holm"]
    assert patch.added[0].args == {"tests": [], "alpha": 0.05}
    assert patch.method == "nothing_to_test"
    rejected = [d for d in planner.decisions if d["decision"] == "rejected"]
    assert rejected[-1]["reason"] == "the screen found no relation to test"


def test_write_up_draws_only_the_families_that_replicated() -> None:
    tests = [
        {"family": "sex", "significant": True},
        {"family": "island", "significant": False},
    ]
    results = {
        "load": {"column_names": ["sex", "island"]},
        "profile/island": {},
        "profile/sex": {},
        "hypotheses/holm": {"tests": tests},
        "models/ols_flipper": {},
        "models/classify": {},
        "figures/heatmap": {},
    }
    ctx = HTNContext(None, Subtask("write_up"), results, "expand", DOMAIN)
    subtasks = report_what_was_found(ctx, "T", "/out")
    assert [s.id for s in subtasks] == [
        "fig_sex",
        "fig_replication",
        "report",
        "publish",
    ]
    report = subtasks[2].kwargs
    assert report["profiles"] == ["${profile/sex.result}", "${profile/island.result}"]
    assert report["figures"][-2:] == [
        "${fig_sex.result}",
        "${fig_replication.result}",
    ]
    assert subtasks[3].kwargs == {"report": "${report.result}", "dest": "/out"}


@pytest.mark.slow
def test_figures_are_deterministic_pngs(
    tmp_path: Path, clean_table: dict[str, Any]
) -> None:
    from argus_lab.demo.analysis import read_table

    df = read_table(clean_table["path"])
    first = save_png(distribution_figure(df, "body_mass_g"), tmp_path / "a.png")
    second = save_png(distribution_figure(df, "body_mass_g"), tmp_path / "b.png")
    assert first == second and first.startswith(b"\x89PNG")
    assert (tmp_path / "a.png").read_bytes() == first


# ---------------------------------------------------------------- a whole run


@pytest.fixture(scope="module")
def clean_table(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    raw = demo.load_dataset()
    ctx = al.ToolContext(
        session_id="s",
        task_id="t",
        attempt=1,
        idempotency_key="k",
        workspace=tmp_path_factory.mktemp("w"),
        workdir=tmp_path_factory.mktemp("clean"),
    )
    result: dict[str, Any] = demo.clean_dataset(
        raw["path"], raw["sha256"], True, 342, ctx=ctx
    )
    return result


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A study stopped after STOP_AFTER tasks, reopened, approved, finished."""
    root = tmp_path_factory.mktemp("study")
    ws = al.Workspace(root / "ws")
    out = root / "published"
    s = runner.new_session(ws, name="study", out=out, backoff=(0.001, 0.01))
    seen: list[str] = []

    def stop(ev: Any) -> None:
        if ev.kind == "task_succeeded":
            seen.append(ev.task_id)
            if len(seen) == STOP_AFTER:
                s.pause("stopped by the test")

    s.subscribe(stop)
    first = s.run()
    before = {t: r.status for t, r in s.records.items()}
    s.close()
    s = runner.open_session(ws, "study", backoff=(0.001, 0.01))
    second = s.run()
    published_before_approval = out.exists()
    pending = s.pending_approvals()
    s.approve(runner.PUBLISH, by="test")
    final = s.run()
    yield {
        "ws": ws,
        "s": s,
        "out": out,
        "first": first,
        "before": before,
        "second": second,
        "pending": pending,
        "published_before_approval": published_before_approval,
        "final": final,
    }
    s.close()
    ws.close()


@pytest.mark.slow
def test_the_study_runs_62_tasks_through_a_stop_and_an_approval(study: Any) -> None:
    s = study["s"]
    assert study["first"].status == "paused"
    assert study["first"].reason == "stopped by the test"
    assert study["second"].status == "paused"
    assert list(study["pending"]) == [runner.PUBLISH]
    assert "outside the session" in study["pending"][runner.PUBLISH]["reason"]
    assert not study["published_before_approval"]
    assert study["final"].status == "succeeded", str(study["final"])
    assert len(s.plan.tasks) == 62
    assert {r.status for r in s.records.values()} == {"succeeded"}


@pytest.mark.slow
def test_nothing_finished_before_the_stop_ran_again(study: Any) -> None:
    s = study["s"]
    done_before = {t for t, st in study["before"].items() if st == "succeeded"}
    assert len(done_before) >= STOP_AFTER
    events = s.events()
    stop = next(
        e.seq
        for e in events
        if e.kind == "paused" and e.reason == "stopped by the test"
    )
    started_after = {
        e.task_id for e in events if e.kind == "task_started" and e.seq > stop
    }
    assert started_after and not started_after & done_before
    assert all(s.record(t.id).attempts == 1 for t in s.plan.tasks if t.id != "citation")


@pytest.mark.slow
def test_three_lazy_subtrees_expanded_from_their_inputs(study: Any) -> None:
    s = study["s"]
    patches = {e.compound: e.details() for e in s.events() if e.kind == "plan_patched"}
    assert {c: len(p["added"]) for c, p in patches.items()} == {
        "profile": 8,
        "hypotheses": 24,
        "write_up": 5,
    }
    assert patches["hypotheses"]["method"] == "one_test_per_relation"
    relations = s.result("relations")["relations"]
    tests = {t.id for t in s.plan.tasks if t.tool == "permutation_test"}
    assert tests == {f"hypotheses/{r['id']}" for r in relations}
    assert not [t for t in s.plan.tasks if t.tool == EXPAND_TOOL]


@pytest.mark.slow
def test_the_flaky_citation_was_retried(study: Any) -> None:
    s = study["s"]
    retries = [e for e in s.events() if e.kind == "retry_scheduled"]
    assert [e.task_id for e in retries] == ["citation"]
    assert "timed out" in retries[0].error
    assert s.record("citation").attempts == 2
    assert s.result("citation")["licence"] == "CC0"


@pytest.mark.slow
def test_the_report_its_figures_and_the_published_copy(study: Any) -> None:
    s = study["s"]
    report = s.result("write_up/report")
    path = Path(report["path"])
    text = path.read_text(encoding="utf-8")
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert sorted(links) == sorted(report["figures"]) and len(links) == 10
    for link in links:
        assert (path.parent / link).read_bytes().startswith(b"\x89PNG")
    assert "21 of the 23 relations found in 2007-2008 replicate in 2009" in text
    assert "Males exceed females in bill_depth_mm, bill_length_mm, body_mass_g" in text
    # Each figure's PNG is also a content-addressed artifact of the checkpoint.
    fig = s.result("write_up/fig_sex")
    assert isinstance(fig["png"], Path)
    png = (path.parent / fig["file"]).read_bytes()
    assert fig["png"].read_bytes() == png
    assert fig["sha256"] == hashlib.sha256(png).hexdigest()
    published = s.result(runner.PUBLISH)
    out = study["out"]
    assert published["folder"] == str(out.resolve())
    assert (out / "report.md").read_text(encoding="utf-8") == text
    for link in links:
        assert (out / link).read_bytes() == (path.parent / link).read_bytes()
    granted = [e for e in s.events() if e.kind == "approval_granted"]
    assert [(e.task_id, e.by) for e in granted] == [(runner.PUBLISH, "test")]


@pytest.mark.slow
def test_a_cached_rerun_replays_every_task_in_a_fraction_of_the_time(
    study: Any,
) -> None:
    import time

    ws, s = study["ws"], study["s"]
    start = time.perf_counter()
    again = runner.rerun_cached(ws, "study", new_name="again")
    with again:
        res = again.run()
        seconds = time.perf_counter() - start
        events = again.events()
        assert res.status == "succeeded"
        replayed = [e for e in events if e.kind == "task_succeeded"]
        assert len(replayed) == 62
        assert all(getattr(e, "cached", None) for e in replayed)
        assert not [e for e in events if e.kind == "task_started"]
        assert again.result("write_up/report") == s.result("write_up/report")
        assert not again.pending_approvals()  # the recorded publish is replayed
    assert seconds < 0.5 * s.usage["wall_s"]
