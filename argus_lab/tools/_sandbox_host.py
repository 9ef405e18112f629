"""The parent side of the ``python`` tool's sandbox (see ``argus_lab.tools.sandbox``).

Its limits and result types, the child's source text, the environment, what to
hide and keep in the file view, output capture, the launcher's report, and the
probe behind ``sandbox_status``.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import math
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argus_lab.errors import ToolError
from argus_lab.tools._sandbox_child import _boot, _launcher
from argus_lab.tools._sandbox_kernel import Cgroups, seccomp_filter
from argus_lab.tools._sandbox_landlock import _landlock
from argus_lab.tools._sandbox_view import _copy_out, _quota, _view


@dataclass(frozen=True, slots=True)
class Limits:
    """Limits of one run of the ``python`` tool."""

    wall_time: float = 60.0
    """Seconds of real time when the call gives no ``timeout``."""
    max_wall_time: float = 600.0
    """Largest ``timeout`` a call may ask for; larger ones are lowered to it."""
    cpu_time: float | None = None
    """CPU seconds per process (then SIGKILL); None: the wall time."""
    memory: int = 2 << 30
    """Memory of the whole process tree, bytes (memory cgroup; the task folder's
    files count too, as they live in memory), and address space per process
    (RLIMIT_AS)."""
    file_size: int = 64 << 20
    """Largest file the code may write, bytes (RLIMIT_FSIZE)."""
    disk: int = 256 << 20
    """Quota of the task folder, bytes (a tmpfs of this size); the produced
    files copied out, and so stored as artifacts, never exceed it."""
    processes: int = 64
    """Most processes at once (pids cgroup or RLIMIT_NPROC)."""
    cpus: float | None = None
    """Cores the whole process tree may keep busy at once (cpu cgroup); None:
    all of this machine's but one (at least one), so the host keeps a core."""
    open_files: int = 1024
    """Most open files per process (RLIMIT_NOFILE)."""
    output: int = 64 << 10
    """Bytes kept of stdout and of stderr each; the middle is cut with a marker."""
    max_files: int = 200
    """Most produced files kept (copied out and listed in the result)."""
    max_code: int = 100_000
    """Largest ``code`` accepted, bytes (it travels as one argument)."""
    network: bool = False
    """Allow network access (by default it is cut off where the OS allows)."""
    require_isolation: bool = False
    """Refuse to run (ToolError) where any rule of the threat model is left
    unenforced (see ``sandbox_status``)."""
    python: str | None = None
    """The interpreter to run; default: the one running Argus Lab."""

    def cores(self) -> float:
        """``cpus``, or its default for this machine."""
        if self.cpus is not None:
            return self.cpus
        return float(max(1, (os.cpu_count() or 1) - 1))


@dataclass(slots=True)
class RunResult:
    """What one sandboxed run produced."""

    exit_code: int
    """The exit code; minus the signal number if a signal ended it."""
    stdout: str
    """Captured stdout, cut in the middle with a marker if over the limit."""
    stderr: str
    """Captured stderr, likewise."""
    timed_out: bool
    """True if the wall-time limit ended the run."""
    killed_by: str | None
    """"wall_time", "cpu_time", a signal name such as "SIGSEGV", or None."""
    files: list[Path]
    """Regular files in the task folder afterwards; symlinks, files with several
    hard links and hidden files or folders (such as caches under HOME) are not
    listed."""
    isolation: dict[str, Any] = field(default_factory=dict)
    """What the sandbox set up (see ``sandbox_status``)."""
    memory_peak: int | None = None
    """Peak memory of the whole process tree, bytes (None without a memory
    cgroup)."""
    warnings: list[str] = field(default_factory=list)
    """Each isolation layer that was not available, and each limit adjusted."""


@functools.cache
def _sources() -> tuple[str, str]:
    """(launcher source, boot source), cut out of the ``_sandbox_*`` modules' text."""
    funcs = (_launcher, _quota, _view, _copy_out, _landlock, _boot)
    # Annotations stay strings (never evaluated), so ``Any`` needs no import.
    launcher = "from __future__ import annotations\n"
    launcher += "\n".join(textwrap.dedent(inspect.getsource(f)) for f in funcs)
    launcher += "\n_launcher()\n"
    boot = textwrap.dedent(inspect.getsource(_boot))
    return launcher, boot


