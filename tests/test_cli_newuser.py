"""What a new user of ``argus`` met, pinned: each printed hint works as printed,
and each mistake is one line with exit 2, never a traceback.

Found by installing the package in a fresh venv and following the README.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from argus_lab.cli import main
from tests.conftest import crashed_demo

TOOLS = """\
import pathlib
import argus_lab as al

@al.tool
def flaky(marker: str) -> str:
    # Fails until the marker file exists: a fault fixed outside the session.
    if not pathlib.Path(marker).exists():
        raise RuntimeError("the marker is missing")
    return "ok"

@al.tool
def add(a: int, b: int = 1) -> int:
    return a + b

@al.tool(side_effect="write", idempotent=True)
def send(to: str) -> str:
    return "sent " + to
"""
SECRET_NAME = "sk-ant-api03-" + "A" * 40
LONG_KEY = "sk-ant-api03-" + "A" * 82


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


def _line(text: str, after: str) -> list[str]:
    """The ``argus ...`` command printed after ``after``, as argv for main()."""
    (line,) = [ln for ln in text.splitlines() if after in ln]
    argv = shlex.split(line.split(after, 1)[1])
    assert argv[0] == "argus"
    return argv[1:]


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "plan.yaml", "--tools", "t.py", "--name", SECRET_NAME],
        ["demo", "--name", SECRET_NAME],
        ["fork", "s", "--at", "a", "--name", SECRET_NAME],
        # As long as a real key (95 characters): over the name rule's 64 too,
        # whose message repeated the name, on stderr and in --json's document.
        ["--json", "run", "plan.yaml", "--tools", "t.py", "--name", LONG_KEY],
    ],
    ids=["run", "demo", "fork", "real-length-json"],
)
def test_a_session_name_that_looks_like_a_secret_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # Before: a ValueError traceback from the workspace (and exit 1).
    code, out, err = _cli(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and "looks like a secret" in err
    assert SECRET_NAME[:20] not in err + out  # not echoed back either


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
    assert "a session named 'dup' already exists" in err and "ws.open" not in err
    resume, rm = re.findall(r"`(argus [^`]*)`", err)
    assert rm == f"argus rm dup -w {ws}"
    assert shlex.split(resume) == [
        *("argus", "resume", "dup", "--tools", str(tools), "-w", str(ws))
    ]
    assert _cli(capsys, *shlex.split(resume)[1:])[0] == 0  # works as printed
    code, _, err = _cli(
        capsys, "-w", ws, "fork", "dup", "--at", "mail", "--name", "dup"
    )
    assert code == 2 and "give --name another name" in err


def test_every_printed_resume_line_works_as_printed(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path, Path]
) -> None:
    """The approve / resume / fork hints name --tools and -w: copied, they run."""
    ws, plan, tools = files
    code, out, _ = _cli(capsys, "-w", ws, "run", plan, "--tools", tools, "--name", "m")
    assert code == 3  # paused for the write tool's approval
    # The runtime's reason says "call s.approve('mail') or s.reject(...)": in a
    # terminal there is no `s`, so the CLI says it in argus lines.
    assert "s.approve(" not in out and "s.reject(" not in out
    assert f"argus approve m mail -w {ws} or argus reject m mail -w {ws}" in out
    code, shown, _ = _cli(capsys, "-w", ws, "show", "m")
    assert code == 0 and "s.approve(" not in shown and "argus approve m mail" in shown
    decide = _line(out, "decide: ")
    assert decide[:5] == ["approve", "m", "mail", "-w", str(ws)]  # then words
    resume = _line(out, "then ")
    # Before: `argus resume m`, which has no workspace here and no tools (exit 2).
    assert resume == ["resume", "m", "--tools", str(tools), "-w", str(ws)]
    code, out, _ = _cli(capsys, "-w", ws, "approve", "m", "mail")
    assert code == 0
    # approve takes no --tools, so its line names the option to fill in.
    assert _line(out, "continue with: ") == [
        *("resume", "m", "--tools", "MODULE_OR_FILE", "-w", str(ws))
    ]
    code, out, _ = _cli(capsys, *resume, "--json")
    assert code == 0 and json.loads(out)["status"] == "succeeded"

    code, out, _ = _cli(capsys, "-w", ws, "fork", "m", "--at", "mail", "--name", "f")
    assert code == 0
    run_fork = _line(out, "run it: ")
    assert run_fork == ["resume", "f", "--tools", "MODULE_OR_FILE", "-w", str(ws)]
    run_fork[3] = str(tools)
    code, out, _ = _cli(capsys, *run_fork, "--yes", "--json")
    assert code == 0 and json.loads(out)["status"] == "succeeded"


def test_a_demo_session_needs_no_tools_in_its_hints() -> None:
    from argus_lab.cli._common import resume_command
    from argus_lab.cli._parser import build_parser

    args = build_parser().parse_args(["approve", "d", "t"])
    assert resume_command("d", args, needs_tools=False) == "argus resume d"
    assert resume_command("d", args, needs_tools=True) == (
        "argus resume d --tools MODULE_OR_FILE"
    )
    args = build_parser().parse_args(
        ["-w", "my runs", "resume", "d", "--tools", "a.py", "--tools", "b"]
    )
    assert resume_command("d", args, needs_tools=True) == (
        "argus resume d --tools a.py,b -w 'my runs'"
    )


@pytest.mark.parametrize("limit", ["0", "-3", "x"])
def test_show_limit_must_be_a_positive_count(
    capsys: pytest.CaptureFixture[str], limit: str
) -> None:
    # Before: 0 and -3 were taken, and showed every event or all but the first 3.
    code, _, err = _cli(capsys, "show", "s", "--limit", limit)
    assert code == 2 and "--limit" in err and "is not a whole number >= 1" in err


def test_show_limit_shows_the_last_events_and_svg_says_where_it_went(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path, Path]
) -> None:
    ws, plan, tools = files
    assert _cli(capsys, "-w", ws, "run", plan, "--tools", tools, "--yes")[0] == 0
    code, out, _ = _cli(capsys, "-w", ws, "--json", "ls")
    name = json.loads(out)[0]["name"]
    # Before: --limit without --events showed no events at all.
    code, out, _ = _cli(capsys, "-w", ws, "--json", "show", name, "--limit", "2")
    shown = json.loads(out)
    assert code == 0 and [e["kind"] for e in shown["events"]][-1] == (
        "session_succeeded"
    )
    assert len(shown["events"]) == 2
    svg = ws.parent / "graph.svg"
    code, out, _ = _cli(capsys, "-w", ws, "show", name, "--svg", svg)
    assert code == 0 and svg.read_text().lstrip().startswith(("<svg", "<?xml"))
    assert out.rstrip().splitlines()[-1] == f"graph written to {svg}"


def test_ls_of_a_missing_workspace_names_the_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    typo = tmp_path / "wrokspace"
    code, out, _ = _cli(capsys, "-w", typo, "ls")
    # Before: "no sessions yet", as if the user's sessions had vanished.
    assert code == 0 and f"no workspace at {typo} yet" in out
    assert not typo.exists()


def test_help_lists_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    # The README lists 141 (output closed early); --help did not.
    for argv in (["--help"], ["run", "--help"]):
        code, out, _ = _cli(capsys, *argv)
        codes = re.findall(r"\b(\d+)\s+[a-z]", out.split("exit codes:", 1)[1])
        assert code == 0 and codes[:7] == ["0", "1", "2", "3", "4", "130", "141"]


def test_resume_of_a_session_that_succeeded_needs_no_tools(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path, Path]
) -> None:
    ws, plan, tools = files
    args = ("-w", ws, "run", plan, "--tools", tools, "--yes", "--name", "done")
    assert _cli(capsys, *args)[0] == 0
    # Before: exit 2, "session 'done' needs its tools", to run nothing.
    code, out, _ = _cli(capsys, "-w", ws, "--json", "resume", "done")
    assert code == 0 and json.loads(out)["status"] == "succeeded"
    # One that can still run does need them, and says so.
    code, _, err = _cli(capsys, "-w", ws, "fork", "done", "--at", "mail", "--name", "f")
    assert code == 0
    code, _, err = _cli(capsys, "-w", ws, "resume", "f")
    assert code == 2 and "needs its tools: --tools MODULE_OR_FILE" in err


@pytest.mark.slow
def test_the_demos_printed_lines_keep_the_workspace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`argus -w DIR demo` printed `argus show NAME` etc. without -w: copied, they
    looked in ./.argus. Its crash, approval and next-step lines now carry it."""
    ws, pub = tmp_path / "my ws", tmp_path / "pub"
    p = crashed_demo(ws, pub, 1)
    (hint,) = [ln for ln in p.stdout.splitlines() if "(or: argus resume" in ln]
    again = shlex.split(hint.split("(or: ", 1)[0])
    assert again == ["argus", "demo", "--name", "c", "-w", str(ws)]
    code, out, _ = _cli(capsys, *again[1:], "--ask", "--out", pub)
    assert code == 3, out
    approve, resume = (
        shlex.split(part) for part in _line_text(out, "approve: ").split(" && ")
    )
    assert approve == ["argus", "approve", "c", "write_up/publish", "-w", str(ws)]
    assert _cli(capsys, *approve[1:])[0] == 0
    code, out, _ = _cli(capsys, *resume[1:], "--json")
    assert code == 0 and json.loads(out)["counts"] == {"succeeded": 62}
    code, out, _ = _cli(capsys, *again[1:])  # finished: says so, then next steps
    (show,) = [ln for ln in out.splitlines() if ln.startswith("  argus show c")]
    assert code == 0 and shlex.split(show)[:5] == ["argus", "show", "c", "-w", str(ws)]
    assert _cli(capsys, *shlex.split(show)[1:5])[0] == 0


