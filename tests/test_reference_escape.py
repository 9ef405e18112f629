"""``$${`` passes a literal ``${`` to a tool (docker-compose's escape).

Without it ``echo ${HOME}`` in a shell tool's argument was refused as a bad
reference, with no way to write it. The rule is one module's
(``plan/_refs.py``): validation, resolution, hashing, HTN expansion and the
plan's stored text must all read it the same way.
"""

from __future__ import annotations

from typing import Any

import pytest

import argus_lab as al
from argus_lab.errors import PlanError
from argus_lab.plan.graph import iter_references, resolve_args, validate_plan
from argus_lab.plan.htn import _resolve
from tests.conftest import BASIC_TOOLS


def _plan(args: dict[str, Any]) -> dict[str, Any]:
    return {
        "goal": "escape",
        "tasks": [
            {"id": "a", "tool": "add", "args": {"a": 41}},
            {"id": "b", "tool": "echo", "args": args},
        ],
    }


@pytest.mark.parametrize(
    ("written", "received"),
    [
        ("echo $${HOME}", "echo ${HOME}"),
        ("$${a.result.sum}", "${a.result.sum}"),  # whole: still text, no type
        ("$${env.HOME} and $${", "${env.HOME} and ${"),
        ("cost: $$${a.result.sum}", "cost: $42"),  # a "$" before a reference
        ("$$$${a.result.sum}", "$${a.result.sum}"),
        ("echo $$ $HOME", "echo $$ $HOME"),  # no "{": as written, as before
        ("${a.result.sum}$${x}", "42${x}"),
    ],
)
def test_an_escaped_reference_reaches_the_tool_as_written_once(
    ws: al.Workspace, written: str, received: str
) -> None:
    with ws.new_session(
        plan=_plan({"value": written}), tools=BASIC_TOOLS, name="esc"
    ) as s:
        assert s.run().status == "succeeded"
        assert s.result("b") == received
        assert s.stale() == []
    with ws.open("esc", tools=BASIC_TOOLS) as s:  # hashed alike after a reopen
        assert s.stale() == []


def test_an_escaped_reference_is_no_dependency_and_no_environment_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ESC_TOKEN", "s3cret-value-0123456789")
    plan = validate_plan(
        al.Plan.from_dict(_plan({"value": "$${a.result} $${env.ESC_TOKEN}"}))
    )
    assert plan.tasks[1].deps == []
    assert list(iter_references(plan.tasks[1].args)) == []
    assert resolve_args(plan.tasks[1].args, lambda t: 1 / 0) == {
        "value": "${a.result} ${env.ESC_TOKEN}"
    }


def test_an_unescaped_bad_reference_is_still_refused() -> None:
    with pytest.raises(PlanError, match=r"bad reference \$\{HOME\}") as e:
        validate_plan(al.Plan.from_dict(_plan({"value": "echo ${HOME}"})))
    assert "or $${ for a literal ${ (as in 'echo $${HOME}')" in e.value.message
    with pytest.raises(PlanError, match=r"close it with '\}'"):
        validate_plan(al.Plan.from_dict(_plan({"value": "echo $$${HOME"})))


def test_a_yaml_plan_keeps_the_escape_until_the_tool_runs() -> None:
    plan = al.Plan.from_yaml(
        "goal: g\ntasks:\n"
        "  - id: b\n    tool: echo\n    args:\n      value: echo $${HOME}\n"
    )
    assert plan.tasks[0].args == {"value": "echo $${HOME}"}
    again = al.Plan.from_yaml(plan.to_yaml())
    assert again.tasks[0].args == {"value": "echo $${HOME}"}


def test_an_htn_expansion_resolves_results_and_keeps_escapes_for_the_run() -> None:
    out = _resolve("$${x.result} ${y.result.n} ${env.HOME}", {"y": {"n": 2}}, "t")
    assert out == "$${x.result} 2 ${env.HOME}"
    assert resolve_args(out, lambda t: 1 / 0).startswith("${x.result} 2 ")


def test_the_llm_planner_is_told_the_escape() -> None:
    from argus_lab.plan import _llm_prompt

    text = _llm_prompt._FIELD_HELP["args"] + _llm_prompt._SYSTEM
    assert "$${" in text
