"""%%argus and %argus on a real IPython InteractiveShell (run_cell_magic)."""

from __future__ import annotations

import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import argus_lab as al
from argus_lab.jupyter.display import PlanView
from argus_lab.jupyter.magic import interpolate
from argus_lab.jupyter.widget import GraphWidget
from tests.conftest import fresh_shell

WAIT = 30.0

PLAN = """
goal: add things
tasks:
  - id: a
    tool: add
    args: {a: {start}}
  - id: b
    tool: add
    args: {a: "${a.result.sum}"}
"""

TOOLS_MODULE = '''
import argus_lab as al

@al.tool
def shout(text: str) -> str:
    """Upper-cases text."""
    return text.upper()

@al.tool
def whisper(text: str) -> str:
    """Lower-cases text."""
    return text.lower()
'''


@pytest.fixture
def ip(shell: InteractiveShell, tmp_path: Path) -> Iterator[InteractiveShell]:
    """The shell with a fresh namespace, workspace and magic defaults."""
    fresh_shell(shell, tmp_path / "ws")
    run(
        shell,
        """
        import argus_lab as al

        @al.tool
        def add(a: int, b: int = 1) -> dict:
            return {"sum": a + b}

        start = 41
        """,
    )
    yield shell
    for value in list(shell.user_ns.values()):
        if isinstance(value, al.Session):
            value.wait(WAIT)


def run(ip: InteractiveShell, code: str) -> None:
    result = ip.run_cell(textwrap.dedent(code))
    result.raise_error()


def cell(ip: InteractiveShell, line: str, body: str = PLAN) -> Any:
    return ip.run_cell_magic("argus", line, textwrap.dedent(body))


def test_yaml_cell_returns_widget_and_binds_session(ip: InteractiveShell) -> None:
    w = cell(ip, "demo -o s")
    assert isinstance(w, GraphWidget)
    s = ip.user_ns["s"]
    assert isinstance(s, al.Session) and w.session is s
    assert s.name == "demo" and s.goal == "add things"
    assert s.plan.task("a").args == {"a": 41}  # {start} from the namespace
    assert s.plan.task("b").args == {"a": "${a.result.sum}"}  # a reference, kept
    assert s.status == "created" and w.statuses == {"a": "pending", "b": "pending"}


def test_step_and_run_flags(ip: InteractiveShell) -> None:
    w = cell(ip, "stepped --step -o s")
    assert w.statuses == {"a": "succeeded", "b": "pending"}
    cell(ip, "ran --run -o r")
    r = ip.user_ns["r"]
    assert r.wait(WAIT).status == "succeeded"
    assert r.result("b") == {"sum": 43}


def test_default_mode_is_configurable(ip: InteractiveShell) -> None:
    ip.run_line_magic("config", "ArgusMagics.mode = 'step'")
    ip.run_line_magic("config", "ArgusMagics.height = 300")
    w = cell(ip, "-o s")
    assert w.statuses["a"] == "succeeded"
    assert w.height == 300


def test_plan_only_binds_the_plan(ip: InteractiveShell) -> None:
    view = cell(ip, "--plan-only -o p")
    assert isinstance(view, PlanView)
    assert isinstance(ip.user_ns["p"], al.Plan)
    assert [t.id for t in ip.user_ns["p"].tasks] == ["a", "b"]
    assert "<svg" in view._repr_html_()
    assert al.Workspace(ip.user_ns["ws_dir"]).sessions() == []


def test_rerunning_a_cell_shows_the_same_session(ip: InteractiveShell) -> None:
    w1 = cell(ip, "same --step -o s")
    w2 = cell(ip, "same -o s2")
    assert ip.user_ns["s2"] is ip.user_ns["s"]
    assert w2.statuses == w1.statuses == {"a": "succeeded", "b": "pending"}
    with pytest.raises(UsageError, match="already exists with another plan"):
        cell(ip, "same", PLAN.replace("add things", "add other things"))


