"""Plan input at the edges: files that are not files, sizes, duplicate keys, ids.

Complements test_plan_hostile.py: whatever the source, only PlanError escapes,
and nothing blocks (a FIFO, /dev/zero) or reads without bound (a huge file).
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.plan._text import MAX_PLAN_BYTES


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "plan.yaml"
    os.mkfifo(fifo)  # no writer: a plain open() would block forever
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_yaml(fifo)
    assert info.value.message == (
        f"plan file '{fifo}' is a FIFO, not a regular file: save the plan to a file"
    )


@pytest.mark.timeout(20)
def test_a_device_is_refused_without_reading_it() -> None:
    with pytest.raises(al.PlanError, match="is a character device, not a regular"):
        al.Plan.from_yaml(Path("/dev/zero"))


def test_a_symlink_loop(tmp_path: Path) -> None:
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_yaml(loop)
    assert info.value.message == (
        f"cannot read plan file '{loop}': Too many levels of symbolic links"
    )


@pytest.mark.timeout(20)
def test_a_file_over_the_size_limit_is_refused_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:  # sparse: no 8 MiB actually written
        f.truncate(MAX_PLAN_BYTES + 1)
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_yaml(big)
    assert info.value.message == (
        f"plan file '{big}' is {MAX_PLAN_BYTES + 1:,} bytes: a plan may be at most "
        f"{MAX_PLAN_BYTES:,} bytes (keep large data in files the tools read)"
    )


@pytest.mark.timeout(20)
def test_text_and_dicts_over_the_size_limit_are_refused() -> None:
    huge = "a" * (MAX_PLAN_BYTES + 1)
    with pytest.raises(al.PlanError, match=r"plan text is 8,388,6\d\d characters"):
        al.Plan.from_yaml(f"goal: '{huge}'\ntasks: []\n")
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_dict({"goal": huge, "tasks": []})
    assert info.value.message == (
        "the plan holds more than 8,388,608 characters of text: keep large data in "
        "files the tools read"
    )


def test_file_objects_get_a_hint() -> None:
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_yaml(io.StringIO("tasks: []"))  # type: ignore[arg-type]
    assert info.value.message == (
        "Plan.from_yaml takes YAML/JSON text or a file path, got StringIO: pass "
        "f.read() or the file's path"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "tasks: [{id: a, id: b, tool: x}]\n",
            "<plan text>:1: the plan is not valid YAML: the key 'id' is written "
            "twice in one mapping (the first one would be lost)",
        ),
        (
            "goal: g\ntasks: []\ngoal: h\n",
            "<plan text>:3: the plan is not valid YAML: the key 'goal' is written "
            "twice",
        ),
        (
            "tasks:\n  - id: a\n    tool: x\n    args: {n: 1, 'n': 2}\n",
            "<plan text>:4: the plan is not valid YAML: the key 'n' is written twice",
        ),
    ],
    ids=["task-id", "top-level", "quoted-args"],
)
def test_duplicate_keys_are_refused(text: str, expected: str) -> None:
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_yaml(text)
    assert info.value.message.startswith(expected)


def test_merge_keys_still_override() -> None:
    p = al.Plan.from_yaml(
        "tasks:\n  - id: a\n    tool: x\n    args: {<<: {n: 1, m: 2}, n: 3}\n"
    )
    assert p.tasks[0].args == {"n": 3, "m": 2}


@pytest.mark.parametrize("tid", ["a b", "é", "${x}", "../x", "a\\b", "-a", "a\n"])
def test_bad_task_ids_say_what_an_id_may_hold(tid: str) -> None:
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_dict({"tasks": [{"id": tid, "tool": "x"}]})
    assert info.value.message == (
        f"invalid plan:\n- task {tid!r}.id: a task id is 1 to 200 letters, digits "
        "and _ . / : - (ASCII), starting with a letter, digit or _"
    )


def _cyclic() -> dict[str, Any]:
    d: dict[str, Any] = {}
    d["me"] = d
    return d


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (math.nan, "task 'root/fetch': args.q: nan is not a JSON number"),
        ({1, 2}, "task 'root/fetch': args.q: a set is not plain data"),
        (b"x", "task 'root/fetch': args.q: a bytes is not plain data"),
        ({1: 2}, "task 'root/fetch': args.q: key 1 is not text"),
        (10**5000, "task 'root/fetch': args.q: an integer too long to store"),
        (_cyclic(), "task 'root/fetch': args.q.me: refers to itself"),
    ],
    ids=["nan", "set", "bytes", "int-key", "huge-int", "cycle"],
)
def test_htn_operator_args_are_checked_like_a_plan_file(
    value: Any, expected: str
) -> None:
    from argus_lab.plan.domain import HTNContext, HTNDomain, Subtask
    from argus_lab.plan.htn import HTNPlanner

    dom = HTNDomain("d")
    dom.operator("fetch", params=["q"])

    @dom.method("root")
    def root(ctx: HTNContext) -> list[Subtask]:
        return [Subtask("fetch", value)]

    with pytest.raises(al.PlanError) as info:
        HTNPlanner(dom).plan("root")
    assert expected in info.value.message


def test_htn_compound_args_may_stay_python_objects() -> None:
    # Only what becomes a stored task (operators, lazy compounds) must be JSON:
    # a method may hand its sub-methods a set, a cycle or a huge integer.
    from argus_lab.plan.domain import HTNContext, HTNDomain, Subtask
    from argus_lab.plan.htn import HTNPlanner

    dom = HTNDomain("d")
    dom.operator("fetch", params=["q"])

    @dom.method("root")
    def root(ctx: HTNContext) -> list[Subtask]:
        return [Subtask("inner", {3, 1, 2}, _cyclic(), 10**5000)]

    @dom.method("inner")
    def inner(ctx: HTNContext, s: set[int], c: Any, n: int) -> list[Subtask]:
        return [Subtask("fetch", sorted(s))]

    plan = HTNPlanner(dom).plan("root")
    assert [t.args for t in plan.tasks] == [{"q": [1, 2, 3]}]


def test_a_file_name_without_a_plan_suffix_gets_a_hint(tmp_path: Path) -> None:
    f = tmp_path / "plan.txt"
    f.write_text("tasks: []\n")
    with pytest.raises(al.PlanError) as info:
        al.Plan.from_yaml(str(f))
    assert info.value.message == (
        f"<plan text>: a plan must be a mapping with 'goal' and 'tasks', got the "
        f"text {str(f)!r} (a file name must end in .yaml, .yml or .json, or be "
        "given as a Path)"
    )
    assert al.Plan.from_yaml(f).tasks == []  # as a Path, any name is a file
