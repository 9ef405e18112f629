"""The ``argus`` command: run plans headless, list, show and resume sessions.

Exit codes: 0 done (succeeded), 1 the session failed, 2 bad usage or input,
3 the session paused and needs a decision, 4 an Argus error (plan, store, lease).
Imports stay light until a command needs more, so ``argus --help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argus_lab.runtime.session import RunResult, Session
    from argus_lab.tools.registry import Tool
    from argus_lab.workspace import Workspace

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PAUSED, EXIT_ERROR = 0, 1, 2, 3, 4


class UsageError(Exception):
    """Bad arguments or input: exit code 2 with a one-line reason."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="argus",
        description="Argus Lab: run agent plans as durable, resumable sessions.",
        epilog="exit codes: 0 succeeded, 1 failed, 2 bad usage, 3 paused "
        "(needs a decision), 4 Argus error. Workspace: --workspace, else "
        "$ARGUS_HOME, else ./.argus",
    )
    p.add_argument(
        "-w", "--workspace", help="workspace folder (default $ARGUS_HOME or ./.argus)"
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        sp.add_argument("--json", action="store_true", help="print JSON for scripts")
        return sp

    r = add("run", "run a YAML/JSON plan as a new session")
    r.add_argument("plan", help="path of a YAML or JSON plan file")
    r.add_argument(
        "--tools",
        required=True,
        action="append",
        help="module name or .py file whose Tool objects the plan uses "
        "(repeat or comma-separate)",
    )
    r.add_argument("--name", help="session name (default: from the goal)")
    r.add_argument(
        "--concurrency", type=int, default=4, help="tasks at once (default 4)"
    )
    r.add_argument(
        "--yes", action="store_true", help="approve every call that asks (writes)"
    )

    add("ls", "list the sessions of the workspace")

    s = add("show", "show a session's tasks (and events)")
    s.add_argument("name", help="session name or id")
    s.add_argument("--events", action="store_true", help="list its events too")

    rs = add("resume", "continue a session exactly where it stopped")
    rs.add_argument("name", help="session name or id")
    rs.add_argument(
        "--tools",
        action="append",
        default=[],
        help="module name or .py file with the session's tools",
    )
    rs.add_argument(
        "--concurrency", type=int, default=4, help="tasks at once (default 4)"
    )
    rs.add_argument(
        "--yes", action="store_true", help="approve every call that asks (writes)"
    )

    ap = add("approve", "approve a task that waits for approval (then: argus resume)")
    ap.add_argument("name", help="session name or id")
    ap.add_argument("task", help="the task id")
    ap.add_argument("--args", help="edited arguments, as a JSON object")

    rj = add("reject", "refuse a task that waits for approval (it fails)")
    rj.add_argument("name", help="session name or id")
    rj.add_argument("task", help="the task id")
    rj.add_argument("--reason", default="rejected on the command line")

    d = add("demo", "run the bundled offline demo (penguin data analysis)")
    d.add_argument("--name", help="session name (default demo-<time>)")
    return p


def _workspace(args: argparse.Namespace) -> Workspace:
    from argus_lab.workspace import Workspace

    return Workspace(args.workspace)


def load_tools(specs: Sequence[str]) -> list[Tool]:
    """Imports modules (names or .py paths) and collects their Tool objects.

    A module's ``TOOLS`` list wins; otherwise every module-level Tool is taken.
    """
    from argus_lab.tools.registry import Tool

    out: list[Tool] = []
    for spec in [x.strip() for s in specs for x in s.split(",") if x.strip()]:
        if spec.endswith(".py") or os.sep in spec:
            path = Path(spec)
            if not path.exists():
                raise UsageError(f"--tools: file {spec!r} does not exist")
            mspec = importlib.util.spec_from_file_location(path.stem, path)
            if mspec is None or mspec.loader is None:
                raise UsageError(f"--tools: cannot import {spec!r}")
            mod = importlib.util.module_from_spec(mspec)
            sys.modules[path.stem] = mod
            mspec.loader.exec_module(mod)
        else:
            try:
                mod = importlib.import_module(spec)
            except ImportError as e:
                raise UsageError(
                    f"--tools: cannot import module {spec!r}: {e}"
                ) from None
        found = getattr(mod, "TOOLS", None)
        if found is None:
            found = [v for v in vars(mod).values() if isinstance(v, Tool)]
        if not found:
            raise UsageError(
                f"--tools: module {spec!r} has no tools (decorate functions with "
                "@argus_lab.tool or list them in TOOLS)"
            )
        out.extend(found)
    return out


def _run_with_progress(s: Session, quiet: bool) -> RunResult:
    if quiet or not sys.stderr.isatty():
        return s.run()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    total = len(s.plan.tasks)
    done0 = sum(1 for r in s.records.values() if r.status in ("succeeded", "skipped"))
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
        transient=True,
    ) as prog:
        bar = prog.add_task(s.name, total=total, completed=done0, last="")

        def on_event(ev: Any) -> None:
            if ev.kind in ("task_succeeded", "task_skipped"):
                prog.update(bar, advance=1, last=ev.task_id or "")
            elif ev.kind == "retry_scheduled":
                prog.update(
                    bar, last=f"{ev.task_id}: retrying ({ev.payload.get('error')})"
                )

        unsub = s.subscribe(on_event)
        try:
            return s.run()
        finally:
            unsub()


