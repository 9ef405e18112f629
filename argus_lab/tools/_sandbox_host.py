"""The parent side of the ``python`` tool's sandbox (see ``argus_lab.tools.sandbox``).

Its limits and result types, the child's source text, the environment, the pids
cgroup, output capture, the child's report and what it means, and the probe
behind ``sandbox_status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argus_lab.tools._sandbox_child import _boot, _landlock, _launcher, _mounts


@dataclass(frozen=True, slots=True)
class Limits:
    """Limits of one run of the ``python`` tool."""

    wall_time: float = 60.0
    """Seconds of real time when the call gives no ``timeout``."""
    max_wall_time: float = 600.0
    """Largest ``timeout`` a call may ask for; larger ones are lowered to it."""
    cpu_time: float | None = None
    """CPU seconds per process (SIGXCPU, then SIGKILL); None: the wall time."""
    memory: int = 2 << 30
    """Address space per process, bytes (RLIMIT_AS)."""
    file_size: int = 64 << 20
    """Largest file the code may write, bytes (RLIMIT_FSIZE)."""
    processes: int = 64
    """Most processes at once (pids cgroup or RLIMIT_NPROC)."""
    open_files: int = 1024
    """Most open files per process (RLIMIT_NOFILE)."""
    output: int = 64 << 10
    """Bytes kept of stdout and of stderr each; the middle is cut with a marker."""
    max_files: int = 200
    """Most produced files listed in the result."""
    max_code: int = 100_000
    """Largest ``code`` accepted, bytes (it travels as one argument)."""
    network: bool = False
    """Allow network access (by default it is cut off where the OS allows)."""
    require_isolation: bool = False
    """Refuse to run (ToolError) where a file, network or process layer is missing."""
    python: str | None = None
    """The interpreter to run; default: the one running Argus Lab."""


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
    warnings: list[str] = field(default_factory=list)
    """Each isolation layer that was not available, and each limit adjusted."""


@functools.cache
def _sources() -> tuple[str, str]:
    """(launcher source, boot source), cut out of ``_sandbox_child``'s text."""
    parts = [inspect.getsource(f) for f in (_launcher, _mounts, _landlock)]
    launcher = "from __future__ import annotations\nfrom typing import Any\n"
    launcher += "\n".join(textwrap.dedent(p) for p in parts)
    launcher += "\n_launcher()\n"
    boot = textwrap.dedent(inspect.getsource(_boot)) + "\n_boot()\n"
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


