"""The attack matrix of issue 14, through real sessions: each attack is blocked.

One row per rule of docs/sandbox.md's threat model. Every test asserts the
attack failed *with evidence* (the target unchanged, the server saw nothing, the
memory peak bounded, ...). Where this machine lacks the layer that enforces a
rule, the test asserts instead that ``sandbox_status()`` warns about exactly
that rule: it never passes by skipping.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

import argus_lab as al
from argus_lab.tools.builtin import builtin_tools
from argus_lab.tools.sandbox import RULES, Limits, make_python_tool, sandbox_status

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandbox targets Linux"
)

STATUS: dict[str, Any] = sandbox_status() if sys.platform.startswith("linux") else {}
FAST = Limits(wall_time=20)


def enforced(rule: str) -> bool:
    """True if a layer enforces ``rule`` here; else asserts the status says so."""
    assert rule in RULES
    if STATUS["rules"][rule] is not None:
        return True
    open_rules = [w for w in STATUS["warnings"] if w.startswith(f"rule {rule!r}")]
    assert open_rules, f"rule {rule!r} is open here but no warning names it"
    return False


def session(
    ws: al.Workspace,
    tasks: list[dict[str, Any]],
    limits: Limits = FAST,
    prepare: Callable[[Path], None] | None = None,
    **options: Any,
) -> al.Session:
    """A real session running ``tasks``; ``prepare`` first fills its folder
    (which its python tasks may read, never write)."""
    tools = [make_python_tool(limits, check=False), *builtin_tools("read_file")]
    s = ws.new_session(
        plan={"goal": "attack the sandbox", "tasks": tasks},
        tools=tools,
        name=f"attack-{uuid.uuid4().hex[:8]}",
        **options,
    )
    folder = workdir_of(s)
    folder.mkdir(parents=True, exist_ok=True)
    if prepare is not None:
        prepare(folder)
    s.run()
    return s


def attack(
    ws: al.Workspace,
    code: str,
    limits: Limits = FAST,
    prepare: Callable[[Path], None] | None = None,
) -> dict[str, Any]:
    """Runs ``code`` as a python task of a real session; returns its result."""
    task = {"id": "attack", "tool": "python", "args": {"code": code}}
    s = session(ws, [task], limits, prepare)
    rec = s.record("attack")
    assert rec.status == "succeeded", (rec.error, rec.traceback)
    result: dict[str, Any] = s.result("attack")
    return result


PRELUDE = (
    "import json, os, ctypes, socket\n"
    "tries = {}\n"
    "def t(name, fn):\n"
    "    try:\n"
    "        r = fn()\n"
    "        done = r is None or r is True or (type(r) is int and r == 0)\n"
    "        tries[name] = 'ok' if done else repr(r)\n"
    "    except BaseException as e:\n"
    "        tries[name] = type(e).__name__\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def c(rc):\n"
    "    if rc != 0:\n"
    "        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))\n"
)


def outcomes(
    ws: al.Workspace,
    body: str,
    limits: Limits = FAST,
    prepare: Callable[[Path], None] | None = None,
) -> dict[str, str]:
    """Runs ``body`` after ``PRELUDE``: ``t(name, fn)`` records "ok" or the
    error's class name in ``tries``, which is returned."""
    code = PRELUDE + body + "\nprint(json.dumps(tries))\n"
    res = attack(ws, code, limits, prepare)
    assert res["exit_code"] == 0, res["stderr"]
    found: dict[str, str] = json.loads(res["stdout"].splitlines()[-1])
    return found


def workdir_of(s: al.Session) -> Path:
    return s.workspace.path / "files" / s.id


def state(p: Path) -> tuple[str, int, float, list[str]]:
    """The evidence that a file was not touched: content, mode, mtime, xattrs."""
    st = p.stat()
    return (
        hashlib.sha256(p.read_bytes()).hexdigest(),
        st.st_mode,
        st.st_mtime,
        os.listxattr(p),
    )


# --- The seven holes of issue 14 -------------------------------------------------


def _started(
    code: str, folder: Path, shared: Path
) -> tuple[threading.Thread, list[Any]]:
    """Runs ``code`` in the sandbox on a thread of its own (``shared``, made
    now, readable by it); the thread, and the list its result lands in."""
    import asyncio

    from argus_lab.tools.sandbox import run_python

    results: list[Any] = []

    def run() -> None:
        run_ = run_python(code, folder, limits=FAST, readable=[shared])
        results.append(asyncio.run(run_))

    shared.mkdir()
    thread = threading.Thread(target=run)
    thread.start()
    return thread, results


def test_1_chmod_utime_setxattr_outside_the_task_folder_fail(ws: al.Workspace) -> None:
    if not enforced("metadata"):
        return
    seen: dict[str, Any] = {}

    def prepare(folder: Path) -> None:
        shutil.copy("/bin/true", folder / "true")  # root-owned when we are root
        seen["before"] = state(folder / "true")
        seen["path"] = folder / "true"

    body = (
        "import sys\n"
        "p = sys.argv[0]\n"
        "p = os.path.abspath('../../../true')\n"
        "t('chmod_setuid', lambda: os.chmod(p, 0o4755))\n"
        "t('chown', lambda: os.chown(p, 0, 0))\n"
        "t('utime_1970', lambda: os.utime(p, (0, 0)))\n"
        "t('setxattr', lambda: os.setxattr(p, 'user.argus', b'1'))\n"
        "t('chmod_usr', lambda: os.chmod('/usr/bin/env', 0o4755))\n"
        "t('utime_etc', lambda: os.utime('/etc/hostname', (0, 0)))\n"
    )
    tries = outcomes(ws, body, prepare=prepare)
    assert "ok" not in tries.values(), tries
    assert len(tries) == 6
    assert state(seen["path"]) == seen["before"]  # mode, mtime, xattrs unchanged
    assert not os.stat("/usr/bin/env").st_mode & 0o4000


def test_2_shadow_files_are_hidden(ws: al.Workspace) -> None:
    if not enforced("hidden"):
        return
    code = (
        "out = {}\n"
        "for p in ('/etc/shadow', '/etc/gshadow', '/etc/shadow-', '/etc/gshadow-'):\n"
        "    try:\n"
        "        out[p] = open(p).read()\n"
        "    except OSError as e:\n"
        "        out[p] = type(e).__name__\n"
        "import json; print(json.dumps(out))\n"
    )
    got = json.loads(attack(ws, code)["stdout"])
    for path, text in got.items():
        assert ":" not in text, (path, text)  # no "root:$6$..." line: empty or error
    if os.path.exists("/etc/shadow"):
        assert got["/etc/shadow"] in ("", "PermissionError", "FileNotFoundError")


def test_3_unix_sockets_by_path_and_abstract_name_fail(ws: al.Workspace) -> None:
    if not enforced("unix_sockets"):
        return
    servers = []
    abstract = f"\0argus-attack-{uuid.uuid4().hex}"

    def prepare(folder: Path) -> None:
        for addr in (str(folder / "host.sock"), abstract):
            srv = socket.socket(socket.AF_UNIX)
            srv.bind(addr)
            srv.listen()
            srv.setblocking(False)
            servers.append(srv)
        os.chmod(folder / "host.sock", 0o777)

    body = (
        f"abstract = {abstract!r}\n"
        "def conn(addr):\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    s.connect(addr)\n"
        "t('path', lambda: conn(os.path.abspath('../../../host.sock')))\n"
        "t('abstract', lambda: conn(abstract))\n"
        "t('socketpair_still_works', lambda: socket.socketpair() and None)\n"
    )
    try:
        tries = outcomes(ws, body, prepare=prepare)
        assert tries["path"] != "ok" and tries["abstract"] != "ok", tries
        assert tries["socketpair_still_works"] == "ok"
        for srv in servers:
            with pytest.raises(BlockingIOError):
                srv.accept()  # the server saw no connection
    finally:
        for srv in servers:
            srv.close()


@pytest.mark.slow
def test_4_memory_is_limited_for_the_whole_process_tree(ws: al.Workspace) -> None:
    if not enforced("memory") or STATUS["rules"]["memory"] != "memory cgroup":
        assert any(w.startswith("rule 'memory'") for w in STATUS["warnings"])
        return
    limit = 768 << 20
    code = (
        "import os, time\n"
        "kids = []\n"
        "for i in range(3):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        b = b'x' * (400 << 20)  # touched: every page is real memory\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print([os.waitpid(k, 0)[1] for k in kids])\n"
    )
    res = attack(ws, code, Limits(wall_time=30, memory=limit))
    statuses = json.loads(res["stdout"])
    assert 9 in statuses, res  # the OOM killer ended at least one (SIGKILL)
    assert res["memory_peak"] <= limit  # 3 x 400 MiB never coexisted


