"""Analysis benchmark: trajectories into DataFrames, from the store to the frame.

A script, not a test. It builds workspaces of realistic trajectories, then times
``events_df`` for one session of 10,000 and of 100,000 events and for a workspace of
100 sessions, against the issue's target (100,000 events in <= 1 s), plus the other
frames, export/load, and the ways of parsing the stored JSON it chose between.

Trajectories: per task, ``task_started``, an ``llm_call``, a ``tool_call``, a second
``llm_call`` and ``task_succeeded`` (every tenth task also fails once first:
``task_started`` + ``retry_scheduled``), with the payloads the runtime and the model
layer write. They are committed through ``Session.emit`` in batches (the real
store path: redaction, envelope, checksum), which is much faster than running
100,000 events' worth of tasks, and what is measured is the read, not the write.

Every figure is the median of ``--repeat`` runs in this process (min-max beside it),
after one warm-up run; the machine and versions are printed with the results.

Usage::

    .venv/bin/python benchmarks/bench_analysis.py            # markdown to stdout
    .venv/bin/python benchmarks/bench_analysis.py --write    # results_analysis.md
    .venv/bin/python benchmarks/bench_analysis.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results_analysis.md"
TARGET_S = 1.0

import argus_lab as al  # noqa: E402
from argus_lab import analysis as an  # noqa: E402
from argus_lab.analysis._event_cols import event_table, split_bodies  # noqa: E402
from argus_lab.analysis._read import parse_events  # noqa: E402
from argus_lab.events import EventBase, make_event  # noqa: E402


@al.tool
def noop(i: int) -> str:
    """Does nothing (the plan needs a tool)."""
    return "x"


def _events(sid: str, n_events: int, t0: float) -> list[EventBase]:
    out: list[EventBase] = []
    k = 0
    while len(out) < n_events:
        tid, ts = f"t{k}", t0 + k
        if k % 10 == 9:
            out.append(make_event("task_started", session_id=sid, ts=ts, task_id=tid,
                                  attempt=1, tool="noop"))  # fmt: skip
            out.append(make_event(
                "retry_scheduled", session_id=sid, ts=ts + 0.05, task_id=tid, attempt=1,
                duration=0.05, delay=0.5, error="HTTP 529 overloaded",
                error_type="TransientError",
            ))  # fmt: skip
        a = 2 if k % 10 == 9 else 1
        llm = {
            "model": "claude-sonnet-4-5", "purpose": "task",
            "input_tokens": 1200 + k % 7,
            "output_tokens": 300, "cache_read_tokens": 1000, "cache_write_tokens": 0,
            "cost_usd": 0.0123, "request_hash": f"{k:016x}", "cached": False,
            "stop_reason": "tool_use",
        }  # fmt: skip
        out += [
            make_event("task_started", session_id=sid, ts=ts + 0.1, task_id=tid,
                       attempt=a, tool="noop"),
            make_event("llm_call", session_id=sid, ts=ts + 0.2, task_id=tid, attempt=a,
                       duration=0.8, **llm),
            make_event("tool_call", session_id=sid, ts=ts + 0.3, task_id=tid, attempt=a,
                       duration=0.01, tool="search", ok=True,
                       args={"q": f"penguins {k}"}),
            make_event("llm_call", session_id=sid, ts=ts + 0.4, task_id=tid, attempt=a,
                       duration=0.5, **{**llm, "stop_reason": "end_turn"}),
            make_event("task_succeeded", session_id=sid, ts=ts + 0.5, task_id=tid,
                       attempt=a, duration=0.4, bytes=3),
        ]  # fmt: skip
        k += 1
    return out[:n_events]


def make_session(ws: al.Workspace, name: str, n_events: int) -> al.Session:
    """A session with ``n_events`` events (plus the 2 every session starts with)."""
    n_tasks = max(1, n_events // 5 + 1)
    plan = al.Plan(tasks=[al.Task(id=f"t{i}", tool="noop", args={"i": i})
                          for i in range(n_tasks)])  # fmt: skip
    s = ws.new_session(plan=plan, tools=[noop], name=name)
    evs = _events(s.id, n_events, time.time())
    for i in range(0, len(evs), 5000):
        s.emit(*evs[i : i + 5000])
    return s


def measure(fn: Callable[[], Any], repeat: int) -> dict[str, float]:
    """Wall and CPU seconds of ``fn`` (CPU: this process, all its threads)."""
    fn()  # warm-up: imports, SQLite page cache
    times, cpus = [], []
    for _ in range(repeat):
        gc.collect()
        c, t = time.process_time(), time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return {
        "median": statistics.median(times),
        "min": min(times),
        "max": max(times),
        "cpu": statistics.median(cpus),
    }


def _parsers(bodies: list[str]) -> dict[str, Callable[[], Any]]:
    import pyarrow as pa
    import pyarrow.json as pj

    heads = pa.schema([("kind", pa.string()), ("session_id", pa.string()),
                       ("seq", pa.int64()), ("ts", pa.float64()),
                       ("task_id", pa.string()), ("attempt", pa.int64()),
                       ("duration", pa.float64())])  # fmt: skip
    opts = pj.ParseOptions(explicit_schema=heads, unexpected_field_behavior="ignore")

    def arrow() -> Any:
        table = pj.read_json(io.BytesIO("\n".join(bodies).encode()), parse_options=opts)
        return table, split_bodies(bodies, True)

    return {
        "json.loads per event": lambda: [json.loads(b) for b in bodies],
        "json.loads of one joined array": lambda: json.loads(
            "[" + ",".join(bodies) + "]"
        ),
        "pyarrow.json (heads; details sliced as text)": arrow,
        "split after duration, heads joined into dicts (SessionData.events)": (
            lambda: parse_events(bodies)
        ),
        "split after duration, heads parsed by Arrow (used: event_table)": (
            lambda: event_table(bodies, True)
        ),
    }


def run(quick: bool) -> dict[str, Any]:
    repeat = 3 if quick else 7
    sizes = (10_000, 100_000) if not quick else (10_000, 30_000)
    n_ws, per_ws = (100, 1_000) if not quick else (20, 500)
    res: dict[str, Any] = {"repeat": repeat, "rows": []}

    def add(what: str, n: int, m: dict[str, float]) -> None:
        res["rows"].append({"what": what, "events": n, **m})
        print(
            f"  {what:<58} {n:>8,} {m['median']:.3f} s (cpu {m['cpu']:.3f} s)",
            file=sys.stderr,
        )

    with tempfile.TemporaryDirectory() as tmp:
        ws = al.Workspace(Path(tmp) / "one")
        for n in sizes:
            s = make_session(ws, f"s{n}", n)
            n_ev = len(s.events_df())
            bodies = list(s.event_json())
            rows = parse_events(bodies)
            add(
                "events_df(session)", n_ev, measure(lambda s=s: an.events_df(s), repeat)
            )
            add(
                'events_df(session, dtype_backend="pyarrow")',
                n_ev,
                measure(lambda s=s: an.events_df(s, dtype_backend="pyarrow"), repeat),
            )
            add(
                "  of which: store read (iter_event_json)",
                n_ev,
                measure(lambda s=s: list(s.event_json()), repeat),
            )
            add(
                "  of which: parse",
                n_ev,
                measure(lambda b=bodies: parse_events(b), repeat),
            )
            add(
                "  of which: build the frame (Columns.frame)",
                n_ev,
                measure(lambda r=rows: an.EVENT_COLUMNS.frame(r), repeat),
            )
            add("tasks_df(session)", n_ev, measure(lambda s=s: an.tasks_df(s), repeat))
            add(
                "llm_calls_df(session)",
                n_ev,
                measure(lambda s=s: an.llm_calls_df(s), repeat),
            )
            add(
                "frames(session): all seven frames",
                n_ev,
                measure(lambda s=s: an.frames(s), max(2, repeat // 2)),
            )
            if n == sizes[-1]:
                for name, fn in _parsers(bodies).items():
                    add(f"parse alternative: {name}", n_ev, measure(fn, repeat))
                out = Path(tmp) / "export"
                add(
                    "export(session) to parquet",
                    n_ev,
                    measure(lambda s=s, o=out: an.export(s, o), max(2, repeat // 2)),
                )
                add("load(folder)", n_ev, measure(lambda o=out: an.load(o), repeat))
            s.close()
        many = al.Workspace(Path(tmp) / "many")
        for i in range(n_ws):
            make_session(many, f"w{i:03d}", per_ws).close()
        n_ev = len(an.events_df(many))
        add(
            f"events_df(workspace of {n_ws} sessions)",
            n_ev,
            measure(lambda: an.events_df(many), repeat),
        )
        add(
            f"sessions_df(workspace of {n_ws} sessions)",
            n_ev,
            measure(lambda: an.sessions_df(many), repeat),
        )
        add(
            f"frames(workspace of {n_ws} sessions)",
            n_ev,
            measure(lambda: an.frames(many), max(2, repeat // 2)),
        )
        many.close()
        ws.close()
    res["env"] = {
        "date": dt.date.today().isoformat(),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        **{p: metadata.version(p) for p in ("pandas", "pyarrow", "numpy")},
    }
    return res


def render(res: dict[str, Any]) -> str:
    e = res["env"]
    lines = [
        "## Analysis: trajectories into DataFrames",
        "",
        "`benchmarks/bench_analysis.py` (rerun: `.venv/bin/python "
        "benchmarks/bench_analysis.py --write`). Target: `events_df` of 100,000 events "
        f"in <= {TARGET_S:g} s, store read included. Median of {res['repeat']} runs "
        "after a warm-up (min-max). CPU is this process's CPU time (all threads): "
        "on a shared machine it says what the work costs when wall time also "
        "counts waiting for a core.",
        "",
        f"Machine: {e['machine']}, load average {e['load']:.1f} at the end; Python "
        f"{e['python']}, pandas {e['pandas']}, pyarrow {e['pyarrow']}, numpy "
        f"{e['numpy']}; {e['date']}.",
        "",
        "| what | events | wall, median | wall, min-max | CPU, median | events/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        rate = f"{r['events'] / r['median']:,.0f}" if r["median"] else "-"
        lines.append(
            f"| {r['what']} | {r['events']:,} | {r['median']:.3f} s | "
            f"{r['min']:.3f}-{r['max']:.3f} s | {r['cpu']:.3f} s | {rate} |"
        )
    return "\n".join([*lines, "", *NOTES]) + "\n"


NOTES = """\
### Notes