def test_rerunning_a_cell_whose_goal_holds_a_secret_shows_the_same_session(
    ip: InteractiveShell,
) -> None:
    # The goal is stored masked, so the stored plan never equalled the cell's:
    # a named cell run again said "already exists with another plan", and an
    # unnamed one made a new session each time (its side effects repeated).
    secret = PLAN.replace("add things", "add things, password=hunter2hunter2")
    cell(ip, "masked --step -o s", secret)
    cell(ip, "masked -o s2", secret)
    assert ip.user_ns["s2"] is ip.user_ns["s"]
    cell(ip, "--step -o u", secret)
    cell(ip, "-o u2", secret)
    assert ip.user_ns["u2"].id == ip.user_ns["u"].id
    assert ip.user_ns["u2"].records["a"].status == "succeeded"
    with pytest.raises(UsageError, match="already exists with another plan"):
        cell(ip, "masked", secret.replace("add things", "add more things"))


def test_rerunning_an_unnamed_cell_shows_its_session_goal_or_not(
    ip: InteractiveShell,
) -> None:
    # Without a NAME, the newest session with the cell's plan; --new makes
    # another. A YAML plan without a goal stores none (it was a KeyError).
    for body in (PLAN, PLAN.replace("goal: add things\n", "")):
        cell(ip, "-o s", body)
        cell(ip, "-o s2", body)
        assert ip.user_ns["s2"] is ip.user_ns["s"]
        cell(ip, "--new -o s3", body)
        assert ip.user_ns["s3"].id != ip.user_ns["s"].id


