"""An outside checker's attacks on the notebook experience (issues 4, 13, 15).

The magics run in a real IPython shell here; what a browser or a real kernel
is needed for lives in tests/test_notebook_kernel.py (a kernel through
jupyter_client, real comm messages) and tests/test_browser.py. Each test is a
way a user can break the promise "live and honest": a secret reaching a
notebook's output, a widget or magic that keeps handing back a closed session.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import argus_lab as al
from argus_lab.jupyter.widget import GraphWidget
from tests.conftest import fresh_shell
from tests.waiting import wait_until

WAIT = 30.0
SECRET = "sk-ant-nbattack0123456789abcdefghij"

PLAN = """
tasks:
  - id: a
    tool: add
    args: {a: 1}
  - id: b
    tool: add
    args: {a: "${a.result.sum}"}
"""


@pytest.fixture
def ip(shell: InteractiveShell, tmp_path: Path) -> Iterator[InteractiveShell]:
    fresh_shell(shell, tmp_path / "ws")
    shell.run_cell(
        textwrap.dedent(
            """
            import argus_lab as al

            @al.tool
            def add(a: int, b: int = 1) -> dict:
                return {"sum": a + b}

            @al.tool
            def echo(text: str) -> str:
                return text
            """
        )
    ).raise_error()
    yield shell
    for value in list(shell.user_ns.values()):
        if isinstance(value, al.Session):
            value.wait(WAIT)
            value.close()


def cell(ip: InteractiveShell, line: str, body: str = PLAN) -> Any:
    return ip.run_cell_magic("argus", line, textwrap.dedent(body))


def outputs(w: GraphWidget) -> str:
    """Everything a notebook keeps of the widget: its mime bundle (saved with
    the notebook), its static fallback, its synced state (comm messages) and
    the session's repr and goal."""
    data, _meta = w._repr_mimebundle_()
    parts = [
        json.dumps(data, default=str),
        w.fallback_html(),
        json.dumps(w.get_state(), default=str),
        repr(w.session),
        w.session.goal,
        w.session._repr_html_(),
    ]
    return "\n".join(parts)


# -- secrets -------------------------------------------------------------------------