def _env(folder: Path, python: str) -> dict[str, str]:
    bindir = os.path.dirname(python)
    return {
        "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": str(folder),
        "TMPDIR": str(folder),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }


def _code_fd(code: str) -> int:
    """The code in an anonymous memory file, for the launcher to read (then
    close): in its argv every user of the host could read it with ``ps``,
    secrets from ``${env.NAME}`` included. -1 where there is no memfd (not
    Linux: the code then goes in argv)."""
    if not hasattr(os, "memfd_create"):
        return -1
    fd = os.memfd_create("argus-code", os.MFD_CLOEXEC)
    view = memoryview(code.encode("utf-8", "surrogatepass"))
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _encode_config(cfg: dict[str, Any]) -> str:
    """The launcher's argument: one ``key<TAB>type<TAB>value`` line per entry
    (str, int, bool, list of str, dict of str), which it parses without an
    import (``json`` would be paid on every call).

    Raises:
        ToolError: a path or value holding a tab, a newline or ``\x1f``.
    """
    lines = []
    for key, v in cfg.items():
        if isinstance(v, bool):
            kind, items = "b", ["1" if v else "0"]
        elif isinstance(v, int):
            kind, items = "i", [str(v)]
        elif isinstance(v, list):
            kind, items = "l", [str(x) for x in v]
        elif isinstance(v, dict):
            kind, items = "d", [f"{k}={x}" for k, x in v.items()]
        else:
            kind, items = "s", [str(v)]
        bad = [x for x in items if "\t" in x or "\n" in x or "\x1f" in x]
        if bad:
            raise ToolError(
                f"python: {key} holds a tab, newline or \\x1f ({bad[0]!r}); the "
                "sandbox cannot be set up for such a path"
            )
        lines.append(f"{key}\t{kind}\t" + "\x1f".join(items))
    return "\n".join(lines)


class _Report:
    """The launcher's report lines (``setup``, ``child``, ``exit``), read as they
    come: each the ``repr`` of a dict, parsed with ``ast.literal_eval``. Only
    the launcher writes them (the code never holds the pipe)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.buf = b""
        self.data: dict[str, Any] = {}

    def poll(self) -> dict[str, Any]:
        """Reads what is there without blocking; returns everything so far."""
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            with contextlib.suppress(ValueError, SyntaxError, TypeError):
                self.data.update(ast.literal_eval(line.decode("utf-8", "replace")))
        return self.data


def _read_report(fd: int) -> dict[str, Any]:
    """Everything the launcher reported (call once its write end is closed)."""
    return _Report(fd).poll()


_SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/dev", "/proc", "/sys")
HIDDEN = (
    "/root",
    "/home",
    "/tmp",
    "/var/tmp",
    "/run",
    "/mnt",
    "/media",
    "/srv",
    "/boot",
    "/var/lib",
    "/var/log",
    "/var/mail",
    "/var/spool",
    "/var/backups",
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    # World-readable places credentials are often kept in (code running as
    # nobody reads them all the same), and root-only ones, for the unprivileged
    # user who may be in their group.
    "/etc/environment",
    "/etc/pip.conf",
    "/etc/xdg/pip",
    "/etc/netrc",
    "/etc/.git-credentials",
    "/etc/apt/auth.conf",
    "/etc/apt/auth.conf.d",
    "/etc/docker",
    "/etc/containers/auth.json",
    "/etc/NetworkManager/system-connections",
    "/etc/wireguard",
    "/etc/ipsec.secrets",
    "/etc/ipsec.d/private",
    "/etc/ppp/chap-secrets",
    "/etc/ppp/pap-secrets",
    "/etc/krb5.keytab",
    "/etc/letsencrypt",
    "/etc/pki/tls/private",
    "/etc/credstore",
    "/etc/credstore.encrypted",
    "/etc/security/opasswd",
    "/etc/libvirt/secrets",
    "/etc/mysql/debian.cnf",
)
"""Hidden from the code on every machine: secrets-bearing system paths, home
folders and the places sockets live. The workspace, the project and the current
folder are added per run (see ``_hidden``)."""


_PIP_CONFIG = ("pip.conf", "pip.ini")


def _under(p: str, q: str) -> bool:
    return p == q or p.startswith(q.rstrip("/") + "/")


def _python_roots(python: str) -> list[str]:
    """The interpreter's installation: what the code may read and execute."""
    roots = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        roots = []  # another interpreter: its own installation only
    real = os.path.realpath(python)
    roots += [os.path.dirname(real), os.path.dirname(os.path.dirname(real))]
    roots += [os.path.dirname(python), os.path.dirname(os.path.dirname(python))]
    return [r for r in dict.fromkeys(os.path.realpath(r) for r in roots) if r != "/"]