def _line_text(text: str, after: str) -> str:
    (line,) = [ln for ln in text.splitlines() if after in ln]
    return line.split(after, 1)[1]


def test_retry_and_skip_answer_a_failed_or_in_doubt_task_from_the_terminal(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path, Path]
) -> None:
    """An in-doubt task said "call s.retry('p') ... or s.skip('p')", and argus had
    neither: a terminal user was stuck. `argus retry|skip NAME TASK` answer it."""
    ws, _, tools = files
    marker = ws.parent / "marker"
    plan = ws.parent / "flaky.yaml"
    plan.write_text(
        f"goal: flaky\ntasks:\n  - {{id: f, tool: flaky, args: {{marker: {marker}}}}}\n"
        "  - {id: after, tool: add, args: {a: 1}, deps: [f]}\n"
    )
    run = ("-w", ws, "run", plan, "--tools", tools, "--name")
    code, out, _ = _cli(capsys, *run, "r")
    assert (
        code == 1 and f"once the cause is fixed: argus retry r f -w {ws}, then" in out
    )
    assert _cli(capsys, *run, "k")[0] == 1
    code, _, err = _cli(capsys, "-w", ws, "retry", "r", "after")
    assert code == 0  # blocked: pending again
    code, _, err = _cli(capsys, "-w", ws, "retry", "r", "nope")
    assert code == 2 and "has no task 'nope'" in err
    marker.touch()  # the fault is fixed
    code, out, _ = _cli(capsys, "-w", ws, "retry", "r", "f")
    assert code == 0 and "task 'f' is pending; continue with: argus resume r" in out
    again = _line(out, "continue with: ")
    assert again == ["resume", "r", "--tools", "MODULE_OR_FILE", "-w", str(ws)]
    again[3] = str(tools)
    code, out, _ = _cli(capsys, *again, "--json")
    assert code == 0 and json.loads(out)["counts"] == {"succeeded": 2}
    code, _, err = _cli(capsys, "-w", ws, "retry", "r", "f")
    assert code == 2 and err.count("\n") == 1
    assert "is succeeded; only failed, in-doubt, blocked or skipped" in err

    code, out, _ = _cli(capsys, "-w", ws, "--json", "skip", "k", "f", "--reason", "x")
    assert code == 0 and json.loads(out)["status"] == "skipped"
    code, out, _ = _cli(capsys, "-w", ws, "--json", "resume", "k", "--tools", tools)
    assert code == 0 and json.loads(out)["counts"] == {"skipped": 1, "succeeded": 1}
    code, _, err = _cli(capsys, "-w", ws, "skip", "k", "after")
    assert code == 2 and "succeeded and cannot be skipped" in err


