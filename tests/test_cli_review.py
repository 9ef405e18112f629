"""What a second new-user review of ``argus`` found, pinned: edited approval
args checked like ``Session.approve`` checks them, ``--tools NAME`` importable
from the current folder, output that cannot be written, an empty plan, the
serve extra, option help, and the crashed demo's way to finish.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_files, crashed_demo
from tests.conftest import cli_run as _cli

TOOLS = """\
import argus_lab as al

@al.tool
def add(a: int, b: int = 1) -> int:
    return a + b

@al.tool(side_effect="write")
def post(msg: str) -> dict:
    return {"posted": msg}
"""
PLAN = (
    "goal: add and post\ntasks:\n  - {id: one, tool: add, args: {a: 1}}\n"
    "  - {id: tell, tool: post, args: {msg: 'sum ${one.result}'}}\n"
)
README = Path(__file__).parent.parent / "README.md"


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    return cli_files(tmp_path, "review_tools.py", TOOLS, PLAN)


def _paused(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, ...], name: str
) -> None:
    ws, plan, tools = files
    code, _, _ = _cli(capsys, "-w", ws, "run", plan, "--tools", tools, "--name", name)
    assert code == 3  # 'tell' waits for approval


def _status(capsys: pytest.CaptureFixture[str], ws: Path, name: str, task: str) -> str:
    code, out, _ = _cli(capsys, "-w", ws, "show", name, "--json")
    assert code == 0
    return next(t["status"] for t in json.loads(out)["tasks"] if t["task"] == task)


# ------------------------------------------------- 1. approve --args, checked


def test_approve_args_are_checked_against_the_tools_given(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, _, tools = files
    _paused(capsys, files, "ed")
    for edited, says in [
        ('{"msg": 42}', "msg: Input should be a valid string"),
        (
            '{"mssg": "hi"}',
            "msg: missing argument; mssg: unknown argument (accepts: msg)",
        ),
    ]:
        code, _, err = _cli(
            capsys,
            "-w",
            ws,
            "approve",
            "ed",
            "tell",
            "--args",
            edited,
            "--tools",
            tools,
        )
        assert code == 2 and says in err and "nothing was approved" in err, err
        assert len(err.strip().splitlines()) == 1
    assert _status(capsys, ws, "ed", "tell") == "awaiting_approval"
    code, _, err = _cli(
        capsys, "-w", ws, "approve", "ed", "tell", "--args", '{"msg": "hi"}',
        "--tools", ws.parent / "plan.yaml",
    )  # fmt: skip
    assert code == 2 and "--tools" in err
    code, out, _ = _cli(
        capsys, "-w", ws, "approve", "ed", "tell", "--args", '{"msg": "hi"}',
        "--tools", tools, "--json",
    )  # fmt: skip
    assert code == 0 and json.loads(out)["args_checked"] is True
    code, out, _ = _cli(capsys, "-w", ws, "resume", "ed", "--tools", tools, "--json")
    assert code == 0 and json.loads(out)["status"] == "succeeded"


def test_approve_args_unchecked_says_so_and_how_to_check(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, _, _ = files
    _paused(capsys, files, "un")
    for edited in ("[1]", '"hi"', "42"):
        code, _, err = _cli(capsys, "-w", ws, "approve", "un", "tell", "--args", edited)
        assert code == 2 and "must be a JSON object" in err, edited
    code, out, _ = _cli(capsys, "-w", ws, "approve", "un", "tell", "--args", "{}")
    assert code == 0
    assert "replace all of its args" in out and "NOT checked against tool 'post'" in out
    assert "--tools MODULE_OR_FILE" in out


def test_approve_help_says_edited_args_replace_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _cli(capsys, "approve", "--help")
    text = " ".join(out.split())
    assert code == 0 and "REPLACE all of its arguments" in text
    assert "nothing is merged" in text and "--tools MODULE_OR_FILE" in text
    readme = " ".join(README.read_text().split())
    assert "replace all of its arguments, not merged into them" in readme


@pytest.mark.slow
def test_approve_args_of_a_demo_are_checked_against_its_own_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    argv = ["-w", ws, "demo", "--name", "d", "--ask", "--out", tmp_path / "pub"]
    assert _cli(capsys, *argv)[0] == 3
    code, _, err = _cli(
        capsys, "-w", ws, "approve", "d", "write_up/publish", "--args", '{"dest": 5}'
    )
    assert code == 2 and "publish_report" in err and "nothing was approved" in err
    assert _status(capsys, ws, "d", "write_up/publish") == "awaiting_approval"


# ------------------------------------------ 2. --tools NAME from the cwd


def test_tools_by_module_name_import_from_the_current_folder(
    files: tuple[Path, Path, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ws, plan, tools = files
    here = tools.parent
    # As the installed `argus` script starts: its own folder, not the cwd, first.
    monkeypatch.setattr(
        sys, "path", [p for p in sys.path if p not in ("", ".", os.getcwd())]
    )
    monkeypatch.chdir(here)
    before = list(sys.path)
    try:
        code, _, err = _cli(capsys, "-w", ws, "run", plan, "--tools", "review_tools")
        assert code == 3, err  # ran: paused at the approval
        assert sys.path == before  # the cwd was on the path for that import only
    finally:
        sys.modules.pop("review_tools", None)
    (here / "my.tools.py").write_text(TOOLS)
    code, _, err = _cli(capsys, "-w", ws, "run", plan, "--tools", "my.tools")
    assert code == 2 and "did you mean my.tools.py?" in err, err
    (here / "json.py").write_text(TOOLS)  # the standard library's json wins
    code, _, err = _cli(capsys, "-w", ws, "run", plan, "--tools", "json")
    assert code == 2 and "did you mean json.py?" in err, err
    (here / "needs_dep.py").write_text("import no_such_dep_xyz\n")
    try:
        code, _, err = _cli(capsys, "-w", ws, "run", plan, "--tools", "needs_dep")
    finally:
        sys.modules.pop("needs_dep", None)
    assert code == 2 and "needs_dep.py:1" in err and "no_such_dep_xyz" in err


# ------------------------------------------- 3. output that cannot be written


def _argus(ws: Path, *argv: str, **popen: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "argus_lab.cli", "-w", str(ws), *argv],
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        **popen,
    )


def test_a_full_or_closed_stdout_is_one_line_not_a_traceback(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws = files[0]
    _paused(capsys, files, "out")
    full = Path("/dev/full")
    if sys.platform.startswith("linux"):
        assert full.exists()  # CI runs Linux: this test must not skip there
    elif not full.exists():
        pytest.skip("no /dev/full on this system")
    for argv in (["ls"], ["--json", "ls"], ["show", "out"], ["show", "nobody"]):
        with full.open("w") as sink:
            p = _argus(ws, *argv, stdout=sink)
        want = 2 if "nobody" in argv else 4
        assert p.returncode == want, (argv, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, (argv, p.stderr)
        assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr
    with full.open("w") as sink:
        p = _argus(ws, "ls", stdout=sink)
    assert "cannot write the output: No space left on device" in p.stderr
    if os.name == "posix":  # started with stdout closed: `argus ls >&-`
        p = _argus(ws, "ls", preexec_fn=lambda: os.close(1))
        assert p.returncode == 4 and p.stderr.strip().endswith("stdout is closed")


# --------------------------------------------------------- 4. an empty plan


def test_an_empty_plan_says_it_has_no_tasks(
    tmp_path: Path, files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, _, tools = files
    empty = tmp_path / "empty.yaml"
    empty.write_text("goal: nothing\ntasks: []\n")
    code, out, _ = _cli(capsys, "-w", ws, "run", empty, "--tools", tools)
    assert code == 0 and "its plan has no tasks, so nothing ran" in out
    assert not re.search(r":\s*$", out, re.M), out  # no dangling colon


# --------------------------------------------- 5. serve extra, option help


def test_serve_without_its_extra_is_bad_setup_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed
    code, _, err = _cli(capsys, "-w", tmp_path / "ws", "serve", "--port", "0")
    assert code == 2, err
    assert (
        err.startswith("argus serve: needs the 'serve' extra")
        and err.count("argus serve") == 1
    )
    assert "pip install 'argus-lab[serve]'" in err


@pytest.mark.parametrize("command", ["reject", "skip"])
def test_reason_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, command, "--help")
    assert code == 0
    assert re.search(r"--reason REASON\s+why, recorded", out), out


# ------------------------------------------ 6. a crashed demo, finished


@pytest.mark.slow
def test_a_crashed_demo_finishes_as_readme_help_and_hint_say(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = " ".join(README.read_text().split())
    said = readme[readme.index("`--crash-at N` SIGKILLs") :][:220]
    assert "`argus demo --name NAME` finishes it" in said, said
    assert "`argus resume NAME --yes`" in said and "stops at the approval" in said
    code, out, _ = _cli(capsys, "demo", "--help")
    helped = " ".join(out.split())
    assert "finish with `argus demo --name NAME` (or `argus resume NAME --yes`" in (
        helped
    )
    for how in ("demo", "resume"):
        ws = tmp_path / how
        p = crashed_demo(ws, tmp_path / f"pub-{how}", 10)
        hint = p.stdout[p.stdout.index("Then finish the run with:") :]
        demo_line = f"argus demo --name c -w {ws}"
        resume_line = f"argus resume c --yes -w {ws}"
        assert demo_line in hint and resume_line in hint, hint
        line = demo_line if how == "demo" else resume_line
        code, _, err = _cli(capsys, *line.split()[1:])
        assert code == 0, (line, err)
        assert (tmp_path / f"pub-{how}" / "report.md").is_file()
