"""Runtime benchmark: cost per step, disk use, peak memory, reopen and start-up time.

A script, not a test. Every measurement runs in a fresh Python process (this file
re-runs itself with ``--child``), so peak RSS and import times are that process's own.
Configurations are interleaved (one repeat of each, then the next repeat) so drift on a
shared machine hits them all alike; medians are reported, with min and max.

Usage::

    .venv/bin/python benchmarks/bench_runtime.py            # markdown to stdout
    .venv/bin/python benchmarks/bench_runtime.py --write    # update BENCHMARKS.md
    .venv/bin/python benchmarks/bench_runtime.py --quick    # smoke run (~20 s)
    .venv/bin/python benchmarks/bench_runtime.py --json out.json
    .venv/bin/python benchmarks/bench_runtime.py --profile  # cProfile, 1,000-step chain
    .venv/bin/python benchmarks/bench_runtime.py --from-json out.json --write
    .venv/bin/python benchmarks/bench_runtime.py --wait-quiet 20 --write  # busy host

What is measured (see BENCHMARKS.md for the results):

- ms per step: wall time of ``s.run()`` divided by the number of tasks.
- disk B/step: bytes of the workspace folder's files after ``s.close()`` (the WAL is
  checkpointed into the database and removed) divided by the number of tasks.
- written B/step: ``write_bytes`` from ``/proc/self/io`` of the child (bytes it caused
  to be sent to the storage layer), from creating the workspace to closing it.
- peak RSS: ``ru_maxrss`` of the child.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH_MD = ROOT / "BENCHMARKS.md"
START_MARK = "<!-- results:start -->"
END_MARK = "<!-- results:end -->"

TARGET_MS = 0.5
TARGET_BYTES = 2048
TARGET_FLAT = 1.5
TARGET_REOPEN_S = 0.5
TARGET_IMPORT_S = 0.3
TARGET_HELP_S = 0.15
RESULT_TEXT = "x" * 256
HEAVY = (
    "pandas",
    "lancedb",
    "anthropic",
    "anywidget",
    "matplotlib",
    "numpy",
    "pyarrow",
)


# -- the child side: one measurement per process ------------------------------------


def _read_io() -> dict[str, int]:
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return {}
    return {k: int(v) for k, v in (line.split(": ") for line in text.splitlines())}


def _io_delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: b[k] - a[k] for k in a if k in b}


def _peak_rss_kb() -> int:
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _files_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def timed_result(
    n: int, wall: float, cpu: float, root: Path, io0: dict[str, int]
) -> dict[str, Any]:
    """A bare child's answer (the floor, the bound): per-step times, bytes."""
    return {
        "n_tasks": n,
        "run_s": wall,
        "ms_per_step": wall * 1000 / n,
        "cpu_ms_per_step": cpu * 1000 / n,
        "disk_bytes": _files_bytes(root),
        "io_total": _io_delta(io0, _read_io()),
        "rss_peak_kb": _peak_rss_kb(),
    }


def _plan(al: Any, shape: str, n: int) -> Any:
    """A chain of n tasks, or a fan-out 1 -> n -> 1 (n + 2 tasks)."""
    if shape == "chain":
        tasks = [
            al.Task(
                id=f"t{i}", tool="noop", args={"i": i}, deps=[f"t{i - 1}"] if i else []
            )
            for i in range(n)
        ]
    else:
        mids = [f"m{i}" for i in range(n)]
        tasks = [
            al.Task(id="src", tool="noop", args={"i": -1}),
            *(
                al.Task(id=m, tool="noop", args={"i": i}, deps=["src"])
                for i, m in enumerate(mids)
            ),
            al.Task(id="sink", tool="noop", args={"i": n}, deps=mids),
        ]
    return al.Plan(goal=f"benchmark {shape} {n}", tasks=tasks)


def noop(i: int) -> str:
    """The benchmark's tool: does nothing, returns 256 characters."""
    return RESULT_TEXT


def _noop_tool(al: Any) -> Any:
    return al.tool(noop)


def child_run(spec: dict[str, Any]) -> dict[str, Any]:
    """Creates a workspace, runs one plan, closes; returns timings, bytes and RSS."""
    import argus_lab as al

    rss_import = _peak_rss_kb()
    noop = _noop_tool(al)
    plan = _plan(al, spec["shape"], spec["n"])
    root = Path(spec["dir"])
    io0 = _read_io()
    ws = al.Workspace(root, durability=spec["durability"])
    size0 = _files_bytes(root)
    c_new = time.process_time()
    s = ws.new_session(
        plan=plan, tools=[noop], name="bench", concurrency=spec["concurrency"]
    )
    io1 = _read_io()
    c0, t0 = time.process_time(), time.perf_counter()
    result = s.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    io2 = _read_io()
    c1 = time.process_time()
    s.close()
    c_end = time.process_time()
    ws.close()
    io3 = _read_io()
    n_tasks = len(plan.tasks)
    if result.status != "succeeded" or result.counts.get("succeeded") != n_tasks:
        raise SystemExit(f"benchmark run did not succeed: {result}")
    leftovers = [p.name for p in root.rglob("*-wal") if p.stat().st_size]
    return {
        "n_tasks": n_tasks,
        "run_s": wall,
        "ms_per_step": wall * 1000 / n_tasks,
        # CPU time of all the process's threads: less disturbed than wall time
        # when other processes compete for the cores.
        "cpu_ms_per_step": cpu * 1000 / n_tasks,
        # What a run costs beyond s.run(): work moved into new_session() or
        # close() is no saving (CPU ms of each, and of all three).
        "cpu_new_ms": (c0 - c_new) * 1000,
        "cpu_close_ms": (c_end - c1) * 1000,
        "cpu_session_ms": (c0 - c_new + cpu + c_end - c1) * 1000,
        "disk_bytes": _files_bytes(root) - size0,
        "wal_left": leftovers,
        "io_total": _io_delta(io0, io3),
        "io_create": _io_delta(io0, io1),
        "io_run": _io_delta(io1, io2),
        "io_close": _io_delta(io2, io3),
        "rss_import_kb": rss_import,
        "rss_peak_kb": _peak_rss_kb(),
    }


