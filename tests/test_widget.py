"""GraphWidget, Python side: traits after each action, live coalesced updates.

Drawing and clicking are covered by tests/test_browser.py in a real browser;
here the widget is built without a front end (ipywidgets' dummy comm) and its
traits are asserted. Waits use futures and events with timeouts, never sleeps.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import argus_lab as al
from argus_lab.jupyter.display import STATUS_COLORS, session_html
from argus_lab.jupyter.widget import ACTIONS, GraphWidget, asset_path
from argus_lab.layout import GROUP_PREFIX
from tests.conftest import BASIC_TOOLS, FAST

WAIT = 30.0
"""Seconds any wait may take on a loaded CI machine."""


@al.tool(side_effect="write")
def publish(text: str) -> str:
    """A write tool: asks for approval by default."""
    return f"published {text}"


GATE = threading.Event()
STARTED = threading.Event()


@al.tool
def gated(value: int = 0) -> int:
    """Signals it started, then waits for the test to open the gate."""
    STARTED.set()
    if not GATE.wait(WAIT):
        raise RuntimeError("the test never opened the gate")
    return value


FLAKY_CALLS: list[int] = []


@al.tool
def flaky(value: int = 0) -> int:
    """Fails permanently on its first call, works afterwards."""
    FLAKY_CALLS.append(value)
    if len(FLAKY_CALLS) == 1:
        raise ValueError("first call fails")
    return value


TOOLS = [*BASIC_TOOLS, publish, gated, flaky]


@pytest.fixture(autouse=True)
def _reset() -> None:
    GATE.clear()
    STARTED.clear()
    FLAKY_CALLS.clear()


@pytest.fixture
def make(ws: al.Workspace) -> Iterator[Callable[..., GraphWidget]]:
    """Builds a session from task dicts and a widget on it; closes both."""
    made: list[tuple[GraphWidget, al.Session]] = []

    def build(tasks: list[dict[str, Any]], **kw: Any) -> GraphWidget:
        widget_kw = {k: kw.pop(k) for k in ("update_interval",) if k in kw}
        s = ws.new_session(
            plan={"goal": "widget test", "tasks": tasks}, tools=TOOLS, **FAST, **kw
        )
        w = GraphWidget(s, **widget_kw)
        made.append((w, s))
        return w

    yield build
    GATE.set()
    for w, s in made:
        for sess in {id(s): s, id(w.session): w.session}.values():
            sess.wait(WAIT)
        w.close()
        s.close()
        if w.session is not s:
            w.session.close()


CHAIN = [
    {"id": "a", "tool": "add", "args": {"a": 1}},
    {"id": "b", "tool": "add", "args": {"a": "${a.result.sum}"}},
    {"id": "c", "tool": "add", "args": {"a": "${b.result.sum}"}},
]


def test_front_end_files_are_found_and_loaded() -> None:
    js, css = asset_path("graph.js"), asset_path("graph.css")
    assert "export default { render }" in js.read_text()
    assert ".argus-graph" in css.read_text()
    with pytest.raises(FileNotFoundError, match="reinstall"):
        asset_path("nope.js")


def test_initial_traits(make: Callable[..., GraphWidget]) -> None:
    w = make(
        [
            *CHAIN,
            {"id": "g1", "tool": "echo", "parent": "grp"},
            {"id": "g2", "tool": "echo", "parent": "grp"},
        ]
    )
    assert w.session_name == w.session.name
    assert w.tasks == ["a", "b", "c", "g1", "g2"]
    assert w.status_codes == "ppppp"
    assert w.statuses == dict.fromkeys(w.tasks, "pending")
    assert w.palette == STATUS_COLORS
    assert {n["id"] for n in w.graph["nodes"]} == set(w.tasks)
    assert [g["key"] for g in w.graph["groups"]] == ["grp"]
    assert w.summary["total"] == 5 and w.summary["done"] == 0
    assert w.summary["status"] == "created"
    assert w.approvals == {} and w.breakpoints == [] and w.busy == ""
    assert w.unsupported == {}  # a Session supports every action
    # The static fallback travels with the live view.
    data, _ = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert "<svg" in data["text/html"] and "widget test" in data["text/html"]


def test_step_updates_statuses_summary_and_message(
    make: Callable[..., GraphWidget],
) -> None:
    w = make(CHAIN)
    ran = w.act("step").result(WAIT)
    assert [r.task_id for r in ran] == ["a"]
    assert w.statuses == {"a": "succeeded", "b": "pending", "c": "pending"}
    assert w.summary["done"] == 1 and w.summary["status"] == "paused"
    assert w.message["text"] == "step: a succeeded"
    assert w.busy == ""


def test_run_in_background_then_traits_show_the_end(
    make: Callable[..., GraphWidget],
) -> None:
    w = make(CHAIN)
    result = w.act("run").result(WAIT)
    assert result.status == "succeeded"
    assert w.status_codes == "sss"
    assert w.summary["done"] == 3 and w.summary["status"] == "succeeded"
    assert w.message == {
        "text": "run ended: succeeded, 3/3 done",
        "level": "info",
        "n": 1,
    }
    assert w.busy == ""


def test_pause_stops_a_background_run(make: Callable[..., GraphWidget]) -> None:
    w = make(
        [
            {"id": "slow", "tool": "gated", "args": {"value": 1}},
            {"id": "after", "tool": "add", "args": {"a": 1}, "deps": ["slow"]},
        ]
    )
    fut = w.act("run")
    assert STARTED.wait(WAIT)
    assert w.busy == "run"
    # Step is refused while the run goes on, and says why.
    with pytest.raises(RuntimeError, match="pause it first"):
        w.act("step").result(WAIT)
    assert w.message["level"] == "error"
    w.act("pause").result(WAIT)
    GATE.set()
    result = fut.result(WAIT)
    assert result.status == "paused"
    assert w.statuses == {"slow": "succeeded", "after": "pending"}
    assert w.summary["status"] == "paused"
    assert w.summary["reason"] == "paused by the user"


def test_approve_with_edited_args(make: Callable[..., GraphWidget]) -> None:
    w = make([{"id": "pub", "tool": "publish", "args": {"text": "draft"}}])
    assert w.act("run").result(WAIT).status == "paused"
    assert w.statuses == {"pub": "awaiting_approval"}
    assert w.approvals["pub"]["tool"] == "publish"
    assert w.approvals["pub"]["args"] == {"text": "draft"}
    w.act("select", task="pub").result(WAIT)
    assert w.detail["resolved_args"] == {"text": "draft"}
    # The run paused only for this approval: approving resumes it.
    resumed = w.act("approve", task="pub", args={"text": "final"}).result(WAIT)
    assert resumed.result(WAIT).status == "succeeded"
    assert w.approvals == {} and w.statuses == {"pub": "succeeded"}
    assert w.session.result("pub") == "published final"
    assert w.detail["approval"]["state"] == "approved"
    # The panel shows the args the task ran with, the edit and who made it.
    assert w.detail["resolved_args"] == {"text": "final"}
    assert w.detail["edited_args"] == {"text": "final"}
    assert w.detail["args"] == {"text": "draft"}
    assert w.detail["approved_by"] == w.detail["approval"]["by"] != ""
    assert [a["outcome"] for a in w.detail["attempt_log"]] == ["succeeded"]


def test_approve_while_a_run_goes_on(make: Callable[..., GraphWidget]) -> None:
    w = make(
        [
            {"id": "slow", "tool": "gated", "args": {"value": 1}},
            {"id": "pub", "tool": "publish", "args": {"text": "x"}},
        ]
    )
    asked = threading.Event()
    w.observe(lambda c: asked.set() if "pub" in c["new"] else None, names="approvals")
    fut = w.act("run")
    assert STARTED.wait(WAIT) and asked.wait(WAIT)
    w.act("approve", task="pub").result(WAIT)
    assert w.busy == "run"  # the approval did not hide the run going on
    GATE.set()
    assert fut.result(WAIT).status == "succeeded"
    assert w.statuses == {"slow": "succeeded", "pub": "succeeded"}
    assert w.busy == ""


def test_reject_fails_the_task_and_blocks_dependents(
    make: Callable[..., GraphWidget],
) -> None:
    w = make(
        [
            {"id": "pub", "tool": "publish", "args": {"text": "x"}},
            {"id": "after", "tool": "add", "args": {"a": 1}, "deps": ["pub"]},
        ]
    )
    w.act("run").result(WAIT)
    w.act("reject", task="pub", reason="not today").result(WAIT)
    assert w.statuses == {"pub": "failed", "after": "blocked"}
    assert "not today" in w.session.record("pub").error


def test_bad_approve_arguments_surface_as_errors(
    make: Callable[..., GraphWidget],
) -> None:
    w = make([{"id": "pub", "tool": "publish", "args": {"text": "x"}}])
    w.act("run").result(WAIT)
    with pytest.raises(al.ArgusError):
        w.act("approve", task="pub", args={"nope": 1}).result(WAIT)
    assert w.message["level"] == "error" and "approve" in w.message["text"]
    assert w.statuses == {"pub": "awaiting_approval"}
    with pytest.raises(ValueError, match="needs the id of a task"):
        w.act("approve", task="missing")
    with pytest.raises(ValueError, match="unknown action"):
        w.act("explode")


def test_messages_from_the_front_end_map_to_actions(
    make: Callable[..., GraphWidget],
) -> None:
    w = make(CHAIN)
    w._on_msg(w, {"action": "select", "task": "b"}, [])
    assert w.selected == "b" and w.detail["id"] == "b"
    w._on_msg(w, {"action": "explode"}, [])  # shown, never raised in the kernel
    assert w.message["level"] == "error" and "unknown action" in w.message["text"]
    w._on_msg(w, {"no": "action"}, [])
    assert set(ACTIONS) >= {"step", "run", "pause", "approve", "reject", "fork"}


def test_retry_failed_reruns_failed_tasks(make: Callable[..., GraphWidget]) -> None:
    w = make(
        [
            {"id": "f", "tool": "flaky", "args": {"value": 5}},
            {"id": "after", "tool": "add", "args": {"a": "${f.result}"}},
        ]
    )
    assert w.act("run").result(WAIT).status == "failed"
    assert w.statuses == {"f": "failed", "after": "blocked"}
    w.act("select", task="f").result(WAIT)
    assert w.detail["error"] == "first call fails"
    assert w.detail["error_type"] == "ValueError"
    assert "ValueError" in (w.detail["traceback"] or "")
    assert w.act("retry_failed").result(WAIT).status == "succeeded"
    assert w.statuses == {"f": "succeeded", "after": "succeeded"}
    assert w.detail["attempts"] == 2 and w.detail["result"] == "5"


def test_fork_rebinds_the_widget(make: Callable[..., GraphWidget]) -> None:
    w = make(CHAIN)
    parent = w.session
    w.act("run").result(WAIT)
    fork = w.act("fork", at="b").result(WAIT)
    assert w.session is fork and fork is not parent
    assert w.session_name == fork.name != parent.name
    assert w.statuses == {"a": "succeeded", "b": "pending", "c": "pending"}
    assert w.summary["name"] == fork.name and w.summary["done"] == 1
    assert "forked" in w.message["text"]
    assert w.act("step").result(WAIT)[0].task_id == "b"
    assert w.statuses["b"] == "succeeded"
    assert parent.record("b").generation == 0  # the parent is untouched


BREAKPOINT_C = "breakpoint before task 'c'; run() or step() goes on from it"


def test_breakpoint_pauses_before_its_task(make: Callable[..., GraphWidget]) -> None:
    w = make(CHAIN, concurrency=1)
    assert w.act("toggle_breakpoint", task="c").result(WAIT) is True
    assert w.breakpoints == ["c"] == w.session.breakpoints  # set on the session
    w.act("select", task="c").result(WAIT)
    assert w.detail["breakpoint"] is True
    result = w.act("run").result(WAIT)
    assert result.status == "paused"
    assert result.reason == BREAKPOINT_C
    # The widget names its own buttons where the runtime names the methods.
    assert (
        w.summary["reason"] == "breakpoint before task 'c'; Run or Step goes on from it"
    )
    assert w.statuses == {"a": "succeeded", "b": "succeeded", "c": "pending"}
    # Run again goes past the breakpoint, as a debugger's continue does.
    assert w.act("run").result(WAIT).status == "succeeded"
    assert w.act("toggle_breakpoint", task="c").result(WAIT) is False
    assert w.breakpoints == [] == w.session.breakpoints
    assert w.detail["breakpoint"] is False


def test_breakpoint_on_a_ready_task_stops_run_once(
    make: Callable[..., GraphWidget],
) -> None:
    w = make(CHAIN)
    w.act("toggle_breakpoint", task="a").result(WAIT)
    result = w.act("run").result(WAIT)
    assert result.status == "paused"
    assert result.reason == BREAKPOINT_C.replace("'c'", "'a'")
    assert w.message["text"] == (
        "run ended: paused, 0/3 done; breakpoint before task 'a'; Run or Step "
        "goes on from it"
    )
    assert w.statuses["a"] == "pending"
    assert w.act("run").result(WAIT).status == "succeeded"
    assert w.breakpoints == ["a"]  # it stays set: the next run stops there again


def test_step_continues_from_a_breakpoint(make: Callable[..., GraphWidget]) -> None:
    w = make(CHAIN)
    w.act("toggle_breakpoint", task="a").result(WAIT)
    assert w.act("step").result(WAIT) == []
    assert w.summary["reason"].startswith("breakpoint before task 'a'")
    assert [r.task_id for r in w.act("step").result(WAIT)] == ["a"]
    assert w.statuses["a"] == "succeeded"


def test_breakpoints_set_outside_the_widget_are_mirrored(
    make: Callable[..., GraphWidget],
) -> None:
    w = make(CHAIN)
    w.session.set_breakpoint("b")
    w.refresh()
    assert w.breakpoints == ["b"]
    w.session.set_breakpoint("b", on=False)
    w.session.set_breakpoint("c")
    assert w.act("toggle_breakpoint", task="a").result(WAIT) is True
    assert w.breakpoints == w.session.breakpoints == ["c", "a"]
    # A new widget on the session shows the committed breakpoints.
    w2 = GraphWidget(w.session)
    assert w2.breakpoints == ["c", "a"]
    w2.close()


def test_session_budget_pauses_the_run(make: Callable[..., GraphWidget]) -> None:
    w = make(CHAIN, concurrency=1)
    assert w.summary["budget_left"] == {}
    w.session.set_budget(max_steps=2)
    w.refresh()
    assert w.summary["budget_left"] == {"steps": 2}
    result = w.act("run").result(WAIT)
    assert result.status == "paused"
    assert (result.reason or "").startswith("budget exceeded: session max_steps=2")
    assert w.status_codes == "ssp"
    assert w.summary["budget_left"] == {"steps": 0}
    # Raising the budget lets the next run go on.
    w.session.set_budget(max_steps=3, max_cost_usd=1.0)
    assert w.act("run").result(WAIT).status == "succeeded"
    assert w.summary["budget_left"] == {"cost": 1.0, "steps": 0}


def test_a_run_started_in_a_cell_blocks_widget_runs(
    make: Callable[..., GraphWidget],
) -> None:
    w = make([{"id": "slow", "tool": "gated", "args": {"value": 1}}])
    fut = w.session.start()  # not through the widget
    assert STARTED.wait(WAIT)
    assert w.session.running and w.busy == ""
    for action in ("step", "run"):
        with pytest.raises(RuntimeError, match="pause it first"):
            w.act(action).result(WAIT)
    GATE.set()
    assert fut.result(WAIT).status == "succeeded"
    assert not w.session.running
    assert w.act("step").result(WAIT) == []


def test_collapsing_a_group_recomputes_the_layout(
    make: Callable[..., GraphWidget],
) -> None:
    w = make(
        [
            {"id": "a", "tool": "echo"},
            {"id": "g1", "tool": "echo", "deps": ["a"], "parent": "grp"},
            {"id": "g2", "tool": "echo", "deps": ["a"], "parent": "grp"},
        ]
    )
    w.collapsed = ["grp"]
    ids = {n["id"] for n in w.graph["nodes"]}
    assert ids == {"a", GROUP_PREFIX + "grp"}
    w.act("select", task=GROUP_PREFIX + "grp").result(WAIT)
    assert w.detail["kind"] == "group" and w.detail["members"] == ["g1", "g2"]
    w.collapsed = []
    assert len(w.graph["nodes"]) == 3


def test_stale_and_rerun_stale(make: Callable[..., GraphWidget]) -> None:
    w = make(CHAIN)
    w.act("run").result(WAIT)
    assert w.stale == []

    @al.tool(name="add")
    def add2(a: int, b: int = 2) -> dict[str, int]:
        """Adds two numbers, differently."""
        return {"sum": a + b}

    w.session.update_tools(add2)
    w.refresh()
    assert w.stale == ["a", "b", "c"]
    w.act("select", task="b").result(WAIT)
    assert w.detail["stale"] is True
    w.act("rerun_stale").result(WAIT)
    assert w.stale == [] and w.status_codes == "sss"
    assert w.session.result("c") == {"sum": 7}


def test_live_updates_arrive_without_an_action(
    make: Callable[..., GraphWidget],
) -> None:
    w = make(CHAIN, update_interval=0.05)
    done = threading.Event()

    def watch(change: dict[str, Any]) -> None:
        if change["new"] == "sss":
            done.set()

    w.observe(watch, names="status_codes")
    w.session.start()  # not through the widget: only the subscription sees it
    assert done.wait(WAIT)
    assert w.flushes >= 1


def test_updates_are_coalesced(make: Callable[..., GraphWidget]) -> None:
    n = 300
    tasks = [{"id": f"t{i}", "tool": "echo", "args": {"value": i}} for i in range(n)]
    w = make(tasks, update_interval=10.0)  # one flush window spans the run
    before = w.comm_messages
    assert w.session.run().status == "succeeded"
    # ~3 events per task were committed, yet at most the first flush went out.
    assert len(w.session.events()) > 2 * n
    assert w.flushes <= 1
    assert w.comm_messages - before <= 2
    w.refresh()
    assert w.status_codes == "s" * n


def test_close_stops_live_updates(make: Callable[..., GraphWidget]) -> None:
    w = make(CHAIN, update_interval=0.0)
    w.close()
    flushes = w.flushes
    w.session.run()
    assert w.flushes == flushes


def test_static_html_of_a_session(ws: al.Workspace) -> None:
    s = ws.new_session(
        plan={
            "goal": "static <view>",
            "tasks": [
                {"id": "ok", "tool": "add", "args": {"a": 1}},
                {"id": "bad", "tool": "boom", "deps": ["ok"]},
                {"id": "after", "tool": "echo", "deps": ["bad"]},
            ],
        },
        tools=TOOLS,
    )
    with s:
        s.run()
        html = session_html(s)
    assert "<script" not in html
    assert "static &lt;view&gt;" in html  # escaped
    assert html.count("<rect") >= 3
    for tid, status in (("ok", "succeeded"), ("bad", "failed"), ("after", "blocked")):
        assert f'data-id="{tid}" data-status="{status}"' in html
        assert STATUS_COLORS[status] in html
    assert "1/3" in html


def test_jupyter_package_imports_lazily() -> None:
    code = (
        "import sys, argus_lab.jupyter, argus_lab.layout\n"
        "heavy = ('anywidget', 'ipywidgets', 'IPython')\n"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


def test_plan_patches_relayout_the_graph(ws: al.Workspace) -> None:
    # An HTN plan whose run expands a lazy compound and backtracks a subtree:
    # the plan changes under the widget, which follows it.
    from tests import htn_domains as d

    planner = al.HTNPlanner(d.trip)
    plan = planner.plan("trip", "alice", "home", "paris", 2)
    log: list[str] = []
    tools = d.trip_tools(log, taxi_strike=True)
    with ws.new_session(plan=plan, tools=tools, planner=planner) as s:
        w = GraphWidget(s, update_interval=0.0)
        before = set(w.tasks)
        assert "trip/lodging" in before  # the lazy compound, not yet expanded
        relaid = threading.Event()
        w.observe(lambda c: relaid.set(), names="graph")
        assert s.run().status == "succeeded"
        assert relaid.wait(WAIT)  # a live flush saw plan_patched and laid out anew
        w.refresh()
        ids = [t.id for t in s.plan.tasks]
        assert w.tasks == ids and set(w.tasks) != before
        assert "trip/to_airport/ride_train" in w.tasks
        assert {n["id"] for n in w.graph["nodes"]} == set(ids)
        assert set(w.statuses.values()) == {"succeeded"}
        keys = {g["key"] for g in w.graph["groups"]}
        assert {"trip", "trip/to_airport"} <= keys
        w.close()


def test_detail_shows_resolved_args_attempts_and_no_env_values(
    make: Callable[..., GraphWidget], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WIDGET_TEST_TOKEN", "sk-secret-value-123")
    w = make(
        [
            *CHAIN,
            {"id": "e", "tool": "echo", "args": {"value": "${env.WIDGET_TEST_TOKEN}"}},
        ]
    )
    w.act("select", task="b").result(WAIT)
    # Before it ran: the reference cannot be resolved and is shown as written.
    assert w.detail["resolved_args"] == {"a": "${a.result.sum}"}
    assert w.detail["attempt_log"] == [] and w.detail["context"] is None
    w.act("run").result(WAIT)
    assert w.detail["args"] == {"a": "${a.result.sum}"}  # the plan's template
    assert w.detail["resolved_args"] == {"a": 2}  # what the task ran with
    log = w.detail["attempt_log"]
    assert [(a["n"], a["outcome"]) for a in log] == [(1, "succeeded")]
    assert log[0]["duration"] is not None and log[0]["duration"] >= 0
    assert w.detail["result"] == '{\n  "sum": 3\n}'
    w.act("select", task="e").result(WAIT)
    assert "sk-secret" not in json.dumps(w.detail)  # never resolved for display
    assert w.detail["resolved_args"] == {"value": "${env.WIDGET_TEST_TOKEN}"}


def test_detail_of_a_failed_task_has_error_traceback_and_attempts(
    make: Callable[..., GraphWidget],
) -> None:
    w = make([{"id": "x", "tool": "flaky", "args": {"value": 3}}])
    w.act("run").result(WAIT)
    w.act("select", task="x").result(WAIT)
    d = w.detail
    assert d["status"] == "failed" and d["error"] == "first call fails"
    assert d["error_type"] == "ValueError" and "first call fails" in d["traceback"]
    assert [a["outcome"] for a in d["attempt_log"]] == ["failed"]
    assert d["attempt_log"][0]["error"] == "first call fails"


def test_context_breakdown_of_an_llm_task_reaches_the_panel(
    ws: al.Workspace,
) -> None:
    from tests.test_llm_task import PLAN as LLM_PLAN
    from tests.test_llm_task import lookup, model, seed

    s = ws.new_session(plan=LLM_PLAN, tools=[seed, lookup], name="ctx", models=model())
    w = GraphWidget(s)
    try:
        w.act("run").result(WAIT)
        w.act("select", task="explain").result(WAIT)
        ctx = w.detail["context"]
        assert ctx == s.context_breakdown("explain")  # a dict, not dropped
        assert ctx["budget"] == 8000
        assert any(item["status"] == "included" for item in ctx["items"])
        assert w.detail["tokens"] > 0
        w.act("select", task="topic").result(WAIT)
        assert w.detail["context"] is None  # not an LLM task
    finally:
        w.close()
        s.close()


def test_cell_running_while_a_blocking_run_goes_on(
    make: Callable[..., GraphWidget],
) -> None:
    w = make(
        [{"id": "slow", "tool": "gated", "args": {"value": 1}}], update_interval=0.02
    )
    said = threading.Event()
    cleared = threading.Event()

    def watch(change: dict[str, Any]) -> None:
        (said if change["new"] else cleared).set()

    w.observe(watch, names="cell_running")
    # A cell's blocking run(), here on a thread standing in for the kernel.
    t = threading.Thread(target=w.session.run)
    t.start()
    assert STARTED.wait(WAIT) and said.wait(WAIT)
    assert w.cell_running and w.session.blocking_run
    GATE.set()
    t.join(WAIT)
    assert cleared.wait(WAIT) and not w.cell_running
    # The widget's own Step is not a cell's run: no banner for it.
    assert w.act("step").result(WAIT) == []
    assert not w.cell_running


def test_pause_with_nothing_running_says_so(make: Callable[..., GraphWidget]) -> None:
    w = make(CHAIN)
    w.act("pause").result(WAIT)
    assert w.message["text"] == "nothing to pause: no run is going on"
    w.act("run").result(WAIT)
    w.act("step").result(WAIT)
    assert w.message["text"] == "step: nothing to run; every task is done"
    assert "None" not in w.message["text"]


def test_hints_name_the_bound_variable_or_the_magic(
    make: Callable[..., GraphWidget],
) -> None:
    w = make([{"id": "pub", "tool": "publish", "args": {"text": "draft"}}])
    w.act("run").result(WAIT)
    name = w.session.name
    assert f"%argus approve {name} pub" in w.summary["reason"]
    assert "s.approve" not in w.summary["reason"]
    w.hint_var = "r"
    w.refresh()
    assert "r.approve('pub')" in w.summary["reason"]


def test_fork_breadcrumb_and_compare_with_parent(
    make: Callable[..., GraphWidget],
) -> None:
    w = make(CHAIN)
    parent = w.session
    w.act("run").result(WAIT)
    assert w.family == {"parent": "", "forked_at": "", "forks": []}
    fork = w.act("fork", at="b").result(WAIT)
    assert w.family["parent"] == parent.name and w.family["forked_at"] == "b"
    assert w.act("compare").result(WAIT) == ["b", "c"]  # pending in the fork
    assert w.differs == ["b", "c"]
    w.act("run").result(WAIT)
    assert w.act("compare").result(WAIT) == []  # same tools, same results
    assert w.message["text"] == f"same as {parent.name}"
    # Back to the parent, and forward to the fork, through the breadcrumb.
    assert w.act("open_family", name=parent.name).result(WAIT) is parent
    assert w.family["forks"] == [fork.name] and w.differs == []
    with pytest.raises(ValueError, match="not a fork"):
        w.act("compare")
    assert w.act("open_family", name=fork.name).result(WAIT) is fork


def test_graph_svg_and_argus_show_svg(
    make: Callable[..., GraphWidget], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import xml.etree.ElementTree as ET

    from argus_lab.cli import main

    w = make([*CHAIN, {"id": "x", "tool": "flaky"}])
    s = w.session
    s.run()
    text = s.graph_svg()
    root = ET.fromstring(text.split("\n", 1)[1])  # a well-formed SVG document
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    ns = {"svg": "http://www.w3.org/2000/svg"}
    nodes = {g.get("data-id"): g for g in root.iter("{http://www.w3.org/2000/svg}g")}
    assert nodes["a"].get("data-status") == "succeeded"
    assert nodes["x"].get("data-status") == "failed"
    label = nodes["x"].find("svg:text", ns)
    assert label is not None and label.text == "✕ x"  # a glyph, not colour alone
    legend = [e.text for e in root.iter("{http://www.w3.org/2000/svg}text")][-4:]
    assert legend == ["✓", "succeeded", "✕", "failed"]  # the statuses present
    out = tmp_path / "graph.svg"
    assert main(["-w", str(s.workspace.path), "show", s.name, "--svg", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == text
    code = main(["-w", str(s.workspace.path), "show", s.name, "--svg", "/nope/x.svg"])
    assert code != 0 and "cannot write the SVG" in capsys.readouterr().err


def test_a_forks_elapsed_time_counts_only_its_own_work(
    make: Callable[..., GraphWidget],
) -> None:
    w = make(CHAIN)
    w.act("run").result(WAIT)
    parent_elapsed = w.summary["elapsed"]
    fork = w.act("fork", at="c").result(WAIT)
    assert w.summary["elapsed"] == 0.0  # nothing ran in the fork yet
    w.act("step").result(WAIT)
    rec = fork.record("c")
    assert rec.started is not None and rec.ended is not None
    assert w.summary["elapsed"] == round(rec.ended - rec.started, 3)
    assert parent_elapsed >= 0.0


def test_display_shows_a_static_fallback_then_the_live_view(
    make: Callable[..., GraphWidget],
) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    w = make(CHAIN)
    shown: list[tuple[dict[str, Any], dict[str, Any]]] = []
    shell = InteractiveShell.instance()
    pub = shell.display_pub
    original = pub.publish
    pub.publish = lambda data, metadata=None, **kw: shown.append((data, metadata))  # type: ignore[method-assign]
    try:
        w._ipython_display_()
    finally:
        pub.publish = original  # type: ignore[method-assign]
    assert len(shown) == 2
    fallback, live = shown[0][0], shown[1][0]
    assert list(fallback) == ["text/html"]
    html = fallback["text/html"]
    assert f"argus-fb-{w.fallback_key}" in html and w.fallback_key
    assert f"%argus open {w.session.name}" in html and "<svg" in html
    assert "application/vnd.jupyter.widget-view+json" in live


def test_report_of_a_fork_without_at_names_no_missing_marker(
    make: Callable[..., GraphWidget],
) -> None:
    from argus_lab.analysis import report

    w = make(CHAIN)
    w.act("run").result(WAIT)
    parent = w.session
    whole = w.act("fork").result(WAIT)  # at=None: every result kept
    text = report(whole).to_markdown()
    assert f"Forked from `{parent.name}` keeping every result" in text
    missing = [ln for ln in text.splitlines() if "<NA>" in ln or "NaN" in ln]
    assert "<NA>" not in text and "NaN" not in text, missing  # seen once in CI
    part = parent.fork(at="b")
    try:
        assert f"Forked from `{parent.name}` at `b`" in report(part).to_markdown()
    finally:
        part.close()


def test_detail_lists_the_memory_a_task_wrote(
    make: Callable[..., GraphWidget],
) -> None:
    from tests.waiting import wait_until

    w = make(CHAIN, remember=True)
    w.act("run").result(WAIT)
    s = w.session

    def written() -> bool:
        w.act("select", task="")
        w.act("select", task="b").result(WAIT)
        return bool(w.detail["memories"])

    wait_until(written, "the result memory of task b")  # written in background
    (m,) = w.detail["memories"]
    assert m["kind"] == "result" and '"sum": 3' in m["text"]
    assert s.workspace.memory.get(m["id"]) is not None


def test_a_breakpoint_set_while_a_run_goes_on_pauses_it(
    make: Callable[..., GraphWidget],
) -> None:
    w = make(
        [
            {"id": "slow", "tool": "gated", "args": {"value": 1}},
            {"id": "b", "tool": "add", "args": {"a": 1}, "deps": ["slow"]},
            {"id": "c", "tool": "add", "args": {"a": 2}, "deps": ["b"]},
        ],
        concurrency=1,
    )
    run = w.act("run")
    assert STARTED.wait(WAIT) and w.session.running
    assert w.act("toggle_breakpoint", task="c").result(WAIT) is True
    GATE.set()
    result = run.result(WAIT)
    assert result.status == "paused"
    assert w.statuses == {"slow": "succeeded", "b": "succeeded", "c": "pending"}
    assert "breakpoint before task 'c'" in w.summary["reason"]


def test_a_run_started_outside_the_widget_ends_in_it_too(
    make: Callable[..., GraphWidget],
) -> None:
    w = make(
        [{"id": "slow", "tool": "gated", "args": {"value": 1}}], update_interval=0.02
    )
    live = threading.Event()
    ended = threading.Event()

    def watch(change: dict[str, Any]) -> None:
        (live if change["new"].get("live") else ended).set()

    w.observe(watch, names="summary")
    fut = w.session.start()  # from a cell, not through the widget
    assert STARTED.wait(WAIT) and live.wait(WAIT)
    ended.clear()
    GATE.set()
    assert fut.result(WAIT).status == "succeeded"
    # No action and no cell follows: the widget's own look-again sees the end.
    assert ended.wait(WAIT)
    assert w.summary["live"] is False and w.summary["status"] == "succeeded"


def test_report_counts_attempts_the_same_way_everywhere(
    make: Callable[..., GraphWidget],
) -> None:
    from argus_lab.analysis import report

    w = make([{"id": "x", "tool": "flaky", "args": {"value": 3}}])
    s = w.session
    assert s.run().status == "failed"
    s.retry("x")  # a new generation: 2 attempts in all
    assert s.run().status == "succeeded"
    text = report(s).to_markdown()
    assert "Attempts: 2 (" in text
    (row,) = [line for line in text.splitlines() if line.startswith("| x | flaky |")]
    assert row.split("|")[4].strip() == "2", row  # task | tool | status | attempts


def test_a_task_in_flight_when_the_session_closed_is_drawn_interrupted(
    ws: al.Workspace,
) -> None:
    """Closed mid-run (or its kernel restarted), the session keeps the task's
    intent ("running") until the next run decides it; nothing runs it, so the
    widget must not draw it running, neither on this object nor on a reopen."""
    plan = {
        "goal": "interrupted",
        "tasks": [
            {"id": "slow", "tool": "gated", "args": {"value": 1}},
            {"id": "after", "tool": "add", "args": {"a": 1}, "deps": ["slow"]},
        ],
    }
    s = ws.new_session(plan=plan, tools=TOOLS, name="cut", shutdown_grace=0.0)
    w = GraphWidget(s)
    try:
        s.start()
        assert STARTED.wait(WAIT)
        w.refresh()  # a live run: running is running
        assert w.marks["interrupted"] == [] and w.summary["running"] == 1
        s.close()  # the attempt is left as its intent (it still blocks)
        w.refresh()  # what the widget does after the cell that closed it
        assert w.statuses["slow"] == "running"  # the record, unchanged
        assert w.marks["interrupted"] == ["slow"]
        assert w.summary["running"] == 0 and w.summary["interrupted"] == 1
        static = session_html(s)  # the view shown where no widget runs
        assert '<g data-id="slow" data-status="interrupted">' in static
        assert "interrupted 1" in static
    finally:
        w.close()
        GATE.set()
    again = ws.open("cut", tools=TOOLS)  # as after a kernel restart
    w2 = GraphWidget(again)
    try:
        # The SVG for papers and issue reports (argus show --svg) draws it so too.
        svg = again.graph_svg()
        assert '<g data-id="slow" data-status="interrupted">' in svg
        assert 'data-status="running"' not in svg
        assert ">interrupted</text>" in svg  # in its legend too
        assert w2.marks["interrupted"] == ["slow"]
        assert w2.summary["running"] == 0 and w2.summary["interrupted"] == 1
        assert again.run().status == "succeeded"  # gated has no side effect
        w2.refresh()
        assert w2.marks["interrupted"] == [] and w2.summary["interrupted"] == 0
    finally:
        w2.close()
        again.close()


def test_following_another_run_reads_the_store_once_then_what_changed(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A widget following a run elsewhere looks every second: it must not load
    the whole session each time, only the head, then the records that changed."""
    from argus_lab.jupyter._elsewhere import run_elsewhere
    from argus_lab.store.checkpoints import SessionStore

    loads: list[str] = []
    real = SessionStore.load

    def counted(self: SessionStore, **kw: Any) -> Any:
        loads.append(self.session_id)
        return real(self, **kw)

    plan = {
        "goal": "followed",
        "tasks": [
            {"id": "slow", "tool": "gated", "args": {"value": 1}},
            {"id": "after", "tool": "add", "args": {"a": 1}, "deps": ["slow"]},
        ],
    }
    runner = ws.new_session(plan=plan, tools=TOOLS, name="far")
    try:
        runner.start()
        assert STARTED.wait(WAIT)
        viewer = ws.open("far", tools=TOOLS)  # as a second kernel would
        monkeypatch.setattr(SessionStore, "load", counted)
        first = run_elsewhere(viewer)
        assert first is not None and first["tasks"] == {
            "slow": "running",
            "after": "pending",
        }
        assert "being run by process" in first["reason"]
        for _ in range(3):  # nothing committed: the head alone
            assert run_elsewhere(viewer) == first
        assert len(loads) == 1
        GATE.set()
        assert runner.wait(WAIT).status == "succeeded"
        last = run_elsewhere(viewer)
        assert len(loads) == 1  # the records the commits touched, no more
        monkeypatch.setattr(SessionStore, "load", real)
        assert last == ws.progress("far")
        assert last["tasks"] == {"slow": "succeeded", "after": "succeeded"}
        viewer.close()
    finally:
        GATE.set()
        runner.close()
