"""The python tool's sandbox: limits, containment, isolation, results, sessions.

Isolation layers the machine lacks are skipped with the reason the sandbox itself
reports (``sandbox_status()``); CI runs as root on Linux, where all of them work.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

import argus_lab as al
from argus_lab.errors import ToolError
from argus_lab.tools import sandbox
from argus_lab.tools.builtin import builtin_tools
from argus_lab.tools.sandbox import (
    Limits,
    _warnings,
    make_python_tool,
    run_python,
    sandbox_status,
    task_folder,
)

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandbox tests target Linux"
)

STATUS: dict[str, Any] = sandbox_status() if sys.platform.startswith("linux") else {}
FAST = Limits(wall_time=10)


def missing(layer: str) -> str:
    return f"{layer} isolation is unavailable here: " + "; ".join(
        STATUS.get("warnings") or [STATUS.get("error", "")]
    )


def run(
    ctx: al.ToolContext,
    code: str,
    limits: Limits = FAST,
    *,
    check: bool = False,
    **kw: Any,
) -> dict[str, Any]:
    """The tool's result; ``check=False`` so a failing run is a result here."""
    tool = make_python_tool(limits)
    result: dict[str, Any] = asyncio.run(tool.fn(code=code, ctx=ctx, check=check, **kw))
    return result


def marked_processes(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in p.info["cmdline"] or ()):
            found.append(p)
    return found


def test_runs_code_and_returns_output_and_files(ctx: al.ToolContext) -> None:
    code = (
        "import sys\n"
        "print('hi'); open('out.txt', 'w').write('data')\n"
        "print('e', file=sys.stderr)\n"
    )
    res = run(ctx, code)
    if STATUS.get("memory") == "cgroup":
        assert 0 < res.pop("memory_peak") < FAST.memory
    assert res == {
        "exit_code": 0,
        "stdout": "hi\n",
        "stderr": "e\n",
        "timed_out": False,
        "killed_by": None,
        "files": {
            "tasks/t/attempt-1/out.txt": Path(ctx.workdir) / "tasks/t/attempt-1/out.txt"
        },
    }
    assert res["files"]["tasks/t/attempt-1/out.txt"].read_text() == "data"


def test_errors_are_results_with_the_code_lines(ctx: al.ToolContext) -> None:
    res = run(ctx, "x = 1\ny = x / 0\n")
    assert res["exit_code"] == 1 and not res["timed_out"] and res["killed_by"] is None
    assert 'File "<code>", line 2, in <module>\n    y = x / 0' in res["stderr"]
    assert res["stderr"].rstrip().endswith("ZeroDivisionError: division by zero")
    res = run(ctx, "def f(:\n")
    assert res["exit_code"] == 1 and "SyntaxError" in res["stderr"]
    assert run(ctx, "import sys; sys.exit(3)")["exit_code"] == 3


@pytest.mark.slow
def test_infinite_loop_is_killed_at_the_cpu_limit(ctx: al.ToolContext) -> None:
    t0 = time.monotonic()
    res = run(ctx, "while True:\n    pass\n", Limits(wall_time=20, cpu_time=1))
    assert res["killed_by"] == "cpu_time" and res["exit_code"] < 0
    assert not res["timed_out"]
    assert time.monotonic() - t0 < 10


def test_wall_time_kills_the_whole_group(ctx: al.ToolContext) -> None:
    marker = uuid.uuid4().hex
    code = (
        "import subprocess, sys, time\n"
        f"child = 'import time; time.sleep(60)  # {marker}'\n"
        "subprocess.Popen([sys.executable, '-c', child])\n"
        "time.sleep(60)\n"
    )
    t0 = time.monotonic()
    res = run(ctx, code, Limits(wall_time=1))
    assert res["timed_out"] and res["killed_by"] == "wall_time"
    assert res["exit_code"] == -9
    assert time.monotonic() - t0 < 8
    _, alive = psutil.wait_procs(marked_processes(marker), timeout=5)
    assert not alive


