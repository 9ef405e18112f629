"""The ``python`` tool: code runs in a separate, limited, isolated ``python -I``.

What is enforced, and how (Linux; each layer is used where the kernel allows it,
and a run's result lists under ``warnings`` every layer that was missing):

- **Files**: Landlock (Linux >= 5.13, via ``ctypes``) lets the code write only in
  its task folder (and a private /dev/shm) and read only the system folders, the
  Python installation and import path, and the session folder. Without Landlock
  only ordinary file permissions stop writes elsewhere.
- **Network**: a new network namespace with no interface up, not even loopback
  (as root directly, otherwise inside a new user namespace). Where neither is
  allowed, Landlock ABI >= 4 (Linux >= 6.7) still denies TCP connect and bind.
- **Processes**: a pids cgroup with ``pids.max`` where we may create one (root);
  else ``RLIMIT_NPROC``, which counts only the sandbox's processes when it runs
  in its own user namespace (Linux >= 5.14). Root ignores ``RLIMIT_NPROC``: root
  without a pids cgroup gets no process cap, only the CPU and wall-time limits.
- **Lifetime**: a new PID namespace whose first process reaps orphans and whose
  exit makes the kernel kill whatever is left; the caller kills the whole
  process group at the wall-time limit and on cancellation.
- **Privileges and the rest**: the capability bounding set and all capabilities
  are dropped and ``no_new_privs`` is set (as root the code is a powerless uid
  0); a mount namespace gives a private /proc and /dev/shm, an IPC namespace
  private System V IPC; rlimits cap CPU seconds, address space, file size and
  open files; the environment holds only PATH, LANG, LC_ALL, HOME, TMPDIR,
  PYTHONDONTWRITEBYTECODE and PYTHONIOENCODING.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from argus_lab.errors import ToolError
from argus_lab.tools._sandbox_host import (
    Limits,
    RunResult,
    _Capture,
    _Cgroup,
    _drain,
    _killpg,
    _probe,
)

# Used here, and also reached through this module by the tests.
from argus_lab.tools._sandbox_host import _config as _config
from argus_lab.tools._sandbox_host import _env as _env
from argus_lab.tools._sandbox_host import _read_report as _read_report
from argus_lab.tools._sandbox_host import _sources as _sources
from argus_lab.tools._sandbox_host import _warnings as _warnings
from argus_lab.tools.files import walk_files
from argus_lab.tools.registry import Tool, ToolContext, tool

__all__ = [
    "Limits",
    "RunResult",
    "make_python_tool",
    "run_python",
    "sandbox_status",
    "task_folder",
]

_DRAIN_GRACE = 2.0
"""Seconds to wait for the output pipes to close once the sandbox has ended."""


def sandbox_status(
    *, python: str | None = None, network: bool = False
) -> dict[str, Any]:
    """What isolation the ``python`` tool gets on this machine, found by trying it.

    Returns:
        The sandbox's own report (``filesystem``, ``landlock`` ABI, ``network``,
        ``processes``, ``pid_namespace``, ``user_namespace``, ``capabilities``,
        ``notes`` on what failed and why) plus ``warnings``: one sentence per
        missing layer, empty when everything is enforced. Cached per interpreter.
    """
    if sys.platform == "win32":
        return {"error": "the python tool needs Linux or macOS", "warnings": []}
    iso = dict(_probe(python or sys.executable, network))
    if "error" not in iso:
        iso["warnings"] = _warnings(iso, Limits(network=network))
    return iso


def _wall(limits: Limits, timeout: float | None, warnings: list[str]) -> float:
    if timeout is None:
        return limits.wall_time
    if not timeout > 0 or math.isinf(timeout):
        raise ToolError(
            f"python: timeout must be a positive number of seconds, got {timeout!r}"
        )
    if timeout > limits.max_wall_time:
        warnings.append(
            f"timeout {timeout:g}s lowered to the maximum of {limits.max_wall_time:g}s"
        )
        return limits.max_wall_time
    return float(timeout)


async def run_python(
    code: str,
    folder: Path,
    *,
    limits: Limits = Limits(),  # frozen, so one shared default is safe  # noqa: B008
    timeout: float | None = None,
    readable: list[Path] | None = None,
) -> RunResult:
    """Runs ``code`` in the sandbox with ``folder`` as its working folder.

    Args:
        code: Python source.
        folder: The task folder: the working folder, HOME and TMPDIR, and the only
            place the code may write. Created if missing.
        limits: The limits (see ``Limits``).
        timeout: Wall-time seconds; default ``limits.wall_time``.
        readable: More folders the code may read (not write).

    Raises:
        ToolError: Bad arguments, an unsupported platform, isolation missing while
            ``limits.require_isolation`` is set, or a sandbox that failed to start.
    """
    if sys.platform == "win32":
        raise ToolError("python: the sandbox needs Linux or macOS")
    if not isinstance(code, str):
        raise ToolError(f"python: code must be a string, got {type(code).__name__}")
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > limits.max_code or "\x00" in code:
        raise ToolError(
            f"python: code is {size} bytes, over the limit of {limits.max_code} (or "
            "holds a NUL byte); write long code to a file with write_file and run "
            "it with exec(open(path).read())"
        )
    warnings: list[str] = []
    wall = _wall(limits, timeout, warnings)
    cpu = limits.cpu_time if limits.cpu_time is not None else wall
    python = limits.python or sys.executable
    if not python:
        raise ToolError("python: no interpreter found (sys.executable is empty)")
    if limits.require_isolation:
        missing = sandbox_status(python=python, network=limits.network)
        if "error" in missing or missing["warnings"]:
            text = missing.get("error") or "; ".join(missing["warnings"])
            raise ToolError(f"python: isolation is required but incomplete: {text}")
    folder = Path(folder).absolute()
    folder.mkdir(parents=True, exist_ok=True)
    cfg = _config(folder, limits, cpu, list(readable or []), python)
    out, err = _Capture(limits.output), _Capture(limits.output)
    cg = _Cgroup.create(limits.processes)
    cfg["cgroup_procs"] = cg.procs if cg else None
    r, w = os.pipe()
    cfg["report_fd"] = w
    proc: asyncio.subprocess.Process | None = None
    readers: list[asyncio.Task[None]] = []
    timed_out = False
    report: dict[str, Any] = {}
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                python,
                "-I",
                "-c",
                _sources()[0],
                json.dumps(cfg),
                code,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=folder,
                env=_env(folder, python),
                start_new_session=True,
                pass_fds=(w,),
            )
        finally:
            os.close(w)
        readers = [
            asyncio.ensure_future(_drain(proc.stdout, out)),
            asyncio.ensure_future(_drain(proc.stderr, err)),
        ]
        try:
            await asyncio.wait_for(proc.wait(), wall)
        except TimeoutError:
            timed_out = True
            _killpg(proc.pid)
            await proc.wait()
        report = _read_report(r)
        if not (report.get("setup") or {}).get("pid_namespace"):
            _killpg(proc.pid)  # what the code left behind in the process group
        await asyncio.wait(readers, timeout=_DRAIN_GRACE)
    finally:
        if proc is not None and proc.returncode is None:
            _killpg(proc.pid)  # cancelled or failed: never leave the sandbox running
            with contextlib.suppress(asyncio.CancelledError):
                await proc.wait()
            if readers:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait(readers, timeout=_DRAIN_GRACE)
        for t in readers:
            t.cancel()
        os.close(r)
        if cg is not None:
            cg.remove()
    return _run_result(report, proc, out, err, timed_out, cpu, folder, limits, warnings)


def _run_result(
    report: dict[str, Any],
    proc: asyncio.subprocess.Process,
    out: _Capture,
    err: _Capture,
    timed_out: bool,
    cpu: float,
    folder: Path,
    limits: Limits,
    warnings: list[str],
) -> RunResult:
    iso: dict[str, Any] = report.get("setup") or {}
    ex: dict[str, Any] | None = report.get("exit")
    killed_by: str | None = None
    if timed_out:
        exit_code, killed_by = -signal.SIGKILL, "wall_time"
    elif ex is not None:
        status = int(ex["status"])
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            exit_code = -sig
            over_cpu = float(ex["cpu"]) >= max(1, math.ceil(cpu)) - 0.05
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and over_cpu):
                killed_by = "cpu_time"
            else:
                killed_by = signal.Signals(sig).name
        else:
            exit_code = os.WEXITSTATUS(status)
    elif not iso:
        raise ToolError(
            "python: the sandbox failed to start: "
            + (err.text().strip()[-2000:] or f"exit code {proc.returncode}")
        )
    else:  # init itself was killed (for instance by the code, without a PID ns)
        exit_code = proc.returncode if proc.returncode is not None else -1
        if exit_code > 128:
            exit_code = 128 - exit_code
    files: list[Path] = []
    omitted = 0
    for rel, _ in walk_files(folder):
        if any(part.startswith(".") for part in rel.split("/")):
            continue  # hidden: caches libraries keep under HOME, such as .cache/
        if len(files) < limits.max_files:
            files.append(folder / rel)
        else:
            omitted += 1
    if omitted:
        warnings.append(f"{omitted} more produced files are not listed")
    return RunResult(
        exit_code=exit_code,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        killed_by=killed_by,
        files=files,
        isolation=iso,
        warnings=[*_warnings(iso, limits), *warnings] if iso else warnings,
    )


def task_folder(ctx: ToolContext) -> Path:
    """``<workdir>/tasks/<task id, made safe>/attempt-<n>``: one attempt's folder."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", ctx.task_id)[:80].strip(".")
    if safe != ctx.task_id:
        digest = hashlib.sha256(ctx.task_id.encode("utf-8", "surrogatepass"))
        safe = f"{safe or 'task'}-{digest.hexdigest()[:8]}"
    return Path(ctx.workdir) / "tasks" / safe / f"attempt-{ctx.attempt}"


