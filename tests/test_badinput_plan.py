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


# -- HTN domains with bugs ------------------------------------------------------


@al.tool
def op(a: int) -> int:
    return a


def _buggy_domain(*, lazy: bool) -> al.HTNDomain:
    d = al.HTNDomain("buggy")
    d.operator("op", tool=op)
    d.compound("later", lazy=lazy)

    @d.method("top")
    def top(ctx: object) -> list[tuple[object, ...]]:
        return [("op", 1), ("later",)]

    @d.method("later")
    def lookup(ctx: object) -> list[tuple[object, ...]]:
        return [("op", {"x": 1}["y"])]  # the bug: a KeyError

    return d


def test_a_method_that_raises_is_named_with_its_task() -> None:
    with pytest.raises(al.PlanError) as info:
        al.HTNPlanner(_buggy_domain(lazy=False)).plan(("top",))
    assert info.value.message == (
        "method 'lookup' of later() raised KeyError: 'y' (a bug in the domain: "
        "fix the method, or raise NotApplicable / return None when it does not "
        "apply)"
    )
    assert isinstance(info.value.__cause__, KeyError)  # the traceback is kept


def test_a_lazy_method_that_raises_fails_its_task_not_the_run(tmp_path: Path) -> None:
    # Before: a bare KeyError escaped s.run().
    d = _buggy_domain(lazy=True)
    planner = al.HTNPlanner(d)
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=planner.plan(("top",)),
        tools=[op],
        planner=planner,
        name="buggy",
    )
    r = s.run()
    assert r.status == "failed"
    assert "top/later: method 'lookup' of later() raised KeyError: 'y'" in r.reason
    assert s.result("top/op") == 1  # what ran before stays committed
    s.close()
    assert ws.open("buggy", tools=[]).record("top/op").status == "succeeded"


def test_a_method_that_recurses_forever_is_stopped_and_named() -> None:
    """What held: the search gives up, names the task and how to allow more."""
    d = al.HTNDomain("loop")

    @d.method("again")
    def again(ctx: object, n: int) -> list[tuple[object, ...]]:
        return [("again", n + 1)]

    with pytest.raises(al.PlanError) as info:
        al.HTNPlanner(d, max_expansions=500).plan(("again", 0))
    assert info.value.message.startswith(
        "HTN search gave up after 500 method calls at again(500): does a method "
        "recurse forever?"
    )


# -- keys from other plan formats, and typos ------------------------------------


@pytest.mark.parametrize(
    ("task", "problem"),
    [
        (
            "{id: a, tool: x, dependencies: [t]}",
            "task 'a'.dependencies: unknown key; did you mean 'deps'?",
        ),
        (
            "{id: a, tool: x, depends_on: [t]}",
            "task 'a'.depends_on: unknown key; did you mean 'deps'?",
        ),
        (
            "{id: a, tool: x, arguments: {n: 1}}",
            "task 'a'.arguments: unknown key; did you mean 'args'?",
        ),
        (
            "{id: a, tool: x, retires: 2}",
            "task 'a'.retires: unknown key; did you mean 'retries'?",
        ),
        (
            "{id: a, tool: x, colour: red}",
            "task 'a'.colour: unknown key; allowed: id, title, description, kind, "
            "tool, args, deps,",
        ),
    ],
)
def test_an_unknown_task_key_gets_the_key_it_meant(task: str, problem: str) -> None:
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_yaml(f"tasks:\n  - {{id: t, tool: x}}\n  - {task}\n")
    assert f"<plan text>:3: {problem}" in info.value.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "goal: g\ntask:\n  - {id: t, tool: x}\n",
            "a plan needs a 'tasks' list (each task with an id and a tool); "
            "'task': unknown key; did you mean 'tasks'?",
        ),
        (
            "goal: g\nsteps:\n  - {id: t, tool: x}\n",
            "'steps': unknown key; did you mean 'tasks'?",
        ),
        (
            "goal: g\ntasks: []\nconstrains: [cheap]\n",
            "constrains: unknown key; did you mean 'constraints'?",
        ),
    ],
)
def test_an_unknown_plan_key_gets_the_key_it_meant(text: str, expected: str) -> None:
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_yaml(text)
    assert expected in info.value.message