def test_timeout_argument(ctx: al.ToolContext) -> None:
    res = run(ctx, "import time; time.sleep(30)", timeout=0.5)
    assert res["timed_out"]
    res = run(ctx, "print(1)", Limits(max_wall_time=5), timeout=100)
    assert res["exit_code"] == 0
    assert res["warnings"] == ["timeout 100s lowered to the maximum of 5s"]
    for bad in (0, -1, float("nan")):
        with pytest.raises(ToolError, match="timeout must be a positive number"):
            run(ctx, "print(1)", timeout=bad)


def test_a_4gb_allocation_fails_inside_not_in_the_caller(ctx: al.ToolContext) -> None:
    res = run(ctx, "b = bytearray(4 * 1024**3)\nprint('allocated')")
    assert res["exit_code"] == 1 and "allocated" not in res["stdout"]
    assert res["stderr"].rstrip().endswith("MemoryError")
    # The caller is unaffected, and the limit is per sandbox, not ours.
    assert len(bytearray(64 << 20)) == 64 << 20


@pytest.mark.slow
def test_fork_bomb_is_contained(ctx: al.ToolContext) -> None:
    if STATUS.get("processes") in (None, "none"):
        pytest.skip(missing("process-count"))
    counted = (
        "import os, signal\n"
        "n = 0\n"
        "while True:\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as e:\n"
        "        print('refused after', n, e.errno); break\n"
        "    if pid == 0:\n"
        "        signal.pause()\n"
        "    n += 1\n"
    )
    res = run(ctx, counted, Limits(wall_time=10, processes=16))
    words = res["stdout"].split()
    assert words[:2] == ["refused", "after"] and int(words[2]) < 16, res
    assert res["exit_code"] == 0 and not res["timed_out"]

    marker = uuid.uuid4().hex
    bomb = (
        f"import os  # {marker}\n"
        "while True:\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        pass\n"
    )
    t0 = time.monotonic()
    res = run(ctx, bomb, Limits(wall_time=2, processes=16))
    assert res["timed_out"] and time.monotonic() - t0 < 10
    # The forks carry the launcher's argv, which names the task folder.
    folder = str(sandbox.task_folder(ctx))
    _, alive = psutil.wait_procs(marked_processes(folder), timeout=5)
    assert not alive
    # The machine is fine: we can still start processes.
    assert run(ctx, "print('alive')")["stdout"] == "alive\n"


def test_writing_outside_the_task_folder_fails(
    tmp_path: Path, ctx: al.ToolContext
) -> None:
    if STATUS.get("filesystem") != "landlock":
        pytest.skip(missing("file-system"))
    stray = f"/tmp/argus-escape-{uuid.uuid4().hex}"
    targets = [
        str(Path(ctx.workdir) / "in-session.txt"),  # the session folder: read-only
        str(tmp_path / "next-to-workspace.txt"),
        stray,
        "../escaped.txt",
        str(Path.home() / f"argus-escape-{uuid.uuid4().hex}"),
    ]
    code = (
        "import json, sys\n"
        f"targets = {targets!r}\n"
        "out = {}\n"
        "for t in targets:\n"
        "    try:\n"
        "        open(t, 'w').write('escaped')\n"
        "        out[t] = 'written'\n"
        "    except OSError as e:\n"
        "        out[t] = type(e).__name__\n"
        "open('inside.txt', 'w').write('ok')\n"
        "print(json.dumps(out))\n"
    )
    before = sorted(p.name for p in tmp_path.iterdir())
    res = run(ctx, code)
    outcome = json.loads(res["stdout"])
    # PermissionError from Landlock, OSError (EROFS) from the read-only view.
    assert set(outcome.values()) <= {"PermissionError", "OSError"}, outcome
    for t in targets:
        assert not (Path(ctx.workdir) / "tasks/t/attempt-1" / t).exists()
    assert not Path(stray).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert list(res["files"]) == ["tasks/t/attempt-1/inside.txt"]