def test_the_runtimes_python_hints_read_as_argus_lines() -> None:
    import argparse

    from argus_lab.cli._common import cli_terms

    doubt = (
        "in doubt: task 'p' ... Check, then call s.retry('p') to run it again or "
        "s.skip('p') if it took effect."
    )
    assert cli_terms(doubt, "pay", argparse.Namespace(workspace="my ws")) == (
        "in doubt: task 'p' ... Check, then run argus retry pay p -w 'my ws' to run "
        "it again or argus skip pay p -w 'my ws' if it took effect."
    )
    asked = "call s.approve('m') or s.reject('m', reason)"
    assert cli_terms(asked, "x", argparse.Namespace()) == (
        "run argus approve x m or argus reject x m"
    )


@pytest.mark.parametrize("under", [False, True], ids=["file", "under-a-file"])
def test_demo_out_that_is_a_file_is_refused_before_the_study_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, under: bool
) -> None:
    # Before: all 62 tasks ran, then the last one failed: "[Errno 17] File exists".
    afile = tmp_path / "report"
    afile.write_text("not a folder")
    dest = afile / "deeper" if under else afile
    ws = tmp_path / "ws"
    code, _, err = _cli(capsys, "-w", ws, "demo", "--name", "d", "--out", dest)
    assert code == 2 and err.count("\n") == 1
    assert f"{afile} is a file, not a folder" in err
    assert not (ws / "sessions").exists() or not any((ws / "sessions").iterdir())


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import argus_lab

    # Before: "unrecognized arguments: --version", exit 2.
    code, out, _ = _cli(capsys, "--version")
    assert (code, out) == (0, f"argus-lab {argus_lab.__version__}\n")


