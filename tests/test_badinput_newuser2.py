"""What a new user gets wrong with tools and budgets, refused early and in words.

Found by trying: a lambda as a tool, an async generator, ``*args``, a tool
returning numpy values, a budget of -1, NaN, True or 1.5 tokens. Each is
refused where it is written (not at the session's creation, nor as pydantic's
report) with what to do instead; numpy scalars are stored as the numbers they
hold.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import argus_lab as al

ONE = {"goal": "g", "tasks": [{"id": "a", "tool": "add", "args": {"a": 1}}]}


@al.tool
def add(a: int, b: int = 0) -> int:
    return a + b


def test_a_lambda_or_a_bad_name_says_how_to_name_the_tool() -> None:
    with pytest.raises(ValueError) as e:
        al.tool(lambda x: x)
    assert str(e.value).endswith(
        ": a lambda has no name of its own, give it one: "
        "al.tool(lambda ...: ..., name='my_tool')"
    )
    assert al.tool(lambda x: x, name="ident")(3) == 3  # as it says

    def f(x: int) -> int:
        return x

    with pytest.raises(ValueError) as e:
        al.tool(f, name="two words")
    # The name was given: no advice to give one.
    assert str(e.value) == (
        "tool name 'two words' must be 1-64 letters, digits, '_' or '-'"
    )


def test_tools_a_task_cannot_call_are_refused_when_made() -> None:
    def spread(*args: int) -> int:
        return sum(args)

    with pytest.raises(TypeError, match=r"takes \*args, which a task cannot fill"):
        al.tool(spread)

    async def stream() -> Any:
        yield 1

    with pytest.raises(TypeError, match=r"is an async generator function: .* list"):
        al.tool(stream)


def test_a_kwargs_tool_takes_any_named_argument(ws: al.Workspace) -> None:
    def collect(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    plan = {"goal": "k", "tasks": [{"id": "k", "tool": "collect", "args": {"z": 1}}]}
    with ws.new_session(plan=plan, tools=[al.tool(collect)], name="kw") as s:
        assert s.run().status == "succeeded"
        assert s.result("k") == {"z": 1}


@al.tool
def scalars() -> dict[str, Any]:
    return {
        "n": np.int64(3),
        "ok": np.bool_(True),
        "half": np.float32(0.5),
        "day": np.datetime64("2024-01-02"),
        "listed": [np.int8(1), np.uint64(2)],
    }


@al.tool
def array() -> Any:
    return np.arange(6).reshape(2, 3)


def test_numpy_scalars_are_stored_as_numbers_and_an_array_says_what_to_return(
    ws: al.Workspace,
) -> None:
    plan = {
        "goal": "np",
        "tasks": [{"id": "s", "tool": "scalars"}, {"id": "arr", "tool": "array"}],
    }
    with ws.new_session(plan=plan, tools=[scalars, array], name="np") as s:
        res = s.run()
        assert res.status == "failed" and list(res.failed) == ["arr"]
        got = s.result("s")
        assert got == {
            "n": 3,
            "ok": True,
            "half": 0.5,
            "day": "2024-01-02",
            "listed": [1, 2],
        }
        assert type(got["n"]) is int and type(got["ok"]) is bool
        rec = s.record("arr")
        assert rec.error_type == "ToolError"
        assert rec.error == (
            "tool 'array' returned a result that is not JSON: a numpy array "
            "(shape (2, 3)) has no JSON form: return arr.tolist(), or a "
            "DataFrame (stored as parquet)"
        )


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        ({"max_cost_usd": -1}, "max_cost_usd must be a number >= 0 (0 allows "
         "nothing; None: no limit), got -1"),
        ({"max_cost_usd": math.nan}, "max_cost_usd must be a number >= 0 (0 "
         "allows nothing; None: no limit), got nan"),
        ({"max_cost_usd": "ten"}, "got 'ten' (str)"),
        ({"max_steps": True}, "max_steps must be a whole number >= 0 (0 allows "
         "nothing; None: no limit), got True (bool)"),
        ({"max_tokens": 1.5}, "max_tokens must be a whole number >= 0"),
        ({"max_wall_s": -math.inf}, "max_wall_s must be a number >= 0"),
    ],
)  # fmt: skip
def test_a_bad_budget_is_one_line_and_nothing_is_written(
    ws: al.Workspace, limits: dict[str, Any], words: str
) -> None:
    with pytest.raises(ValueError) as e:
        ws.new_session(plan=ONE, tools=[add], name="b", budget=limits)
    assert words in str(e.value) and "pydantic" not in str(e.value)
    assert "\n" not in str(e.value)
    assert ws.sessions() == []  # refused before anything was written
    with ws.new_session(plan=ONE, tools=[add], name="ok") as s:
        s.set_budget(max_steps=5)
        with pytest.raises(ValueError) as e2:
            s.set_budget(**limits)
        assert words in str(e2.value) and "\n" not in str(e2.value)
        assert s.info.budgets["session"].max_steps == 5  # kept as it was
    with ws.open("ok", tools=[add]) as again:
        assert again.info.budgets["session"] == al.Budget(max_steps=5)
    # In a plan the same sentence, without pydantic's "Value error, ".
    bad = {"goal": "g", "tasks": [{**ONE["tasks"][0], "budget": limits}]}
    with pytest.raises(al.PlanError) as e3:
        ws.new_session(plan=bad, tools=[add], name="p")
    (value,) = limits.values()
    if isinstance(value, float) and not math.isfinite(value):
        # A plan is JSON: refused before its budgets are read, by field.
        assert str(e3.value).endswith(
            f"budget.{next(iter(limits))}: {value} is not a JSON number"
        )
    else:
        assert words in str(e3.value) and "Value error" not in str(e3.value)


def test_an_infinite_budget_is_no_limit_and_whole_floats_are_counts(
    ws: al.Workspace,
) -> None:
    with ws.new_session(plan=ONE, tools=[add], name="inf") as s:
        s.set_budget(max_wall_s=math.inf, max_steps=2.0)
        assert s.info.budgets["session"] == al.Budget(max_steps=2)
        assert s.run().status == "succeeded"


def test_tools_given_as_a_folder_says_what_to_give(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from argus_lab.cli import main

    plan = tmp_path / "plan.yaml"
    plan.write_text("goal: g\ntasks:\n  - {id: a, tool: add, args: {a: 1}}\n")
    folder = tmp_path / "mytools"
    folder.mkdir()
    argv = ["-w", str(tmp_path / "ws"), "run", str(plan), "--tools", str(folder)]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"argus run: --tools: {str(folder)!r} is a folder: give a .py file, or a "
        "package's module name (run from the folder that holds it)\n"
    )
    assert not (tmp_path / "ws" / "sessions").exists() or not any(
        (tmp_path / "ws" / "sessions").iterdir()
    )


def test_edited_args_name_the_arguments_a_tool_takes(ws: al.Workspace) -> None:
    with pytest.raises(al.ToolArgumentsError) as e:
        add.validate({"a": 1, "c": 2})
    assert str(e.value) == (
        "tool 'add' got bad arguments: c: unknown argument (accepts: a, b)"
    )
    with pytest.raises(al.ToolArgumentsError) as e:
        add.validate({"b": "x"})
    assert str(e.value) == (
        "tool 'add' got bad arguments: a: missing argument; b: Input should be a "
        "valid integer, unable to parse string as an integer"
    )


def test_events_df_keeps_the_kinds_asked_for_and_refuses_a_kind_that_is_none(
    ws: al.Workspace,
) -> None:
    with ws.new_session(plan=ONE, tools=[add], name="ev") as s:
        s.run()
        full = s.events_df()
        done = s.events_df(kinds="task_succeeded")
        assert list(done["kind"]) == ["task_succeeded"]
        assert (
            done["seq"].tolist()
            == full.loc[full["kind"] == "task_succeeded", "seq"].tolist()
        )
        both = al.analysis.events_df(
            ws, kinds=("task_started", "task_succeeded"), dtype_backend="pyarrow"
        )
        assert list(both["kind"]) == ["task_started", "task_succeeded"]
        assert both.index.tolist() == [0, 1]
        assert full.dtypes.equals(done.dtypes)  # the same columns, kept rows
        assert s.events_df(kinds=[]).empty
        with pytest.raises(ValueError) as e:
            s.events_df(kinds="task_sucesed")
        assert str(e.value) == (
            "'task_sucesed' is no event kind; did you mean 'task_succeeded'? "
            "(the kinds: argus_lab.events.EVENT_KINDS)"
        )
        with pytest.raises(TypeError, match=r"got 5 \(int\)"):
            s.events_df(kinds=5)
        spec = al.analysis.EVENT_COLUMNS.select("seq")
        with pytest.raises(ValueError, match="include 'kind' in columns"):
            s.events_df(kinds="task_started", columns=spec)


def test_a_closed_session_object_says_once_why_it_will_not_run(
    ws: al.Workspace,
) -> None:
    s = ws.new_session(plan=ONE, tools=[add], name="closed")
    assert s.run().status == "succeeded"
    s.close()
    for call in (s.step, s.run):
        with pytest.raises(al.ArgusError) as e:
            call()
        # It said "shut down (interrupted by a shutdown (session closed); no
        # task failed: open the session again and run() to go on); open the
        # session again ... to go on": the pause reason inside the refusal.
        assert str(e.value) == (
            "this Session object is shut down (session closed): open the "
            "session again with ws.open(name, tools=[...]) to go on"
        )
    with ws.open("closed", tools=[add]) as again:  # nothing was lost
        assert again.record("a").status == "succeeded" and again.result("a") == 1


def test_a_reference_into_a_value_that_has_no_keys_says_what_is_there(
    ws: al.Workspace,
) -> None:
    @al.tool
    def echo(value: Any = None) -> Any:
        return value

    plan = {
        "goal": "refs",
        "tasks": [
            {"id": "n", "tool": "add", "args": {"a": 1}},
            {"id": "lst", "tool": "echo", "args": {"value": [1, 2]}},
            {"id": "m", "tool": "echo", "args": {"value": {"k": "hello"}}},
            {"id": "on_n", "tool": "echo", "args": {"value": "${n.result.x}"}},
            {"id": "on_l", "tool": "echo", "args": {"value": "${lst.result.x}"}},
            {"id": "on_m", "tool": "echo", "args": {"value": "${m.result.k.z}"}},
        ],
    }
    with ws.new_session(plan=plan, tools=[add, echo], name="refs") as s:
        assert s.run().status == "failed"
        # It said "cannot look up 'x' in a int from 'n'".
        assert s.record("on_n").error == (
            "${n.result.x}: ${n.result} is an int (1), not a mapping: it has no "
            "'x'; refer to ${n.result} for the value itself"
        )
        assert s.record("on_l").error == (
            "${lst.result.x}: ${lst.result} is a list of 2: look its items up by "
            "index (${lst.result.0}), not by 'x'"
        )
        assert s.record("on_m").error == (
            "${m.result.k.z}: ${m.result.k} is a str ('hello'), not a mapping: it "
            "has no 'z'; refer to ${m.result.k} for the value itself"
        )


def test_run_or_step_beside_a_background_run_is_refused_and_changes_nothing(
    ws: al.Workspace,
) -> None:
    import threading

    from tests.waiting import DEADLINE

    gate, started = threading.Event(), threading.Event()

    @al.tool
    def slow() -> int:
        started.set()
        gate.wait(DEADLINE)
        return 1

    plan = {
        "goal": "bg",
        "tasks": [
            {"id": "a", "tool": "slow"},
            {"id": "b", "tool": "add", "args": {"a": "${a.result}"}},
        ],
    }
    with ws.new_session(plan=plan, tools=[slow, add], name="bg") as s:
        f = s.start()
        try:
            assert started.wait(DEADLINE)
            s.pause("hold on")
            before = [e.kind for e in s.events()]
            for call, name in ((s.run, "run"), (s.step, "step")):
                with pytest.raises(al.SessionStateError) as e:
                    call()
                assert str(e.value) == (
                    f"s.{name}() while a background run of this session goes on "
                    "(s.start(), the widget's Run or %%argus --run): s.wait() "
                    "waits for its result, s.pause() stops it"
                )
            # It committed "paused: nothing can run now" while a ran, and took
            # back the pause asked for, so b ran too.
            assert [e.kind for e in s.events()] == before
            assert s.status == "running"
        finally:
            gate.set()
        res = f.result(DEADLINE)
        assert res.status == "paused" and res.reason == "hold on"
        assert s.record("b").status == "pending"  # the pause held
        assert s.wait() is res
        assert s.run().status == "succeeded"  # once it is over, run() runs


def test_a_plan_indented_with_tabs_says_to_use_spaces() -> None:
    with pytest.raises(al.PlanError) as e:
        al.Plan.from_yaml("goal: g\ntasks:\n\t- {id: a, tool: add}\n")
    assert str(e.value).endswith(
        "found character '\\t' that cannot start any token (YAML indents with "
        "spaces, never tabs: replace the tabs)"
    )
    assert ":3: the plan is not valid YAML" in str(e.value)


def test_an_unknown_task_names_the_one_meant_or_that_there_are_none(
    ws: al.Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    from argus_lab.cli import main

    plan = {
        "goal": "g",
        "tasks": [
            {"id": f"profile/{c}", "tool": "add", "args": {"a": 1}} for c in "xyz"
        ]
        + [{"id": "clean", "tool": "add", "args": {"a": 1}}],
    }
    with ws.new_session(plan=plan, tools=[add], name="p") as s:
        with pytest.raises(KeyError) as e:
            s.retry("clen")
        assert e.value.args[0] == (
            "session 'p' has no task 'clen' (did you mean 'clean'? tasks: "
            "profile/x, profile/y, profile/z, clean)"
        )
    with ws.new_session(plan={"goal": "e", "tasks": []}, tools=[], name="e") as s:
        with pytest.raises(KeyError) as e:
            s.skip("a")
        # It said "(tasks: )".
        assert e.value.args[0] == "session 'e' has no task 'a' (its plan has no tasks)"
    assert main(["-w", str(ws.path), "retry", "p", "cleen"]) == 2
    assert capsys.readouterr().err == (
        "argus retry: session 'p' has no task 'cleen' (did you mean "
        "'clean'? tasks: profile/x, profile/y, profile/z, clean)\n"
    )


@al.tool
def opaque() -> object:
    """Returns an object with no JSON form."""
    return object()


def test_a_result_with_no_json_form_says_what_a_tool_may_return(
    ws: al.Workspace,
) -> None:
    plan = {"goal": "o", "tasks": [{"id": "o", "tool": "opaque"}]}
    with ws.new_session(plan=plan, tools=[opaque], name="opaque") as s:
        assert s.run().status == "failed"
        error = s.record("o").error or ""
        assert "returned a result that is not JSON" in error
        assert "return JSON: text, numbers, lists and dicts of them" in error