def child_build_paused(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs n steps of an (n + 1)-task chain and pauses before the last task."""
    import argus_lab as al

    n = spec["n"]
    box: list[Any] = []

    def gated(i: int) -> str:
        if i == n - 1:
            # Called on a tool thread: pause() only sets a flag, so no new task
            # starts after this one commits. The last task is left pending.
            box[0].pause("benchmark: stopped before the last task")
        return RESULT_TEXT

    gated_tool = al.tool(name="noop")(gated)

    ws = al.Workspace(Path(spec["dir"]), durability=spec["durability"])
    s = ws.new_session(plan=_plan(al, "chain", n + 1), tools=[gated_tool], name="bench")
    box.append(s)
    t0 = time.perf_counter()
    result = s.run()
    wall = time.perf_counter() - t0
    s.close()
    ws.close()
    if result.status != "paused" or result.counts.get("succeeded") != n:
        raise SystemExit(f"could not build a paused {n}-step session: {result}")
    return {"run_s": wall, "disk_bytes": _files_bytes(Path(spec["dir"]))}


def child_reopen(spec: dict[str, Any]) -> dict[str, Any]:
    """Opens the paused session, checks it is ready to continue, takes one step."""
    t0 = time.perf_counter()
    import argus_lab as al

    t_import = time.perf_counter() - t0
    noop = _noop_tool(al)
    n = spec["n"]
    t0 = time.perf_counter()
    ws = al.Workspace(Path(spec["dir"]), durability=spec["durability"])
    t_ws = time.perf_counter() - t0
    t0 = time.perf_counter()
    s = ws.open("bench", tools=[noop])
    t_open = time.perf_counter() - t0
    if s.counts()["succeeded"] != n or s.ready() != [f"t{n}"]:
        raise SystemExit(f"reopened session is not ready to continue: {s!r}")
    t0 = time.perf_counter()
    done = s.step()
    t_step = time.perf_counter() - t0
    s.close()
    ws.close()
    if [r.status for r in done] != ["succeeded"]:
        raise SystemExit(f"the step after reopening did not succeed: {done}")
    return {
        "import_s": t_import,
        "workspace_s": t_ws,
        "open_s": t_open,
        "reopen_s": t_ws + t_open,
        "first_step_s": t_step,
        "rss_peak_kb": _peak_rss_kb(),
    }


def child_profile(spec: dict[str, Any]) -> dict[str, Any]:
    """cProfile of ``s.run()`` of a chain, on the session's loop thread."""
    import cProfile
    import io
    import pstats
    import threading

    import argus_lab as al

    noop = _noop_tool(al)
    ws = al.Workspace(Path(spec["dir"]), durability=spec["durability"])
    s = ws.new_session(plan=_plan(al, "chain", spec["n"]), tools=[noop], name="bench")
    prof = cProfile.Profile()

    # The work happens on the session's private loop thread ("argus-<name>"), started
    # lazily by run(): hook new threads and switch the profiler on in that one only.
    def hook(frame: Any, event: str, arg: Any) -> None:
        sys.setprofile(None)
        if threading.current_thread().name == f"argus-{s.name}":
            prof.enable()

    threading.setprofile(hook)
    t0 = time.perf_counter()
    s.run()
    wall = time.perf_counter() - t0
    s.close()  # joins the loop thread, which ends its profiling
    threading.setprofile(None)
    ws.close()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(spec.get("top", 30))
    stats.sort_stats("cumulative").print_stats(spec.get("top", 30))
    return {"wall_s": wall, "n": spec["n"], "report": out.getvalue()}


CHILDREN: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "run": child_run,
    "build_paused": child_build_paused,
    "reopen": child_reopen,
    "profile": child_profile,
}


# -- the parent side: orchestration and statistics ----------------------------------


