"""The CLI as a new user meets it: every mistake is one line with exit 2.

Exit 1 only ever means "the session failed": not a bad argument, not a closed
pipe, not Ctrl-C (130, the shell's convention for SIGINT).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from argus_lab.cli import main
from tests.waiting import wait_until

ROOT = Path(__file__).parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
TOOLS = """\
import os, pathlib, time
import argus_lab as al

@al.tool
def x(n: int = 0) -> int:
    return n

@al.tool
def slow(n: int = 0) -> int:
    pathlib.Path(os.environ["ARGUS_TEST_READY"]).touch()
    time.sleep(1.0)
    return n
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    tools = tmp_path / "tl.py"
    tools.write_text(TOOLS)
    plan = tmp_path / "plan.yaml"
    plan.write_text("goal: g\ntasks:\n  - {id: a, tool: x}\n")
    return tmp_path / "ws", plan, tools


def _err(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["gc", "--older-than", "3x"],
            "argus gc: argument --older-than: '3x' is not an age: write a number "
            "and a unit, e.g. 30d, 12h, 90m, 2w (argus gc --help says more)\n",
        ),
        (
            ["show"],
            "argus show: the following arguments are required: name (argus show "
            "--help says more)\n",
        ),
        (
            ["run", "p.yaml", "--tools", "t.py", "--concurrency", "0"],
            "argus run: argument --concurrency: '0' is not a whole number >= 1 "
            "(argus run --help says more)\n",
        ),
        (
            ["gc", "--keep", "x"],
            "argus gc: argument --keep: invalid int value: 'x' (argus gc --help "
            "says more)\n",
        ),
    ],
    ids=["bad-age", "missing-name", "bad-concurrency", "bad-keep"],
)
def test_argparse_mistakes_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    assert _err(capsys, *argv) == (2, expected)


def test_an_unknown_command_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _err(capsys, "frobnicate")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("argus: argument COMMAND: invalid choice: 'frobnicate'")