def test_reads_are_limited_to_system_python_and_session(
    tmp_path: Path, ctx: al.ToolContext
) -> None:
    if STATUS.get("filesystem") != "landlock":
        pytest.skip(missing("file-system"))
    private = tmp_path / "private.txt"
    private.write_text("top secret")
    (Path(ctx.workdir) / "data.txt").write_text("shared")
    code = (
        "print(open('../../../data.txt').read())\n"
        f"try:\n    open({str(private)!r}).read()\n"
        "except (PermissionError, FileNotFoundError):\n"
        "    print('denied')\n"
    )
    assert run(ctx, code)["stdout"] == "shared\ndenied\n"


def test_planted_secret_is_not_in_the_environment(
    ctx: al.ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "tok-" + uuid.uuid4().hex
    monkeypatch.setenv("ARGUS_TEST_SECRET_TOKEN", token)
    monkeypatch.setenv("ANTHROPIC_API_KEY", token)
    res = run(ctx, "import json, os; print(json.dumps(dict(os.environ)))")
    env = json.loads(res["stdout"])
    assert "ARGUS_TEST_SECRET_TOKEN" not in env and token not in res["stdout"]
    folder = str(task_folder(ctx))
    assert env == {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": folder,
        "TMPDIR": folder,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }


def test_socket_connect_to_localhost_fails(ctx: al.ToolContext) -> None:
    if STATUS.get("network") not in ("namespace", "landlock-tcp"):
        pytest.skip(missing("network"))
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        code = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
            "    print('connected')\n"
            "except OSError as e:\n"
            "    print('blocked', type(e).__name__)\n"
        )
        res = run(ctx, code)
        assert res["stdout"].startswith("blocked"), res
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing reached us


def test_network_namespace_hides_every_interface(ctx: al.ToolContext) -> None:
    if STATUS.get("network") != "namespace":
        pytest.skip(missing("network namespace"))
    code = (
        "import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "try:\n    s.sendto(b'x', ('127.0.0.1', 9)); print('sent')\n"
        "except OSError as e:\n    print('blocked', e.errno)\n"
    )
    assert run(ctx, code)["stdout"].startswith("blocked")


def test_multiprocessing_works_and_proc_shows_only_the_sandbox(
    ctx: al.ToolContext,
) -> None:
    if not (STATUS.get("shm") and STATUS.get("proc")):
        pytest.skip(missing("mount namespace"))
    code = (
        "import os\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        "def square(x):\n    return x * x\n"
        "with ProcessPoolExecutor(2) as ex:\n"
        "    print(list(ex.map(square, range(4))))\n"
        "print(len([p for p in os.listdir('/proc') if p.isdigit()]))\n"
        "open('/dev/shm/scratch', 'w').write('private')\n"
    )
    res = run(ctx, code)
    lines = res["stdout"].split("\n")
    assert lines[0] == "[0, 1, 4, 9]", res
    assert int(lines[1]) <= 3  # init and the code (and maybe a lingering worker)
    assert not os.path.exists("/dev/shm/scratch")  # the host's /dev/shm is untouched


def test_output_is_truncated_with_a_visible_marker(ctx: al.ToolContext) -> None:
    code = "import sys\nsys.stdout.write('A' * 100000 + 'END')"
    res = run(ctx, code, Limits(wall_time=10, output=1000))
    out = res["stdout"]
    assert out.startswith("A" * 700) and out.endswith("A" * 100 + "END")
    assert "\n[... truncated 99003 bytes ...]\n" in out
    assert len(out) < 1100


def test_cancellation_kills_the_sandbox(ctx: al.ToolContext) -> None:
    marker = uuid.uuid4().hex
    escape = ""
    if STATUS.get("pid_namespace"):  # a child that leaves the process group
        escape = (
            "import subprocess, sys\n"
            f"child = 'import time; time.sleep(60)  # {marker}'\n"
            "subprocess.Popen([sys.executable, '-c', child], start_new_session=True)\n"
        )
    code = f"# {marker}\n{escape}import time\ntime.sleep(60)\n"
    # The task folder is the sandbox's own tmpfs until the run ends: wait for
    # the processes themselves (the launcher and the code name the folder in
    # their argv; the code itself is not there, it travels in a memfd).
    folder = str(sandbox.task_folder(ctx))

    def found() -> list[psutil.Process]:
        return marked_processes(marker) + marked_processes(folder)

    want = 3 if escape else 2

    async def main() -> None:
        task = asyncio.create_task(
            make_python_tool(Limits(wall_time=60)).fn(code=code, ctx=ctx)
        )
        deadline = time.monotonic() + 10
        while len(found()) < want:  # the condition, with a deadline
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    t0 = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - t0 < 15
    _, alive = psutil.wait_procs(found(), timeout=5)
    assert not alive


