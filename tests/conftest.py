"""Shared fixtures. Every test gets its own workspace; nothing touches ./.argus."""

from __future__ import annotations

from pathlib import Path

import pytest

import argus_lab as al


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A test that forgets to pass a workspace must not write into the checkout.
    monkeypatch.setenv("ARGUS_HOME", str(tmp_path / "argus-home"))


@pytest.fixture
def ws(tmp_path: Path) -> al.Workspace:
    w = al.Workspace(tmp_path / "ws")
    yield w
    w.close()


FAST = {"backoff": (0.001, 0.01)}
"""Session options that keep retry delays negligible in tests."""


@al.tool
def add(a: int, b: int = 1) -> dict[str, int]:
    """Adds two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return {"sum": a + b}


@al.tool
def echo(value: object = None) -> object:
    """Returns its input."""
    return value


@al.tool
def boom(message: str = "boom") -> None:
    """Always fails permanently."""
    raise ValueError(message)


BASIC_TOOLS = [add, echo, boom]