def test_a_workspace_that_cannot_be_made(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, plan, tools = files
    where = plan / "ws"  # inside a file
    assert _err(capsys, "-w", where, "run", plan, "--tools", tools) == (
        2,
        f"argus run: cannot create the workspace {where}: Not a directory; give -w "
        "(or ARGUS_HOME) a folder you can write to\n",
    )


def test_a_workspace_whose_sessions_folder_is_a_file(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, plan, tools = files
    ws.mkdir()
    (ws / "sessions").write_text("not a folder")
    expected = (
        f"the workspace {ws} is damaged: {ws / 'sessions'} is a file, not a "
        "folder; move it away"
    )
    for argv in (["ls"], ["run", plan, "--tools", tools]):
        code, err = _err(capsys, "-w", ws, *argv)
        assert (code, err) == (2, f"argus {argv[0]}: {expected}\n")


@pytest.mark.parametrize("spec", ["", ",", " , "])
def test_empty_tools(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], spec: str
) -> None:
    ws, plan, _ = files
    assert _err(capsys, "-w", ws, "run", plan, "--tools", spec) == (
        2,
        "argus run: --tools: name a module or a .py file holding the plan's tools\n",
    )


def test_plan_files_that_are_not_files(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, plan, tools = files
    fifo, loop = plan.parent / "fifo.yaml", plan.parent / "loop.yaml"
    os.mkfifo(fifo)
    loop.symlink_to(loop)
    for path, said in [
        (fifo, f"plan file '{fifo}' is a FIFO, not a regular file"),
        (loop, f"cannot read plan file '{loop}': Too many levels of symbolic links"),
        (Path("/dev/zero"), "plan file '/dev/zero' is a character device"),
    ]:
        code, err = _err(capsys, "-w", ws, "run", path, "--tools", tools)
        assert code == 2 and err.count("\n") == 1 and said in err, err


def test_a_closed_pipe_is_not_a_traceback_nor_a_failure(
    files: tuple[Path, Path, Path],
) -> None:
    ws, plan, tools = files
    run = ["-w", str(ws), "run", str(plan), "--tools", str(tools), "--name", "g"]
    assert main(run) == 0
    r, w = os.pipe()
    os.close(r)  # like `| head` that already exited: every write is EPIPE
    try:
        for argv in (["ls"], ["--json", "ls"], ["show", "g", "--events"]):
            p = subprocess.run(
                [sys.executable, "-m", "argus_lab.cli", "-w", str(ws), *argv],
                stdout=w,
                stderr=subprocess.PIPE,
                text=True,
                env=ENV,
                timeout=60,
            )
            assert (p.returncode, p.stderr) == (141, ""), argv
    finally:
        os.close(w)


def _gone(p: subprocess.Popen[str]) -> str | None:
    return None if p.poll() is None else f"argus run ended ({p.returncode})"


@pytest.mark.slow
def test_ctrl_c_during_run_is_one_line_exit_130_and_nothing_fails(
    files: tuple[Path, Path, Path],
) -> None:
    ws, plan, tools = files
    plan.write_text(
        "goal: slow\ntasks:\n  - {id: a, tool: slow}\n"
        "  - {id: b, tool: slow, deps: [a]}\n"
    )
    ready = plan.parent / "ready"
    argv = ["-w", str(ws), "run", str(plan), "--tools", str(tools), "--name", "sl"]
    p = subprocess.Popen(
        [sys.executable, "-m", "argus_lab.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**ENV, "ARGUS_TEST_READY": str(ready)},
        # Ctrl-C as a terminal delivers it, even when this test runs in a
        # background job (whose shell started it with SIGINT ignored, which
        # a child inherits and Python then keeps).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        wait_until(ready.exists, "the first task to start", gone=lambda: _gone(p))
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert (p.returncode, err) == (
        130,
        "argus run: interrupted: running tasks finished and were saved; session "
        f"'sl' is paused (argus resume sl --tools {tools} -w {ws} goes on)\n",
    )
    import argus_lab as al

    with al.Workspace(ws).open("sl") as s:
        assert [s.record(t).status for t in ("a", "b")] == ["succeeded", "pending"]
        assert s.status == "paused"


# A tool that presses Ctrl-C twice from inside the run, each time once the CLI
# is where a person's next Ctrl-C would find it (read off the main thread's
# stack), and returns only once the session is closing: after the second
# Ctrl-C, within the shutdown's grace.
TWICE = """\
import inspect, signal, sys, threading
import argus_lab as al
from argus_lab.runtime import loop

_src, _first = inspect.getsourcelines(loop.LoopThread.call)
_WAITS = [_first + i for i, line in enumerate(_src) if "fut.result()" in line]

def _main_frames():
    f = sys._current_frames().get(threading.main_thread().ident)
    while f is not None:
        yield f
        f = f.f_back

def _until(test):
    while not any(test(f) for f in _main_frames()):
        threading.Event().wait(0.001)

def _ctrl_c():  # as a terminal sends it: to the main thread, which is waiting
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

@al.tool
def twice(n: int = 0) -> int:
    call = loop.LoopThread.call.__code__
    _until(lambda f: f.f_code is call and f.f_lineno == _WAITS[0])
    _ctrl_c()  # the first Ctrl-C: a pause
    _until(lambda f: f.f_code is call and f.f_lineno == _WAITS[1])
    _ctrl_c()  # the second: the session closes
    # Returns within the shutdown's grace, or only once the process exits
    # (joining the tool threads, after the message): left running, as a hung
    # call would be.
    if n == 0:
        _until(lambda f: f.f_code.co_name == "close" and "argus_lab" in str(f))
    else:
        _until(lambda f: f.f_code.co_name == "_python_exit")
    return n
"""


@pytest.mark.parametrize(
    "finishes", [True, pytest.param(False, marks=pytest.mark.slow)]
)
def test_after_a_second_ctrl_c_only_tasks_still_running_are_named(
    files: tuple[Path, Path, Path], finishes: bool
) -> None:
    # The message was built from the records when Ctrl-C came, before the
    # session closed: it said a task would rerun which then finished within
    # the shutdown's grace (2 s) and was saved.
    ws, plan, tools = files
    tools.write_text(TWICE)
    n = 0 if finishes else 1
    plan.write_text(
        f"goal: twice\ntasks:\n  - {{id: a, tool: twice, args: {{n: {n}}}}}\n"
        "  - {id: b, tool: twice, deps: [a]}\n"
    )
    argv = ["-w", str(ws), "run", str(plan), "--tools", str(tools), "--name", "tw"]
    p = subprocess.run(
        [sys.executable, "-m", "argus_lab.cli", *argv],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    again = f"argus resume tw --tools {tools} -w {ws}"
    assert (p.returncode, p.stderr) == (
        130,
        "argus run: interrupted: running tasks finished and were saved; session "
        f"'tw' is paused ({again} goes on)\n"
        if finishes
        else "argus run: interrupted again before 1 running task(s) finished (a); "
        f"session 'tw' is paused and nothing failed: {again} reruns them if "
        "their tools are idempotent, else holds them in doubt\n",
    )
    import argus_lab as al

    with al.Workspace(ws).open("tw", tools=[]) as s:
        # Left running: its intent stays for the next run to decide about.
        first = "succeeded" if finishes else "running"
        assert [s.record(t).status for t in ("a", "b")] == [first, "pending"]


def test_a_damaged_entry_named_on_the_command_line_says_why(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, plan, tools = files
    assert main(["-w", str(ws), "run", str(plan), "--tools", str(tools)]) == 0
    capsys.readouterr()
    # (not /nonexistent: a machine may have one)
    (ws / "sessions" / "dangling").symlink_to(ws.parent / "gone" / "x")
    code, err = _err(capsys, "-w", ws, "show", "dangling")
    assert (code, err) == (
        4,
        f"argus show: session dangling: {ws / 'sessions' / 'dangling'} is a "
        "symbolic link to nothing\n",
    )


_BAD_NAME = (
    "must start with a letter or digit and use only letters, digits, '.', '_' "
    "or '-' (at most 64)"
)


@pytest.mark.parametrize("name", ["bad name!", "", "_x", "a" * 65])
def test_a_bad_session_name_is_one_line(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], name: str
) -> None:
    ws, plan, tools = files
    for argv, flag in (
        (["run", plan, "--tools", tools, "--name", name], "--name"),
        (["fork", "x", "--at", "a", "--name", name], "--name"),
        (["demo", "--name", name], "--name"),
    ):
        code, err = _err(capsys, "-w", ws, *argv)
        assert (code, err) == (
            2,
            f"argus {argv[0]}: argument {flag}: session name {name!r} {_BAD_NAME} "
            f"(argus {argv[0]} --help says more)\n",
        )


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_a_bad_port_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], port: str
) -> None:
    code, err = _err(capsys, "-w", tmp_path, "serve", f"--port={port}")
    assert (code, err) == (
        2,
        f"argus serve: argument --port: {port!r} is not a port (0 to 65535) "
        "(argus serve --help says more)\n",
    )


def test_a_port_in_use_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, err = _err(capsys, "-w", tmp_path, "serve", "--port", port)
    assert (code, err) == (
        2,
        f"argus serve: cannot listen on 127.0.0.1:{port}: Address already in "
        "use; choose another --port (or --host)\n",
    )


def test_piped_output_has_no_escapes_and_no_color_has_no_colours(
    files: tuple[Path, Path, Path],
) -> None:
    import re

    ws, plan, tools = files
    assert main(["-w", str(ws), "run", str(plan), "--tools", str(tools)]) == 0
    plain = {k: v for k, v in ENV.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    for extra, pattern in (
        ({"TERM": "xterm-256color"}, r"\x1b\["),  # not a terminal: nothing at all
        ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, r"\x1b\[(3\d|9\d|38;)"),  # no colour
    ):
        for argv in (["ls"], ["--json", "ls"]):
            p = subprocess.run(
                [sys.executable, "-m", "argus_lab.cli", "-w", str(ws), *argv],
                capture_output=True,
                text=True,
                env={**plain, **extra},
                timeout=60,
            )
            assert p.returncode == 0 and "succeeded" in p.stdout, p.stderr
            assert not re.search(pattern, p.stdout + p.stderr), (extra, argv)


def test_rm_of_a_damaged_entry_says_why(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, plan, tools = files
    assert main(["-w", str(ws), "run", str(plan), "--tools", str(tools)]) == 0
    capsys.readouterr()
    (ws / "sessions" / "afile").write_text("x")
    assert _err(capsys, "-w", ws, "rm", "afile", "-y") == (
        4,
        f"argus rm: session afile: {ws / 'sessions' / 'afile'} is a file, not a "
        "session folder\n",
    )
    code, err = _err(capsys, "-w", ws, "rm", "nobody", "-y")
    assert code == 2 and err.startswith("argus rm: no session 'nobody' in ")
