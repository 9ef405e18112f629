"""The argus command: every command, its JSON, its exit codes and its mistakes.

Commands run in-process through ``main([...])`` (fast, and capsys sees stdout);
a few run as real processes: the console entry point, ``--help`` staying light,
argparse's own errors, and a demo that kills itself with SIGKILL mid-run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.cli import main
from argus_lab.cli._cleanup import parse_age, parse_size
from tests.conftest import cli_files, crashed_demo
from tests.conftest import cli_run as cli

TOOLS_PY = """
import argus_lab as al

@al.tool
def add(a: int, b: int = 1) -> dict:
    return {"sum": a + b}

@al.tool
def boom() -> None:
    raise RuntimeError("no luck")

@al.tool
def big(tag: str) -> str:
    return tag * 70_000  # over the inline limit: stored as an artifact

@al.tool(side_effect="write")
def send(to: str) -> dict:
    return {"sent": to}
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

COMMANDS = [
    *("demo", "run", "ls", "show", "resume", "fork"),
    *("approve", "reject", "retry", "skip", "export", "rm", "gc"),
]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    return cli_files(tmp_path, "mytools.py", TOOLS_PY, PLAN)


def cli_json(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, Any]:
    code, out, _ = cli(capsys, *argv, "--json")
    return code, json.loads(out)


def one_task_plan(tmp_path: Path, tool: str, args: str = "{}", name: str = "p") -> Path:
    plan = tmp_path / f"{name}.yaml"
    plan.write_text(
        f"goal: {name}\ntasks:\n  - id: a\n    tool: {tool}\n    args: {args}\n"
    )
    return plan


# ------------------------------------------------------ run, ls, show, resume