def test_a_dict_plan_gets_the_same_hint() -> None:
    with pytest.raises(
        al.PlanError, match=r"task 't'\.needs: unknown key; did you mean 'deps'\?"
    ):
        al.Plan.from_dict({"tasks": [{"id": "t", "tool": "x", "needs": []}]})


# -- budgets ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("max_cost", "did you mean 'max_cost_usd'? "),
        ("max_wall_seconds", "did you mean 'max_wall_s'? "),
        ("max_stepz", "did you mean 'max_steps'? "),
        ("colour", ""),
    ],
)
def test_a_budget_with_an_unknown_limit_names_the_one_it_meant(
    key: str, meant: str
) -> None:
    with pytest.raises(ValueError) as info:
        al.Budget(**{key: 5})
    assert (
        f"Budget has no limit {key!r}; {meant}(the limits are max_cost_usd, "
        "max_tokens, max_wall_s, max_steps)"
    ) in str(info.value)


def test_a_task_budget_typo_in_a_plan_file_gets_the_same_hint() -> None:
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_yaml("tasks:\n  - {id: a, tool: x, budget: {max_cost: 1}}\n")
    assert "task 'a'.budget" in info.value.message
    assert "did you mean 'max_cost_usd'?" in info.value.message


# -- ids with dots and slashes ---------------------------------------------------


@pytest.mark.parametrize(("tid", "reads_as"), [("x.result", "x"), ("a.result.b", "a")])
def test_an_id_a_reference_would_split_is_refused(tid: str, reads_as: str) -> None:
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_dict({"tasks": [{"id": tid, "tool": "x"}]})
    assert info.value.problems == [
        f"task id {tid!r} cannot be referenced: ${{{tid}.result}} reads as the "
        f"result of task {reads_as!r}; rename it (e.g. "
        f"{tid.replace('.result', '_result')!r})"
    ]


@pytest.mark.parametrize("tid", ["a.b", "a/b", "a:b", "env", "env.X", "fetch.results"])
def test_ids_with_dots_slashes_and_colons_resolve(tmp_path: Path, tid: str) -> None:
    """What held: these ids are referenced and resolved like any other."""

    @al.tool
    def val(v: str = "base") -> dict[str, str]:
        return {"k": v}

    plan = {
        "tasks": [
            {"id": tid, "tool": "val"},
            {"id": "use", "tool": "val", "args": {"v": f"${{{tid}.result.k}}"}},
        ]
    }
    s = al.Workspace(tmp_path / "ws").new_session(plan=plan, tools=[val])
    assert s.run().status == "succeeded"
    assert s.result("use") == {"k": "base"}
    s.close()


def test_replan_without_a_planner_says_why_the_task_just_failed(
    tmp_path: Path,
) -> None:
    # Before: the failure read "a: nope", as if on_failure: replan were not there.
    @al.tool
    def boom() -> int:
        raise al.ToolError("nope")

    ws = al.Workspace(tmp_path / "ws")
    plan = {"tasks": [{"id": "a", "tool": "boom", "on_failure": "replan"}]}
    s = ws.new_session(plan=plan, tools=[boom])
    r = s.run()
    assert r.status == "failed"
    assert s.record("a").error == (
        "nope (on_failure is 'replan', but the session has no planner that "
        "replans: pass planner=al.LLMPlanner(model) to ws.new_session or ws.open)"
    )
    s.close()


def test_a_fallback_to_the_same_tool_is_refused() -> None:
    # Before: accepted, and the task failed with no fallback tried.
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_dict(
            {
                "tasks": [
                    {"id": "a", "tool": "x", "on_failure": "fallback", "fallback": "x"}
                ]
            }
        )
    assert info.value.problems == [
        "task 'a' falls back to its own tool 'x', which would fail the same way; "
        "name another tool as its fallback"
    ]