def test_tools_from_variables_lists_and_modules(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "loud_tools.py").write_text(TOOLS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    body = """
    tasks:
      - id: up
        tool: shout
        args: {text: hi}
    """
    cell(ip, "by-module --tools loud_tools --run -o s", body)
    assert ip.user_ns["s"].wait(WAIT).status == "succeeded"
    assert set(ip.user_ns["s"].tools) == {"shout", "whisper"}
    run(ip, "import loud_tools\nmine = [loud_tools.shout]")
    cell(ip, "by-list --tools mine,add -o s2", body)
    assert set(ip.user_ns["s2"].tools) == {"shout", "add"}


def test_bad_arguments_raise_usage_errors(ip: InteractiveShell) -> None:
    cases = [
        ("--bogus", PLAN, "unrecognized arguments"),
        ("--run --step", PLAN, "choose one of --run, --step, --plan-only"),
        ("--planner nope", PLAN, "invalid choice"),
        ("--max-cost -1", PLAN, "--max-cost must be positive"),
        ("--max-steps 0", PLAN, "--max-steps must be at least 1"),
        ("--max-steps x", PLAN, "invalid int value"),
        ("", "   \n", "the cell is empty"),
        ("--tools nowhere_at_all", PLAN, "neither a variable of this notebook"),
        ("--tools start", PLAN, "is a int, not a tool"),
        ("--planner yaml", "Plan a salon in Lisbon", "not a YAML plan"),
        ("", PLAN.replace("tool: add", "tool: sub", 1), "sub"),
        ("bad/name", PLAN, "session name"),
        ("", "tasks:\n  - {id: a, tool: add", "not valid YAML"),
    ]
    for line, body, message in cases:
        with pytest.raises(UsageError, match=message):
            cell(ip, line, body)


@pytest.mark.slow
def test_goal_text_without_a_key_names_the_offline_ways(ip: InteractiveShell) -> None:
    # Goal text goes to the LLM planner; with no API key that must say what to do.
    with pytest.raises(UsageError, match="planning failed") as e:
        cell(ip, "", "Plan a three-day salon in Lisbon")
    assert "ANTHROPIC_API_KEY" in str(e.value) and "YAML" in str(e.value)


class FakeHTN:
    """Stands in for al.HTNPlanner (same call shape): one task per goal argument."""

    def __init__(self, domain: Any) -> None:
        self.domain = domain

    def plan(self, goal: str, *args: Any, **kwargs: Any) -> al.Plan:
        words = [str(a) for a in args] + [f"{k}-{v}" for k, v in kwargs.items()]
        tasks = [
            {"id": w, "tool": "add", "args": {"a": len(w)}, "parent": goal}
            for w in words
        ]
        return al.Plan.from_dict({"goal": f"{goal}{args}", "tasks": tasks})


class FakeModel:
    def __init__(self, name: str = "default") -> None:
        self.name = name


class FakeLLM:
    """Stands in for al.LLMPlanner: records what it was given."""

    seen: dict[str, Any] = {}

    def __init__(self, model: FakeModel) -> None:
        self.model = model

    def plan(self, goal: str, tools: list[al.Tool]) -> al.Plan:
        FakeLLM.seen = {"goal": goal, "model": self.model.name, "tools": tools}
        task = {"id": "x", "tool": "add", "args": {"a": 1}}
        return al.Plan.from_dict({"goal": goal, "tasks": [task]})


def test_goal_text_goes_to_the_planners(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(al, "HTNPlanner", FakeHTN, raising=False)
    monkeypatch.setattr(al, "LLMPlanner", FakeLLM, raising=False)
    monkeypatch.setattr(al, "AnthropicModel", FakeModel, raising=False)
    ip.user_ns["salon"] = "salon-domain"
    # The goal is a task call; its arguments are expressions over the notebook.
    cell(ip, "--domain salon -o s", "book('venue', start + 1, days=2)")
    s = ip.user_ns["s"]
    assert [t.id for t in s.plan.tasks] == ["venue", "42", "days-2"]
    assert s.plan.tasks[0].parent == "book"
    with pytest.raises(UsageError, match="needs --domain"):
        cell(ip, "--planner htn", "book('venue')")
    with pytest.raises(UsageError, match="MODULE:OBJ"):
        cell(ip, "--domain undefined_name", "book('venue')")
    with pytest.raises(UsageError, match="write the goal as a task call"):
        cell(ip, "--domain salon", "book a venue please")
    cell(ip, "--model claude-x -o s2", "Plan a salon")
    assert FakeLLM.seen["goal"] == "Plan a salon"
    assert FakeLLM.seen["model"] == "claude-x"
    assert [t.name for t in FakeLLM.seen["tools"]] == ["add"]


def test_max_steps_pauses_a_run(ip: InteractiveShell) -> None:
    ip.run_line_magic("config", "ArgusMagics.session_options = {'concurrency': 1}")
    w = cell(ip, "budget --run --max-steps 1 -o s")
    s = ip.user_ns["s"]
    result = s.wait(WAIT)
    assert result.status == "paused", result
    assert (result.reason or "").startswith("budget exceeded: session max_steps=1")
    assert s.record("a").status == "succeeded" and s.record("b").status == "pending"
    assert s.info.budgets["session"].max_steps == 1  # the session's own budget
    w.refresh()
    assert w.summary["budget_left"] == {"steps": 0}


def test_max_cost_sets_the_session_budget(ip: InteractiveShell) -> None:
    w = cell(ip, "costly --max-cost 0.5 -o s")
    budget = ip.user_ns["s"].info.budgets["session"]
    assert budget.max_cost_usd == 0.5 and budget.max_steps is None
    assert w.summary["budget_left"] == {"cost": 0.5}


def test_line_magics(ip: InteractiveShell) -> None:
    cell(ip, "first --run -o s")
    s = ip.user_ns["s"]
    s.wait(WAIT)
    ls = ip.run_line_magic("argus", "ls")
    assert list(ls["name"]) == ["first"]
    assert list(ls["status"]) == ["succeeded"] and list(ls["tasks"]) == [2]

    w = ip.run_line_magic("argus", "open first -o again")
    assert isinstance(w, GraphWidget)
    assert ip.user_ns["again"] is s  # one Session object per session per kernel
    assert w.status_codes == "ss"

    tasks = ip.run_line_magic("argus", "df first")
    assert list(tasks["task_id"]) == ["a", "b"]
    events = ip.run_line_magic("argus", "df first events")
    assert "task_succeeded" in set(events["kind"].astype(str))
    llm = ip.run_line_magic("argus", "df first llm")
    assert len(llm) == 0

    fw = ip.run_line_magic("argus", "fork first --at b -o f")
    f = ip.user_ns["f"]
    assert fw.session is f and f.name != "first"
    assert {t: r.status for t, r in f.records.items()} == {
        "a": "succeeded",
        "b": "pending",
    }
    rw = ip.run_line_magic("argus", f"resume {f.name}")
    assert rw.session is f
    assert f.wait(WAIT).status == "succeeded"


def test_resume_opens_from_disk_with_tools(ip: InteractiveShell) -> None:
    # A session written by another process (here: directly) and resumed.
    ws = al.Workspace(ip.user_ns["ws_dir"])
    body = textwrap.dedent(PLAN).replace("{start}", "1")
    s = ws.new_session(plan=body, tools=[ip.user_ns["add"]], name="elsewhere")
    s.step()
    s.close()
    w = ip.run_line_magic("argus", "resume elsewhere -o s")
    assert w.session.wait(WAIT).status == "succeeded"
    assert ip.user_ns["s"].result("b") == {"sum": 3}


def test_line_magic_usage_errors(ip: InteractiveShell) -> None:
    cell(ip, "known")
    cases = [
        ("frob", "invalid choice"),
        ("open", "needs a session NAME"),
        ("ls extra", "takes no name"),
        ("open nowhere", "no session 'nowhere'"),
        ("open known tasks", "unexpected argument"),
        ("open known --at a", "--at goes with %argus fork only"),
        ("fork known --at zz", "no task 'zz'"),
        ("df known sideways", "choose tasks, events or llm"),
    ]
    for line, message in cases:
        with pytest.raises(UsageError, match=message):
            ip.run_line_magic("argus", line)


def test_help_documents_everything(ip: InteractiveShell) -> None:
    doc = ip.find_cell_magic("argus").__doc__
    for word in ("%%argus", "--planner", "--domain", "--tools", "--model", "--run",
                 "--step", "--plan-only", "--max-cost", "--max-steps", "-o VAR",
                 "%argus ls", "%argus open NAME", "{var}"):  # fmt: skip
        assert word in doc, word
    line_doc = ip.find_line_magic("argus").__doc__
    assert "{ls,open,resume,fork,df,approve,reject,retry,skip}" in line_doc
    assert "%%argus?" in line_doc and "%argus approve NAME TASK" in line_doc


WRITE_PLAN = """
goal: publish
tasks:
  - id: pub
    tool: publish
    args: {text: draft}
"""


def test_rerunning_a_cell_leaves_one_subscribed_widget(ip: InteractiveShell) -> None:
    first = ip.run_cell(textwrap.dedent("%%argus sums -o s\n" + PLAN), cell_id="c1")
    again = ip.run_cell(textwrap.dedent("%%argus sums -o s\n" + PLAN), cell_id="c1")
    other = ip.run_cell(textwrap.dedent("%%argus sums\n" + PLAN), cell_id="c2")
    w1, w2, w3 = first.result, again.result, other.result
    assert w1.session is w2.session is w3.session
    assert w2.hint_var == "s" and w3.hint_var == ""
    s = w2.session
    flushes = (w1.flushes, w2.flushes, w3.flushes)
    done = threading.Event()
    w2.observe(lambda c: done.set() if c["new"] == "ss" else None, "status_codes")
    s.start().result(WAIT)
    assert done.wait(WAIT)
    w3.refresh()
    assert w1.flushes == flushes[0]  # the replaced widget no longer listens
    assert w2.flushes > flushes[1] and w3.status_codes == "ss"


def test_stale_tasks_show_after_tools_are_redefined_in_a_cell(
    ip: InteractiveShell,
) -> None:
    w = ip.run_cell(
        textwrap.dedent("%%argus sums -o s --run\n" + PLAN), cell_id="c1"
    ).result
    w.session.wait(WAIT)
    ip.run_cell("pass")  # after a cell the widget catches up
    assert w.stale == []
    run(
        ip,
        """
        @al.tool
        def add(a: int, b: int = 2) -> dict:
            return {"sum": a + b}

        s.update_tools(add)
        """,
    )
    # No event announces new tools: the widget refreshed after the cell.
    assert w.stale == ["a", "b"]


def _paused_for_approval(ip: InteractiveShell, name: str) -> Any:
    """A ``%%argus`` widget whose run paused for the approval of task "pub"."""
    run(
        ip,
        """
        @al.tool(side_effect="write")
        def publish(text: str) -> str:
            return "published " + text
        """,
    )
    w = cell(ip, f"{name} --tools publish", WRITE_PLAN)
    assert w.act("run").result(WAIT).status == "paused"
    assert f"%argus approve {name} pub" in w.summary["reason"]
    return w


def test_approve_and_reject_by_name(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    w = _paused_for_approval(ip, "pub")
    ip.run_line_magic("argus", "approve pub pub")
    assert "pub: pub approved" in capsys.readouterr().out
    assert w.session.record("pub").approval["state"] == "approved"
    with pytest.raises(UsageError, match="needs a TASK"):
        ip.run_line_magic("argus", "reject pub")
    with pytest.raises(UsageError, match="no task 'nope'"):
        ip.run_line_magic("argus", "skip pub nope")
    with pytest.raises(UsageError, match="not waiting"):
        ip.run_line_magic("argus", "reject pub pub")


def test_approving_by_name_without_the_tools_here_does_not_start_the_run(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """A session paused elsewhere (its tools are not in this kernel): starting
    it would fail the approved call ("not registered") and spend the approval."""

    @al.tool(side_effect="write")
    def publish(text: str) -> str:
        return "published " + text

    ws = al.Workspace(ip.user_ns["ws_dir"])
    plan = {
        "goal": "g",
        "tasks": [{"id": "pub", "tool": "publish", "args": {"text": "x"}}],
    }
    with ws.new_session(plan=plan, tools=[publish], name="away") as s:
        assert s.run().status == "paused"
    ip.run_line_magic("argus", "approve away pub")
    assert capsys.readouterr().out == (
        "away: pub approved; to go on, define its tools (publish) here, then: "
        "%argus resume away\n"
    )
    with ws.open("away", tools=[publish]) as s:
        assert s.record("pub").status == "pending"
        assert s.record("pub").approval["state"] == "approved"
        assert s.run().status == "succeeded"


def test_approving_by_name_resumes_a_run_paused_for_it(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """The widget's hint says `%argus approve NAME TASK`; like its Approve
    button, that goes on with a run that stopped only for this approval."""
    w = _paused_for_approval(ip, "pub2")
    ip.run_line_magic("argus", "approve pub2 pub")
    assert "pub2: pub approved; the run goes on" in capsys.readouterr().out
    res = w.session.wait(WAIT)
    assert res is not None and res.status == "succeeded"
    assert w.session.result("pub") == "published draft"


def test_interpolate() -> None:
    ns = {"city": "Lisbon", "days": 3, "names": ["a", "b"], "flag": True}
    text = "goal: {city} for {days} days {{city}} ${t.result.x} {missing} {names}"
    assert interpolate(text, ns) == (
        'goal: Lisbon for 3 days {city} ${t.result.x} {missing} ["a", "b"]'
    )
    assert interpolate("{flag}", ns) == "true"
    # YAML flow mappings, nested ones included, pass through untouched.
    flow = '- {id: j, args: {a: "${x.result}", b: {c: "${y.result}"}}}'
    assert interpolate(flow, ns) == flow
    assert interpolate("args: {city: x}", ns) == "args: {city: x}"