@functools.cache
def _pids_cgroup_parent() -> Path | None:
    """A cgroup folder where we may create pids-limited children, or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
        own_text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    own: dict[str, str] = {}
    for line in own_text.splitlines():
        _, ctrls, path = line.split(":", 2)
        for c in ctrls.split(",") if ctrls else ["<v2>"]:
            own[c] = path
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        root, mnt = fields[3], fields[4].replace("\\040", " ")
        fstype, opts = rest[0], rest[2].split(",")
        if fstype == "cgroup" and "pids" in opts and "pids" in own:
            rel = own["pids"]
        elif fstype == "cgroup2" and "<v2>" in own:
            rel = own["<v2>"]
        else:
            continue
        if root != "/" and rel.startswith(root):
            rel = rel[len(root) :]
        base = Path(mnt + "/" + rel.lstrip("/"))
        if fstype == "cgroup2":
            # Use the controller only where it is already enabled for children:
            # turning it on would change the host's cgroup setup.
            try:
                ctl = (base / "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if "pids" not in ctl:
                continue
        if os.access(base, os.W_OK):
            return base
    return None


class _Cgroup:
    """A pids cgroup of one run, removed after it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_pids: int) -> _Cgroup | None:
        base = _pids_cgroup_parent()
        if base is None:
            return None
        path = base / f"argus-sandbox-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
        except OSError:
            return None
        try:
            (path / "pids.max").write_text(str(max_pids))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    @property
    def procs(self) -> str:
        return str(self.path / "cgroup.procs")

    def remove(self) -> None:
        # Normally empty by now: the PID namespace's init waits for every process
        # in it before it exits. Kill stragglers (no PID namespace) and retry.
        for _ in range(200):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                with contextlib.suppress(OSError, ValueError):
                    for pid in Path(self.procs).read_text().split():
                        with contextlib.suppress(OSError):
                            os.kill(int(pid), signal.SIGKILL)
                time.sleep(0.005)


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class _Capture:
    """Keeps the head and tail of a stream within ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 64)
        self.tail_size = self.limit // 4
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > 2 * self.tail_size:
                del self.tail[: len(self.tail) - self.tail_size]

    def text(self) -> str:
        if self.total <= self.limit:
            return self.head.decode("utf-8", "replace")
        tail = bytes(self.tail[-self.tail_size :])
        head = bytes(self.head[: self.limit - len(tail)])
        cut = self.total - len(head) - len(tail)
        marker = f"\n[... truncated {cut} bytes ...]\n"
        return (
            head.decode("utf-8", "replace") + marker + tail.decode("utf-8", "replace")
        )


async def _drain(stream: asyncio.StreamReader | None, cap: _Capture) -> None:
    if stream is None:
        return
    while chunk := await stream.read(1 << 16):
        cap.feed(chunk)


def _read_report(fd: int) -> dict[str, Any]:
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    out: dict[str, Any] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        with contextlib.suppress(ValueError):
            out.update(json.loads(line))
    return out


def _warnings(iso: dict[str, Any], limits: Limits) -> list[str]:
    """One sentence per isolation layer that the platform did not provide."""
    notes: dict[str, str] = iso.get("notes") or {}
    userns = notes.get("user_namespace")

    def why(layer: str) -> str:
        return notes.get(layer) or userns or "not available on this platform"

    out = []
    if iso.get("filesystem") != "landlock":
        out.append(
            "file writes are not confined to the task folder (Landlock: "
            f"{why('filesystem')}); the code can write wherever this process can"
        )
    net = iso.get("network")
    if not limits.network and net == "landlock-tcp":
        out.append(
            "network: only TCP is blocked, by Landlock; UDP and unix sockets are "
            f"not (no network namespace: {why('network')})"
        )
    elif not limits.network and net != "namespace":
        out.append(f"network access is not blocked ({why('network')})")
    procs = iso.get("processes")
    if procs == "none":
        out.append(
            f"the number of processes is not limited ({why('processes')}); only "
            "the CPU and wall-time limits end a fork bomb"
        )
    elif procs == "rlimit-shared":
        out.append(
            "the process limit counts every process of this user, not only the "
            f"sandbox's (no user namespace: {userns or 'unavailable'})"
        )
    if not iso.get("pid_namespace"):
        out.append(
            "processes that leave the sandbox's process group may outlive the run "
            f"(no PID namespace: {why('pid_namespace')})"
        )
    if iso.get("filesystem") == "landlock" and not iso.get("shm"):
        out.append(
            "no private /dev/shm (no mount namespace: "
            f"{why('mount_namespace')}), so multiprocessing's locks will fail"
        )
    return out


def _config(
    folder: Path, limits: Limits, cpu: float, readable: list[Path], python: str
) -> dict[str, Any]:
    return {
        "python": python,
        "boot": _sources()[1],
        "folder": str(folder),
        "read_paths": [str(p) for p in readable],
        "network": limits.network,
        "cpu": max(1, math.ceil(cpu)),
        "memory": limits.memory,
        "file_size": limits.file_size,
        "open_files": limits.open_files,
        "processes": limits.processes,
    }


@functools.cache
def _probe(python: str, network: bool) -> dict[str, Any]:
    limits = Limits(network=network)
    with tempfile.TemporaryDirectory(prefix="argus-sandbox-probe-") as d:
        folder = Path(d)
        cfg = _config(folder, limits, 5, [], python)
        cg = _Cgroup.create(8)
        r, w = os.pipe()
        cfg["report_fd"] = w
        cfg["cgroup_procs"] = cg.procs if cg else None
        try:
            proc = subprocess.run(
                [python, "-I", "-c", _sources()[0], json.dumps(cfg), "pass"],
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
            if cg:
                cg.remove()
    iso: dict[str, Any] = dict(report.get("setup") or {})
    if not iso:
        err = proc.stderr.decode("utf-8", "replace").strip()
        iso = {"error": f"the sandbox did not start: {err[-2000:]}"}
    return iso