def _hidden(extra: list[Path]) -> list[str]:
    """What the code must not see: ``HIDDEN``, the workspace(s) given, the
    project (where ``argus_lab`` is imported from when it is not an installed
    package), every other folder on this process's import path (an editable
    install puts a project there), the current folder and HOME."""
    import argus_lab

    found = [*HIDDEN, *(str(p) for p in extra)]
    here = Path(argus_lab.__file__).resolve().parents[1]
    if "site-packages" not in here.parts and "dist-packages" not in here.parts:
        found.append(str(here))
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
    for p in sys.path:
        real = os.path.realpath(p) if p and os.path.isabs(p) else ""
        if real and os.path.isdir(real) and not any(_under(real, q) for q in prefixes):
            found.append(real)
    found += [os.getcwd(), os.path.expanduser("~"), os.environ.get("ARGUS_HOME", "")]
    out = []
    for p in found:
        if not p or not os.path.isabs(p):
            continue
        p = os.path.realpath(p)
        if any(_under(s, p) for s in _SYSTEM):  # "/" or an ancestor of /usr
            continue
        out.append(p)
    return list(dict.fromkeys(out))


def _config(
    folder: Path,
    limits: Limits,
    cpu: float,
    readable: list[Path],
    python: str,
    hidden: list[Path] | None = None,
) -> dict[str, Any]:
    roots = _python_roots(python)
    reads = [os.path.realpath(p) for p in readable]
    bpf, _ = seccomp_filter()
    return {
        "python": python,
        "folder": str(folder),
        "read_paths": reads,
        "python_roots": roots,
        # pip's configuration in a virtual environment may hold an index URL
        # with a token in it; the environment itself stays readable.
        "hide": _hidden(
            [*(hidden or []), *(Path(r, n) for r in roots for n in _PIP_CONFIG)]
        ),
        "keep": [*roots, *reads, str(folder)],
        "uid": 65534,  # nobody: the code's uid when Argus Lab runs as root
        "network": limits.network,
        "cpu": max(1, math.ceil(cpu)),
        "memory": limits.memory,
        "file_size": limits.file_size,
        "disk": limits.disk,
        "max_inodes": max(4 * limits.max_files, 4096),
        "max_files": limits.max_files,
        "open_files": limits.open_files,
        "processes": limits.processes,
        "seccomp": bpf.hex(),
        "cgroups": {},
        "cgroups_home": {},
    }


@functools.cache
def _probe(python: str, network: bool) -> dict[str, Any]:
    limits = Limits(network=network)
    with tempfile.TemporaryDirectory(prefix="argus-sandbox-probe-") as d:
        folder = Path(d)
        cfg = _config(folder, limits, 5, [], python)
        cg = Cgroups.create(8, 256 << 20, limits.cores())
        r, w = os.pipe()
        cfg["report_fd"] = w
        cfg["cgroups"], cfg["cgroups_home"] = cg.procs, cg.home
        try:
            proc = subprocess.run(
                [python, "-I", "-c", _sources()[0], _encode_config(cfg), "pass"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                cwd=folder,
                env=_env(folder, python),
                start_new_session=True,
                pass_fds=(w,),
                timeout=30,
                check=False,
            )
            os.close(w)
            w = -1
            report = _read_report(r)
        finally:
            if w >= 0:
                os.close(w)
            os.close(r)
            cg.remove()
    iso: dict[str, Any] = dict(report.get("setup") or {})
    if not iso:
        err = proc.stderr.decode("utf-8", "replace").strip()
        iso = {"error": f"the sandbox did not start: {err[-2000:]}"}
    return iso