def test_a_secret_in_the_goal_never_reaches_the_notebook_output(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store masks a goal's secret, so reopening shows [REDACTED]; the live
    session the cell made must show the same, not the secret, in every output
    the notebook saves."""
    monkeypatch.setenv("NBATTACK_API_KEY", SECRET)
    w = cell(ip, "leaky --run -o s", f"goal: deploy with {SECRET}\n{PLAN}")
    assert w.session.wait(WAIT).status == "succeeded"
    w.refresh()
    w.selected = "a"
    shown = outputs(w)
    assert SECRET not in shown and SECRET[:12] not in shown
    assert "[REDACTED]" in w.session.goal
    # What is live is what was committed: the reopened session agrees.
    again = al.Workspace(ip.user_ns["ws_dir"]).open("leaky", tools=[])
    try:
        assert again.goal == w.session.goal
    finally:
        again.close()


def test_a_secret_shape_in_a_goal_passed_to_new_session_is_masked_live(
    ws: al.Workspace,
) -> None:
    """The same through the Python API (no magic): a token shape in the goal."""
    s = ws.new_session(goal=f"post with token={SECRET}", plan={"tasks": []}, tools=[])
    try:
        assert SECRET not in s.goal and SECRET not in s.plan.goal
        assert SECRET not in s._repr_html_()
    finally:
        s.close()


def test_interpolated_secret_variables_stay_out_of_plan_only_output(
    ip: InteractiveShell,
) -> None:
    """``{key}`` in a cell is replaced by the variable's value: a plan holding
    it is refused (naming ${env.NAME}) and the refusal does not echo it; a
    ``--plan-only`` view of it does not show it either."""
    ip.user_ns["key"] = SECRET
    body = "tasks:\n  - id: a\n    tool: echo\n    args: {text: '{key}'}\n"
    with pytest.raises(UsageError) as e:
        cell(ip, "k", body)
    assert "${env.NAME}" in str(e.value) and SECRET not in str(e.value)
    view = cell(ip, "--plan-only", body)
    assert SECRET not in view._repr_html_() and SECRET not in repr(view)


# -- a session closed while its widget is live ----------------------------------


def test_the_magics_reopen_a_session_closed_in_the_notebook(
    ip: InteractiveShell,
) -> None:
    """``s.close()`` then ``%argus resume NAME`` (or the ``%%argus`` cell run
    again): the magics must not hand back the closed Session object, whose
    every action fails telling the user to open the session again."""
    first = cell(ip, "demo -o s")
    ip.run_cell("s.close()").raise_error()
    resumed = ip.run_line_magic("argus", "resume demo")
    assert resumed.session is not first.session
    assert resumed.session.wait(WAIT).status == "succeeded"
    assert ip.run_line_magic("argus", "open demo").session is resumed.session
    again = cell(ip, "demo -o s")
    assert again.session is resumed.session


def test_a_widget_of_a_closed_session_says_so_and_acts_no_more(
    ip: InteractiveShell,
) -> None:
    w = cell(ip, "shut -o s")
    ip.run_cell("s.close()").raise_error()  # the widget catches up after the cell
    assert w.summary["closed"] is True
    assert w.summary["status"] == "created"  # the last committed status
    f = w.act("step")
    with pytest.raises(Exception, match="%argus open shut"):
        f.result(WAIT)
    assert w.message["level"] == "error" and "%argus open shut" in w.message["text"]
    # Reopened through the magic, a new widget on a new object runs it.
    w2 = ip.run_line_magic("argus", "resume shut")
    assert w2.session.wait(WAIT).status == "succeeded"
    w2.refresh()
    assert w2.summary["closed"] is False


# -- clicks while something runs: follow it, or say what runs -------------------


GATED = """
import threading
GATE, STARTED = threading.Event(), threading.Event()

@al.tool
def slow(a: int) -> int:
    STARTED.set()
    if not GATE.wait(30):
        raise RuntimeError("the test never opened the gate")
    return a
"""

SLOW_PLAN = """
tasks:
  - id: a
    tool: slow
    args: {a: 1}
  - id: b
    tool: slow
    args: {a: 2}
    deps: [a]
"""


def test_resume_or_a_rerun_cell_while_the_run_goes_on_follows_it(
    ip: InteractiveShell,
) -> None:
    """``%argus resume NAME`` (or Run all again) while the background run goes
    on: the new widget follows that run; it must not say, in red, to pause it."""
    ip.run_cell(GATED).raise_error()
    cell(ip, "demo -o s --run", SLOW_PLAN)
    assert ip.user_ns["STARTED"].wait(WAIT)
    resumed = ip.run_line_magic("argus", "resume demo")
    again = cell(ip, "demo -o s --run", SLOW_PLAN)
    for w in (resumed, again):
        assert w.message.get("level") != "error", w.message
        assert w.busy == "run" and w.summary["live"] is True
    ip.user_ns["GATE"].set()
    assert ip.user_ns["s"].wait(WAIT).status == "succeeded"
    for w in (resumed, again):  # each saw the run it followed end
        wait_until(lambda w=w: not w.busy, "the widget to see the end")
        assert w.message["text"] == "run ended: succeeded, 2/2 done"
        assert w.statuses == {"a": "succeeded", "b": "succeeded"}


def test_a_second_click_while_a_step_runs_says_a_step_runs(
    ip: InteractiveShell,
) -> None:
    ip.run_cell(GATED).raise_error()
    w = cell(ip, "steps -o s", SLOW_PLAN)
    first = w.act("step")
    assert ip.user_ns["STARTED"].wait(WAIT)
    for action in ("step", "run"):
        with pytest.raises(RuntimeError, match="a step is going on"):
            w.act(action).result(WAIT)
        assert "pause" not in w.message["text"]
    ip.user_ns["GATE"].set()
    assert [r.status for r in first.result(WAIT)] == ["succeeded"]
    assert w.statuses == {"a": "succeeded", "b": "pending"}


def test_a_fork_at_an_unknown_task_says_so_without_python_quotes(
    ip: InteractiveShell,
) -> None:
    w = cell(ip, "forky -o s")
    with pytest.raises(KeyError):
        w.act("fork", at="nope").result(WAIT)
    text = w.message["text"]
    assert text.startswith("fork: session 'forky' has no task 'nope'"), text
    assert '"' not in text  # str(KeyError) quotes its message: not shown


# -- what a cell does to the session shows in its widget ------------------------

FLAKY = """
CALLS = []

@al.tool
def flaky(a: int) -> int:
    CALLS.append(a)
    if len(CALLS) == 1:
        raise ValueError("first call fails")
    return a
"""

FLAKY_PLAN = """
tasks:
  - id: a
    tool: flaky
    args: {a: 1}
  - id: b
    tool: flaky
    args: {a: 2}
    deps: [a]
"""


@pytest.mark.parametrize(
    "how", ["%argus retry demo a", "s.retry('a')"], ids=["magic", "python"]
)
def test_a_retry_from_a_cell_unblocks_the_dependents_in_the_widget(
    ip: InteractiveShell, how: str
) -> None:
    """Retrying a failed task makes what it blocked pending again: the widget
    must show that, not the dependents still 'blocked' (no event names them)."""
    ip.run_cell(FLAKY).raise_error()
    w = cell(ip, "demo -o s --run", FLAKY_PLAN)
    assert ip.user_ns["s"].wait(WAIT).status == "failed"
    wait_until(lambda: w.statuses == {"a": "failed", "b": "blocked"}, "the failure")
    ip.run_cell(how).raise_error()
    wait_until(
        lambda: w.statuses == {"a": "pending", "b": "pending"},
        f"the widget to show {how!r}",
    )


# -- bad cells: one clear error, nothing made, nothing lost ----------------------


@pytest.mark.parametrize(
    ("line", "body", "says"),
    [
        ("bad", "tasks:\n  - id: a\n   tool: add\n", "not valid YAML"),
        ("bad", "tasks:\n  - id: a\n    tool: nope\n", "known tools: add, echo"),
        ("bad", "   \n\n", "the cell is empty"),
        ("bad", "tasks: 3\n", "tasks: Input should be a valid list"),
        (
            "bad",
            "tasks:\n  - {id: a, tool: add, args: {a: 1}}\n"
            "  - {id: a, tool: add, args: {a: 2}}\n",
            "duplicate task id 'a'",
        ),
        (SECRET, PLAN, "the session name holds a secret"),
        ("bad --run --step", PLAN, "choose one of --run, --step, --plan-only"),
        ("bad --max-steps 0", PLAN, "--max-steps must be at least 1"),
    ],
    ids=[
        "yaml",
        "tool",
        "empty",
        "not-a-list",
        "duplicate",
        "secret-name",
        "two-modes",
        "max-steps",
    ],
)
def test_a_bad_cell_is_one_clear_error_and_keeps_what_was_there(
    ip: InteractiveShell,
    monkeypatch: pytest.MonkeyPatch,
    line: str,
    body: str,
    says: str,
) -> None:
    monkeypatch.setenv("NBATTACK_API_KEY", SECRET)
    kept = cell(ip, "kept -o k --run")
    assert kept.session.wait(WAIT).status == "succeeded"
    with pytest.raises(UsageError) as e:
        cell(ip, line, body)
    assert says in str(e.value) and SECRET not in str(e.value)
    assert "Traceback" not in str(e.value)
    ws = al.Workspace(ip.user_ns["ws_dir"])
    try:
        assert [i.name for i in ws.sessions()] == ["kept"]
        again = ws.open("kept", tools=[])
        assert again.status == "succeeded"
        assert again.counts()["succeeded"] == 2
        again.close()
    finally:
        ws.close()