@pytest.mark.slow
def test_4b_without_a_memory_cgroup_the_tree_is_watched_and_the_rule_is_weaker(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from argus_lab.tools import _sandbox_kernel

    if not _sandbox_kernel.can_watch_memory():
        pytest.skip("this kernel does not list children (CONFIG_PROC_CHILDREN)")
    # A machine where no cgroup can be made: the host's fallback takes over.
    monkeypatch.setattr(_sandbox_kernel, "_cgroup_parents", dict)
    limit = 512 << 20
    code = (
        "import os, time\n"
        "for i in range(3):\n"
        "    if os.fork() == 0:\n"
        "        b = b'x' * (300 << 20)\n"
        "        time.sleep(10)\n"
        "        os._exit(0)\n"
        "time.sleep(10)\n"
    )
    t0 = time.monotonic()
    res = attack(ws, code, Limits(wall_time=30, memory=limit))
    assert res["killed_by"] == "memory" and not res["timed_out"], res
    assert time.monotonic() - t0 < 10  # killed by the watch, not the wall limit
    assert any(w.startswith("rule 'memory' is weaker") for w in res["warnings"])
    assert res["memory_peak"] > limit  # what the watch saw before it struck


@pytest.mark.slow
def test_5_the_task_folder_has_a_quota_and_artifacts_stay_within_it(
    ws: al.Workspace,
) -> None:
    if not enforced("disk") or STATUS["rules"]["disk"] != "tmpfs quota":
        assert any(w.startswith("rule 'disk'") for w in STATUS["warnings"])
        return
    quota = 48 << 20
    code = (
        "n = 0\n"
        "try:\n"
        "    for i in range(16):\n"
        "        open(f'f{i}', 'wb').write(b'x' * (8 << 20)); n += 1\n"
        "except OSError as e:\n"
        "    print('stopped', n, e.errno)\n"
    )
    res = attack(ws, code, Limits(wall_time=20, disk=quota))
    assert res["stdout"].startswith("stopped") and "28" in res["stdout"]  # ENOSPC
    kept = sum(p.stat().st_size for p in res["files"].values())
    assert 0 < kept <= quota
    stored = sum(p.stat().st_size for p in ws.artifacts.root.rglob("*") if p.is_file())
    assert stored <= quota + (1 << 20)  # the copies, plus small JSON records


def test_6_the_exit_status_cannot_be_forged(ws: al.Workspace) -> None:
    # Every descriptor the code can reach, in every process it can see: none
    # is a pipe other than its own stdout/stderr; fake reports change nothing.
    code = (
        "import os, json, time\n"
        "mine = {os.readlink(f'/proc/self/fd/{n}') for n in (1, 2)}\n"
        "foreign = []\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    try:\n"
        "        fds = os.listdir(f'/proc/{pid}/fd')\n"
        "    except OSError:\n"
        "        continue\n"
        "    for fd in fds:\n"
        "        try:\n"
        "            target = os.readlink(f'/proc/{pid}/fd/{fd}')\n"
        "        except OSError:\n"
        "            continue\n"
        "        if target.startswith('pipe:') and target not in mine:\n"
        "            foreign.append(target)\n"
        "            try:\n"
        "                w = os.open(f'/proc/{pid}/fd/{fd}', os.O_WRONLY)\n"
        '                os.write(w, b\'{"exit": {"status": 0}}\\n\')\n'
        "            except OSError:\n"
        "                pass\n"
        "if os.fork() == 0:  # a grandchild that would write after the real exit\n"
        "    time.sleep(1)\n"
        "    print('grandchild alive', flush=True)\n"
        "    os._exit(0)\n"
        "print(json.dumps(foreign), flush=True)\n"
        "os._exit(7)\n"
    )
    t0 = time.monotonic()
    res = attack(ws, code)
    assert json.loads(res["stdout"].splitlines()[0]) == []
    assert res["exit_code"] == 7 and res["killed_by"] is None  # the kernel's word
    assert "grandchild alive" not in res["stdout"]  # ended with the code
    assert time.monotonic() - t0 < 10
    # A real fault: the status says so (the code is PID 1 of its namespace, so
    # a signal it sends itself with no handler is ignored, as for any init).
    res = attack(ws, "import ctypes\nctypes.string_at(0)\n")
    assert res["exit_code"] == -11 and res["killed_by"] == "SIGSEGV"


def test_6b_a_tree_too_deep_to_copy_out_does_not_hide_the_exit_status(
    ws: al.Workspace,
) -> None:
    code = (
        "import os\n"
        "open('top.txt', 'w').write('kept')\n"
        "for _ in range(40):  # ~8,000 characters deep: past PATH_MAX\n"
        "    os.mkdir('d' * 200)\n"
        "    os.chdir('d' * 200)\n"
        "open('deep.txt', 'w').write('lost')\n"
        "os._exit(3)\n"
    )
    res = attack(ws, code)
    assert res["exit_code"] == 3 and res["killed_by"] is None, res
    assert [Path(k).name for k in res["files"]] == ["top.txt"]


def test_7_other_sessions_the_workspace_and_the_project_are_out_of_reach(
    ws: al.Workspace,
) -> None:
    marker = "private-" + uuid.uuid4().hex
    a = ws.new_session(
        plan={"goal": marker, "tasks": [{"id": "x", "tool": "echo", "args": {}}]},
        tools=[al.tool(lambda: marker, name="echo")],
        name="victim",
    )
    a.run()
    (workdir_of(a)).mkdir(parents=True, exist_ok=True)
    (workdir_of(a) / "notes.txt").write_text(marker)
    import argus_lab

    project = Path(argus_lab.__file__).resolve().parents[1]
    targets = [
        str(ws.path / "sessions" / a.id),
        str(workdir_of(a) / "notes.txt"),
        str(ws.path / "index"),
        str(ws.path / "artifacts"),
        str(project / "argus_lab" / "__init__.py"),
        os.getcwd(),
    ]
    body = (
        f"targets = {targets!r}\n"
        "def look(p):\n"
        "    if os.path.isdir(p):\n"
        "        return repr(sorted(os.listdir(p)))\n"
        "    return open(p).read()\n"
        "for p in targets:\n"
        "    t(p, lambda: look(p))\n"
    )
    tries = outcomes(ws, body)
    for p, got in tries.items():
        assert marker not in got, p
        # Hidden (an empty folder or missing) or denied: never the contents.
        assert got in ("FileNotFoundError", "PermissionError", "'[]'", "ok"), (p, got)
    assert enforced("hidden") and enforced("read")


def test_new_user_namespaces_fail(ws: al.Workspace) -> None:
    if not enforced("namespaces"):
        return
    body = (
        "t('unshare_user', lambda: c(libc.unshare(0x10000000)))\n"
        "t('unshare_net', lambda: c(libc.unshare(0x40000000)))\n"
        "import subprocess\n"
        "t('unshare_binary', lambda: subprocess.run(['unshare', '-U', 'true'],"
        " capture_output=True).returncode)\n"
    )
    tries = outcomes(ws, body)
    assert tries["unshare_user"] == "PermissionError", tries
    assert tries["unshare_net"] == "PermissionError"
    assert tries["unshare_binary"] != "ok"


def test_ptrace_fails_and_does_not_freeze_the_run(ws: al.Workspace) -> None:
    if not enforced("ptrace"):
        return
    body = (
        "PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206\n"
        "t('attach_pid1', lambda: c(libc.ptrace(PTRACE_ATTACH, 1, 0, 0)))\n"
        "t('seize_pid1', lambda: c(libc.ptrace(PTRACE_SEIZE, 1, 0, 0)))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    rc = libc.ptrace(PTRACE_ATTACH, os.getppid(), 0, 0)\n"
        "    os._exit(0 if rc != 0 else 1)\n"
        "t('child_attaches_parent', lambda: os.waitpid(pid, 0)[1])\n"
        "t('traceme', lambda: c(libc.ptrace(0, 0, 0, 0)))\n"
        "t('vm_read', lambda: c(libc.process_vm_readv(1, 0, 0, 0, 0, 0)))\n"
    )
    t0 = time.monotonic()
    tries = outcomes(ws, body, Limits(wall_time=30))
    assert tries["attach_pid1"] == tries["seize_pid1"] == "PermissionError", tries
    assert tries["child_attaches_parent"] == "ok"  # the child's attach failed
    assert tries["traceme"] == tries["vm_read"] == "PermissionError"
    assert time.monotonic() - t0 < 15  # not frozen until the wall limit


# --- Blocked before issue 14, kept blocked ---------------------------------------


def test_secrets_in_the_environment_and_proc_environ_are_out_of_reach(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "tok-" + uuid.uuid4().hex
    monkeypatch.setenv("ARGUS_ATTACK_SECRET_TOKEN", token)
    body = (
        f"host = {os.getpid()}\n"
        "t('env', lambda: repr(dict(os.environ)))\n"
        "for p in ('/proc/self/environ', '/proc/1/environ', f'/proc/{host}/environ',"
        " f'/proc/{os.getppid()}/environ'):\n"
        "    t(p, lambda: repr(open(p, 'rb').read()))\n"
    )
    tries = outcomes(ws, body)
    assert len(tries) >= 4
    assert not any(token in v or "ARGUS_ATTACK" in v for v in tries.values())
    assert tries[f"/proc/{os.getpid()}/environ"] != "ok"


def port(s: socket.socket) -> int:
    return int(s.getsockname()[1])


def test_network_tcp_udp_dns_fail_and_no_server_sees_a_packet(
    ws: al.Workspace,
) -> None:
    if not enforced("network"):
        return
    tcp4 = socket.socket()
    tcp4.bind(("127.0.0.1", 0))
    tcp6 = socket.socket(socket.AF_INET6)
    tcp6.bind(("::1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    for s in (tcp4, tcp6):
        s.listen()
    for s in (tcp4, tcp6, udp):
        s.setblocking(False)
    body = (
        "def tcp(family, addr):\n"
        "    s = socket.socket(family); s.settimeout(3); s.connect(addr)\n"
        "def udp(addr):\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    s.sendto(b'x', addr)\n"
        f"t('tcp4', lambda: tcp(socket.AF_INET, ('127.0.0.1', {port(tcp4)})))\n"
        f"t('tcp6', lambda: tcp(socket.AF_INET6, ('::1', {port(tcp6)})))\n"
        f"t('udp', lambda: udp(('127.0.0.1', {port(udp)})))\n"
        "t('dns', lambda: socket.getaddrinfo('example.com', 80) and None)\n"
        "t('tcp_out', lambda: tcp(socket.AF_INET, ('1.1.1.1', 53)))\n"
    )
    try:
        tries = outcomes(ws, body)
        assert "ok" not in tries.values(), tries
        for s in (tcp4, tcp6):
            with pytest.raises(BlockingIOError):
                s.accept()
        with pytest.raises(BlockingIOError):
            udp.recv(16)
    finally:
        for s in (tcp4, tcp6, udp):
            s.close()


def test_no_socket_family_but_ip_and_netlink_opens(ws: al.Workspace) -> None:
    # A network namespace does not cover vsock: from a virtual machine (as CI
    # runs) it reaches the hypervisor's host. Nor bluetooth, CAN, packet, ...
    if not enforced("network") or STATUS["rules"]["network"] == "network namespace":
        assert any(w.startswith("rule 'network'") for w in STATUS["warnings"])
        return
    body = (
        "for fam in (40, 17, 31, 29, 38, 44, 5, 4, 9, 0, 63, 100):\n"
        "    t(f'family {fam}', lambda: socket.socket(fam, socket.SOCK_STREAM)"
        ".close())\n"
        "t('ip', lambda: socket.socket().close())\n"
        "t('netlink', lambda: socket.socket(16, socket.SOCK_RAW).close())\n"
    )
    tries = outcomes(ws, body)
    opened = {k for k, v in tries.items() if v == "ok"}
    assert opened == {"ip", "netlink"}, tries


def test_every_change_outside_the_task_folder_fails(ws: al.Workspace) -> None:
    if not enforced("write"):
        return
    seen: dict[str, Any] = {}

    def prepare(folder: Path) -> None:
        (folder / "data.txt").write_text("original")
        seen["folder"], seen["state"] = folder, state(folder / "data.txt")
        seen["listing"] = sorted(p.name for p in folder.iterdir())

    body = (
        "d = os.path.abspath('../../..')\n"
        "f = d + '/data.txt'\n"
        "for where in (d, '/usr/local', '/etc', '/tmp', '/var/tmp', '/dev/shm/..'):\n"
        "    n = where + '/argus-x'\n"
        "    t(f'write {where}', lambda: open(n, 'w').write('x') and None)\n"
        "    t(f'mkdir {where}', lambda: os.mkdir(n))\n"
        "    t(f'mkfifo {where}', lambda: os.mkfifo(n))\n"
        "    t(f'symlink {where}', lambda: os.symlink('/etc/passwd', n))\n"
        "t('overwrite', lambda: open(f, 'w').write('pwned') and None)\n"
        "t('append', lambda: open(f, 'a').write('pwned') and None)\n"
        "t('truncate', lambda: os.truncate(f, 0))\n"
        "t('unlink', lambda: os.unlink(f))\n"
        "t('rename', lambda: os.rename(f, d + '/moved'))\n"
        "t('rename_in', lambda: (open('mine', 'w').close(), os.rename('mine', f))[1])\n"
        "t('link_in', lambda: os.link('mine', d + '/linked'))\n"
    )
    tries = outcomes(ws, body, prepare=prepare)
    assert "ok" not in tries.values(), tries
    assert state(seen["folder"] / "data.txt") == seen["state"]
    assert sorted(p.name for p in seen["folder"].iterdir()) == [
        *seen["listing"],
        "tasks",
    ]
    assert not Path("/usr/local/argus-x").exists()


def test_raw_devices_fail(ws: al.Workspace) -> None:
    body = (
        "for dev in ('/dev/vda', '/dev/sda', '/dev/kvm', '/dev/kmsg', '/dev/mem',"
        " '/dev/port', '/dev/tty'):\n"
        "    t(dev, lambda: os.close(os.open(dev, os.O_RDONLY)))\n"
        "t('mknod', lambda: os.mknod('null', 0o666 | 0o020000, os.makedev(1, 3)))\n"
    )
    tries = outcomes(ws, body)
    assert "ok" not in tries.values(), tries


@pytest.mark.slow
def test_busy_and_sleeping_loops_are_killed_at_their_limits(ws: al.Workspace) -> None:
    t0 = time.monotonic()
    res = attack(ws, "while True:\n    pass\n", Limits(wall_time=20, cpu_time=1))
    assert res["killed_by"] == "cpu_time" and res["exit_code"] < 0
    res = attack(
        ws, "import time\nwhile True:\n    time.sleep(0.1)\n", Limits(wall_time=1)
    )
    assert res["killed_by"] == "wall_time" and res["timed_out"]
    assert time.monotonic() - t0 < 15


def test_an_8gb_allocation_fails_inside(ws: al.Workspace) -> None:
    res = attack(ws, "b = bytearray(8 * 1024**3)\nprint('allocated')")
    assert res["exit_code"] == 1 and "allocated" not in res["stdout"]
    assert res["stderr"].rstrip().endswith("MemoryError")


def marked(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in p.info["cmdline"] or ()):
            found.append(p)
    return found


@pytest.mark.slow
def test_fork_bombs_are_contained(ws: al.Workspace) -> None:
    if not enforced("processes"):
        return
    marker = uuid.uuid4().hex
    loop = (
        f"import os, signal  # {marker}\n"
        "n = 0\n"
        "while True:\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        signal.pause()\n"
        "    n += 1\n"
        "print(n)\n"
    )
    res = attack(ws, loop, Limits(wall_time=10, processes=16))
    assert int(res["stdout"]) < 16, res
    recursive = (
        f"import os  # {marker}\n"
        "def bomb():\n"
        "    while True:\n"
        "        try:\n"
        "            if os.fork() == 0:\n"
        "                bomb()\n"
        "        except OSError:\n"
        "            pass\n"
        "bomb()\n"
    )
    res = attack(ws, recursive, Limits(wall_time=2, processes=16))
    assert res["timed_out"]
    _, alive = psutil.wait_procs(marked(marker), timeout=5)
    assert not alive
    assert attack(ws, "print('alive')")["stdout"] == "alive\n"


def test_mount_sethostname_reboot_and_killing_the_host_fail(ws: al.Workspace) -> None:
    hostname = socket.gethostname()
    body = (
        "t('mount', lambda: c(libc.mount(b'none', b'/mnt', b'tmpfs', 0, None)))\n"
        "t('sethostname', lambda: c(libc.sethostname(b'pwned', 5)))\n"
        "t('reboot', lambda: c(libc.reboot(0x4321FEDC)))\n"
        f"t('kill_host', lambda: os.kill({os.getpid()}, 9))\n"
        f"t('see_host', lambda: os.path.exists('/proc/{os.getpid()}/status'))\n"
        "import resource\n"
        "t('raise_as', lambda: resource.setrlimit(resource.RLIMIT_AS,"
        " (resource.RLIM_INFINITY, resource.RLIM_INFINITY)))\n"
        "t('raise_nofile', lambda: resource.setrlimit(resource.RLIMIT_NOFILE,"
        " (1 << 20, 1 << 20)))\n"
    )
    tries = outcomes(ws, body)
    assert "ok" not in tries.values(), tries
    assert socket.gethostname() == hostname  # and this process is alive


def test_the_sessions_own_sqlite_cannot_be_opened(ws: al.Workspace) -> None:
    s = ws.new_session(
        plan={
            "goal": "g",
            "tasks": [{"id": "attack", "tool": "python", "args": {"code": ""}}],
        },
        tools=[make_python_tool(FAST, check=False)],
        name="sqlite-victim",
    )
    db = next((ws.path / "sessions" / s.id).glob("*.db"))
    code = (
        PRELUDE + f"db = {str(db)!r}\n" + "import sqlite3\n"
        "def pwn():\n"
        "    c = sqlite3.connect(db)\n"
        "    c.execute('create table pwned (x)')\n"
        "    c.commit()\n"
        "t('sqlite', pwn)\n"
        "t('open_rw', lambda: open(db, 'r+b').close())\n"
        "print(json.dumps(tries))\n"
    )
    s.plan.tasks[0].args["code"] = code  # the plan object is ours until it runs
    s.run()
    tries = json.loads(s.result("attack")["stdout"])
    assert "ok" not in tries.values(), tries
    import sqlite3

    with sqlite3.connect(db) as con:
        tables = [r[0] for r in con.execute("select name from sqlite_master")]
    assert "pwned" not in tables


def test_links_made_by_code_are_not_read_through_read_file(ws: al.Workspace) -> None:
    code = (
        "import os\n"
        "os.symlink('/etc/passwd', 'soft')\n"
        "open('real', 'w').write('mine')\n"
        "os.link('real', 'hard')\n"
    )
    folder = "tasks/attack/attempt-1"
    s = session(
        ws,
        [
            {"id": "attack", "tool": "python", "args": {"code": code}},
            {
                "id": "soft",
                "tool": "read_file",
                "deps": ["attack"],
                "args": {"path": f"{folder}/soft"},
            },
            {
                "id": "hard",
                "tool": "read_file",
                "deps": ["attack"],
                "args": {"path": f"{folder}/hard"},
            },
        ],
    )
    assert s.record("attack").status == "succeeded"
    for tid in ("soft", "hard"):
        rec = s.record(tid)
        assert rec.status == "failed" and "root:" not in (rec.error or ""), rec


def test_traversal_spellings_in_the_file_tools_are_refused(ws: al.Workspace) -> None:
    from tests.test_file_tools import ATTEMPTS

    marker = "outside-" + uuid.uuid4().hex
    outside = ws.path.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(marker)
    tasks = [
        {
            "id": f"read{i}",
            "tool": "read_file",
            "args": {"path": path.replace("<outside>", str(outside))},
        }
        for i, (_, path, _) in enumerate(ATTEMPTS)
    ]
    s = session(ws, tasks, max_consecutive_failures=None)
    assert len(tasks) >= 21
    for t in tasks:
        rec = s.record(t["id"])
        assert rec.status == "failed", (t, rec)
        assert marker not in (rec.error or "") and rec.result is None


@pytest.mark.slow
def test_a_gigabyte_on_stdout_is_bounded(ws: al.Workspace) -> None:
    code = "import os\nchunk = b'A' * (1 << 20)\nfor _ in range(1024):\n"
    code += "    os.write(1, chunk)\n"
    res = attack(ws, code, Limits(wall_time=60, output=64 << 10))
    assert len(res["stdout"]) < (64 << 10) + 100
    assert "[... truncated" in res["stdout"]


def test_a_10gb_file_is_refused_at_the_file_size_limit(ws: al.Workspace) -> None:
    code = (
        "f = open('big', 'wb')\n"
        "try:\n"
        "    f.seek(10 * 1024**3); f.write(b'x'); f.flush()\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    res = attack(ws, code)
    assert res["stdout"].startswith("refused 27"), res  # EFBIG
    assert all(p.stat().st_size <= 64 << 20 for p in res["files"].values())


def test_the_threat_model_document_matches_these_tests_row_for_row() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "sandbox.md").read_text()
    rows = [
        line.split("|")[1:-1]
        for line in doc.splitlines()
        if line.startswith("| `") and line.count("|") == 6
    ]
    assert [r[0].strip().strip("`") for r in rows] == list(RULES)  # same order
    here = [n for n in globals() if n.startswith("test_")]
    for rule, *_, tests in rows:
        # `test_name` exactly, or `test_7_...` for a test whose name starts so.
        named = re.findall(r"`(test_\w+?)(_\.\.\.)?`", tests)
        assert named, rule
        for name, abbreviated in named:
            found = [t for t in here if t.startswith(name + "_")] if abbreviated else []
            assert name in here or found, f"{rule}: no test {name} here"


# --- Variants of the same classes (a second attacker's round) --------------------


def test_terminal_escapes_in_the_output_are_made_visible(ws: al.Workspace) -> None:
    # Shown raw by the CLI (an error's stderr tail) they would clear the screen,
    # retitle the window, write the clipboard (OSC 52) or overwrite a line.
    code = (
        "import sys\n"
        "sys.stdout.write('a\\x1b]52;c;cHduZWQ=\\x07b\\x1b[2Jc\\rFAKE\\u202ed\\n')\n"
        "sys.stdout.flush()\n"
        "import os; os.write(1, b'\\xc2\\x9b31m\\xff\\xfe\\n')\n"
        "sys.stderr.write('\\x1b]0;title\\x07 boom\\n')\n"
        "raise SystemExit(2)\n"
    )
    res = attack(ws, code)
    for text in (res["stdout"], res["stderr"]):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", text), text
    shown = "a\\x1b]52;c;cHduZWQ=\\x07b\\x1b[2Jc\nFAKE\\u202ed\n"
    assert res["stdout"].startswith(shown)
    assert "\\x9b31m\ufffd\ufffd" in res["stdout"]  # bad UTF-8 replaced, visibly
    # The failure's message (what the CLI prints) carries the escaped text too.
    task = {"id": "attack", "tool": "python", "args": {"code": code, "check": True}}
    s = session(ws, [task])
    error = s.record("attack").error or ""
    assert "\\x1b]0;title\\x07 boom" in error and "\x1b" not in error


def test_produced_file_names_cannot_break_the_result_or_carry_a_secret(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A name that is not UTF-8 made the task fail ("result that is not JSON")
    # even with check=False; a name with ESC or a newline reached the CLI; a
    # file or folder named after a secret put it on disk in the workspace.
    secret = "nm-" + uuid.uuid4().hex
    monkeypatch.setenv("ARGUS_NAMES_TOKEN", secret)
    code = (
        "import os\n"
        "s = '${env.ARGUS_NAMES_TOKEN}'\n"
        "open(b'bad\\xff.txt', 'w').write('x')\n"
        "open('esc\\x1b[31m\\nname.txt', 'w').write('x')\n"
        "open('bidi\\u202etxt.exe', 'w').write('x')\n"
        "open(s + '.txt', 'w').write('named')\n"
        "os.mkdir(s); open(s + '/inner.txt', 'w').write('inside')\n"
        "open('plain.txt', 'w').write('kept')\n"
    )
    res = attack(ws, code)
    assert res["exit_code"] == 0
    names = sorted(res["files"])
    assert [n.split("attempt-1/")[1] for n in names] == [
        "[REDACTED].txt",
        "[REDACTED]/inner.txt",
        "plain.txt",
    ], names
    assert any("were not kept" in w for w in res["warnings"])  # the two bad names
    on_disk = [str(p) for p in ws.path.rglob("*")]
    assert not [p for p in on_disk if secret in p or "\x1b" in p or "\udcff" in p]
    assert not [p for p in on_disk if "\u202e" in p]


def test_ipc_stays_inside_and_host_files_cannot_be_watched(ws: al.Workspace) -> None:
    # inotify on a readable host file was a channel between sandboxes of two
    # sessions (one opens /etc/hostname, the other sees IN_OPEN) and a view of
    # the host's activity; SysV IPC, message queues and /dev/shm must be private.
    if not enforced("ipc"):
        return
    key = 0x5A000000 + uuid.uuid4().int % 0xFFFFFF
    name = f"argus-ipc-{uuid.uuid4().hex[:8]}"
    body = (
        f"key, name = {key}, {name!r}\n"
        "def watch(flags):\n"
        "    fd = libc.inotify_init1(0)\n"
        "    c(-1 if fd < 0 else 0)\n"
        "    c(libc.inotify_add_watch(fd, b'/etc/hostname', flags))\n"
        "t('inotify', lambda: watch(0xfff))\n"
        "t('inotify_old', lambda: c(min(0, libc.inotify_init())))\n"
        "t('fanotify', lambda: c(min(0, libc.fanotify_init(0x200, 0))))\n"
        "t('shm', lambda: c(min(0, libc.shmget(key, 4096, 0o1666))))\n"
        "t('msg', lambda: c(min(0, libc.msgget(key, 0o1666))))\n"
        "t('dev_shm', lambda: open('/dev/shm/' + name, 'w').write('x') and None)\n"
    )
    tries = outcomes(ws, body)
    assert tries["inotify"] != "ok" and tries["inotify_old"] != "ok", tries
    assert tries["fanotify"] != "ok"
    # Made inside, seen nowhere outside: the host's IPC objects and /dev/shm.
    assert tries["shm"] == tries["msg"] == tries["dev_shm"] == "ok", tries
    for table in ("/proc/sysvipc/shm", "/proc/sysvipc/msg"):
        if os.path.exists(table):
            keys = [line.split()[0] for line in Path(table).read_text().splitlines()]
            assert str(key) not in keys, table
    assert not os.path.exists(f"/dev/shm/{name}")


@pytest.mark.slow
def test_many_busy_processes_get_only_their_share_of_the_cores(
    ws: al.Workspace,
) -> None:
    # RLIMIT_CPU is per process: 64 busy processes kept every core of the host
    # busy for the whole wall time (up to 600 s), starving Argus and others.
    if STATUS["rules"]["cpu"] != "cpu cgroup":
        assert any(w.startswith("rule 'cpu' is weaker") for w in STATUS["warnings"])
        return
    code = (
        "import os, time\n"
        "kids = []\n"
        "for i in range(4):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        end = time.monotonic() + 4\n"
        "        while time.monotonic() < end:\n"
        "            pass\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "for k in kids:\n"
        "    os.waitpid(k, 0)\n"
        "t = os.times()\n"
        "print(t.children_user + t.children_system)\n"
    )
    res = attack(ws, code, Limits(wall_time=30, cpus=0.2))
    used = float(res["stdout"])
    assert 0 < used <= 0.2 * 4 * 1.25 + 0.3, res  # 4 busy processes, 0.2 cores


def test_a_socketpair_cannot_reach_a_host_path_socket(ws: al.Workspace) -> None:
    # socket(AF_UNIX) fails, but a datagram socketpair is not bound to its
    # peer: sendto() or connect() reached any path socket (here one in the
    # session folder; /dev/log where a syslog daemon listens there).
    if not enforced("unix_sockets"):
        return
    servers = []

    def prepare(folder: Path) -> None:
        for kind, name in (
            (socket.SOCK_DGRAM, "dgram.sock"),
            (socket.SOCK_STREAM, "s.sock"),
        ):
            srv = socket.socket(socket.AF_UNIX, kind)
            servers.append(srv)  # closed by the test even if bind fails
            # Bound by a name relative to the folder: a socket's path may not
            # exceed 107 bytes, and pytest's tmp path alone can come close.
            with contextlib.chdir(folder):
                srv.bind(name)
            os.chmod(folder / name, 0o777)
            if kind == socket.SOCK_STREAM:
                srv.listen()
            srv.setblocking(False)

    body = (
        "dg, st = os.path.abspath('../../../dgram.sock'), "
        "os.path.abspath('../../../s.sock')\n"
        "U, S = socket.AF_UNIX, socket\n"
        "def pair(kind, how):\n"
        "    a, b = socket.socketpair(U, kind)\n"
        "    return how(a)\n"
        "def send(a):\n"
        "    a.sendto(b'x', dg)\n"
        "t('dgram_sendto', lambda: pair(S.SOCK_DGRAM, send))\n"
        "t('dgram_connect', lambda: pair(S.SOCK_DGRAM, lambda a: a.connect(dg)))\n"
        "t('raw_sendto', lambda: pair(S.SOCK_RAW, send))\n"
        "t('dgram_cloexec', lambda: pair(S.SOCK_DGRAM | S.SOCK_CLOEXEC, send))\n"
        "t('stream_connect', lambda: pair(S.SOCK_STREAM, lambda a: a.connect(st)))\n"
        "t('seqpkt_connect', lambda: pair(S.SOCK_SEQPACKET, lambda a: a.connect(st)))\n"
        "t('stream_sendto', lambda: pair(S.SOCK_STREAM, send))\n"
        "t('stream_pair_works', lambda: pair(S.SOCK_STREAM, lambda a: None))\n"
    )
    try:
        tries = outcomes(ws, body, prepare=prepare)
        assert tries.pop("stream_pair_works") == "ok"  # multiprocessing needs it
        assert "ok" not in tries.values(), tries
        with pytest.raises(BlockingIOError):
            servers[0].recv(100)  # no datagram arrived
        with pytest.raises(BlockingIOError):
            servers[1].accept()  # no connection
    finally:
        for srv in servers:
            srv.close()


def test_a_tree_deeper_than_the_recursion_limit_does_not_hide_the_exit_status(
    ws: al.Workspace,
) -> None:
    # 1,500 folders of one letter stay under PATH_MAX but past Python's
    # recursion limit: os.walk in the launcher's copy-out raised RecursionError,
    # and the host saw exit code 1 (the launcher's) instead of the code's 3.
    code = (
        "import os\n"
        "open('top.txt', 'w').write('kept')\n"
        "for _ in range(1500):\n"
        "    os.mkdir('d')\n"
        "    os.chdir('d')\n"
        "open('deep.txt', 'w').write('lost')\n"
        "os._exit(3)\n"
    )
    res = attack(ws, code)
    assert res["exit_code"] == 3 and res["killed_by"] is None, res
    assert "RecursionError" not in res["stderr"]
    assert [Path(k).name for k in res["files"]] == ["top.txt"]
    deepest = max(len(p.parts) for p in ws.path.rglob("*"))
    assert deepest < 80  # what reached the host is 32 folders deep at most


def test_host_device_events_do_not_reach_the_sandbox(ws: al.Workspace) -> None:
    # A uevent netlink socket in the sandbox's network namespace received the
    # host's device events (a USB key plugged in, a disk added): only routing
    # netlink (getifaddrs) opens now.
    if STATUS["rules"]["network"] != "network namespace + seccomp":
        assert any(w.startswith("rule 'network'") for w in STATUS["warnings"])
        return
    stop = threading.Event()
    null_uevent = Path("/sys/devices/virtual/mem/null/uevent")

    def poke() -> None:  # the host makes device events while the code listens
        while not stop.wait(0.2):
            try:
                null_uevent.write_text("change")
            except OSError:
                return  # not root: the socket must fail to open all the same

    body = (
        "import select\n"
        "def listen(proto):\n"
        "    s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, proto)\n"
        "    s.bind((0, 1))\n"
        "    r, _, _ = select.select([s], [], [], 3)\n"
        "    return s.recv(4096)[:60].decode('latin-1') if r else None\n"
        "t('uevent', lambda: listen(15))\n"
        "for proto in (4, 9, 11, 16):  # sock_diag, audit, connector, generic\n"
        "    t(f'netlink {proto}', lambda: socket.socket(16, 3, proto).close())\n"
        "t('route', lambda: socket.socket(16, 3, 0).close())\n"
    )
    thread = threading.Thread(target=poke, daemon=True)
    thread.start()
    try:
        tries = outcomes(ws, body)
    finally:
        stop.set()
        thread.join(5)
    assert tries.pop("route") == "ok", tries
    assert set(tries.values()) == {"OSError"}, tries  # not even an empty listen


def test_credentials_files_are_hidden_even_inside_a_kept_folder(
    ws: al.Workspace, tmp_path: Path
) -> None:
    # World-readable files where credentials live (/etc/environment,
    # /etc/pip.conf, ...) were readable, and so was a virtual environment's
    # pip.conf (an index URL with a token): the environment is put back under
    # the hidden /tmp, which showed what was hidden inside it again.
    if not enforced("hidden") or STATUS["rules"]["hidden"] != "mount namespace":
        return
    from argus_lab.tools._sandbox_host import HIDDEN

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    token = "index-token-" + uuid.uuid4().hex
    (venv / "pip.conf").write_text(f"[global]\nindex-url = https://u:{token}@x/\n")
    (venv / "visible.txt").write_text("seen")
    here = [p for p in HIDDEN if os.path.lexists(p)]
    body = (
        f"venv, here = {str(venv)!r}, {here!r}\n"
        "def look(p):\n"
        "    return os.listdir(p) if os.path.isdir(p) else open(p).read()\n"
        "t('pip.conf', lambda: look(venv + '/pip.conf'))\n"
        "t('visible', lambda: look(venv + '/visible.txt'))\n"
        "for p in here:\n"
        "    t(p, lambda: look(p))\n"
    )
    tries = outcomes(ws, body, Limits(wall_time=20, python=str(venv / "bin/python")))
    assert tries.pop("visible") == "'seen'", tries  # the environment is readable
    for path, got in tries.items():
        assert got in ("''", "[]", "FileNotFoundError", "PermissionError"), (path, got)
    assert "/etc/shadow" in here or not os.path.exists("/etc/shadow")


# --- Variants already blocked, kept blocked --------------------------------------


def test_metadata_variants_outside_the_task_folder_fail(ws: al.Workspace) -> None:
    if not enforced("metadata"):
        return
    seen: dict[str, Any] = {}

    def prepare(folder: Path) -> None:
        (folder / "target.txt").write_text("host file")
        (folder / "link").symlink_to("target.txt")
        seen["before"] = state(folder / "target.txt")
        seen["path"] = folder / "target.txt"

    body = (
        "libc.syscall.restype = ctypes.c_long\n"
        "p = os.path.abspath('../../../target.txt')\n"
        "lnk = os.path.abspath('../../../link')\n"
        "def sc(*a):\n"
        "    c(0 if libc.syscall(*a) >= 0 else -1)\n"
        "t('lchown', lambda: os.lchown(lnk, 65534, 65534))\n"
        "t('lsetxattr', lambda: os.setxattr(lnk, 'user.x', b'1', "
        "follow_symlinks=False))\n"
        "t('opath_chmod', lambda: os.chmod("
        "f'/proc/self/fd/{os.open(p, os.O_PATH)}', 0o4777))\n"
        "t('fchmodat2', lambda: sc(452, -100, p.encode(), 0o4777, 0))\n"
        "t('utimensat', lambda: os.utime(p, ns=(0, 0)))\n"
        "t('setxattr_trusted', lambda: os.setxattr(p, 'trusted.x', b'1'))\n"
        "t('setxattr_security', lambda: os.setxattr(p, 'security.x', b'1'))\n"
        "t('link_procfd', lambda: os.link("
        "f'/proc/self/fd/{os.open(p, os.O_RDONLY)}', 'hl'))\n"
        "t('linkat_empty_path', lambda: c(libc.linkat("
        "os.open(p, os.O_RDONLY), b'', -100, b'hl2', 0x1000)))\n"
        "t('rename_out', lambda: os.rename(p, 'moved'))\n"
        "t('truncate_fd', lambda: os.truncate(os.open(p, os.O_RDONLY), 0))\n"
    )
    tries = outcomes(ws, body, prepare=prepare)
    assert len(tries) == 11 and "ok" not in tries.values(), tries
    assert state(seen["path"]) == seen["before"]
    assert (seen["path"].parent / "link").is_symlink()


def test_handles_x32_and_kernel_interfaces_fail(ws: al.Workspace) -> None:
    if not enforced("namespaces"):
        return
    body = (
        "libc.syscall.restype = ctypes.c_long\n"
        "def sc(*a):\n"
        "    c(0 if libc.syscall(*a) >= 0 else -1)\n"
        "buf = ctypes.create_string_buffer(256)\n"
        "mount_id = ctypes.c_int()\n"
        "t('name_to_handle_at', lambda: sc(303, -100, b'/etc/passwd', buf, "
        "ctypes.byref(mount_id), 0))\n"
        "t('open_by_handle_at', lambda: sc(304, -100, buf, 0))\n"
        "t('clone3', lambda: sc(435, 0, 0))\n"
        "t('io_uring_setup', lambda: sc(425, 1, buf))\n"
        "t('userfaultfd', lambda: sc(323, 0))\n"
        "t('bpf', lambda: sc(321, 0, 0, 0))\n"
        "t('perf_event_open', lambda: sc(298, 0, 0, -1, -1, 0))\n"
        "t('keyctl', lambda: sc(250, 0, -3, 0, 0, 0))\n"
        "t('add_key', lambda: sc(248, b'user', b'k', b'v', 1, -3))\n"
        "t('finit_module', lambda: sc(313, 0, b'', 0))\n"
        "t('personality', lambda: sc(135, 0x0040000))\n"
        "t('acct', lambda: sc(163, b'/dev/shm/acct'))\n"
        "t('setns', lambda: sc(308, os.open('/proc/self/ns/net', 0), 0))\n"
        "t('proc_sys_write', lambda: open('/proc/sys/kernel/hostname', 'w')"
        ".write('x'))\n"
        "t('sysrq', lambda: open('/proc/sysrq-trigger', 'w').write('h'))\n"
        "t('modify_ldt', lambda: sc(154, 0, buf, 16))\n"
        "t('move_pages_self', lambda: sc(279, 0, 0, 0, 0, 0, 0))\n"
        "prctl = lambda *a: sc(157, *a, *[0] * (5 - len(a)))\n"
        "t('prctl_mm', lambda: prctl(35, 8, 0))  # PR_SET_MM: argv of itself\n"
        "t('prctl_ambient', lambda: prctl(47, 2, 21))  # raise CAP_SYS_ADMIN\n"
        "t('prctl_securebits', lambda: prctl(28, 0))\n"
        "t('prctl_no_new_privs_off', lambda: prctl(38, 0))\n"
        "import resource\n"
        "t('rlimit_nofile_up', lambda: resource.setrlimit(resource.RLIMIT_NOFILE, "
        "(1 << 20, 1 << 20)))\n"
    )
    tries = outcomes(ws, body)
    assert len(tries) == 22 and "ok" not in tries.values(), tries
    # x32 system calls (bit 30 set) are another ABI the filter does not list:
    # the kernel kills the process instead of running one.
    res = attack(ws, "import ctypes\nctypes.CDLL(None).syscall(0x40000000 | 39)\n")
    assert res["killed_by"] == "SIGSYS", res
    # And the i386 ABI (int 0x80), whose numbers differ: same end.
    if os.uname().machine == "x86_64":
        code = (
            "import ctypes, mmap\n"
            "m = mmap.mmap(-1, 4096, prot=7)\n"
            "m.write(b'\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80\\xc3')  # getpid\n"
            "addr = ctypes.addressof(ctypes.c_char.from_buffer(m))\n"
            "print(ctypes.CFUNCTYPE(ctypes.c_int)(addr)())\n"
        )
        res = attack(ws, code)
        assert res["killed_by"] == "SIGSYS" and res["stdout"] == "", res


def test_only_stdio_descriptors_and_its_own_processes_are_reachable(
    ws: al.Workspace,
) -> None:
    # Every descriptor of the code: stdin (/dev/null), stdout, stderr; nothing
    # inherited. Every process it can see is its own; none is the launcher.
    code = (
        "import os, json\n"
        "fds = {}\n"
        "for fd in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        fds[fd] = os.readlink(f'/proc/self/fd/{fd}')\n"
        "    except OSError:\n"
        "        pass  # the listing's own descriptor, closed meanwhile\n"
        "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "print(json.dumps({'fds': fds, 'pids': pids, 'ppid': os.getppid()}))\n"
    )
    got = json.loads(attack(ws, code)["stdout"])
    assert got["fds"]["0"] == "/dev/null"
    assert got["fds"]["1"].startswith("pipe:") and got["fds"]["2"].startswith("pipe:")
    assert set(got["fds"]) == {"0", "1", "2"}, got["fds"]
    if STATUS["rules"]["lifetime"] == "pid namespace":
        assert got["pids"] == [1] and got["ppid"] == 0, got


def test_priorities_of_host_processes_cannot_be_changed(ws: al.Workspace) -> None:
    # setpriority(PRIO_USER) and ioprio_set(IOPRIO_WHO_USER) act on every
    # process of a uid: the code's uid is nobody's, as are host daemons and
    # other sessions' sandboxes. The PID namespace limits both to its own.
    if not enforced("signals"):
        return
    victim = None
    if os.geteuid() == 0:
        victim = psutil.Popen(["sleep", "60"], user=65534, group=65534)
    try:
        body = (
            "libc.syscall.restype = ctypes.c_long\n"
            "uid = os.getuid()\n"
            "t('setpriority', lambda: c(libc.setpriority(2, uid, 19)))\n"
            "t('ioprio', lambda: c(libc.syscall(251, 3, uid, 3 << 13)))\n"
            "t('kill_all', lambda: os.kill(-1, 9) if os.fork() else os._exit(0))\n"
        )
        tries = outcomes(ws, body)
        assert tries["kill_all"] in ("ok", "ProcessLookupError"), tries
        if victim is not None:
            assert victim.nice() == 0 and victim.is_running()
            assert victim.ionice().ioclass != psutil.IOPRIO_CLASS_IDLE
    finally:
        if victim is not None:
            victim.kill()
            victim.wait()


@pytest.mark.slow
def test_memfd_and_dev_shm_count_against_the_memory_limit(ws: al.Workspace) -> None:
    if STATUS["rules"]["memory"] != "memory cgroup":
        assert any(w.startswith("rule 'memory'") for w in STATUS["warnings"])
        return
    limit = 192 << 20
    code = (
        "import os, ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "made = 0\n"
        "try:\n"
        "    for i in range(3):  # /dev/shm holds 64 MiB, the file-size limit\n"
        "        with open(f'/dev/shm/f{i}', 'wb') as f:\n"
        "            f.write(b'x' * (60 << 20)); made += 60\n"
        "    for i in range(8):\n"
        "        fd = libc.memfd_create(b'm', 0)\n"
        "        os.write(fd, b'x' * (60 << 20)); made += 60\n"
        "except OSError as e:\n"
        "    print('stopped', made, e.errno)\n"
        "print('made', made)\n"
    )
    res = attack(ws, code, Limits(wall_time=30, memory=limit))
    assert res["memory_peak"] <= limit, res
    assert res["killed_by"] == "memory" or "stopped" in res["stdout"], res


def test_a_thread_bomb_stops_at_the_process_limit(ws: al.Workspace) -> None:
    if STATUS["rules"]["processes"] != "pids cgroup":
        assert enforced("processes")
        return
    code = (
        "import threading, time\n"
        "ev = threading.Event()\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(500):\n"
        "        threading.Thread(target=ev.wait, daemon=True).start(); n += 1\n"
        "except RuntimeError as e:\n"
        "    print('stopped', n)\n"
        "ev.set()\n"
    )
    res = attack(ws, code, Limits(wall_time=20, processes=32))
    assert res["stdout"].startswith("stopped"), res
    assert int(res["stdout"].split()[1]) < 32


def test_a_secret_across_the_copy_chunks_or_in_a_link_never_lands(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The launcher copies in 1 MiB chunks: a secret across a chunk boundary,
    # deep in a folder, in a hidden file, or as a symlink's target.
    secret = "chunk-" + uuid.uuid4().hex
    monkeypatch.setenv("ARGUS_CHUNK_TOKEN", secret)
    code = (
        "import os\n"
        "s = '${env.ARGUS_CHUNK_TOKEN}'\n"
        "head = 'a' * ((1 << 20) - 7)\n"
        "open('big.txt', 'w').write(head + s + 'b' * (1 << 20))\n"
        "os.makedirs('a/b/c')\n"
        "open('a/b/c/deep.txt', 'w').write('x\\n' + s)\n"
        "open('.hidden', 'w').write(s)\n"
        "os.symlink('/x/' + s, 'link')\n"
    )
    res = attack(ws, code)
    assert res["exit_code"] == 0, res
    big = next(p for k, p in res["files"].items() if k.endswith("big.txt"))
    assert big.read_text().count("[REDACTED]") == 1
    hits = [
        p
        for p in ws.path.rglob("*")
        if secret in str(p)
        or (p.is_symlink() and secret in os.readlink(p))
        or (p.is_file() and not p.is_symlink() and secret.encode() in p.read_bytes())
    ]
    assert hits == []


def test_empty_folders_and_special_files_are_not_copied_out(ws: al.Workspace) -> None:
    # 4,000 empty folders (the tmpfs has inodes for them) were all made on the
    # host, past the quota; links, FIFOs and hard links never leave either.
    if STATUS["rules"]["disk"] != "tmpfs quota":
        assert any(w.startswith("rule 'disk'") for w in STATUS["warnings"])
        return
    code = (
        "import os, socket\n"
        "for i in range(4000):\n"
        "    os.mkdir(f'e{i}')\n"
        "os.makedirs('a/b')\n"
        "open('a/b/kept.txt', 'w').write('kept')\n"
        "os.symlink('/etc/shadow', 'shadow')\n"
        "os.symlink('/etc', 'etc')\n"
        "os.mkfifo('fifo')\n"
        "open('one', 'w').write('x'); os.link('one', 'two')\n"
    )
    res = attack(ws, code)
    assert res["exit_code"] == 0, res
    assert [k.split("attempt-1/")[1] for k in res["files"]] == ["a/b/kept.txt"]
    (task_dir,) = (ws.path / "files").glob("*/tasks/attack/attempt-1")
    found = sorted(str(p.relative_to(task_dir)) for p in task_dir.rglob("*"))
    assert found == ["a", "a/b", "a/b/kept.txt"], found[:10]


def test_a_concurrent_sandbox_is_out_of_reach(tmp_path: Path) -> None:
    # Two sessions' sandboxes at once, both as nobody: B looks for A through
    # /proc/<pid>/root, /proc/<pid>/cwd, its folder on the host, signals.
    import asyncio

    from argus_lab.tools.sandbox import run_python

    if not enforced("signals") or not enforced("hidden"):
        return
    ws = tmp_path / "ws"
    marker = "a-private-" + uuid.uuid4().hex
    folder_a = ws / "files" / "A" / "tasks" / "t" / "attempt-1"
    folder_b = ws / "files" / "B" / "tasks" / "t" / "attempt-1"
    go = ws / "files" / "A" / "go"
    code_a = (
        "import os, time\n"
        f"open('secret.txt', 'w').write({marker!r})\n"
        "while not os.path.exists('../../../go'):  # until B has looked\n"
        "    time.sleep(0.05)\n"
    )
    results: dict[str, Any] = {}

    def run(name: str, code: str, folder: Path, timeout: float) -> None:
        session = folder.parents[2]
        results[name] = asyncio.run(
            run_python(
                code,
                folder,
                limits=Limits(wall_time=timeout),
                readable=[session],
                hidden=[ws],
            )
        )

    (ws / "files" / "A").mkdir(parents=True)
    a = threading.Thread(target=run, args=("a", code_a, folder_a, 30))
    a.start()
    try:
        deadline = time.monotonic() + 20
        pid_a = None
        while pid_a is None and time.monotonic() < deadline:
            for p in psutil.process_iter(["cmdline"]):
                cmd = p.info["cmdline"] or []  # the config names the folder
                if any(str(folder_a) in c for c in cmd) and p.ppid() != os.getpid():
                    pid_a = p.pid  # the code's process, not its launcher
            a.join(0.05)
        assert pid_a is not None, "sandbox A did not start"
        code_b = (
            "import os, json\n"
            "found = {}\n"
            f"where = ['/proc/{pid_a}/root', '/proc/{pid_a}/cwd', {str(folder_a)!r}]\n"
            "for p in where:\n"
            "    try:\n"
            "        found[p] = os.listdir(p)\n"
            "    except OSError as e:\n"
            "        found[p] = type(e).__name__\n"
            "try:\n"
            f"    os.kill({pid_a}, 9); found['kill'] = 'ok'\n"
            "except OSError as e:\n"
            "    found['kill'] = type(e).__name__\n"
            "found['pids'] = [p for p in os.listdir('/proc') if p.isdigit()]\n"
            "print(json.dumps(found))\n"
        )
        run("b", code_b, folder_b, 20)
    finally:
        go.write_text("go")
        a.join(30)
    got = json.loads(results["b"].stdout)
    assert marker not in results["b"].stdout
    assert got.pop("pids") == ["1"]
    assert got.pop("kill") == "ProcessLookupError"
    for path, seen in got.items():
        assert seen in ("FileNotFoundError", "PermissionError", []), (path, seen)
    assert results["a"].exit_code == 0 and (folder_a / "secret.txt").exists()


@pytest.mark.slow
def test_memory_the_oom_killer_cannot_see_does_not_kill_the_launcher(
    ws: al.Workspace,
) -> None:
    # memfd pages count in no process's resident memory: the OOM killer picked
    # the launcher (the biggest process it could see), and the produced files
    # and the launcher's report were lost. The launcher leaves the cgroups.
    if STATUS["rules"]["memory"] != "memory cgroup":
        assert any(w.startswith("rule 'memory'") for w in STATUS["warnings"])
        return
    code = (
        "import os, ctypes\n"
        "open('kept.txt', 'w').write('kept')\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "chunk = b'x' * (1 << 16)\n"
        "while True:\n"
        "    fd = libc.memfd_create(b'm', 0)\n"
        "    for _ in range(512):\n"
        "        os.write(fd, chunk)\n"
    )
    for _ in range(2):  # the OOM killer's pick was the launcher every time
        res = attack(ws, code, Limits(wall_time=30, memory=192 << 20))
        assert res["killed_by"] == "memory", res
        assert [Path(k).name for k in res["files"]] == ["kept.txt"], res


def test_a_long_output_is_never_cut_inside_a_secret(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Output over the limit keeps its head and tail: a secret printed across
    # either cut kept its first (or last) characters, which the redactor no
    # longer recognised, and so they were stored.
    secret = "cut-" + uuid.uuid4().hex
    monkeypatch.setenv("ARGUS_CUT_TOKEN", secret)
    limit = 4096
    tail = limit // 4
    code = (
        "import sys\n"
        "s = '${env.ARGUS_CUT_TOKEN}'\n"
        f"sys.stdout.write('a' * ({limit - tail} - 14) + s)  # across the head's end\n"
        "sys.stdout.write('b' * 20000)\n"
        f"sys.stdout.write(s + 'c' * ({tail} - 14))  # across the tail's start\n"
    )
    res = attack(ws, code, Limits(wall_time=20, output=limit))
    out = res["stdout"]
    assert "[... truncated" in out
    for piece in (secret[:12], secret[-12:], secret[:8], secret[-8:]):
        assert piece not in out, piece
    assert out.startswith("a" * 100) and out.endswith("c" * 100)
    # The end of stderr in a failure's message is cut the same way.
    failing = (
        "import sys\n"
        "sys.stderr.write('x' * 100 + '${env.ARGUS_CUT_TOKEN}' + 'c' * 1486)\n"
        "raise SystemExit(1)\n"
    )
    task = {"id": "attack", "tool": "python", "args": {"code": failing, "check": True}}
    s = session(ws, [task], Limits(wall_time=20, output=limit))
    error = s.record("attack").error or ""
    assert "stderr (end):\n..." + "c" * 1486 in error, error[-1600:]
    assert secret[-8:] not in error  # its last 14 characters were kept
    stored = [p for p in ws.path.rglob("*") if p.is_file()]
    for piece in (secret[:12], secret[-12:]):
        assert not [p for p in stored if piece.encode() in p.read_bytes()], piece


def test_the_seccomp_filter_builds_wherever_libseccomp_loads() -> None:
    # One rule libseccomp refused (a system call name it did not know) once
    # dropped the whole filter, and every seccomp attack above then passed by
    # finding the rule "not enforced". Where libseccomp loads, it must build.
    from argus_lab.tools._sandbox_kernel import seccomp_filter

    bpf, why = seccomp_filter()
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, OSError):
        assert not bpf and why and "unavailable" in why
        assert not enforced("ptrace")  # and the status says what is open
        return
    assert bpf and why is None, why
    assert STATUS["seccomp"] is True, STATUS["notes"]


def test_the_code_and_its_secrets_are_not_in_any_process_listing(
    tmp_path: Path,
) -> None:
    # The code went in the launcher's argv: `ps` on the host, for any user,
    # showed it, and with it every secret a ${env.NAME} had put in it.

    secret = "ps-" + uuid.uuid4().hex
    folder = tmp_path / "s" / "tasks" / "t" / "attempt-1"
    go = tmp_path / "s" / "go"
    code = (
        "import os, time\n"
        f"token = {secret!r}\n"
        "while not os.path.exists('../../../go'):\n"
        "    time.sleep(0.05)\n"
        "print(len(token))\n"
    )
    thread, results = _started(code, folder, tmp_path / "s")
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 20
        while len(seen) < 2 and time.monotonic() < deadline:
            seen = []
            for p in psutil.process_iter(["cmdline"]):
                cmd = "\0".join(p.info["cmdline"] or [])
                if "_launcher()" in cmd and str(folder) in cmd:
                    seen.append(cmd)  # the launcher and the code's process
            thread.join(0.05)
        assert len(seen) == 2, "the sandbox's processes were not found"
        assert not [cmd for cmd in seen if secret in cmd]
    finally:
        go.write_text("go")
        thread.join(30)
    assert results[0].stdout == f"{len(secret)}\n", results[0]


# --- A third attacker's round ----------------------------------------------------


def test_folders_cannot_be_watched_with_dnotify_nor_files_leased(
    ws: al.Workspace,
) -> None:
    # inotify and fanotify were closed, but fcntl(F_NOTIFY) (dnotify) watches
    # any readable folder the same way: a signal per file read or made in
    # /etc or the session folder, the host's activity seen from inside (and a
    # channel between sandboxes). A lease (F_SETLEASE) on a file the code's
    # uid owns (every file of the user when Argus runs unprivileged) made the
    # host's open for writing wait until the run ended (up to 45 s).
    if not enforced("ipc"):
        return
    stop = threading.Event()
    waited: list[float] = []

    def prepare(folder: Path) -> None:
        (folder / "mine.txt").write_text("the host writes this")
        if os.geteuid() == 0:  # the code's uid owns it, as without root
            os.chown(folder / "mine.txt", STATUS["uid"], STATUS["uid"])

        def poke() -> None:  # the host works in the session folder meanwhile
            i = 0
            while not stop.wait(0.2):
                (folder / f"host-{i}.txt").write_text("x")
                t0 = time.monotonic()
                with contextlib.suppress(OSError), open(folder / "mine.txt", "w"):
                    pass
                waited.append(time.monotonic() - t0)
                i += 1

        threading.Thread(target=poke, daemon=True).start()

    body = (
        "import fcntl, signal, time\n"
        "seen = []\n"
        "signal.signal(signal.SIGIO, lambda *a: seen.append(1))\n"
        "def watch(path):\n"
        "    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)\n"
        "    fcntl.fcntl(fd, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_CREATE"
        " | fcntl.DN_MODIFY | fcntl.DN_MULTISHOT)\n"
        "def lease():\n"
        "    fd = os.open('../../../mine.txt', os.O_RDONLY)\n"
        "    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)\n"
        "t('dnotify_session', lambda: watch('../../..'))\n"
        "t('dnotify_etc', lambda: watch('/etc'))\n"
        "t('lease', lease)\n"
        "time.sleep(2)\n"
        "t('signals', lambda: len(seen))\n"
    )
    try:
        tries = outcomes(ws, body, prepare=prepare)
    finally:
        stop.set()
    assert tries.pop("signals") == "ok", tries  # len(seen) == 0: nothing seen
    assert "ok" not in tries.values(), tries
    assert waited and max(waited) < 1, waited  # the host never waited on a lease


def test_seccomp_argument_checks_cannot_be_passed_with_high_bits(
    ws: al.Workspace,
) -> None:
    # The kernel reads an int argument's low 32 bits only, seccomp all 64: a
    # datagram socketpair with 1 << 32 added to its family (AF_UNIX to the
    # kernel, not AF_UNIX to the filter) reached a host path socket again, and
    # fcntl(F_NOTIFY) passed the same way.
    if not enforced("unix_sockets"):
        return
    servers = []

    def prepare(folder: Path) -> None:
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        servers.append(srv)
        with contextlib.chdir(folder):
            srv.bind("dgram.sock")
        os.chmod(folder / "dgram.sock", 0o777)
        srv.setblocking(False)

    body = (
        "libc.syscall.restype = ctypes.c_long\n"
        "L = ctypes.c_long\n"
        "dg = os.path.abspath('../../../dgram.sock')\n"
        "def pair(family, kind):\n"
        "    sv = (ctypes.c_int * 2)()\n"
        "    c(0 if libc.syscall(L(53), L(family), L(kind), L(0), sv) == 0 else -1)\n"
        "    socket.socket(fileno=sv[0]).sendto(b'x', dg)\n"
        "def sock(family):\n"
        "    fd = libc.syscall(L(41), L(family), L(2), L(0))\n"
        "    c(0 if fd >= 0 else -1)\n"
        "    socket.socket(fileno=fd).sendto(b'x', dg)\n"
        "def notify(cmd):\n"
        "    fd = os.open('/etc', os.O_RDONLY | os.O_DIRECTORY)\n"
        "    c(0 if libc.syscall(L(72), L(fd), L(cmd), L(0x80000004)) == 0 else -1)\n"
        "for high in (1 << 32, 0xFFFFFFFF << 32):\n"
        "    t(f'dgram_pair {high:#x}', lambda: pair(high | 1, 2))\n"
        "    t(f'raw_pair {high:#x}', lambda: pair(high | 1, 3))\n"
        "    t(f'unix_socket {high:#x}', lambda: sock(high | 1))\n"
        "    t(f'dnotify {high:#x}', lambda: notify(high | 1026))\n"
    )
    try:
        tries = outcomes(ws, body, prepare=prepare)
        assert len(tries) == 8 and "ok" not in tries.values(), tries
        with pytest.raises(BlockingIOError):
            servers[0].recv(100)  # no datagram arrived
    finally:
        for srv in servers:
            srv.close()


def test_the_wall_time_signal_after_the_code_ended_harms_nothing(
    tmp_path: Path,
) -> None:
    # At the wall-time limit the host signals the launcher, which killed the
    # code by its pid. When the code had just ended (the launcher copying
    # its files out), that pid was already reaped: the kill raised inside the
    # copy (a file kept cut short, or lost) or after it (exit code 1 for the
    # code's 5), and a host process given the pid since (the code can cycle
    # the host's pids by forking) would have been killed, by root.
    import signal

    if STATUS["rules"]["disk"] != "tmpfs quota":
        return  # no copy out: nothing runs after the code
    folder = tmp_path / "s" / "tasks" / "t" / "attempt-1"
    code = (
        "import os, time\n"
        "while not os.path.exists('../../../go'):  # until the host watches\n"
        "    time.sleep(0.01)\n"
        "for i in range(60):  # 240 MiB: the copy out takes a while\n"
        "    with open(f'f{i}', 'wb') as f:\n"
        "        f.write(bytes([i]) * (4 << 20))\n"
        "os._exit(5)\n"
    )
    thread, results = _started(code, folder, tmp_path / "s")
    signalled = False
    try:
        launcher = child = None
        deadline = time.monotonic() + 20
        while child is None and time.monotonic() < deadline:
            for p in psutil.Process().children():  # the launcher, not the code
                with contextlib.suppress(psutil.Error):
                    if str(folder) in "\0".join(p.cmdline()):
                        launcher = p
                        child = next(iter(p.children()), None)
            time.sleep(0.001)
        assert launcher is not None and child is not None, "no sandbox found"
        (tmp_path / "s" / "go").write_text("go")
        while child.is_running() and time.monotonic() < deadline:
            time.sleep(0.0005)  # until the launcher has reaped the code
        with contextlib.suppress(psutil.NoSuchProcess):
            launcher.send_signal(signal.SIGUSR1)  # the host's wall-time stop
            signalled = True
    finally:
        (tmp_path / "s" / "go").write_text("go")
        thread.join(60)
    res = results[0]
    assert signalled, "the copy out ended before the signal: nothing was tried"
    assert res.exit_code == 5 and not res.warnings, (res.exit_code, res.warnings)
    assert len(res.files) == 60, res.files
    for p in res.files:  # every file whole, none cut short
        assert p.stat().st_size == 4 << 20, p


def test_a_name_too_long_once_masked_does_not_stop_the_sweep(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "[REDACTED]" is longer than a short secret (6 characters): a 255-byte
    # name holding one could not be renamed masked (ENAMETOOLONG). The sweep
    # stopped there, the task failed, and the name, and every file the sweep
    # had not reached yet (deeper folders go first), stayed on disk unmasked.
    secret = "Zq" + uuid.uuid4().hex[:4]
    monkeypatch.setenv("ARGUS_SHORT_TOKEN", secret)
    code = (
        "import os\n"
        "s = '${env.ARGUS_SHORT_TOKEN}'\n"
        "open('leak.txt', 'w').write('plain ' + s)\n"
        "os.makedirs('a/b')\n"
        "open('a/b/' + s * 42 + 'abc', 'w').write('x')  # 255 bytes\n"
        "os.mkdir('x' * 249 + s)  # 255 bytes\n"
        "open('x' * 249 + s + '/inner.txt', 'w').write(s)\n"
        "open('plain.txt', 'w').write('kept')\n"
    )
    res = attack(ws, code)
    assert res["exit_code"] == 0, res
    assert [k.split("attempt-1/")[1] for k in res["files"]] == [
        "leak.txt",
        "plain.txt",
    ], res["files"]
    for p in ws.path.rglob("*"):
        assert secret not in str(p), p
        if p.is_file():
            assert secret.encode() not in p.read_bytes(), p