def _run_approving(s: Session, quiet: bool, yes: bool, by: str) -> RunResult:
    """Runs; with ``yes``, approves what asks and runs on, saying so each time."""
    res = _run_with_progress(s, quiet)
    while yes and res.status == "paused" and s.pending_approvals():
        for tid, asked in s.pending_approvals().items():
            if not quiet:
                why = asked.get("reason") or "asked"
                print(
                    f"approval: task {tid!r} calls {asked.get('tool')!r} ({why})"
                    f" — approved by {by}"
                )
            s.approve(tid, by=by)
        res = _run_with_progress(s, quiet)
    return res


def _exit_code(status: str) -> int:
    return {"succeeded": EXIT_OK, "failed": EXIT_FAILED}.get(status, EXIT_PAUSED)


def _task_rows(s: Session) -> list[dict[str, Any]]:
    rows = []
    for t in s.plan.tasks:
        r = s.record(t.id)
        dur = r.ended - r.started if r.ended and r.started else None
        rows.append(
            {
                "task": t.id,
                "tool": t.tool,
                "status": r.status,
                "attempts": r.attempts,
                "seconds": dur,
                "error": r.error or r.reason,
            }
        )
    return rows


def _print_tasks(s: Session) -> None:
    from rich.console import Console
    from rich.table import Table

    colors = {
        "succeeded": "green",
        "failed": "red",
        "blocked": "yellow",
        "in_doubt": "magenta",
        "running": "cyan",
        "skipped": "dim",
    }
    table = Table(
        title=f"{s.name} — {s.status}" + (f": {s.reason}" if s.reason else "")
    )
    for col in ("task", "tool", "status", "tries", "seconds", "error"):
        table.add_column(col, overflow="fold")
    for row in _task_rows(s):
        st = row["status"]
        table.add_row(
            row["task"],
            row["tool"] or "",
            f"[{colors.get(st, '')}]{st}",
            str(row["attempts"]),
            "" if row["seconds"] is None else f"{row['seconds']:.3f}",
            (row["error"] or "")[:120],
        )
    Console().print(table)


def _report(s: Session, res: RunResult, args: argparse.Namespace, ws: Workspace) -> int:
    if args.json:
        print(
            json.dumps(
                {
                    "session": s.name,
                    "id": s.id,
                    "status": res.status,
                    "reason": res.reason,
                    "counts": res.counts,
                    "failed": res.failed,
                    "workspace": str(ws.path),
                }
            )
        )
    else:
        _print_tasks(s)
        print(f"session {s.name!r} {res}")
        print(f"workspace: {ws.path}")
    return _exit_code(res.status)


def cmd_run(args: argparse.Namespace) -> int:
    from argus_lab.model import Plan

    plan = Plan.from_yaml(Path(args.plan))
    tools = load_tools(args.tools)
    ws = _workspace(args)
    s = ws.new_session(
        plan=plan, tools=tools, name=args.name, concurrency=args.concurrency
    )
    with s:
        res = _run_approving(s, args.json, args.yes, "argus run --yes")
        return _report(s, res, args, ws)


def _default_tools(ws: Workspace, name: str) -> list[Tool]:
    # Tools are code and are not stored; the demo's are known, others must be named.
    from argus_lab.demo import TOOLS

    with ws.open(name) as s:
        names = {t.tool for t in s.plan.tasks if t.tool}
    if names <= {t.name for t in TOOLS}:
        return list(TOOLS)
    raise UsageError(
        f"resume needs the session's tools: --tools MODULE (it uses "
        f"{', '.join(sorted(names))})"
    )


