"""What one run of the ``python`` tool comes to (see ``argus_lab.tools.sandbox``).

Its ``RunResult`` from the launcher's status and report; failure as an error
(``_check``: failure is failure); produced files scrubbed of secrets; the
tool's result dict and description.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import signal
import stat
from pathlib import Path
from typing import Any

from argus_lab.errors import ToolError, TransientError
from argus_lab.redact import Redactor
from argus_lab.tools._sandbox_host import Limits, RunResult
from argus_lab.tools._sandbox_output import _CONTROL, _Capture, _tail
from argus_lab.tools._sandbox_rules import warnings
from argus_lab.tools.files import walk_files
from argus_lab.tools.registry import ToolContext


def _run_result(
    report: dict[str, Any],
    proc: asyncio.subprocess.Process,
    out: _Capture,
    err: _Capture,
    timed_out: bool,
    cpu: float,
    folder: Path,
    limits: Limits,
    warns: list[str],
    redactor: Redactor | None = None,
) -> RunResult:
    iso: dict[str, Any] = report.get("setup") or {}
    ex: dict[str, Any] = report.get("exit") or {}
    if not iso:
        raise ToolError(
            "python: the sandbox failed to start: "
            + (err.text().strip()[-2000:] or f"exit code {proc.returncode}")
        )
    # The launcher ends exactly as the code did, so its status (from the
    # kernel, through waitpid) is the code's: a signal stays a signal.
    exit_code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    killed_by: str | None = None
    if timed_out:
        killed_by = "wall_time"
    elif exit_code < 0:
        sig = -exit_code
        # Sampled CPU time runs a little behind the limit's own clock. And in a
        # PID namespace nothing but the kernel can SIGKILL the code (it is PID
        # 1), so a SIGKILL that is neither the wall limit nor the OOM killer
        # (which run_python tells apart) is the CPU limit.
        over_cpu = float(ex.get("cpu") or 0) >= 0.8 * max(1, math.ceil(cpu))
        if iso.get("pid_namespace"):
            over_cpu = True
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and over_cpu):
            killed_by = "cpu_time"
        else:
            try:
                killed_by = signal.Signals(sig).name
            except ValueError:
                killed_by = f"signal {sig}"
    copied = ex.get("copied") or {}
    if copied.get("skipped"):
        warns.append(
            f"{copied['skipped']} more produced files were not kept (over "
            f"{limits.max_files} files, {limits.disk >> 20} MiB or 32 folders deep, "
            "or named with bytes that are not UTF-8 or with control characters)"
        )
    if copied.get("error"):
        warns.append(f"copying the produced files out failed: {copied['error']}")
    files, omitted = _listed(folder, limits.max_files)
    if omitted:
        warns.append(f"{omitted} more produced files are not listed")
    return RunResult(
        exit_code=exit_code,
        stdout=out.text(redactor),
        stderr=err.text(redactor),
        timed_out=timed_out,
        killed_by=killed_by,
        files=files,
        isolation=iso,
        warnings=[*warnings(iso, limits.network), *warns],
    )


def _shown(name: str) -> bool:
    """Whether a produced file's name may be listed: UTF-8 (a result key must
    encode), no control character (a terminal would act on it), not hidden."""
    try:
        name.encode("utf-8")
    except UnicodeError:
        return False
    return not name.startswith(".") and not _CONTROL.search(name)


def _listed(folder: Path, most: int) -> tuple[list[Path], int]:
    """(the produced files listed, how many more were left out)."""
    files: list[Path] = []
    omitted = 0
    for rel, _ in walk_files(folder):
        if not all(_shown(part) for part in rel.split("/")):
            continue  # hidden (caches under HOME, such as .cache/) or unnamable
        if len(files) < most:
            files.append(folder / rel)
        else:
            omitted += 1
    return files, omitted


def _scrub(run: RunResult, ctx: ToolContext, folder: Path, most: int) -> list[str]:
    """Masks secrets in the task folder in place (it lies in the workspace)
    before anything reads it: in every regular file, and in every name (a file
    or folder named after a secret is renamed, a link pointing at one removed).
    Lists the produced files again; returns the binary ones deleted for
    holding a secret."""
    red = ctx.redactor
    if red is None or not folder.is_dir():
        return []
    refused = []
    # By descriptor: a tree deeper than PATH_MAX must not stop the sweep.
    for top, dirs, names, fd in os.fwalk(folder, topdown=False):
        for name in [*names, *dirs]:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                if red.needed(os.readlink(name, dir_fd=fd)):
                    os.unlink(name, dir_fd=fd)
                continue
            if stat.S_ISREG(st.st_mode):
                try:
                    gone = red.scrub_file(Path(top) / name) == "removed"
                except OSError:  # a path too long to open: never stored unread
                    os.unlink(name, dir_fd=fd)
                    continue
                if gone:
                    refused.append(red.text(name))
                    continue
            if red.needed(name) and not _rename(name, red.text(name), fd):
                # The masked name is taken, or too long ("[REDACTED]" is
                # longer than a short secret): drop this one, never keep it.
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(name, dir_fd=fd)
                else:
                    os.unlink(name, dir_fd=fd)
    if red.needed(str(folder)):  # the task id is refused earlier; to be sure
        raise ToolError(f"python: task {ctx.task_id!r}: its folder names a secret")
    run.files = _listed(folder, most)[0]
    return refused


def _rename(name: str, masked: str, fd: int) -> bool:
    """Renames ``name`` to ``masked`` in the folder ``fd`` unless that name is
    taken or cannot be made (over 255 bytes); returns whether it did."""
    try:
        os.stat(masked, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        pass
    except OSError:  # ENAMETOOLONG
        return False
    else:
        return False
    try:
        os.rename(name, masked, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        return False
    return True


def _check(run: RunResult, redactor: Redactor | None = None) -> None:
    """Failure is failure: raises for a run that did not end with exit code 0."""
    if run.exit_code == 0 and not run.timed_out:
        return
    if run.timed_out:
        why = "was killed at its wall-time limit"
    elif run.killed_by:
        why = f"was killed ({run.killed_by})"
    else:
        why = f"exited with code {run.exit_code}"
    parts = [f"python: the code {why}"]
    if run.stderr.strip():
        parts.append("stderr (end):\n" + _tail(run.stderr, 1500, redactor))
    if run.stdout.strip():
        parts.append("stdout (end):\n" + _tail(run.stdout, 500, redactor))
    text = "\n".join(parts)
    # A timeout may pass on another try (a busy machine); code that fails does not.
    raise TransientError(text) if run.timed_out else ToolError(text)


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
    if run.memory_peak is not None:
        out["memory_peak"] = run.memory_peak
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
        f"this task; only it is writable, up to {limits.disk >> 20} MiB. Files of "
        "the session folder (e.g. from write_file) are readable at "
        "../../../<path>. The process runs "
        f"{net}, with {limits.wall_time:g}s of wall time by default (up to "
        f"{limits.max_wall_time:g}s with timeout), {cpu}{limits.memory >> 20} MiB "
        f"of memory and {limits.processes} processes. Print what you need to see; "
        f"stdout and stderr are cut to {limits.output >> 10} KiB each. Code that "
        "raises, exits non-zero or times out is an error showing the end of "
        "stderr; with check=false it is returned as a result instead."
    )
