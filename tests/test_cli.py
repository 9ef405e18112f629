"""The argus command: run, ls, show, resume, demo, and its exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from argus_lab.cli import main

TOOLS_PY = """
import argus_lab as al

@al.tool
def add(a: int, b: int = 1) -> dict:
    return {"sum": a + b}

@al.tool
def boom() -> None:
    raise RuntimeError("no luck")
"""

PLAN = """
goal: add things
tasks:
  - id: one
    tool: add
    args: {a: 1}
  - id: two
    tool: add
    args: {a: "${one.result.sum}", b: 5}
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    tools = tmp_path / "mytools.py"
    tools.write_text(TOOLS_PY)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    return tmp_path / "ws", plan, tools


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_run_ls_show_resume(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, plan, tools = files
    code, out, _ = run(
        capsys,
        "-w",
        str(ws),
        "run",
        str(plan),
        "--tools",
        str(tools),
        "--name",
        "adder",
        "--json",
    )
    assert code == 0
    assert json.loads(out)["status"] == "succeeded"
    code, out, _ = run(capsys, "-w", str(ws), "ls", "--json")
    assert [s["name"] for s in json.loads(out)] == ["adder"]
    code, out, _ = run(capsys, "-w", str(ws), "show", "adder", "--json", "--events")
    shown = json.loads(out)
    assert [t["status"] for t in shown["tasks"]] == ["succeeded", "succeeded"]
    assert shown["events"][-1]["kind"] == "session_succeeded"
    code, out, _ = run(capsys, "-w", str(ws), "show", "adder")
    assert code == 0 and "one" in out and "succeeded" in out
    code, out, _ = run(capsys, "-w", str(ws), "resume", "adder", "--tools", str(tools))
    assert code == 0 and "succeeded" in out


def test_failed_session_exits_1_with_reason(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, plan, tools = files
    plan.write_text("goal: fail\ntasks:\n  - id: b\n    tool: boom\n")
    code, out, _ = run(capsys, "-w", str(ws), "run", str(plan), "--tools", str(tools))
    assert code == 1 and "no luck" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "missing.yaml", "--tools", "x.py"], "does not exist"),
        (["show", "nobody"], "no session 'nobody'"),
        (["resume", "nobody", "--tools", "mytools.py"], "no session"),
        (["run", "PLAN", "--tools", "no_such_module_xyz"], "cannot import module"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    files: tuple[Path, Path, Path],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    needle: str,
) -> None:
    ws, plan, tools = files
    argv = [
        str(plan) if a == "PLAN" else str(tools) if a == "mytools.py" else a
        for a in argv
    ]
    code, _, err = run(capsys, "-w", str(ws), *argv)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) <= 3


def test_plan_errors_exit_2(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, plan, tools = files
    plan.write_text("goal: x\ntasks:\n  - id: a\n    tool: teleport\n")
    code, _, err = run(capsys, "-w", str(ws), "run", str(plan), "--tools", str(tools))
    assert code == 2 and "known tools: add, boom" in err


def test_usage_errors_from_argparse_exit_2(tmp_path: Path) -> None:
    for argv in (["run"], ["frobnicate"], []):
        p = subprocess.run(
            [sys.executable, "-m", "argus_lab.cli", *argv],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert p.returncode == 2, argv


def test_demo_runs_offline_and_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "-w", str(tmp_path / "ws"), "demo", "--name", "d")
    assert code == 0
    assert "35 succeeded" in out
    assert "transient failures retried: citation" in out
    report = next((tmp_path / "ws" / "files").glob("*/report.md"))
    assert "Palmer" in report.read_text() or "penguin" in report.read_text().lower()
    code, out, _ = run(capsys, "-w", str(tmp_path / "ws"), "resume", "d")
    assert code == 0