def cmd_resume(args: argparse.Namespace) -> int:
    ws = _workspace(args)
    tools = load_tools(args.tools) if args.tools else _default_tools(ws, args.name)
    with ws.open(args.name, tools=tools, concurrency=args.concurrency) as s:
        res = _run_approving(s, args.json, args.yes, "argus resume --yes")
        return _report(s, res, args, ws)


def cmd_approve(args: argparse.Namespace) -> int:
    edited = None
    if args.args is not None:
        try:
            edited = json.loads(args.args)
        except json.JSONDecodeError as e:
            raise UsageError(f"--args is not JSON: {e}") from None
        if not isinstance(edited, dict):
            raise UsageError("--args must be a JSON object of argument names")
    ws = _workspace(args)
    with ws.open(args.name) as s:
        s.approve(args.task, edited, by="argus approve")
        print(f"approved {args.task!r}; continue with: argus resume {s.name}")
    return EXIT_OK


def cmd_reject(args: argparse.Namespace) -> int:
    ws = _workspace(args)
    with ws.open(args.name) as s:
        s.reject(args.task, args.reason, by="argus reject")
        print(f"rejected {args.task!r}: {args.reason}")
    return EXIT_OK


def cmd_ls(args: argparse.Namespace) -> int:
    ws = _workspace(args)
    infos = ws.sessions()
    if args.json:
        print(json.dumps([i.model_dump() for i in infos]))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"sessions in {ws.path}")
    for col in ("name", "status", "tasks", "done", "goal", "id"):
        table.add_column(col, overflow="fold")
    for i in infos:
        done = i.counts.get("succeeded", 0) + i.counts.get("skipped", 0)
        table.add_row(i.name, i.status, str(i.n_tasks), str(done), i.goal[:50], i.id)
    Console().print(table)
    if not infos:
        print("no sessions yet: try `argus demo`")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    ws = _workspace(args)
    with ws.open(args.name) as s:
        if args.json:
            out: dict[str, Any] = {
                "session": s.info.model_dump(),
                "tasks": _task_rows(s),
            }
            if args.events:
                out["events"] = [e.model_dump() for e in s.events()]
            print(json.dumps(out, default=str))
            return EXIT_OK
        _print_tasks(s)
        if args.events:
            from rich.console import Console
            from rich.table import Table

            t = Table(title="events")
            for col in ("seq", "kind", "task", "attempt", "payload"):
                t.add_column(col, overflow="fold")
            for e in s.events():
                t.add_row(
                    str(e.seq),
                    e.kind,
                    e.task_id or "",
                    "" if e.attempt is None else str(e.attempt),
                    json.dumps(e.payload)[:100],
                )
            Console().print(t)
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    import time

    from argus_lab.demo import POLICIES, TOOLS, plan_path
    from argus_lab.model import Plan

    ws = _workspace(args)
    name = args.name or time.strftime("demo-%Y%m%d-%H%M%S")
    plan = Plan.from_yaml(plan_path())
    s = ws.new_session(
        plan=plan, tools=TOOLS, name=name, backoff=(0.05, 1.0), approvals=POLICIES
    )
    with s:
        if not args.json:
            print(f"Argus Lab demo: {plan.goal} ({len(plan.tasks)} tasks, offline)")
        # The report is a write: the session asks, and the demo approves for you.
        res = _run_approving(s, args.json, True, "argus demo")
        retried = [str(e.task_id) for e in s.events() if e.kind == "retry_scheduled"]
        code = _report(s, res, args, ws)
        if not args.json:
            if retried:
                print("transient failures retried: " + ", ".join(sorted(set(retried))))
            report = s.workspace.path / "files" / s.id / "report.md"
            if report.exists():
                print(f"report: {report}")
            print(f"inspect: argus show {s.name}   |   resume: argus resume {s.name}")
        return code


COMMANDS = {
    "approve": cmd_approve,
    "reject": cmd_reject,
    "run": cmd_run,
    "ls": cmd_ls,
    "show": cmd_show,
    "resume": cmd_resume,
    "demo": cmd_demo,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``argus`` console script; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    from argus_lab.errors import ArgusError, PlanError

    try:
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(f"argus {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except PlanError as e:
        print(f"argus {args.command}: {e.message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyError as e:
        print(f"argus {args.command}: {e.args[0] if e.args else e}", file=sys.stderr)
        return EXIT_USAGE
    except ArgusError as e:
        print(f"argus {args.command}: {e.message}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
