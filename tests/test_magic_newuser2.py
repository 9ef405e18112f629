"""%%argus bodies meant as plans are never sent to a planner as goal text.

A YAML plan with ``task:`` for ``tasks:`` (or ``steps:``, or a broken
``goal:`` line) was taken for goal text and planned by the LLM planner: with
no API key an unrelated key error, with one a paid plan of a typo. And ``-o``
bound a Session to a namespace key no code can read (``-o 5``).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import argus_lab as al
from argus_lab.llm.testing import FunctionModel
from tests.conftest import fresh_shell


@pytest.fixture
def ip(shell: InteractiveShell, tmp_path: Path) -> Iterator[InteractiveShell]:
    fresh_shell(shell, tmp_path / "ws")
    calls: list[object] = []

    def plan_it(request: object) -> str:
        calls.append(request)
        # An Argus error, so %%argus reports "planning failed" (a plain
        # exception would escape as it is).
        raise al.ArgusError("the scripted model plans nothing")

    shell.user_ns["calls"] = calls
    shell.user_ns["scripted"] = FunctionModel(plan_it, name="scripted")
    shell.run_cell(
        "import argus_lab as al\n@al.tool\ndef add(a: int) -> int:\n    return a\n"
    ).raise_error()
    yield shell


def _cell(ip: InteractiveShell, line: str, body: str) -> object:
    return ip.run_cell_magic("argus", line, textwrap.dedent(body))


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (
            "goal: g\ntask:\n  - {id: a, tool: add, args: {a: 1}}\n",
            "(did you mean 'tasks' for 'task'?)",
        ),
        (
            "goal: g\nsteps:\n  - {id: a, tool: add, args: {a: 1}}\n",
            "(did you mean 'tasks' for 'steps'?)",
        ),
        (
            "goal: g\nwork:\n  - {id: a, tool: add, args: {a: 1}}\n",
            "('work' lists tasks: name that key 'tasks')",
        ),
        ("goal: g\nconstraints: [fast]\n", "(it has 'goal' and 'constraints')"),
    ],
)
def test_a_plan_without_tasks_is_refused_not_planned(
    ip: InteractiveShell, body: str, why: str
) -> None:
    with pytest.raises(UsageError) as e:
        _cell(ip, "typo --model scripted", body)
    assert str(e.value).startswith(
        f"%%argus: the body is a YAML mapping with no 'tasks' list {why}, "
    )
    assert "pass --planner llm to plan it as it is" in str(e.value)
    assert ip.user_ns["calls"] == []  # no model was asked
    assert al.Workspace(ip.user_ns["ws_dir"]).sessions() == []


def test_a_broken_goal_line_is_a_yaml_error_not_a_goal(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="the plan is not valid YAML"):
        _cell(ip, "broken --model scripted", "goal: [unclosed\n")
    assert ip.user_ns["calls"] == []


def test_goal_text_that_parses_as_yaml_still_goes_to_the_planner(
    ip: InteractiveShell,
) -> None:
    # Prose with a colon is a one-key mapping to YAML: still goal text.
    with pytest.raises(UsageError, match="planning failed"):
        _cell(ip, "prose --model scripted", "Analyse: the penguins, then report\n")
    assert len(ip.user_ns["calls"]) >= 1
    # And --planner llm takes any body as the goal, as it says.
    before = len(ip.user_ns["calls"])
    with pytest.raises(UsageError, match="planning failed"):
        _cell(ip, "asis --planner llm --model scripted", "goal: g\ntask: [x]\n")
    assert len(ip.user_ns["calls"]) > before


@pytest.mark.parametrize("var", ["5", "my-session", "class"])
def test_o_takes_a_variable_name(ip: InteractiveShell, var: str) -> None:
    plan = "goal: g\ntasks:\n  - {id: a, tool: add, args: {a: 1}}\n"
    with pytest.raises(UsageError) as e:
        _cell(ip, f"named -o {var}", plan)
    assert str(e.value) == (
        f"%%argus: -o takes a Python variable name to bind the Session to, got {var!r}"
    )
    assert var not in ip.user_ns
    with pytest.raises(UsageError, match="-o takes a Python variable name"):
        ip.run_line_magic("argus", f"open named -o {var}")
    assert _cell(ip, "named -o ok", plan).session is ip.user_ns["ok"]
