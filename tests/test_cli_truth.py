"""The CLI tells the truth: a dead run is interrupted, counts come from the records,
no literal markup, and every user error is one line with exit 2."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import argus_lab as al
from argus_lab.cli import main
from tests import ledger_worker as lw
from tests.waiting import wait_until

N, K = 20, 7


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace whose run was SIGKILLed after K of N tasks succeeded."""
    base = tmp_path_factory.mktemp("killed")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    p = subprocess.run(
        [
            sys.executable,
            str(Path(lw.__file__)),
            str(base / "ws"),
            str(base / "ledger.txt"),
            str(N),
            str(K),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    return base / "ws"


def _ls(ws: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    assert main(["-w", str(ws), "--json", "ls"]) == 0
    rows: list[dict[str, object]] = json.loads(capsys.readouterr().out)
    return rows


def test_a_dead_run_is_interrupted_with_its_successes(
    killed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (row,) = _ls(killed, capsys)
    assert row["status"] == "interrupted"
    assert row["counts"] == {"succeeded": K, "pending": N - K}
    assert main(["-w", str(killed), "ls"]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if " ledger " in ln]
    cells = [c.strip() for c in line.strip("│ ").split("│")]
    assert cells[:4] == ["ledger", "interrupted", str(N), str(K)]
    assert main(["-w", str(killed), "show", "ledger"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].strip() == f"ledger - interrupted ({K} of {N} succeeded)"
    assert out.rstrip().splitlines()[-1] == (
        "its run stopped when its process ended; argus resume ledger --tools "
        f"MODULE_OR_FILE -w {killed} goes on"
    )
    assert main(["-w", str(killed), "--json", "show", "ledger"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["session"]["status"] == "interrupted"
    assert shown["session"]["counts"]["succeeded"] == K


def test_a_fork_counts_the_results_it_kept(
    killed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    shutil.copytree(killed, tmp_path / "ws")
    ws = tmp_path / "ws"
    assert main(["-w", str(ws), "fork", "ledger", "--at", "t015", "--name", "f"]) == 0
    capsys.readouterr()
    rows = {r["name"]: r for r in _ls(ws, capsys)}
    assert rows["f"]["status"] == "created"
    assert rows["f"]["counts"]["succeeded"] == K  # type: ignore[index]
    assert main(["-w", str(ws), "ls"]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if " f (fork) " in ln]
    cells = [c.strip() for c in line.strip("│ ").split("│")]
    assert cells[:4] == ["f (fork)", "created", str(N), str(K)]
    assert "[]" not in out and "[/" not in out


def test_no_literal_markup_and_user_text_prints_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    ws.new_session(
        plan={"goal": "[bold]fix[/] [x] the bug", "tasks": [{"id": "a", "tool": "t"}]},
        tools=[al.tool(lambda: 1, name="t")],
        name="brackets",
    ).close()
    ws.close()
    assert main(["-w", str(ws.path), "ls"]) == 0
    out = capsys.readouterr().out
    assert "[bold]fix[/] [x] the bug" in out
    assert "[]created" not in out and " created " in out
    assert main(["-w", str(ws.path), "show", "brackets"]) == 0
    out = capsys.readouterr().out
    assert "[]" not in out and " pending " in out
    assert out.splitlines()[0].strip() == "brackets - created (0 of 1 succeeded)"


def _one_line_error(
    argv: list[str], capsys: pytest.CaptureFixture[str], expected: str
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == expected + "\n"


def test_export_to_an_impossible_folder(
    killed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    _one_line_error(
        ["-w", str(killed), "export", "ledger", "--parquet", str(afile / "sub")],
        capsys,
        f"argus export: cannot write to {str(afile / 'sub')!r}: Not a directory; "
        "give --parquet a folder you can write to",
    )
    _one_line_error(
        ["-w", str(killed), "export", "ledger", "--parquet", "/proc/argus-nope"],
        capsys,
        "argus export: cannot write to '/proc/argus-nope': No such file or "
        "directory; give --parquet a folder you can write to",
    )


def test_argus_home_pointing_at_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    monkeypatch.setenv("ARGUS_HOME", str(afile))
    for cmd in (["ls"], ["show", "x"]):
        _one_line_error(
            cmd,
            capsys,
            f"argus {cmd[0]}: the workspace {afile} (from ARGUS_HOME) is a file, "
            "not a folder: point ARGUS_HOME at a folder",
        )


def test_tools_that_fail_to_import_show_file_line_and_error(
    killed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad_tools.py"
    bad.write_text("import argus_lab as al\ndef f(:\n    pass\n")
    assert main(["-w", str(killed), "resume", "ledger", "--tools", str(bad)]) == 2
    assert capsys.readouterr().err == (
        f"argus resume: --tools: cannot import {str(bad)!r}: {bad}:2: SyntaxError: "
        "invalid syntax\n    def f(:\n"
    )
    boom = tmp_path / "boom_tools.py"
    boom.write_text("x = 1\nraise RuntimeError('boom')\n")
    assert main(["-w", str(killed), "resume", "ledger", "--tools", str(boom)]) == 2
    assert capsys.readouterr().err == (
        f"argus resume: --tools: cannot import {str(boom)!r}: {boom}:2: "
        "RuntimeError: boom\n    raise RuntimeError('boom')\n"
    )


def test_the_widget_summary_says_interrupted_too(killed: Path, tmp_path: Path) -> None:
    import shutil

    from argus_lab.jupyter.display import session_summary

    shutil.copytree(killed, tmp_path / "ws")
    with al.Workspace(tmp_path / "ws").open("ledger", tools=lw.TOOLS) as s:
        assert s.status == "running"  # as the dead process stored it
        summary = session_summary(s)
        assert summary["status"] == "interrupted"
        assert summary["done"] == K
        # And the Python API says so, as argus ls does.
        assert s.interrupted and repr(s).startswith("<Session 'ledger' interrupted:")
        ended = s.run().status  # the next run decides on the dead run's intents
        assert ended in ("succeeded", "paused") and s.status == ended
        assert not s.interrupted and f"'ledger' {ended}:" in repr(s)


def test_a_live_run_elsewhere_is_not_interrupted(tmp_path: Path) -> None:
    ws = al.Workspace(tmp_path / "ws")
    gate = threading.Event()

    @al.tool
    def wait() -> str:
        gate.wait(30)
        return "ok"

    plan = {"tasks": [{"id": "w", "tool": "wait"}]}
    with ws.new_session(plan=plan, tools=[wait], name="live") as s:
        assert not s.interrupted  # created, never run
        s.start()
        try:
            wait_until(lambda: s.record("w").status == "running", "the task to run")
            other = ws.open("live", tools=[wait])
            try:
                # Stored as running and held by a live runner (s): not interrupted.
                assert other.status == "running" and not other.interrupted
                assert s.running and not s.interrupted
            finally:
                other.close()
        finally:
            gate.set()
            s.wait()
        assert s.status == "succeeded" and not s.interrupted


def test_the_server_says_a_dead_run_is_interrupted_too(killed: Path) -> None:
    # GET /sessions said "running" for good where argus ls says interrupted;
    # "status" keeps the stored word (clients validate it), "interrupted"
    # says no live process runs it.
    from starlette.testclient import TestClient

    from argus_lab.server import create_app

    ws = al.Workspace(killed)
    assert ws.runner("ledger") is None
    auth = {"Authorization": "Bearer tok"}
    try:
        with TestClient(create_app(ws, "tok"), base_url="http://127.0.0.1") as c:
            (item,) = c.get("/sessions", headers=auth).json()["items"]
            assert (item["status"], item["interrupted"]) == ("running", True)
            one = c.get("/sessions/ledger", headers=auth).json()
            assert (one["status"], one["interrupted"], one["running"]) == (
                "running",
                True,
                False,
            )
    finally:
        ws.close()


def test_runner_names_the_live_process_while_a_run_goes_on(ws: al.Workspace) -> None:
    go = threading.Event()
    inside = threading.Event()

    @al.tool
    def wait_for_go() -> str:
        inside.set()
        assert go.wait(60)
        return "done"

    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "a", "tool": "wait_for_go"}]},
        tools=[wait_for_go],
        name="live",
    )
    assert ws.runner("live") is None  # never run: nobody holds it
    fut = s.start()
    try:
        assert inside.wait(60)
        assert ws.runner("live") == {"pid": os.getpid(), "host": socket.gethostname()}
    finally:
        go.set()
        assert fut.result(60).status == "succeeded"
    assert ws.runner("live") is None
    s.close()
    with pytest.raises(KeyError, match="no session 'ghost'"):
        ws.runner("ghost")