def _result(run: RunResult, root: Path) -> dict[str, Any]:
    """The tool's result. ``files`` maps each produced file's path (relative to
    the session folder) to the file itself, which the executor stores as a
    content-addressed artifact and which loads back as a ``Path``."""
    out: dict[str, Any] = {
        "exit_code": run.exit_code,
        "stdout": run.stdout,
        "stderr": run.stderr,
        "timed_out": run.timed_out,
        "killed_by": run.killed_by,
        "files": {p.relative_to(root).as_posix(): p for p in run.files},
    }
    if run.warnings:
        out["warnings"] = run.warnings
    return out


def _describe(limits: Limits) -> str:
    cpu = f"{limits.cpu_time:g}s CPU, " if limits.cpu_time is not None else ""
    net = "with network access" if limits.network else "without network access"
    return (
        "Runs Python code in a fresh, isolated process and returns its exit code, "
        "stdout, stderr and the files it wrote (keyed by their paths relative to "
        "the session folder). The working folder starts empty and is private to "
        "this task; "
        "only it is writable. Files of the session folder (e.g. from write_file) "
        "are readable at ../../../<path>. The process runs "
        f"{net}, with {limits.wall_time:g}s of wall time by default (up to "
        f"{limits.max_wall_time:g}s with timeout), {cpu}{limits.memory >> 20} MiB "
        f"of memory and {limits.processes} processes. Print what you need to see; "
        f"stdout and stderr are cut to {limits.output >> 10} KiB each. A non-zero "
        "exit code is a normal result: read stderr."
    )


def make_python_tool(limits: Limits | None = None) -> Tool:
    """Builds the ``python`` tool with the given limits (default: ``Limits()``)."""
    lim = limits or Limits()

    @tool(name="python", description=_describe(lim))
    async def python(
        code: str, timeout: float | None = None, *, ctx: ToolContext
    ) -> dict[str, Any]:
        """Runs Python code in an isolated process.

        Args:
            code: The Python source to run, as a script.
            timeout: Wall-time seconds before the process is killed.
        """
        folder = task_folder(ctx)
        if folder.exists():  # a crashed run of this same attempt: start clean
            shutil.rmtree(folder)
        run = await run_python(
            code, folder, limits=lim, timeout=timeout, readable=[Path(ctx.workdir)]
        )
        return _result(run, Path(ctx.workdir))

    return python
