"""argus_lab.errors: the tree drawn in the module docstring is the real one, every
class is raised somewhere, and the groups catch their members."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import argus_lab as al
from argus_lab import errors

PACKAGE = Path(errors.__file__).parent
GROUPS = {"ArgusError", "StorageError"}
"""Raised through their subclasses only."""


def drawn_tree() -> dict[str, str | None]:
    """Class name -> its parent, as the docstring draws it."""
    doc = errors.__doc__ or ""
    block = doc.split("```")[1]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        m = re.match(r"^([│ ]*)(?:[├└]── )?([A-Z]\w+)\s", line + " ")
        if not m or "[" in line.split(m.group(2))[0]:
            continue
        depth = len(m.group(1)) // 4 + (1 if "──" in line[: m.end(2)] else 0)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[m.group(2)] = stack[-1][1] if stack else None
        stack.append((depth, m.group(2)))
    return parents


def test_the_docstring_draws_the_real_tree() -> None:
    drawn = drawn_tree()
    real = {
        name: (None if cls is errors.ArgusError else cls.__bases__[0].__name__)
        for name in errors.__all__
        if isinstance(cls := getattr(errors, name), type)
    }
    assert drawn == real


def test_every_error_is_public_and_raised_somewhere() -> None:
    assert set(errors.__all__) <= set(al.__all__)
    source = "\n".join(
        p.read_text() for p in PACKAGE.rglob("*.py") if p.name != "errors.py"
    )
    for name in errors.__all__:
        if name in GROUPS:
            continue
        assert re.search(rf"\b{name}\(", source), f"{name} is never raised"


def test_groups_catch_their_members() -> None:
    with pytest.raises(al.StorageError):
        raise al.CorruptCheckpointError("damaged", key="meta")
    with pytest.raises(al.PlanError):
        raise al.UnresolvedReferenceError("no value")
    with pytest.raises(al.ToolError):
        raise al.ToolArgumentsError("bad")
    e = al.PlanError("invalid", problems=["a", "b"])
    assert e.problems == ["a", "b"] and al.PlanError("x").problems == []


def test_a_plan_error_lists_its_problems() -> None:
    with pytest.raises(al.PlanError) as e:
        al.Plan.from_dict(
            {
                "tasks": [
                    {"id": "a", "tool": "t", "deps": ["z"]},
                    {"id": "b", "tool": "t", "deps": ["y"]},
                ]
            }
        )
    assert len(e.value.problems) == 2 and all(
        p in e.value.message for p in e.value.problems
    )


def test_bad_tool_arguments_are_a_tool_error() -> None:
    @al.tool
    def add(a: int) -> int:
        return a

    with pytest.raises(al.ToolArgumentsError, match="add"):
        add.validate({"a": "many"})