@pytest.mark.slow
def test_demo_crash_at_past_the_end_says_nothing_was_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It ran to the end and said nothing of the crash it was asked for.
    code, out, _ = _cli(
        capsys, "-w", tmp_path / "ws", "demo", "--name", "c", "--crash-at", 500
    )
    assert code == 0, out
    m = re.search(r"--crash-at 500: the run ended with (\d+) tasks done", out)
    assert m is not None and int(m[1]) < 500, out


def test_gc_says_an_age_in_units_a_person_reads() -> None:
    from argus_lab.cli._retention import _age

    assert [_age(s) for s in (45, 872, 3 * 3600 + 720, 1.5 * 86400)] == [
        "45 s",
        "14.5 min",
        "3.2 h",
        "1.5 days",
    ]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--json", "ls", "--bogus"],
            "argus: unrecognized arguments: --bogus (argus --help says more)",
        ),
        (
            ["show", "--json"],
            "argus show: the following arguments are required: name "
            "(argus show --help says more)",
        ),
    ],
)
def test_a_usage_mistake_under_json_is_a_json_error_too(
    capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    # A script reading --json got an empty stdout for argparse's mistakes,
    # while every other error is {"error": ..., "exit_code": ...}.
    code, out, err = _cli(capsys, *argv)
    assert (code, err) == (2, line + "\n")
    assert json.loads(out) == {"error": line, "exit_code": 2}
    code, out, err = _cli(capsys, *[a for a in argv if a != "--json"])
    assert (code, out, err) == (2, "", line + "\n")


@pytest.mark.parametrize(
    "argv",
    [
        ["--json", "show", LONG_KEY],  # "no session '...'"
        ["--json", "ls", LONG_KEY],  # argparse: "unrecognized arguments: ..."
        ["show", LONG_KEY],
    ],
    ids=["error-json", "usage-json", "error"],
)
def test_an_error_never_prints_back_a_key_pasted_as_an_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    import argus_lab as al

    al.Workspace(tmp_path / "ws").close()
    code, out, err = _cli(capsys, "-w", tmp_path / "ws", *argv)
    assert code == 2 and "[REDACTED]" in err
    assert LONG_KEY[:20] not in out + err
