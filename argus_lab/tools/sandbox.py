"""The ``python`` tool: code runs in a separate, limited, isolated ``python -I``.

The threat model (docs/sandbox.md; each rule in ``RULES``) and its layers, on
Linux, each used where the kernel allows it (``sandbox_status()`` names every
rule a missing layer leaves open):

- **Namespaces** (as root directly, otherwise inside a new user namespace):
  network (no interface up, not even loopback), PID (the code is PID 1; its end
  kills every process it started), mount, IPC and UTS.
- **File view**: the host's tree read-only (``mount_setattr``), so chmod, utime
  and setxattr fail outside the task folder; secrets-bearing paths, home
  folders, the workspace and the project hidden under empty tmpfs; only the
  Python installation and the session folder put back. Landlock adds a read
  allow-list and confines writes to the task folder.
- **Quota**: the task folder is a tmpfs of ``Limits.disk`` bytes; the launcher
  copies its files to the host's folder after every process has ended.
- **Identity**: as root the code runs as ``nobody``; capabilities are dropped,
  ``no_new_privs`` is set.
- **seccomp** (compiled by libseccomp): no ptrace, no new namespaces, no unix
  sockets, no mounts, keyrings, BPF or io_uring.
- **cgroups**: memory, pids and cpu (cores busy at once) limits for the whole
  process tree.
- **rlimits**: CPU seconds, address space, file size and open files per process.
- **The exit status** travels from the kernel (``waitpid``) only: nothing the
  code can reach carries it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
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
from argus_lab.redact import Redactor
from argus_lab.tools._sandbox_host import (
    Limits,
    RunResult,
    _code_fd,
    _killpg,
    _probe,
    _Report,
)

# Used here, and also reached through this module by the tests.
from argus_lab.tools._sandbox_host import _config as _config
from argus_lab.tools._sandbox_host import _encode_config as _encode_config
from argus_lab.tools._sandbox_host import _env as _env
from argus_lab.tools._sandbox_host import _read_report as _read_report
from argus_lab.tools._sandbox_host import _sources as _sources
from argus_lab.tools._sandbox_kernel import Cgroups, MemoryWatch, can_watch_memory
from argus_lab.tools._sandbox_output import _Capture, _drain
from argus_lab.tools._sandbox_result import (
    _check,
    _describe,
    _result,
    _run_result,
    _scrub,
)
from argus_lab.tools._sandbox_rules import RULES, rules, warnings
from argus_lab.tools.registry import Tool, ToolContext, tool

__all__ = [
    "RULES",
    "Limits",
    "RunResult",
    "make_python_tool",
    "run_python",
    "sandbox_status",
    "task_folder",
]

_DRAIN_GRACE = 2.0
"""Seconds to wait for the output pipes to close once the sandbox has ended."""
_COPY_GRACE = 10.0
"""Seconds the launcher gets, after the wall-time limit, to copy files out."""


def _warnings(iso: dict[str, Any], limits: Limits) -> list[str]:
    return warnings(iso, limits.network)


def sandbox_status(
    *, python: str | None = None, network: bool = False
) -> dict[str, Any]:
    """What isolation the ``python`` tool gets on this machine, found by trying it.

    Returns:
        The sandbox's own report (``filesystem``, ``landlock`` ABI, ``network``,
        ``processes``, ``memory``, ``quota``, ``view``, ``uid``, ``seccomp``,
        ``pid_namespace``, ``user_namespace``, ``capabilities``, ``notes`` on
        what failed and why), ``rules``: each rule of the threat model (see
        ``RULES`` and docs/sandbox.md) with the layer enforcing it (None when
        none does), and ``warnings``: one sentence naming each rule left
        unenforced or enforced only in part, empty when every rule holds.
        Cached per interpreter.
    """
    if sys.platform == "win32":
        return {"error": "the python tool needs Linux or macOS", "warnings": []}
    iso = dict(_probe(python or sys.executable, network))
    if iso.get("memory") == "rlimit" and can_watch_memory():
        iso["memory"] = "watch"  # run_python's fallback (see MemoryWatch)
    if "error" not in iso:
        iso["rules"] = {k: v[0] for k, v in rules(iso, network).items()}
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
    hidden: list[Path] | None = None,
    redactor: Redactor | None = None,
) -> RunResult:
    """Runs ``code`` in the sandbox with ``folder`` as its working folder.

    Args:
        code: Python source.
        folder: The task folder: the working folder, HOME and TMPDIR, and the only
            place the code may write (up to ``limits.disk`` bytes). Created if
            missing; the files the code left there are in it afterwards.
        limits: The limits (see ``Limits``).
        timeout: Wall-time seconds; default ``limits.wall_time``.
        readable: More folders the code may read (not write).
        hidden: More folders the code must not see (besides ``HIDDEN``, the
            project, the current folder and HOME), such as the workspace.
        redactor: Where stdout or stderr is cut (over ``limits.output``), the
            cut moves off any secret it knows, so no part of one is kept
            that it could no longer recognise. It masks nothing itself.

    Raises:
        ToolError: Bad arguments, an unsupported platform, a rule left
            unenforced while ``limits.require_isolation`` is set, or a sandbox
            that failed to start.
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
    warns: list[str] = []
    wall = _wall(limits, timeout, warns)
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
    cfg = _config(folder, limits, cpu, list(readable or []), python, hidden)
    out, err = _Capture(limits.output), _Capture(limits.output)
    if limits.cpus is not None and not limits.cpus > 0:
        raise ToolError(f"python: cpus must be a positive number, got {limits.cpus!r}")
    # At least 2: the launcher is in them until its child has started.
    cg = Cgroups.create(max(2, limits.processes), limits.memory, limits.cores())
    cfg["cgroups"], cfg["cgroups_home"] = cg.procs, cg.home
    r, w = os.pipe()
    cfg["report_fd"] = w
    report = _Report(r)
    code_fd = cfg["code_fd"] = _code_fd(code)
    proc: asyncio.subprocess.Process | None = None
    readers: list[asyncio.Task[None]] = []
    watch: MemoryWatch | None = None
    watcher: asyncio.Future[None] | None = None
    timed_out = False
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                python,
                "-I",
                "-c",
                _sources()[0],
                _encode_config(cfg),
                code if code_fd < 0 else "",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=folder,
                env=_env(folder, python),
                start_new_session=True,
                pass_fds=(w,) if code_fd < 0 else (w, code_fd),
            )
        finally:
            os.close(w)
            if code_fd >= 0:
                os.close(code_fd)
        readers = [
            asyncio.ensure_future(_drain(proc.stdout, out)),
            asyncio.ensure_future(_drain(proc.stderr, err)),
        ]
        if "memory" not in cg.paths and can_watch_memory():
            watch = MemoryWatch(proc.pid, limits.memory, functools.partial(_stop, proc))
            watcher = asyncio.ensure_future(watch.run())
        try:
            await asyncio.wait_for(proc.wait(), wall)
        except TimeoutError:
            timed_out = True
            # The launcher kills the code (and with it its PID namespace), then
            # copies the files out and ends like the code did.
            _stop(proc)
            try:
                await asyncio.wait_for(proc.wait(), _COPY_GRACE)
            except TimeoutError:
                _killpg(proc.pid)
                await proc.wait()
        if not (report.poll().get("setup") or {}).get("pid_namespace"):
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
        for t in [*readers, *([watcher] if watcher else [])]:
            t.cancel()
        data = report.poll()
        os.close(r)
        peak, oom = cg.memory()
        cg.remove()
    if watch is not None:
        peak, oom = watch.peak, watch.fired
        if data.get("setup"):
            data["setup"]["memory"] = "watch"
    res = _run_result(
        data, proc, out, err, timed_out, cpu, folder, limits, warns, redactor
    )
    res.memory_peak = peak
    if oom and res.killed_by in ("SIGKILL", "cpu_time"):
        res.killed_by = "memory"
    return res