def test_background_processes_do_not_hold_the_result(ctx: al.ToolContext) -> None:
    t0 = time.monotonic()
    res = run(ctx, "import subprocess\nsubprocess.Popen(['sleep', '30'])\nprint('bye')")
    assert res["stdout"] == "bye\n" and not res["timed_out"]
    assert time.monotonic() - t0 < 5


def test_links_and_hidden_files_are_not_reported(ctx: al.ToolContext) -> None:
    code = (
        "import os\n"
        "os.symlink('/etc/passwd', 'passwd')\n"
        "os.makedirs('.cache/x'); open('.cache/x/c', 'w').close()\n"
        "os.makedirs('sub'); open('sub/r.txt', 'w').close()\n"
    )
    assert list(run(ctx, code)["files"]) == ["tasks/t/attempt-1/sub/r.txt"]


def test_each_attempt_gets_a_fresh_folder(ctx: al.ToolContext) -> None:
    folder = task_folder(ctx)
    folder.mkdir(parents=True)
    (folder / "stale.txt").write_text("from a crashed run")
    assert run(ctx, "import os; print(os.listdir('.'))")["stdout"] == "[]\n"
    odd = al.ToolContext(
        session_id="s",
        task_id="../../x y",
        attempt=2,
        idempotency_key="k",
        workspace=ctx.workspace,
        workdir=ctx.workdir,
    )
    f = task_folder(odd)
    assert f.parent.parent == Path(ctx.workdir) / "tasks" and f.name == "attempt-2"
    assert f.parent.name.startswith("_.._x_y-")


def test_bad_code_and_required_isolation(ctx: al.ToolContext) -> None:
    with pytest.raises(ToolError, match="over the limit of 10"):
        run(ctx, "print('x' * 1000)", Limits(max_code=10))
    strict = Limits(wall_time=10, require_isolation=True)
    if STATUS.get("warnings"):
        with pytest.raises(ToolError, match="isolation is required but incomplete"):
            run(ctx, "print(1)", strict)
    else:
        assert run(ctx, "print(1)", strict)["stdout"] == "1\n"


def test_status_reports_each_layer() -> None:
    assert {"filesystem", "network", "processes", "pid_namespace", "warnings"} <= set(
        STATUS
    )
    if os.geteuid() == 0:  # CI: everything is enforced
        assert STATUS["warnings"] == [], STATUS
        assert STATUS["capabilities"] == "dropped"


def test_run_python_directly(tmp_path: Path) -> None:
    res = asyncio.run(run_python("print(2 + 2)", tmp_path / "f", limits=FAST))
    assert res.exit_code == 0 and res.stdout == "4\n" and res.files == []