def spawn(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs one child measurement in a fresh interpreter and returns its JSON."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {spec['mode']} failed:\n{proc.stderr}{proc.stdout}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@dataclass
class Summary:
    """Median, min and max of repeated measurements."""

    median: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Summary:
        v = list(values)
        return cls(statistics.median(v), min(v), max(v), len(v))


@dataclass(frozen=True)
class Config:
    """One workload: a chain of n tasks or a fan-out 1 -> n -> 1."""

    shape: str
    n: int
    durability: str
    repeats: int

    @property
    def label(self) -> str:
        if self.shape == "chain":
            return f"chain N={self.n:,}"
        return f"fan-out 1→{self.n:,}→1"


@dataclass
class Results:
    """Everything one benchmark run measured."""

    machine: dict[str, Any]
    quick: bool
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    fixed: dict[str, dict[str, Any]] = field(default_factory=dict)
    reopen: dict[str, Any] = field(default_factory=dict)
    startup: dict[str, Any] = field(default_factory=dict)


def key(c: Config) -> str:
    return f"{c.shape}:{c.n}:{c.durability}"


def run_workloads(configs: list[Config], tmp: Path, log: Callable[[str], None]) -> Any:
    runs: dict[str, list[dict[str, Any]]] = {key(c): [] for c in configs}
    for rep in range(max(c.repeats for c in configs)):
        for c in configs:
            if rep >= c.repeats:
                continue
            d = Path(tempfile.mkdtemp(prefix="ws-", dir=tmp))
            r = spawn(
                {
                    "mode": "run",
                    "shape": c.shape,
                    "n": c.n,
                    "durability": c.durability,
                    "concurrency": 4,
                    "dir": str(d),
                }
            )
            shutil.rmtree(d)
            runs[key(c)].append(r)
            log(
                f"  {c.label:<18} {c.durability:<6} rep {rep + 1}: "
                f"{r['ms_per_step']:.3f} ms/step, "
                f"{r['disk_bytes'] / r['n_tasks']:.0f} B/step"
            )
    return runs


def run_reopen(
    n: int, durabilities: list[str], repeats: int, tmp: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dur in durabilities:
        built = tmp / f"paused-{dur}"
        info = spawn(
            {"mode": "build_paused", "n": n, "durability": dur, "dir": str(built)}
        )
        reps = []
        for _ in range(repeats):
            # Each reopen takes a step, so each gets its own copy of the session.
            d = Path(tempfile.mkdtemp(prefix="reopen-", dir=tmp)) / "ws"
            shutil.copytree(built, d)
            reps.append(
                spawn({"mode": "reopen", "n": n, "durability": dur, "dir": str(d)})
            )
            shutil.rmtree(d.parent)
        shutil.rmtree(built)
        out[dur] = {"n": n, "build": info, "runs": reps}
        log(
            f"  reopen {n:,} steps {dur}: "
            f"{statistics.median(r['reopen_s'] for r in reps) * 1000:.0f} ms"
        )
    return out


def _timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    return time.perf_counter() - t0, proc


def run_startup(repeats: int, log: Callable[[str], None]) -> dict[str, Any]:
    py = sys.executable
    _timed([py, "-c", "import argus_lab"])  # warm the page cache and the .pyc files
    bare: list[float] = []
    imp: list[float] = []
    selfreport: list[float] = []
    for _ in range(repeats):
        bare.append(_timed([py, "-c", "pass"])[0])
        imp.append(_timed([py, "-c", "import argus_lab"])[0])
        _, proc = _timed([py, "-X", "importtime", "-c", "import argus_lab"])
        m = re.search(
            r"^import time:\s+\d+ \|\s+(\d+) \| argus_lab$", proc.stderr, re.M
        )
        if m:
            selfreport.append(int(m.group(1)) / 1e6)
    cpu_probe = (
        "import time; c = time.process_time(); import argus_lab; "
        "print(time.process_time() - c)"
    )
    cpu = [float(_timed([py, "-c", cpu_probe])[1].stdout) for _ in range(repeats)]
    probe = "import argus_lab, sys, json; print(json.dumps(sorted(sys.modules)))"
    loaded = set(json.loads(_timed([py, "-c", probe])[1].stdout))
    heavy = [m for m in HEAVY if m in loaded]
    out: dict[str, Any] = {
        "python_bare_s": bare,
        "python_import_s": imp,
        "import_s": [i - b for i, b in zip(imp, bare, strict=True)],
        "importtime_s": selfreport,
        "import_cpu_s": cpu,
        "heavy_loaded": heavy,
    }
    argus = Path(py).parent / "argus"
    if not argus.exists():
        out["help_error"] = f"no console script at {argus}"
    else:
        _, proc = _timed([str(argus), "--help"])
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            out["help_error"] = f"`argus --help` exits with {proc.returncode}: {last}"
        else:
            out["help_s"] = [_timed([str(argus), "--help"])[0] for _ in range(repeats)]
    helped = (
        out.get("help_error") or f"{statistics.median(out['help_s']) * 1000:.0f} ms"
    )
    log(
        f"  import argus_lab: {statistics.median(out['import_s']) * 1000:.0f} ms; "
        f"argus --help: {helped}"
    )
    return out


# -- the machine ---------------------------------------------------------------------


def _fsync_latency(tmp: Path, n: int = 200) -> float:
    """Median seconds of a 4 KiB write + fsync in the benchmark's folder."""
    path = tmp / "fsync-probe"
    times: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        block = b"\0" * 4096
        for i in range(n):
            os.pwrite(fd, block, (i % 16) * 4096)
            t0 = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times)


def _disk(tmp: Path) -> str:
    dev = os.stat(tmp).st_dev
    name = "?"
    sysdev = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if sysdev.exists():
        name = sysdev.resolve().name
    fs = "?"
    best = ""
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if (
            len(parts) > 2
            and str(tmp).startswith(parts[1])
            and len(parts[1]) > len(best)
        ):
            best, fs = parts[1], parts[2]
    rot = Path(f"/sys/block/{name}/queue/rotational")
    kind = ""
    if rot.exists():
        kind = ", kernel flag rotational=" + rot.read_text().strip()
    virtual = " (virtio: a VM's virtual disk)" if name.startswith("vd") else ""
    return f"{name}{virtual}, {fs}{kind}"


def machine_info(tmp: Path) -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = int(line.split()[1]) / 2**20
    except OSError:
        pass

    def ver(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "ram_gib": round(mem_gib, 1),
        "loadavg": os.getloadavg(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "diskcache": ver("diskcache"),
        "pydantic": ver("pydantic"),
        "argus_lab": ver("argus-lab"),
        "disk": _disk(tmp),
        "fsync_ms": _fsync_latency(tmp) * 1000,
        "git": _git_state(),
    }


def _git_state() -> str:
    """The commit of the checkout, and whether argus_lab/ has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "argus_lab"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "an unknown commit (not a git checkout)"
    return f"commit {head}" + (" plus uncommitted changes" if dirty else "")


# -- the report ----------------------------------------------------------------------


def _kb(x: float) -> str:
    return f"{x / 1024:,.2f} KB"


def _ok(passed: bool) -> str:
    return "pass" if passed else "**FAIL**"


@dataclass
class Row:
    """The medians of one workload."""

    config: Config
    ms: Summary
    cpu_ms: Summary
    disk_per_step: float
    marginal_per_step: float
    written_per_step: float
    rss_mb: float
    rss_import_mb: float


def summarize(res: Results, configs: list[Config]) -> list[Row]:
    rows = []
    for c in configs:
        runs = res.runs[key(c)]
        n_tasks = runs[0]["n_tasks"]
        disk = statistics.median(r["disk_bytes"] for r in runs)
        fixed = res.fixed[c.durability]["disk_bytes"]
        rows.append(
            Row(
                config=c,
                ms=Summary.of(r["ms_per_step"] for r in runs),
                cpu_ms=Summary.of(r["cpu_ms_per_step"] for r in runs),
                disk_per_step=disk / n_tasks,
                # The per-session fixed part (two SQLite files' schemas) taken out:
                # growth beyond a 1-task session, per extra task.
                marginal_per_step=(disk - fixed) / (n_tasks - 1),
                written_per_step=statistics.median(
                    r["io_total"].get("write_bytes", 0) for r in runs
                )
                / n_tasks,
                rss_mb=statistics.median(r["rss_peak_kb"] for r in runs) / 1024,
                rss_import_mb=statistics.median(r["rss_import_kb"] for r in runs)
                / 1024,
            )
        )
    return rows


def _para(*parts: str) -> str:
    return "".join(parts)


def _range(s: Summary, scale: float = 1.0, fmt: str = ".3f") -> str:
    return f"{s.median * scale:{fmt}} ({s.lo * scale:{fmt}}-{s.hi * scale:{fmt}})"


def render(res: Results, configs: list[Config]) -> str:
    """The results section of BENCHMARKS.md, in markdown."""
    rows = summarize(res, configs)
    m = res.machine
    by = {(r.config.shape, r.config.n, r.config.durability): r for r in rows}
    chains = sorted({r.config.n for r in rows if r.config.shape == "chain"})
    small, mid, big = chains[0], chains[len(chains) // 2], chains[-1]
    fixed_run_ms = res.fixed["normal"]["run_s"] * 1000
    out: list[str] = []
    w = out.append
    quick = " with `--quick` (smaller N, fewer repeats)" if res.quick else ""
    w(f"Measured {m['date']}{quick}, argus-lab at {m['git']}.")
    w("")
    load = ", ".join(f"{x:.2f}" for x in m["loadavg"])
    if "loadavg_end" in m:
        load += "; at the end: " + ", ".join(f"{x:.2f}" for x in m["loadavg_end"])
    w(
        _para(
            f"**Machine.** {m['cpu']}, {m['cores']} cores ({m['cores_usable']} ",
            f"usable), {m['ram_gib']} GiB RAM; disk {m['disk']}; a 4 KiB write + ",
            f"fsync takes {m['fsync_ms']:.2f} ms (median of 200); {m['os']}; ",
            f"Python {m['python']}, SQLite {m['sqlite']}, diskcache ",
            f"{m['diskcache']}, pydantic {m['pydantic']}. Load average at start: ",
            f"{load}. A shared, noisy VM: compare ratios within one run, not ",
            "absolute numbers across runs.",
        )
    )
    w("")
    busy = max(m["loadavg"][0], *m.get("loadavg_end", [0.0]))
    if busy > 0.75 * m["cores"]:
        w(
            _para(
                f"> **Warning:** the load average reached {busy:.1f} on ",
                f"{m['cores']} cores during this run: other processes competed for ",
                "the CPU and the disk, so the timings below are inflated and noisy. ",
                "Rerun on a quiet machine before reading much into them.",
            )
        )
        w("")
    w(
        _para(
            "**Per-step cost.** Tool `noop(i: int) -> str` returning 256 ",
            "characters; `concurrency=4`. Each row is the median over fresh ",
            "processes (*runs*); min-max in brackets. *ms/step*: wall time of ",
            "`s.run()` / tasks. *CPU ms/step*: CPU time of all the process's ",
            "threads during `s.run()` / tasks (median), which other processes on the ",
            "machine disturb far less than wall time. *disk/step*: growth of the ",
            "workspace folder's files ",
            "after `s.close()` (WAL checkpointed and removed) / tasks. *marginal*: ",
            "growth beyond a 1-task session (",
            _kb(res.fixed["normal"]["disk_bytes"]),
            " of fixed SQLite structure) per extra task. *written/step*: ",
            "`write_bytes` of the child's `/proc/self/io` (bytes it sent to the ",
            "storage layer: WAL frames, then the checkpoint into the database) from ",
            "creating the workspace to closing it, / tasks. *peak RSS*: ",
            "`ru_maxrss` of the child; in brackets, right after `import argus_lab`.",
        )
    )
    w("")
    w(
        "| workload | durability | tasks | runs | ms/step | CPU ms/step | disk/step "
        "| marginal disk/step | written/step | peak RSS |"
    )
    w("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        c = r.config
        n_tasks = res.runs[key(c)][0]["n_tasks"]
        w(
            f"| {c.label} | {c.durability} | {n_tasks:,} | {r.ms.n} | {_range(r.ms)} "
            f"| {r.cpu_ms.median:.3f} | {_kb(r.disk_per_step)} "
            f"| {_kb(r.marginal_per_step)} "
            f"| {_kb(r.written_per_step)} "
            f"| {r.rss_mb:.0f} MB ({r.rss_import_mb:.0f} MB) |"
        )
    w("")
    w(
        _para(
            f"`run()` of a 1-task session takes {fixed_run_ms:.1f} ms (loop thread ",
            "start, runner lease, the session's status commits, lease release): ",
            f"{fixed_run_ms / small:.3f} ms of each step at N = {small:,}, ",
            f"{fixed_run_ms / big:.4f} ms at N = {big:,}.",
        )
    )
    w("")
    w(
        _para(
            '**The stricter setting.** `durability="normal"` (the default) is WAL ',
            "with `synchronous=NORMAL`: a committed step survives a crash of the ",
            "process (or a Jupyter kernel restart), but the last commits may be lost ",
            "on power ",
            'loss or an OS crash. `durability="full"` is WAL with ',
            "`synchronous=FULL`: every commit fsyncs the WAL, so it survives power ",
            'loss too. Opt in with `al.Workspace(path, durability="full")`. ',
            "Its cost here:",
        )
    )
    w("")
    w("| workload | normal ms/step | full ms/step | full / normal | extra ms/step |")
    w("|---|--:|--:|--:|--:|")
    for r in rows:
        f = by.get((r.config.shape, r.config.n, "full"))
        if r.config.durability != "normal" or f is None:
            continue
        w(
            f"| {r.config.label} | {r.ms.median:.3f} | {f.ms.median:.3f} "
            f"| {f.ms.median / r.ms.median:.2f}x | {f.ms.median - r.ms.median:.3f} |"
        )
    w("")

    reopen_n = next(iter(res.reopen.values()))["n"]
    w(
        _para(
            f"**Reopen.** A chain of {reopen_n + 1:,} tasks was run for {reopen_n:,} ",
            "steps, paused before the last task and closed. Each fresh process then ",
            "times `al.Workspace(path)` + `ws.open(name, tools=[noop])`, checks that ",
            "the last task is ready, and takes that step (timed separately). Warm ",
            "OS page cache; each run gets its own copy of the workspace.",
        )
    )
    w("")
    w(
        "| durability | runs | reopen s | of which ws.open "
        "| first step after reopen | peak RSS |"
    )
    w("|---|--:|--:|--:|--:|--:|")
    reopen_s: dict[str, Summary] = {}
    for dur, info in res.reopen.items():
        reps = info["runs"]
        s = Summary.of(r["reopen_s"] for r in reps)
        reopen_s[dur] = s
        open_s = statistics.median(r["open_s"] for r in reps)
        step_ms = statistics.median(r["first_step_s"] for r in reps) * 1000
        rss = statistics.median(r["rss_peak_kb"] for r in reps) / 1024
        w(
            f"| {dur} | {s.n} | {_range(s)} | {open_s:.3f} s | {step_ms:.1f} ms "
            f"| {rss:.0f} MB |"
        )
    w("")

    st = res.startup
    imp = Summary.of(st["import_s"])
    bare = statistics.median(st["python_bare_s"])
    selfrep = statistics.median(st["importtime_s"]) if st["importtime_s"] else 0.0
    cpu_ms = statistics.median(st.get("import_cpu_s") or [float("nan")]) * 1000
    heavy = ", ".join(st["heavy_loaded"]) or "none of " + ", ".join(HEAVY)
    help_line = (
        f"`argus --help`: {_range(Summary.of(st['help_s']), 1000, '.0f')} ms wall."
        if "help_s" in st
        else f"`argus --help`: not measured ({st['help_error']})."
    )
    w(
        _para(
            f"**Start-up** ({imp.n} runs each, interleaved). `python -c pass` takes ",
            f"{bare * 1000:.0f} ms here; `import argus_lab` is ",
            '`python -c "import argus_lab"` minus that: ',
            f"{_range(imp, 1000, '.0f')} ms. `-X importtime` puts `argus_lab` at ",
            f"{selfrep * 1000:.0f} ms cumulative, and its CPU time (less disturbed by ",
            f"other processes) is {cpu_ms:.0f} ms. Heavy modules loaded by ",
            f"`import argus_lab`: {heavy}. {help_line}",
        )
    )
    w("")

    normal = [r for r in rows if r.config.durability == "normal"]
    r_small = by[("chain", small, "normal")]
    r_mid = by[("chain", mid, "normal")]
    r_big = by[("chain", big, "normal")]
    names = " / ".join(r.config.label for r in normal)
    ms_ok = all(r.ms.median <= TARGET_MS for r in normal)
    marg_ok = all(r.marginal_per_step <= TARGET_BYTES for r in normal)
    raw_ok = all(r.disk_per_step <= TARGET_BYTES for r in normal)
    ro = reopen_s.get("normal") or next(iter(reopen_s.values()))

    def ratio(label: str, a: float, b: float, lo: int, hi: int, best: str = "") -> None:
        w(
            f"| flat in N: {label}, N={hi:,} / N={lo:,} | {a / b:.2f}x{best} "
            f"| <= {TARGET_FLAT}x | {_ok(a / b <= TARGET_FLAT)} |"
        )

    def best(a: Row, b: Row) -> str:
        # The fastest run of each is the one least disturbed by other processes.
        return f" (fastest runs: {a.ms.lo / b.ms.lo:.2f}x)"

    w("**Targets** (default durability, `normal`).")
    w("")
    w("| target | measured | limit | result |")
    w("|---|---|--:|---|")
    ms_vals = " / ".join(f"{r.ms.median:.3f}" for r in normal)
    w(f"| ms per no-op step ({names}) | {ms_vals} | <= {TARGET_MS} | {_ok(ms_ok)} |")
    vals = " / ".join(f"{r.marginal_per_step:,.0f}" for r in normal)
    w(
        f"| disk bytes per step, marginal ({names}) | {vals} "
        f"| <= {TARGET_BYTES:,} | {_ok(marg_ok)} |"
    )
    vals = " / ".join(f"{r.disk_per_step:,.0f}" for r in normal)
    w(
        f"| disk bytes per step, fixed part included ({names}) | {vals} "
        f"| <= {TARGET_BYTES:,} | {_ok(raw_ok)} |"
    )
    ratio(
        "ms/step", r_big.ms.median, r_small.ms.median, small, big, best(r_big, r_small)
    )
    if mid not in (small, big):
        ratio("ms/step", r_big.ms.median, r_mid.ms.median, mid, big, best(r_big, r_mid))
    ratio("CPU ms/step", r_big.cpu_ms.median, r_small.cpu_ms.median, small, big)
    ratio(
        "marginal disk/step",
        r_big.marginal_per_step,
        r_small.marginal_per_step,
        small,
        big,
    )
    ratio("written/step", r_big.written_per_step, r_small.written_per_step, small, big)
    w(
        f"| reopen a {reopen_n:,}-step session, ready to continue "
        f"| {ro.median:.3f} s | <= {TARGET_REOPEN_S} s "
        f"| {_ok(ro.median <= TARGET_REOPEN_S)} |"
    )
    w(
        f"| `import argus_lab` | {imp.median:.3f} s | <= {TARGET_IMPORT_S} s "
        f"| {_ok(imp.median <= TARGET_IMPORT_S)} |"
    )
    if "help_s" in st:
        h = statistics.median(st["help_s"])
        w(
            f"| `argus --help` | {h:.3f} s | <= {TARGET_HELP_S} s "
            f"| {_ok(h <= TARGET_HELP_S)} |"
        )
    else:
        w(
            f"| `argus --help` | not measured: {st['help_error']} "
            f"| <= {TARGET_HELP_S} s | not measured |"
        )
    w("")
    out += verdicts(res, rows, ro, imp, reopen_n)
    return "\n".join(out)


def verdicts(
    res: Results, rows: list[Row], reopen: Summary, imp: Summary, reopen_n: int
) -> list[str]:
    """One plain sentence per target, worded from the numbers."""
    normal = [r for r in rows if r.config.durability == "normal"]
    full = [r for r in rows if r.config.durability == "full"]
    chains = sorted(
        (r for r in normal if r.config.shape == "chain"), key=lambda r: r.config.n
    )
    lo, hi = chains[0], chains[-1]
    worst = max(normal, key=lambda r: r.ms.median)
    slowest = max(r.ms.hi for r in normal)
    over = [r.config.label for r in normal if r.ms.median > TARGET_MS]
    fixed_ms = res.fixed["normal"]["run_s"] * 1000
    fixed_kb = res.fixed["normal"]["disk_bytes"] / 1024
    marg = max(r.marginal_per_step for r in normal)
    raw = max(r.disk_per_step for r in normal)
    written = statistics.median(r.written_per_step for r in normal)
    kept = statistics.median(r.marginal_per_step for r in normal)
    ratio_ms = hi.ms.median / lo.ms.median
    ratio_w = hi.written_per_step / lo.written_per_step
    ratio_d = hi.marginal_per_step / lo.marginal_per_step
    cost = [f.ms.median / n.ms.median for n, f in zip(normal, full, strict=True)]
    extra = [f.ms.median - n.ms.median for n, f in zip(normal, full, strict=True)]
    st = res.startup
    fsync = res.machine["fsync_ms"]

    def said(ok: bool, yes: str, no: str) -> str:
        return yes if ok else no

    lines = [
        "**Verdicts.**",
        "",
        "- *Time per step:* "
        + said(
            worst.ms.median <= TARGET_MS,
            f"every workload stays under {TARGET_MS} ms at the median",
            f"**missed** at the median by {', '.join(over)}",
        )
        + f" (worst {worst.ms.median:.3f} ms, {worst.config.label}; slowest single "
        f"run {slowest:.3f} ms). CPU time per step, all threads: "
        f"{min(r.cpu_ms.median for r in normal):.3f}-"
        f"{max(r.cpu_ms.median for r in normal):.3f} ms. "
        + said(
            worst is lo,
            f"A 1-task `run()` costs {fixed_ms:.1f} ms of fixed set-up, which is why "
            "the shortest chain looks slowest per step.",
            f"A 1-task `run()` costs {fixed_ms:.1f} ms of fixed set-up.",
        ),
        "- *Bytes per step:* "
        + said(
            marg <= TARGET_BYTES,
            f"a step adds at most {marg:,.0f} B on disk",
            f"**missed**: a step adds up to {marg:,.0f} B on disk",
        )
        + f" beyond a fixed {fixed_kb:.0f} KB per session; with that fixed part "
        f"spread over the tasks the worst is {raw:,.0f} B "
        + said(raw <= TARGET_BYTES, "(also within the target)", "(over the target)")
        + f". But the process *writes* about {written / 1024:.0f} KB per step "
        f"(~{written / kept:.0f}x what it keeps): SQLite's WAL writes whole pages "
        "(1 KiB in a new workspace), several per commit, and then checkpoints them "
        "into the database; a quick side-effect-free step is one commit.",
        "- *Flat in N:* "
        + said(
            max(ratio_ms, ratio_w, ratio_d) <= TARGET_FLAT,
            "yes",
            "**no**",
        )
        + f": N={hi.config.n:,} vs N={lo.config.n:,} is {ratio_ms:.2f}x in time "
        f"({hi.cpu_ms.median / lo.cpu_ms.median:.2f}x in CPU time) and "
        f"{ratio_w:.2f}x in bytes written (they creep up a little, mostly from "
        "SQLite's periodic WAL checkpoints and deeper B-trees); the bytes kept on "
        f"disk per step: {ratio_d:.2f}x.",
        f"- *Reopen:* a {reopen_n:,}-step session opens ready to continue in "
        f"{reopen.median:.3f} s, "
        + said(reopen.median <= TARGET_REOPEN_S, "within", "**over**")
        + f" the {TARGET_REOPEN_S} s target. It reads every task record, so it grows "
        "linearly with the number of tasks.",
        f"- *Import:* `import argus_lab` takes {imp.median:.3f} s, "
        + said(imp.median <= TARGET_IMPORT_S, "within", "**over**")
        + f" {TARGET_IMPORT_S} s.",
    ]
    if "help_s" in st:
        h = statistics.median(st["help_s"])
        lines.append(
            f"- *CLI:* `argus --help` takes {h:.3f} s, "
            + said(h <= TARGET_HELP_S, "within", "**over**")
            + f" {TARGET_HELP_S} s."
        )
    else:
        lines.append(f"- *CLI:* `argus --help` was not measured: {st['help_error']}.")
    lines.append(
        f'- *durability="full":* costs {min(cost):.1f}-{max(cost):.1f}x the time '
        f"({min(extra):.2f}-{max(extra):.2f} ms more per step) on this VM, where a "
        f"4 KiB write + fsync took {fsync:.2f} ms during the run; a step of a tool "
        "without side effects fsyncs once (its result; the intent is not fsynced), "
        "a write tool's twice, so the cost follows the disk's fsync latency. Disk "
        "use is the same."
    )
    lines.append("")
    return lines


# -- main ----------------------------------------------------------------------------


def plan_configs(quick: bool, repeats: int | None) -> tuple[list[Config], int, int]:
    """(workloads, reopen N, reopen repeats)."""
    r = repeats or (2 if quick else 5)
    big_r = repeats or (1 if quick else 3)
    sizes = [100, 1000] if quick else [100, 1000, 10_000]
    fan = 100 if quick else 1000
    configs = []
    for dur in ("normal", "full"):
        for n in sizes:
            configs.append(Config("chain", n, dur, big_r if n >= 10_000 else r))
        configs.append(Config("fanout", fan, dur, r))
    return configs, (1000 if quick else 10_000), r


def measure(args: argparse.Namespace, tmp: Path, log: Callable[[str], None]) -> Results:
    """Runs every measurement, each in fresh processes."""
    t_start = time.perf_counter()
    log("machine ...")
    res = Results(machine=machine_info(tmp), quick=args.quick)
    configs, reopen_n, reopen_r = plan_configs(args.quick, args.repeats)
    log("fixed per-session overhead (1-task sessions) ...")
    for dur in ("normal", "full"):
        spec = {"mode": "run", "shape": "chain", "n": 1, "durability": dur}
        reps = []
        for i in range(3):
            d = tmp / f"fixed-{dur}-{i}"
            reps.append(spawn({**spec, "concurrency": 4, "dir": str(d)}))
            shutil.rmtree(d)
        res.fixed[dur] = sorted(reps, key=lambda r: r["run_s"])[1]  # the median
    log("workloads ...")
    res.runs = run_workloads(configs, tmp, log)
    log("reopen ...")
    res.reopen = run_reopen(reopen_n, ["normal", "full"], reopen_r, tmp, log)
    log("start-up ...")
    res.startup = run_startup(5 if args.quick else 15, log)
    res.machine["loadavg_end"] = os.getloadavg()
    res.machine["seconds"] = time.perf_counter() - t_start
    log(f"done in {res.machine['seconds']:.0f} s")
    return res


def to_json(res: Results) -> dict[str, Any]:
    return {
        "machine": res.machine,
        "quick": res.quick,
        "fixed": res.fixed,
        "runs": res.runs,
        "reopen": res.reopen,
        "startup": res.startup,
    }


def from_json(raw: dict[str, Any]) -> tuple[Results, list[Config]]:
    """Results and their workloads back from a ``--json`` dump."""
    res = Results(
        raw["machine"],
        raw["quick"],
        raw["runs"],
        raw["fixed"],
        raw["reopen"],
        raw["startup"],
    )
    if any("cpu_ms_per_step" not in r for runs in raw["runs"].values() for r in runs):
        raise SystemExit("this dump predates CPU time per step; measure again")
    configs = []
    for k, runs in raw["runs"].items():
        shape, n, dur = k.split(":")
        configs.append(Config(shape, int(n), dur, len(runs)))
    return res, configs


def write_doc(text: str) -> None:
    """Replaces the results section of BENCHMARKS.md (between the markers)."""
    doc = BENCH_MD.read_text()
    if START_MARK not in doc or END_MARK not in doc:
        raise SystemExit(f"{BENCH_MD} lacks the {START_MARK} / {END_MARK} markers")
    head, rest = doc.split(START_MARK, 1)
    _, tail = rest.split(END_MARK, 1)
    BENCH_MD.write_text(f"{head}{START_MARK}\n{text}\n{END_MARK}{tail}")


def wait_quiet(seconds: float, log: Callable[[str], None]) -> None:
    """Waits until the 1-minute load average is below half the cores, or gives up."""
    limit = (os.cpu_count() or 1) / 2
    end = time.monotonic() + seconds
    while (load := os.getloadavg()[0]) >= limit:
        if time.monotonic() > end:
            log(f"load average still {load:.2f}; measuring anyway")
            return
        log(f"load average {load:.2f} >= {limit:.1f}: waiting ...")
        time.sleep(30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller N, fewer repeats")
    p.add_argument("--json", type=Path, metavar="PATH", help="also dump raw results")
    p.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    p.add_argument("--repeats", type=int, help="override the number of repeats")
    p.add_argument("--tmp", type=Path, help="folder for the workspaces ($TMPDIR)")
    p.add_argument(
        "--from-json",
        type=Path,
        metavar="PATH",
        help="render (with --write: record) an earlier --json dump; measure nothing",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="print a cProfile of a 1,000-step chain's run() and exit",
    )
    p.add_argument(
        "--wait-quiet",
        type=float,
        metavar="MIN",
        help="first wait up to MIN minutes for the 1-minute load average to fall "
        "below half the cores (a shared machine)",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(CHILDREN[spec["mode"]](spec)))
        return 0

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.wait_quiet and not args.from_json:
        wait_quiet(args.wait_quiet * 60, log)
    if args.from_json:
        res, configs = from_json(json.loads(args.from_json.read_text()))
    else:
        tmp = Path(tempfile.mkdtemp(prefix="argus-bench-", dir=args.tmp))
        try:
            if args.profile:
                spec = {"mode": "profile", "n": 1000, "durability": "normal"}
                r = spawn({**spec, "dir": str(tmp / "ws")})
                took = f"{r['wall_s']:.2f} s"
                print(f"run() of a {r['n']}-step chain under cProfile: {took}")
                print(r["report"])
                return 0
            res = measure(args, tmp, log)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        configs = plan_configs(args.quick, args.repeats)[0]
        if args.json:
            args.json.write_text(json.dumps(to_json(res), indent=1))

    text = render(res, configs)
    if args.write:
        write_doc(text)
        log(f"updated {BENCH_MD}")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