def _stop(proc: asyncio.subprocess.Process) -> None:
    """Asks the launcher to kill the code (and so its PID namespace); it then
    copies the files out and ends like the code did."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGUSR1)


def task_folder(ctx: ToolContext) -> Path:
    """``<workdir>/tasks/<task id, made safe>/attempt-<n>``: one attempt's folder."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", ctx.task_id)[:80].strip(".")
    if safe != ctx.task_id:
        digest = hashlib.sha256(ctx.task_id.encode("utf-8", "surrogatepass"))
        safe = f"{safe or 'task'}-{digest.hexdigest()[:8]}"
    return Path(ctx.workdir) / "tasks" / safe / f"attempt-{ctx.attempt}"


def make_python_tool(limits: Limits | None = None, *, check: bool = True) -> Tool:
    """Builds the ``python`` tool with the given limits (default: ``Limits()``).

    Args:
        limits: The sandbox's limits.
        check: The default of the tool's ``check`` argument: True makes code
            that raises, exits non-zero or times out fail the task (ToolError, or
            TransientError for a timeout, so retry policies apply); False
            returns such a run as a result with its ``exit_code``.
    """
    lim = limits or Limits()
    default_check = check

    @tool(name="python", description=_describe(lim))
    async def python(
        code: str,
        timeout: float | None = None,
        check: bool = default_check,
        *,
        ctx: ToolContext,
    ) -> dict[str, Any]:
        """Runs Python code in an isolated process.

        Args:
            code: The Python source to run, as a script.
            timeout: Wall-time seconds before the process is killed.
            check: Whether code that fails is an error (true) or a result.
        """
        folder = task_folder(ctx)
        if folder.exists():  # a crashed run of this same attempt: start clean
            shutil.rmtree(folder)
        run = await run_python(
            code,
            folder,
            limits=lim,
            timeout=timeout,
            readable=[Path(ctx.workdir)],
            hidden=[Path(ctx.workspace)],
            redactor=ctx.redactor,
        )
        refused = _scrub(run, ctx, folder, lim.max_files)
        if check:
            _check(run, ctx.redactor)
        if refused:
            raise ToolError(
                f"python: task {ctx.task_id!r} wrote binary files with a secret in "
                f"them ({', '.join(refused)}); masking would corrupt them, so they "
                "were deleted, never stored. Keep secrets out of the files the code "
                "writes",
                task_id=ctx.task_id,
            )
        return _result(run, Path(ctx.workdir))

    return python