def test_in_a_real_session(ws: al.Workspace) -> None:
    plan = {
        "goal": "write data, then analyse it",
        "tasks": [
            {
                "id": "save",
                "tool": "write_file",
                "args": {"path": "data.csv", "content": "x\n1\n2\n3\n"},
            },
            {
                "id": "analyse",
                "tool": "python",
                "deps": ["save"],
                "args": {
                    "code": (
                        "rows = open('../../../data.csv').read().split()[1:]\n"
                        "total = sum(map(int, rows))\n"
                        "open('total.txt', 'w').write(str(total))\n"
                        "print(total)\n"
                    )
                },
            },
            {
                "id": "observed",
                "tool": "python",
                "args": {"code": "raise SystemExit('bad input')", "check": False},
            },
            {
                "id": "fails",
                "tool": "python",
                "args": {"code": "print('working'); raise ValueError('bad input')"},
            },
        ],
    }
    s = ws.new_session(
        plan=plan, tools=builtin_tools("python", "write_file"), name="sb"
    )
    res = s.run()  # write_file has a write side effect: by default, a person approves
    assert res.status == "paused" and list(s.pending_approvals()) == ["save"], res
    s.approve("save")
    res = s.run()
    # Failure is failure: code that raises fails its task, with the tails.
    assert res.status == "failed" and list(res.failed) == ["fails"], res
    rec = s.record("fails")
    assert rec.status == "failed" and rec.error_type == "ToolError"
    assert rec.error is not None and "exited with code 1" in rec.error
    assert "ValueError: bad input" in rec.error and "working" in rec.error
    out = s.result("analyse")
    assert out["exit_code"] == 0 and out["stdout"] == "6\n"
    # Produced files come back as content-addressed artifacts, keyed by path.
    produced = out["files"]["tasks/analyse/attempt-1/total.txt"]
    assert isinstance(produced, Path) and produced.read_text() == "6"
    assert produced.is_relative_to(ws.artifacts.root)
    stored = s.record("analyse").result["files"]["tasks/analyse/attempt-1/total.txt"]
    assert stored["$artifact"].startswith("sha256:") and stored["name"] == "total.txt"
    observed = s.result("observed")  # check=False: a non-zero exit is a result
    assert observed["exit_code"] == 1 and "bad input" in observed["stderr"]


FULL = {
    "filesystem": "landlock",
    "landlock": 7,
    "network": "namespace",
    "processes": "cgroup",
    "memory": "cgroup",
    "cpu": "cgroup",
    "pid_namespace": True,
    "ipc_namespace": True,
    "view": True,
    "quota": True,
    "uid": 65534,
    "seccomp": True,
    "shm": True,
    "capabilities": "dropped",
}


def named(warnings: list[str]) -> dict[str, str]:
    """rule name -> "NOT enforced" or "weaker", from the warnings' own words."""
    out = {}
    for w in warnings:
        if w.startswith("rule '"):
            name = w.split("'")[1]
            out[name] = "NOT enforced" if " is NOT enforced: " in w else "weaker"
    return out


def test_warnings_name_each_rule_left_open() -> None:
    assert _warnings(FULL, Limits()) == []
    assert set(sandbox.RULES) == set(sandbox.rules(FULL, False))
    bare = {"notes": {"user_namespace": "user namespace: Operation not permitted"}}
    got = named(_warnings(bare, Limits()))
    always = {"report", "environment"}
    weaker = {"memory", "disk", "cpu"}  # rlimits still hold per process / file
    assert got == {
        **dict.fromkeys(set(sandbox.RULES) - always - weaker, "NOT enforced"),
        **dict.fromkeys(weaker, "weaker"),
    }
    assert "(user namespace: Operation not permitted)" in "\n".join(
        _warnings(bare, Limits())
    )
    # Each layer missing alone opens exactly its own rules.
    for layer, off, rules in (
        ("seccomp", False, {"unix_sockets", "ipc", "ptrace", "namespaces", "network"}),
        ("ipc_namespace", False, {"ipc"}),
        ("view", False, {"metadata"}),
        ("memory", "rlimit", {"memory"}),
        ("cpu", "rlimit", {"cpu"}),
        ("quota", False, {"disk"}),
        ("uid", 0, {"uid"}),
        ("filesystem", "none", {"read"}),
        ("network", "none", {"network"}),
        ("processes", "none", {"processes"}),
        ("capabilities", "kept", {"capabilities"}),
    ):
        assert set(named(_warnings({**FULL, layer: off}, Limits()))) == rules, layer
    # Without a PID namespace, Landlock ABI >= 6 still scopes signals.
    assert set(named(_warnings({**FULL, "pid_namespace": False}, Limits()))) == {
        "lifetime"
    }
    tcp_only = named(_warnings({**FULL, "network": "landlock-tcp"}, Limits()))
    assert tcp_only == {"network": "weaker"}
    assert _warnings({**FULL, "network": "allowed"}, Limits(network=True)) == []


