"""References a new user writes that could never resolve are refused when the
plan is read, with the spelling that works, not at run time or never."""

from __future__ import annotations

from pathlib import Path

import pytest

import argus_lab as al


def _plan(arg: str) -> al.Plan:
    return al.Plan.from_dict(
        {
            "tasks": [
                {"id": "t", "tool": "rows"},
                {"id": "a", "tool": "echo", "args": {"value": arg}},
            ]
        }
    )


@pytest.mark.parametrize(
    ("arg", "hint"),
    [
        ("${t.result.deep[3]}", "${t.result.deep.3}"),
        ("${t.result.rows[0].name}", "${t.result.rows.0.name}"),
        ("${t.result.rows[-1]}", "${t.result.rows.-1}"),
    ],
)
def test_a_bracket_index_is_refused_with_the_dotted_form(arg: str, hint: str) -> None:
    with pytest.raises(al.PlanError) as info:
        _plan(arg)
    assert info.value.problems == [
        f"task 'a' has a bad reference {arg}: a list index is one more path "
        f"part, as in {hint}"
    ]


@pytest.mark.parametrize("arg", ["${t.result", "see ${t.result.x and more"])
def test_an_unclosed_reference_is_refused_not_passed_on_as_text(arg: str) -> None:
    with pytest.raises(al.PlanError, match=r"bad reference \$\{t\.result.*close it"):
        _plan(arg)


def test_the_dotted_index_the_hint_gives_resolves(tmp_path: Path) -> None:
    @al.tool
    def rows() -> dict[str, list[int]]:
        return {"deep": [10, 20, 30, 40]}

    @al.tool
    def echo(value: int) -> int:
        return value

    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(plan=_plan("${t.result.deep.3}"), tools=[rows, echo])
    assert s.run().status == "succeeded"
    assert s.result("a") == 40
    s.close()


def test_text_with_a_dollar_but_no_reference_stays_allowed() -> None:
    assert _plan("costs $5 {net}").task("a").args == {"value": "costs $5 {net}"}
