"""Hostile plan input: whatever a plan file or dict holds, only PlanError escapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import argus_lab as al

VALID = """\
goal: Plan a salon
constraints: [budget under 20k EUR]
tasks:
  - id: pick_city
    tool: pick_city
    args: {region: europe, n: 3}
  - id: book_venue
    tool: book_venue
    args: {city: "${pick_city.result.city}", days: 3}
    deps: [pick_city]
    retries: 2
"""

CASES = {
    "self-referencing list": ("a: &a [*a]\ntasks: *a\n", "refers to itself"),
    "self-referencing args": (
        "tasks:\n  - &t {id: a, tool: x, args: {me: *t}}\n",
        "<plan text>:2: tasks[0].args.me: refers to itself",
    ),
    "nesting 1,000 deep": (
        "tasks: " + "[" * 1000 + "]" * 1000 + "\n",
        "nested too deeply",
    ),
    "code point past U+10FFFF": (
        'goal: "\\U00110000"\ntasks: []\n',
        "<plan text>:1: the plan is not valid YAML: chr() arg not in range",
    ),
    "4,301-digit integer": (
        "tasks:\n  - id: a\n    tool: x\n    args: {n: " + "9" * 4301 + "}\n",
        "<plan text>:4: the plan is not valid YAML: an integer with more than "
        "4,300 digits; write it as text",
    ),
    "!!binary": (
        "tasks:\n  - id: a\n    tool: x\n    args: {b: !!binary aGVsbG8=}\n",
        "<plan text>:4: the plan is not valid YAML: the tag !!binary is not allowed",
    ),
    "!!set": ("tasks: [{id: a, tool: x, args: {b: !!set {a, b}}}]\n", "!!set"),
    "!!timestamp": (
        "tasks: [{id: a, tool: x, args: {b: !!timestamp 2024-01-01}}]\n",
        "!!timestamp",
    ),
    "!!python/tuple": (
        "tasks: [{id: a, tool: x, args: {b: !!python/tuple [1]}}]\n",
        "!!python/tuple",
    ),
    "!!python/object": (
        "tasks: !!python/object/apply:os.system [echo hi]\n",
        "!!python/object/apply:os.system is not allowed",
    ),
    "!!omap": ("tasks: !!omap [{a: 1}]\n", "!!omap"),
    "infinity": (
        "tasks: [{id: a, tool: x, args: {b: .inf}}]\n",
        "inf is not a JSON number",
    ),
    "alias bomb": (
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        )
        + "tasks: []\n",
        "an alias bomb",
    ),
    "non-text key": (
        "tasks: [{id: a, tool: x, args: {on: 1}}]\n",
        "key True is not text",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_yaml_raises_plan_error(name: str) -> None:
    text, expected = CASES[name]
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_yaml(text)
    assert expected in info.value.message


def test_an_unquoted_date_stays_text() -> None:
    p = al.Plan.from_yaml("tasks: [{id: a, tool: x, args: {d: 2024-01-01, e: =}}]\n")
    assert p.tasks[0].args == {"d": "2024-01-01", "e": "="}


def test_files_that_are_not_plans(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").mkdir()
    with pytest.raises(al.PlanError, match="is a folder, not a file"):
        al.Plan.from_yaml(tmp_path / "x.yaml")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"goal: ok\ntasks: []\n# caf\xe9\n")
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_yaml(str(bad))
    assert info.value.message == (
        f"{bad}:3: the plan file is not UTF-8 text (byte 0xe9 at offset 24); "
        "save it as UTF-8"
    )
    with pytest.raises(al.PlanError, match="does not exist"):
        al.Plan.from_yaml(tmp_path / "missing.yml")
    with pytest.raises(al.PlanError, match="cannot read plan file"):
        al.Plan.from_yaml("a\x00b.yaml")
    typo = tmp_path / "typo.yaml"
    typo.write_text(VALID.replace("retries: 2", "retries: two"))
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_yaml(typo)
    assert f"{typo}:7: task 'book_venue'.retries: Input should be a valid integer" in (
        info.value.message
    )


@pytest.mark.parametrize("value", [None, b"tasks: []", 3, ["tasks"], object()])
def test_not_text_nor_path(value: Any) -> None:
    with pytest.raises(al.PlanError):
        al.Plan.from_yaml(value)
    with pytest.raises(al.PlanError):
        al.Plan.from_dict(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (10**5000, "an integer too long to store"),
        ("\ud800", "lone surrogate"),
        (float("nan"), "nan is not a JSON number"),
        (b"x", "a bytes is not plain data"),
        ({1, 2}, "a set is not plain data"),
        ({1: 2}, "key 1 is not text"),
    ],
    ids=["huge-int", "surrogate", "nan", "bytes", "set", "int-key"],
)
def test_dict_values_json_cannot_hold(value: Any, expected: str) -> None:
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_dict({"tasks": [{"id": "a", "tool": "x", "args": {"v": value}}]})
    assert f"tasks[0].args.v: {expected}" in info.value.message or expected in (
        info.value.message
    )


def test_a_cycle_in_a_dict() -> None:
    args: dict[str, Any] = {}
    args["me"] = args
    with pytest.raises(al.PlanError, match="refers to itself"):
        al.Plan.from_dict({"tasks": [{"id": "a", "tool": "x", "args": args}]})


# -- property tests: mutated plans and mutated YAML ---------------------------------

HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.just(10**5000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)),
    st.binary(max_size=8),
    st.sets(st.integers(), max_size=3),
    st.builds(object),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(
        st.one_of(st.text(max_size=5), st.integers()), st.integers(), max_size=3
    ),
    st.recursive(
        st.one_of(st.none(), st.integers(), st.text(max_size=5)),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=20,
    ),
)


def _paths(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, (*path, i))
    return out


def _base() -> dict[str, Any]:
    import yaml

    data: dict[str, Any] = yaml.safe_load(VALID)
    return data


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_plans_raise_only_plan_error(data: st.DataObject) -> None:
    plan = _base()
    for _ in range(data.draw(st.integers(1, 3))):
        paths = _paths(plan)
        path = data.draw(st.sampled_from(paths))
        value = data.draw(HOSTILE)
        if not path:
            plan = value
            break
        parent = plan
        for p in path[:-1]:
            parent = parent[p]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            parent[data.draw(st.one_of(st.text(max_size=8), st.integers()))] = value
        else:
            parent[path[-1]] = value
        if data.draw(st.booleans()) and isinstance(value, dict):
            value["loop"] = plan  # a cycle, as a YAML anchor inside itself makes
            break
    try:
        accepted = al.Plan.from_dict(plan)
    except al.PlanError:
        return
    accepted.model_dump_json()  # whatever is accepted can be stored as JSON


SNIPPETS = st.sampled_from(
    [
        "&a ",
        "*a",
        "!!binary ",
        "!!set ",
        "!!timestamp ",
        "!!python/tuple ",
        "!!float ",
        "!!str ",
        "!!map ",
        "!!omap ",
        "[",
        "]",
        "{",
        "}",
        ": ",
        "- ",
        "\n",
        "\n  ",
        "\t",
        '"\\U00110000"',
        '"\\ud800"',
        "9" * 4301,
        ".inf",
        ".nan",
        "<<: *a\n",
        "? ",
        "|\n",
        ">\n",
        "%YAML 1.1\n---\n",
        "---\n",
        "...\n",
        "#",
        "'",
        '"',
        ",",
        "\x00",
        "\x85",
        "\ufeff",
        "\U0001f600",
        "${",
        "${x.result}",
        "[" * 200,
        "yes",
        "on",
        "~",
        "0x1F",
        "1e400",
        "-",
        "=",
        "!",
        "&",
        "*",
    ]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_yaml_raises_only_plan_error(data: st.DataObject) -> None:
    text = VALID
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        op = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = data.draw(st.one_of(SNIPPETS, st.text(max_size=3)))
        j = min(len(text), i + data.draw(st.integers(0, 6)))
        if op == "insert":
            text = text[:i] + piece + text[i:]
        elif op == "delete":
            text = text[:i] + text[j:]
        else:
            text = text[:i] + piece + text[j:]
    try:
        accepted = al.Plan.from_yaml(text)
    except al.PlanError:
        return
    assert al.Plan.model_validate_json(accepted.model_dump_json()) == accepted


def test_argus_run_says_what_is_wrong_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from argus_lab.cli import main

    tools = tmp_path / "tl.py"
    tools.write_text(
        "import argus_lab as al\n\n@al.tool\ndef x() -> int:\n    return 1\n"
    )
    (tmp_path / "x.yaml").mkdir()
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"goal: \xff\ntasks: []\n")
    ws = str(tmp_path / "ws")
    for path, said in [
        (tmp_path / "x.yaml", "is a folder, not a file: name the YAML file in it"),
        (bad, "1: the plan file is not UTF-8 text (byte 0xff at offset 6); save it"),
    ]:
        assert main(["-w", ws, "run", str(path), "--tools", str(tools)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err and err.startswith("argus run: ")
