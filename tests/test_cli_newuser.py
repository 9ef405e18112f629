"""What a new user of ``argus`` met, pinned: each printed hint works as printed,
and each mistake is one line with exit 2, never a traceback.

Found by installing the package in a fresh venv and following the README.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from argus_lab.cli import main

TOOLS = """\
import argus_lab as al

@al.tool
def add(a: int, b: int = 1) -> int:
    return a + b

@al.tool(side_effect="write", idempotent=True)
def send(to: str) -> str:
    return "sent " + to
"""
SECRET_NAME = "sk-ant-api03-" + "A" * 40


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    tools = tmp_path / "user_tools.py"
    tools.write_text(TOOLS)
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "goal: mail\ntasks:\n  - {id: one, tool: add, args: {a: 1}}\n"
        "  - {id: mail, tool: send, args: {to: bob}, deps: [one]}\n"
    )
    return tmp_path / "ws", plan, tools


def _cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "plan.yaml", "--tools", "t.py", "--name", SECRET_NAME],
        ["demo", "--name", SECRET_NAME],
        ["fork", "s", "--at", "a", "--name", SECRET_NAME],
    ],
    ids=["run", "demo", "fork"],
)
def test_a_session_name_that_looks_like_a_secret_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # Before: a ValueError traceback from the workspace (and exit 1).
    code, _, err = _cli(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and "looks like a secret" in err
    assert SECRET_NAME not in err  # not echoed back either


def test_a_name_holding_a_secret_env_value_is_refused(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    files: tuple[Path, Path, Path],
) -> None:
    ws, plan, tools = files
    monkeypatch.setenv("MY_SERVICE_TOKEN", "hunter2hunter2")
    code, _, err = _cli(
        capsys, "-w", ws, "run", plan, "--tools", tools, "--name", "hunter2hunter2"
    )
    assert code == 2 and "looks like a secret" in err
    assert not ws.exists()  # refused before anything was made


def test_a_taken_name_is_bad_input_and_says_how_to_go_on(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path, Path]
) -> None:
    ws, plan, tools = files
    args = ("-w", ws, "run", plan, "--tools", tools, "--yes", "--name")
    assert _cli(capsys, *args, "dup")[0] == 0
    # Before: exit 4 ("other Argus error") and a hint in Python (ws.open('dup')).
    code, _, err = _cli(capsys, *args, "dup")
    assert code == 2
    assert "a session named 'dup' already exists" in err
    assert "`argus resume dup`" in err and "ws.open" not in err
    code, _, err = _cli(
        capsys, "-w", ws, "fork", "dup", "--at", "mail", "--name", "dup"
    )
    assert code == 2 and "give --name another name" in err