- **How the events are read.** `iter_event_json` yields each stored event's JSON
  text (the store checks its envelope and checksum). The EventBase fields come
  first, `duration` last of them, then the kind's own typed fields, so each text
  is split after `duration`: the small heads (kind, seq, ts, task, attempt,
  duration) are parsed by ONE `json.loads` of a joined array, and the kind's
  fields stay JSON text (the `details` column). They are parsed only for the
  frames that need them (LLM calls, approvals, errors), again one joined
  `json.loads` per frame, and merged into the rows by name. Texts that do not
  have that shape are parsed whole.
- **Why not pyarrow.json**, though it parses fastest above: it must infer one
  struct type for every kind's fields, and they differ by kind and hold maps keyed
  by task ids (`session_failed.failed`), so only the heads could go through it,
  and its Arrow table would serve `events_df` alone while every derived frame
  (attempts, tasks, approvals) needs the rows anyway. A second read path, for
  about 0.1 s per 100,000 events (parsing and column building together), did
  not pay for itself while the target is met.
- **What is left** in `events_df` is about a third each: the store's read (one
  SQLite range scan, then a CRC-32 check and split per record), parsing, and
  building the typed columns.
- **Workspaces.** Each session's store is opened once (not once to list and
  again to read), by 4 threads. Opening a diskcache store rewrites its settings
  and closing it checkpoints SQLite's WAL, a few ms per session; a read-only open
  in the store would remove most of that per-session cost.
- **Wall vs CPU.** These runs share 2 CPUs with other work; where wall time is
  well above CPU time, the difference is waiting for a core or the disk.
""".splitlines()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    ap.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    ap.add_argument("--json", type=Path, help="also dump the raw results here")
    args = ap.parse_args()
    res = run(args.quick)
    text = render(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    if args.write:
        RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