SYSTEM_PY = "/usr/bin/python3"
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists(SYSTEM_PY),
    reason="needs root, setpriv and /usr/bin/python3 to become an unprivileged user",
)
def test_unprivileged_user_gets_the_same_isolation() -> None:
    # Most people run Argus Lab as themselves, not root: the sandbox then uses a
    # user namespace. Run the launcher as `nobody` with the system Python.
    folder = Path(tempfile.mkdtemp(prefix="argus-unpriv-"))
    try:
        os.chmod(folder, 0o755)
        os.chown(folder, 65534, 65534)
        code = (
            "import os, socket\n"
            "print('uid', os.getuid())\n"
            "try:\n    open('/tmp/argus-unpriv-escape', 'w')\n"
            "except OSError as e:\n    print('write', type(e).__name__)\n"
            "try:\n    socket.create_connection(('127.0.0.1', 9), timeout=2)\n"
            "except OSError as e:\n    print('net', type(e).__name__)\n"
            "n = 0\n"
            "while True:\n"
            "    try:\n        pid = os.fork()\n"
            "    except OSError:\n        break\n"
            "    if pid == 0:\n        import signal; signal.pause()\n"
            "    n += 1\n"
            "print('forks', n)\n"
            "import ctypes, json\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "out = {}\n"
            "def t(name, fn):\n"
            "    try:\n        out[name] = repr(fn())\n"
            "    except OSError as e:\n        out[name] = type(e).__name__\n"
            "t('chmod', lambda: os.chmod('/usr/bin/env', 0o4755))\n"
            "t('shadow', lambda: open('/etc/shadow').read())\n"
            "t('unix', lambda: socket.socket(socket.AF_UNIX))\n"
            "t('vsock', lambda: socket.socket(40, socket.SOCK_STREAM))\n"
            "t('ptrace', lambda: libc.ptrace(16, 1, 0, 0) or ctypes.get_errno())\n"
            "t('userns', lambda: libc.unshare(0x10000000) or ctypes.get_errno())\n"
            "print(json.dumps(out))\n"
        )
        cfg = sandbox._config(folder, Limits(processes=16), 10, [], SYSTEM_PY)
        launcher = sandbox._sources()[0]
        r, w = os.pipe()
        cfg["report_fd"] = w
        try:
            proc = subprocess.run(
                [
                    *AS_NOBODY,
                    SYSTEM_PY,
                    "-I",
                    "-c",
                    launcher,
                    sandbox._encode_config(cfg),
                    code,
                ],
                capture_output=True,
                text=True,
                cwd=folder,
                env=sandbox._env(folder, SYSTEM_PY),
                pass_fds=(w,),
                start_new_session=True,
                timeout=30,
                check=False,
            )
        finally:
            os.close(w)
        try:
            report = sandbox._read_report(r)
        finally:
            os.close(r)
        iso = report["setup"]
        if not iso["user_namespace"]:
            pytest.skip("unprivileged user namespaces are disabled here: " + str(iso))
        assert iso["filesystem"] == "landlock" and iso["network"] == "namespace"
        assert iso["view"] and iso["quota"] and iso["seccomp"], iso
        assert iso["processes"] == "rlimit" and iso["pid_namespace"]
        lines = proc.stdout.splitlines()
        assert lines[0] == "uid 65534" and lines[2] == "net PermissionError"
        # EROFS from the read-only view (OSError), or Landlock's EACCES.
        assert lines[1] in ("write OSError", "write PermissionError")
        assert lines[3].startswith("forks ") and int(lines[3].split()[1]) < 16
        assert not os.path.exists("/tmp/argus-unpriv-escape")
        # The rules of issue 14 hold in a user namespace too.
        tries = json.loads(lines[4])
        assert tries["chmod"] in ("OSError", "PermissionError"), tries
        assert tries["shadow"] in ("''", "PermissionError")
        assert tries["unix"] == "PermissionError" and tries["vsock"] == "OSError"
        assert tries["ptrace"] == tries["userns"] == "-1", tries
    finally:
        shutil.rmtree(folder)