def test_run_ls_show_resume(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, plan, tools = files
    code, out = cli_json(
        capsys, "-w", ws, "run", plan, "--tools", tools, "--name", "adder"
    )
    assert code == 0 and out["status"] == "succeeded"
    assert out["counts"] == {"succeeded": 2}
    code, out = cli_json(capsys, "ls", "-w", ws)  # -w after the command works too
    assert [(s["name"], s["status"]) for s in out] == [("adder", "succeeded")]
    assert out[0]["bytes"] > 0
    code, out = cli_json(capsys, "-w", ws, "show", "adder", "--events", "--limit", "2")
    assert [t["status"] for t in out["tasks"]] == ["succeeded", "succeeded"]
    assert [e["kind"] for e in out["events"]][-1] == "session_succeeded"
    assert len(out["events"]) == 2
    code, text, _ = cli(capsys, "-w", ws, "show", "adder", "--events")
    assert code == 0 and "two" in text and "task_succeeded" in text
    code, text, _ = cli(capsys, "-w", ws, "ls")
    assert code == 0 and "adder" in text and "succeeded" in text
    code, text, _ = cli(capsys, "-w", ws, "resume", "adder", "--tools", tools)
    assert code == 0 and "succeeded" in text


def test_failed_session_exits_1_with_reason(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, _, tools = files
    plan = one_task_plan(ws.parent, "boom")
    code, out, _ = cli(capsys, "-w", ws, "run", plan, "--tools", tools)
    assert code == 1 and "no luck" in out


def test_ls_of_an_empty_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_json(capsys, "-w", tmp_path / "none", "ls") == (0, [])
    code, text, _ = cli(capsys, "-w", tmp_path / "none", "ls")
    assert code == 0 and "try `argus demo`" in text
    assert not (tmp_path / "none").exists()  # reading never creates a workspace


# --------------------------------------------------- approvals, fork, export


def test_ask_approve_reject_and_their_mistakes(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, _, tools = files
    plan = one_task_plan(ws.parent, "send", "{to: bob}")
    for name in ("yes", "no"):
        code, out = cli_json(
            capsys, "-w", ws, "run", plan, "--tools", tools, "--name", name
        )
        assert code == 3 and out["pending_approvals"] == ["a"]
    code, text, _ = cli(
        capsys, "-w", ws, "approve", "yes", "a", "--args", '{"to": "al"}'
    )
    assert code == 0 and "argus resume yes" in text
    code, out = cli_json(capsys, "-w", ws, "resume", "yes", "--tools", tools)
    assert code == 0 and out["status"] == "succeeded"
    assert al.Workspace(ws).open("yes").result("a") == {"sent": "al"}  # edited args
    assert cli_json(capsys, "-w", ws, "reject", "no", "a", "--reason", "nope") == (
        0,
        {"session": "no", "task": "a", "decision": "rejected"},
    )
    code, out = cli_json(capsys, "-w", ws, "resume", "no", "--tools", tools)
    assert code == 1 and "nope" in json.dumps(out)
    for argv, needle in [
        (["approve", "yes", "a"], "is not waiting for approval (its status: succeeded"),
        (["approve", "yes", "zz"], "has no task 'zz'"),
        (["reject", "ghost", "a"], "no session 'ghost'"),
        (["approve", "yes", "a", "--args", "{oops"], "--args is not JSON"),
        (["approve", "yes", "a", "--args", "[1]"], "must be a JSON object"),
    ]:
        code, _, err = cli(capsys, "-w", ws, *argv)
        assert code == 2 and needle in err, argv


def test_fork_at_a_task_then_run_it(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, plan, tools = files
    cli(capsys, "-w", ws, "run", plan, "--tools", tools, "--name", "adder")
    code, out = cli_json(
        capsys, "-w", ws, "fork", "adder", "--at", "two", "--name", "f1"
    )
    assert code == 0
    assert (out["session"], out["kept"], out["to_run"]) == ("f1", 1, 1)
    code, out = cli_json(capsys, "-w", ws, "resume", "f1", "--tools", tools)
    assert code == 0 and out["status"] == "succeeded"
    events = al.Workspace(ws).open("f1").events()
    assert any(
        e.kind == "task_succeeded" and getattr(e, "cached", None) for e in events
    )
    argv = ["fork", "adder", "--at", "one", "--reuse", "none", "--run"]
    code, out = cli_json(capsys, "-w", ws, *argv, "--tools", tools, "--name", "f2")
    assert code == 0 and out["counts"] == {"succeeded": 2}
    assert not any(
        getattr(e, "cached", None) for e in al.Workspace(ws).open("f2").events()
    )
    for argv, needle in [
        (["fork", "adder", "--at", "nine"], "has no task 'nine'"),
        (["fork", "ghost", "--at", "one"], "no session 'ghost'"),
        (["fork", "adder", "--at", "one", "--run"], "needs its tools"),
        (["resume", "adder", "--tools", tools, "--planner", "nocolon"], "MODULE:NAME"),
        (["resume", "adder", "--tools", tools, "--planner", "os:sep"], "not an HTN"),
    ]:
        code, _, err = cli(capsys, "-w", ws, *argv)
        assert code == 2 and needle in err, argv
    # Without --at, as Session.fork and %argus fork: every finished result kept.
    code, out = cli_json(capsys, "-w", ws, "fork", "adder", "--name", "f3")
    assert code == 0
    assert (out["at"], out["kept"], out["to_run"]) == (None, 2, 0)
    code, text, _ = cli(capsys, "-w", ws, "fork", "adder", "--name", "f4")
    assert code == 0 and "forked 'adder' as 'f4': 2 results kept, 0 tasks" in text


def test_export_parquet(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, plan, tools = files
    for name in ("a1", "a2"):
        cli(capsys, "-w", ws, "run", plan, "--tools", tools, "--name", name)
    code, out = cli_json(capsys, "-w", ws, "export", "a1", "--parquet", ws.parent / "x")
    assert code == 0 and out["sessions"] == ["a1"]
    assert "tasks.parquet" in out["files"]
    frames = al.analysis.load(ws.parent / "x")
    assert len(frames.tasks) == 2 and set(frames.tasks["task_id"]) == {"one", "two"}
    code, out = cli_json(
        capsys, "-w", ws, "export", "--all", "--parquet", ws.parent / "y"
    )
    assert code == 0 and sorted(out["sessions"]) == ["a1", "a2"]
    assert len(al.analysis.load(ws.parent / "y").tasks) == 4
    for argv, needle in [
        (["export", "--parquet", "z"], "or give --all"),
        (["export", "a1", "--all", "--parquet", "z"], "not both"),
        (["export", "a1", "ghost", "--parquet", "z"], "no session 'ghost'"),
    ]:
        code, _, err = cli(capsys, "-w", ws, *argv)
        assert code == 2 and needle in err, argv
    assert not (Path.cwd() / "z").exists()


# -------------------------------------------------------------------- rm, gc


def test_rm_asks_refuses_running_sessions_and_frees_the_name(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, plan, tools = files
    for name in ("gone", "busy"):
        cli(capsys, "-w", ws, "run", plan, "--tools", tools, "--name", name)
    code, _, err = cli(capsys, "-w", ws, "rm", "gone")  # pytest's stdin: no terminal
    assert code == 2 and "pass --yes" in err
    workspace = al.Workspace(ws)
    with workspace.store("busy") as store:
        store.acquire_lease("another-runner", ttl=60)  # a live runner in this process
    code, _, err = cli(capsys, "-w", ws, "rm", "gone", "busy", "--yes")
    assert code == 4 and "'busy' is being run by process" in err
    assert "lease valid" in err and "stop that run first" in err
    assert "gone" in workspace  # nothing removed: all or none
    sid = workspace.resolve("gone")
    code, out = cli_json(capsys, "-w", ws, "rm", "gone", "-y")
    assert code == 0 and out["removed"][0]["name"] == "gone"
    assert out["bytes_freed"] > 0
    assert not (ws / "sessions" / sid).exists() and sid not in workspace
    assert not (ws / "files" / str(sid)).exists()
    assert [i.name for i in workspace.sessions()] == ["busy"]
    code, _, err = cli(capsys, "-w", ws, "rm", "gone", "--yes")
    assert code == 2 and "no session 'gone'" in err
    code, _ = cli_json(
        capsys, "-w", ws, "run", plan, "--tools", tools, "--name", "gone"
    )
    assert code == 0  # the name is free again


def _age_artifacts(ws: Path) -> None:
    """Makes every artifact of workspace ``ws`` two hours old (past gc's grace)."""
    old = time.time() - 7200
    for p in (ws / "artifacts").glob("??/*"):
        os.utime(p, (old, old))


def test_gc_drops_old_sessions_then_orphans_and_keeps_what_is_used(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, _, tools = files
    for tag in ("d", "k"):  # "k" is the newer one
        plan = one_task_plan(ws.parent, "big", f"{{tag: {tag}}}", name=tag)
        code, _ = cli_json(
            capsys, "-w", ws, "run", plan, "--tools", tools, "--name", tag
        )
        assert code == 0
    workspace = al.Workspace(ws)
    artifacts = sorted(p.name for p in (ws / "artifacts").glob("??/*"))
    assert len(artifacts) == 2
    stray = ws / "files" / "20000101-000000-deadbeef"  # files of a lost session
    stray.mkdir(parents=True)
    (stray / "x.txt").write_text("x" * 100)
    _age_artifacts(ws)  # a young orphan is kept: it may be in flight

    argv = ["gc", "--older-than", "0s", "--keep", "1"]
    code, out = cli_json(capsys, "-w", ws, *argv, "--dry-run")
    assert code == 0 and [s["name"] for s in out["sessions"]] == ["d"]
    assert out["artifacts"] == 1 and out["artifact_bytes"] == 70_002  # JSON: "..."
    assert out["leftovers"] == [str(stray)] and out["bytes_freed"] == 0
    assert len(list((ws / "artifacts").glob("??/*"))) == 2  # a dry run
    code, _, err = cli(capsys, "-w", ws, *argv)
    assert code == 2 and "pass --yes" in err
    code, out = cli_json(capsys, "-w", ws, *argv, "--yes")
    assert code == 0 and out["bytes_freed"] >= 70_100
    assert [i.name for i in workspace.sessions()] == ["k"]
    assert len(list((ws / "artifacts").glob("??/*"))) == 1 and not stray.exists()
    assert workspace.open("k").result("a") == "k" * 70_000  # its artifact stayed

    # A new orphan: kept while young (it may be in flight), whether or not a
    # lease is live (a run writes its lease with its first commit).
    orphan = workspace.artifacts.path(workspace.artifacts.put_bytes(b"orphan"))
    code, out = cli_json(capsys, "-w", ws, "gc", "--max-size", "1G")
    assert code == 0 and out["artifacts"] == 0 and out["young_artifacts_kept"] == 1
    assert orphan.exists()
    _age_artifacts(ws)
    code, out = cli_json(capsys, "-w", ws, "gc", "--max-size", "1G")
    assert code == 0 and out["sessions"] == [] and out["artifacts"] == 1
    assert not orphan.exists()
    orphan = workspace.artifacts.path(workspace.artifacts.put_bytes(b"young"))
    with workspace.store("k") as store:
        store.acquire_lease("runner", ttl=60)
    code, out = cli_json(capsys, "-w", ws, "gc", "--max-size", "1", "--dry-run")
    assert out["sessions"] == [] and out["young_artifacts_kept"] == 1  # "k" runs
    assert orphan.exists()
    for argv, needle in [
        (["gc", "--older-than", "30x"], "is not an age"),
        (["gc", "--max-size", "lots"], "is not a size"),
        (["gc", "--keep", "-1"], "--keep must be >= 0"),
    ]:
        code, _, err = cli(capsys, "-w", ws, *argv)
        assert code == 2 and needle in err, argv


def test_gc_max_size_drops_the_oldest_first(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, plan, tools = files
    for name in ("s1", "s2", "s3"):
        cli(capsys, "-w", ws, "run", plan, "--tools", tools, "--name", name)
    code, out = cli_json(capsys, "-w", ws, "gc", "--max-size", "1", "--dry-run")
    assert [s["name"] for s in out["sessions"]] == ["s1", "s2", "s3"]
    assert all("over --max-size" in s["why"] for s in out["sessions"])
    code, out = cli_json(capsys, "-w", ws, "gc", "--max-size", "1", "--keep", "2", "-y")
    assert code == 0 and [s["name"] for s in out["sessions"]] == ["s1"]
    assert sorted(i.name for i in al.Workspace(ws).sessions()) == ["s2", "s3"]


def test_sizes_and_ages_parse() -> None:
    assert parse_size("1G") == 2**30 and parse_size("1.5GB") == 3 * 2**29
    assert parse_size("500m") == 500 * 2**20 and parse_size("1024") == 1024
    assert parse_size("2KiB") == 2048
    assert parse_age("30d") == 30 * 86400 and parse_age("2w") == 14 * 86400
    assert parse_age("90m") == 5400 and parse_age("1.5h") == 5400


# -------------------------------------------------------------- the demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One `argus demo` (with its stop and resume), its output and its folder."""
    root = tmp_path_factory.mktemp("demo")
    out, err = io.StringIO(), io.StringIO()
    argv = ["-w", str(root / "ws"), "demo", "--name", "d", "--out", str(root / "pub")]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return {"code": code, "out": out.getvalue(), "root": root}


@pytest.mark.slow
def test_demo_runs_the_study_and_says_what_it_shows(demo: dict[str, Any]) -> None:
    out = demo["out"]
    assert demo["code"] == 0, out
    assert "plan: an HTN domain planned 28 tasks; 3 compound tasks" in out
    assert "done: 62 tasks succeeded" in out
    assert (
        "lazily expanded: profile -> 8 tasks, hypotheses -> 24 tasks, write_up -> 5"
        in out
    )
    assert "transient failure retried: citation - citation service timed out" in out
    assert "succeeded on attempt 2" in out
    assert "checkpointed resume: stopped the run after" in out
    assert "reopened it from its checkpoint on disk" in out
    assert "approved by argus demo, on your behalf" in out
    assert "21 of the 23 relations found in 2007-2008 replicate in 2009" in out
    published = demo["root"] / "pub"
    assert f"published: {published / 'report.md'}" in out
    assert len(list((published / "figures").glob("*.png"))) == 10


@pytest.mark.slow
def test_demo_says_it_stopped_where_the_readme_says(demo: dict[str, Any]) -> None:
    # The README: "the run stops after 20 tasks"; tasks already running finish
    # too, and the line used to give their sum (e.g. "after 24") as the stop.
    m = re.search(
        r"checkpointed resume: stopped the run after (\d+) tasks \(as Ctrl-C or a "
        r"closed laptop would(?:; the (\d+) already running finished first)?\) "
        r".*: (\d+) finished tasks kept",
        demo["out"],
    )
    assert m is not None, demo["out"]
    late = int(m[2] or 0)
    assert int(m[1]) == 20 and int(m[3]) == 20 + late


@pytest.mark.slow
def test_demo_again_replays_from_the_cache(
    demo: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    ws = demo["root"] / "ws"
    code, out = cli_json(capsys, "-w", ws, "demo", "--again", "d", "--name", "d2")
    assert code == 0 and out["session"] == "d2" and out["parent"] == "d"
    assert (out["tasks"], out["replayed"], out["executed"]) == (62, 62, 0)
    assert out["ratio"] < 0.5
    code, text, _ = cli(capsys, "-w", ws, "demo", "--again", "d2")
    assert code == 0 and "against" in text and "for the first run ('d')" in text
    code, text, _ = cli(capsys, "-w", ws, "demo", "--name", "d")
    assert code == 0 and "already finished" in text
    for argv, needle in [
        (["demo", "--again", "ghost"], "no session 'ghost'"),
        (["demo", "--again", "d", "--ask"], "drop --crash-at/--ask"),
        (["demo", "--crash-at", "0"], "--crash-at needs"),
    ]:
        code, _, err = cli(capsys, "-w", ws, *argv)
        assert code == 2 and needle in err, argv


@pytest.mark.slow
def test_demo_killed_by_sigkill_resumes_then_asks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws, pub = tmp_path / "ws", tmp_path / "pub"
    p = crashed_demo(ws, pub, 10)
    assert "kills itself (SIGKILL" in p.stdout
    code, out = cli_json(capsys, "-w", ws, "show", "c")
    # Stored as running by the dead process; its lease holder is gone.
    assert out["session"]["status"] == "interrupted"
    done = sum(t["status"] == "succeeded" for t in out["tasks"])
    assert done >= 10
    code, text, _ = cli(capsys, "-w", ws, "demo", "--name", "c", "--ask")
    assert code == 3, text
    assert f"resuming demo session 'c' from its checkpoint: {done} of" in text
    assert "argus approve c write_up/publish" in text and not pub.exists()
    assert cli(capsys, "-w", ws, "approve", "c", "write_up/publish")[0] == 0
    code, out = cli_json(capsys, "-w", ws, "resume", "c")  # the demo's tools
    assert code == 0 and out["counts"] == {"succeeded": 62}
    assert (pub / "report.md").is_file()
    events = al.Workspace(ws).open("c").events()
    started: dict[str, int] = {}
    for e in events:
        if e.kind == "task_started":
            started[str(e.task_id)] = started.get(str(e.task_id), 0) + 1
    rerun = {
        str(e.task_id)
        for e in events
        if e.kind == "resumed" and getattr(e, "recovered", None)
    }
    # Only the flaky citation and what was running at the kill ran twice.
    assert {t for t, n in started.items() if n > 1} <= rerun | {"citation"}


# ----------------------------------------------------------- usage and help


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "missing.yaml", "--tools", "x.py"], "does not exist"),
        (["show", "nobody"], "no session 'nobody'"),
        (["resume", "nobody", "--tools", "mytools.py"], "no session"),
        (["run", "PLAN", "--tools", "no_such_module_xyz"], "cannot import module"),
        (["run", "PLAN", "--tools", "ghost.py"], "file 'ghost.py' does not exist"),
        # (resume of a succeeded session needs none: test_cli_newuser.py)
        (["fork", "adder", "--at", "two", "--run"], "needs its tools: --tools"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    files: tuple[Path, Path, Path],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    needle: str,
) -> None:
    ws, plan, tools = files
    cli(capsys, "-w", ws, "run", plan, "--tools", tools, "--name", "adder")
    argv = [
        str(plan) if a == "PLAN" else str(tools) if a == "mytools.py" else a
        for a in argv
    ]
    code, _, err = cli(capsys, "-w", ws, *argv)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) <= 3
    code, out = cli_json(capsys, "-w", ws, *argv)
    assert code == 2 and out["exit_code"] == 2 and needle in out["error"]


def test_plan_errors_and_missing_workspaces_exit_2(
    files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, _, tools = files
    plan = one_task_plan(ws.parent, "teleport")
    code, _, err = cli(capsys, "-w", ws, "run", plan, "--tools", tools)
    assert code == 2 and "known tools: add, big, boom, send" in err
    code, _, err = cli(capsys, "-w", ws.parent / "nowhere", "show", "x")
    assert code == 2 and "no workspace at" in err


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, command, "--help")
    assert code == 0
    assert out.startswith(f"usage: argus {command}") and "--json" in out
    assert "exit codes: 0 succeeded, 1 failed, 2 bad usage" in out


@pytest.mark.slow
def test_the_console_script_is_fast_and_argparse_errors_exit_2(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from argus_lab.cli import main\n"
        "assert main(['--help']) == 0\n"
        "heavy = {'pandas', 'rich', 'lancedb', 'anthropic', 'matplotlib'}\n"
        "assert not heavy & set(sys.modules), heavy & set(sys.modules)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "argus demo" in p.stdout and "exit codes" in p.stdout
    for argv in (["run"], ["frobnicate"], [], ["gc", "--keep", "x"]):
        p = subprocess.run(
            [sys.executable, "-m", "argus_lab.cli", *argv],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert p.returncode == 2, argv
    assert not (tmp_path / ".argus").exists()
    script = Path(sys.executable).parent / "argus"
    if script.exists():  # installed: the console script is the same main()
        p = subprocess.run(
            [str(script), "ls", "--json", "-w", str(tmp_path / "w")],
            capture_output=True,
            text=True,
            env={**os.environ, "ARGUS_HOME": str(tmp_path)},
        )
        assert (p.returncode, json.loads(p.stdout)) == (0, [])
