"""``argus run | resume | fork | ls | show | export`` (decisions: _decide.py)."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.cli._common import (
    EXIT_OK,
    Out,
    UsageError,
    argus_command,
    cli_terms,
    exit_code,
    human_age,
    human_bytes,
    known_session,
    need_task,
    open_session,
    plain,
    print_tasks,
    resume_command,
    styled,
    task_rows,
    vacant_name,
    workspace,
    workspace_path,
)
from argus_lab.cli._run import run_session
from argus_lab.cli._tools import load_planner, load_tools, needs_tools, session_setup
from argus_lab.errors import ArgusError, LostCommitsError

if TYPE_CHECKING:
    from argus_lab.runtime.session import RunResult, Session
    from argus_lab.workspace import Workspace

from argus_lab.store.folders import dir_bytes

__all__ = [
    "cmd_export",
    "cmd_fork",
    "cmd_ls",
    "cmd_resume",
    "cmd_run",
    "cmd_show",
]


def report_run(
    s: Session,
    res: RunResult,
    out: Out,
    ws: Workspace,
    args: argparse.Namespace | None = None,
) -> int:
    """Print how a run ended (table, or JSON) and return its exit code.

    ``args`` (the command's) make the printed ``argus resume`` line carry its
    ``--tools`` and ``-w``, so that it works as printed.
    """
    out.data(
        {
            "session": s.name,
            "id": s.id,
            "status": res.status,
            "reason": res.reason,
            "counts": res.counts,
            "failed": res.failed,
            "pending_approvals": sorted(s.pending_approvals()),
            "workspace": str(ws.path),
        }
    )
    args = args or argparse.Namespace()
    if not s.plan.tasks:
        # A plan of no tasks is valid (the Python API takes one): nothing ran,
        # and an empty table and "succeeded: " would not say so.
        out.say(
            f"session {s.name!r} {res.status}: its plan has no tasks, so nothing ran"
        )
        return exit_code(res.status)
    print_tasks(s, out, args=args)
    out.say(cli_terms(f"session {s.name!r} {res}", s.name, args))
    again = resume_command(s.name, args, needs_tools=needs_tools(s.plan))
    if res.status == "paused" and s.pending_approvals():
        first = next(iter(s.pending_approvals()))
        decide = argus_command(args, "approve", s.name, first)
        out.say(f"decide: {decide}  (or argus reject ...), then {again}")
    elif res.status == "failed" and res.failed:
        retry = argus_command(args, "retry", s.name, next(iter(res.failed)))
        out.say(f"once the cause is fixed: {retry}, then {again}")
    return exit_code(res.status)


def cmd_run(args: argparse.Namespace, out: Out) -> int:
    """Run a YAML/JSON plan as a new session."""
    from argus_lab.plan import Plan

    plan = Plan.from_yaml(Path(args.plan))  # PlanError says what is wrong
    tools = load_tools(args.tools)
    extra = {"planner": load_planner(args.planner)} if args.planner else {}
    ws = workspace(args, create=True)
    vacant_name(ws, args.name, args)
    s = ws.new_session(
        plan=plan,
        tools=tools,
        name=args.name,
        concurrency=args.concurrency or 4,
        **extra,
    )
    with s:
        res = run_session(s, out, approve_as="argus run --yes" if args.yes else None)
        return report_run(s, res, out, ws, args)


def cmd_resume(args: argparse.Namespace, out: Out) -> int:
    """Continue a session exactly where it stopped."""
    ws = workspace(args)
    lost: dict[str, bool] = {
        k: True for k in ("accept_lost_commits", "accept_copy") if getattr(args, k)
    }
    # A session that succeeded runs nothing more: it needs no --tools to say so.
    done = not args.tools and _status(ws, args.name) == "succeeded"
    opts = {} if done else session_setup(ws, args.name, args, **lost)
    with open_session(ws, args.name, **opts, **lost) as s:
        res = run_session(s, out, approve_as="argus resume --yes" if args.yes else None)
        return report_run(s, res, out, ws, args)


def _status(ws: Workspace, name: str) -> str | None:
    """The status a session's records give (None when they cannot be read:
    opening it says why)."""
    try:
        status: str = ws.progress(known_session(ws, name))["status"]
    except ArgusError:
        return None
    return status


def cmd_fork(args: argparse.Namespace, out: Out) -> int:
    """Branch a session at a task; with --run, run the branch now."""
    ws = workspace(args)
    opts = session_setup(ws, args.name, args) if args.run else {}
    vacant_name(ws, args.new_name, args)
    with open_session(ws, args.name, **opts) as parent:
        if args.at is not None:
            need_task(parent, args.at)
        fork = parent.fork(at=args.at, name=args.new_name, reuse=args.reuse)
    with fork:
        kept = sum(1 for r in fork.records.values() if r.status == "succeeded")
        todo = len(fork.plan.tasks) - kept
        if not args.run:
            out.data(
                {
                    "session": fork.name,
                    "id": fork.id,
                    "parent": args.name,
                    "at": args.at,
                    "reuse": args.reuse,
                    "kept": kept,
                    "to_run": todo,
                    "status": fork.status,
                }
            )
            how = (
                "served from the recorded cache where inputs and code are unchanged"
                if args.reuse == "cached"
                else "re-executed"
            )
            where = f" at {args.at!r}" if args.at is not None else ""
            out.say(
                f"forked {args.name!r}{where} as {fork.name!r}: {kept} "
                f"results kept, {todo} tasks to run ({how}).\n"
                f"run it: "
                + resume_command(fork.name, args, needs_tools=needs_tools(fork.plan))
            )
            return EXIT_OK
        res = run_session(
            fork, out, approve_as="argus fork --yes" if args.yes else None
        )
        return report_run(fork, res, out, ws, args)


def cmd_ls(args: argparse.Namespace, out: Out) -> int:
    """List the sessions of the workspace, oldest first."""
    if not (where := workspace_path(args)).exists():
        out.data([])
        # Name the folder: a mistyped -w or ARGUS_HOME must not look like a
        # workspace whose sessions vanished.
        out.say(f"no workspace at {where} yet, so no sessions: try `argus demo`")
        return EXIT_OK
    ws = workspace(args)
    rows: list[dict[str, Any]] = []
    for info in ws.sessions():
        size = dir_bytes(ws.path_of(info)) + dir_bytes(ws.path / "files" / info.id)
        row = info.model_dump(mode="json") | {"bytes": size}
        try:  # the records' word, not the summary written when a run began
            prog = ws.progress(info.id)
        except ArgusError as e:
            lost = isinstance(e, LostCommitsError)
            row |= {"status": "lost_commits" if lost else "damaged", "error": e.message}
        else:
            row |= {"status": prog["status"], "counts": prog["counts"]}
        rows.append(row)
    # A session that cannot be read is listed with its error; the rest normally.
    damaged = ws.damaged_sessions()
    out.data(
        rows + [{"id": k, "status": "damaged", "error": v} for k, v in damaged.items()]
    )
    if out.json_mode:
        return EXIT_OK
    from rich.table import Table

    table = Table(title=plain(f"sessions in {ws.path}"), title_justify="left")
    for col in ("name", "status", "tasks", "done", "updated", "size", "goal"):
        table.add_column(col, overflow="fold")
    now = time.time()
    for r in rows:
        done = r["counts"].get("succeeded", 0) + r["counts"].get("skipped", 0)
        goal = r.get("error") or r["goal"]
        goal = goal if len(goal) <= 48 else goal[:47] + "..."
        table.add_row(
            plain(r["name"] + (" (fork)" if r["parent"] else "")),
            styled(r["status"]),
            str(r["n_tasks"]),
            str(done),
            human_age(r["updated"], now),
            human_bytes(r["bytes"]),
            plain(goal),
        )
    for sid, why in damaged.items():
        table.add_row(plain(sid), styled("damaged"), "", "", "", "", plain(why))
    out.table(table)
    if not rows and not damaged:
        out.say("no sessions yet: try `argus demo`")
    return EXIT_OK


def show_title(
    ws: Workspace, s: Session, args: argparse.Namespace | None = None
) -> tuple[str, str | None]:
    """``name - status (k of n succeeded)`` from the records, and what to do."""
    prog = ws.progress(s.id)
    ok = prog["counts"].get("succeeded", 0)
    title = f"{s.name} - {prog['status']} ({ok} of {len(s.plan.tasks)} succeeded)"
    if prog["status"] == "interrupted":
        again = resume_command(
            s.name, args or argparse.Namespace(), needs_tools=needs_tools(s.plan)
        )
        return title, f"its run stopped when its process ended; {again} goes on"
    if prog["status"] == "running" and prog["runner"]:
        r = prog["runner"]
        return title, f"running now in process {r['pid']} on {r['host']}"
    title += f": {s.reason}" if s.reason else ""
    return cli_terms(title, s.name, args or argparse.Namespace()), None


def cmd_show(args: argparse.Namespace, out: Out) -> int:
    """Show a session's tasks, and with --events its trajectory."""
    ws = workspace(args)
    with open_session(ws, args.name) as s:
        # --limit N asks for events: showing none would look like there are none.
        args.events = args.events or args.limit is not None
        events = s.events() if args.events else []
        if args.limit is not None:
            events = events[-args.limit :]
        prog = ws.progress(s.id)
        payload: dict[str, Any] = {
            "session": s.info.model_dump(mode="json")
            | {"status": prog["status"], "counts": prog["counts"]},
            "tasks": task_rows(s),
        }
        if args.events:
            payload["events"] = [e.model_dump(mode="json") for e in events]
        if getattr(args, "svg", None):
            from pathlib import Path

            path = Path(args.svg)
            try:
                path.write_text(s.graph_svg(), encoding="utf-8")
            except OSError as err:
                raise UsageError(f"cannot write the SVG to {path}: {err}") from None
            payload["svg"] = str(path)
        out.data(payload)
        if out.json_mode:
            return EXIT_OK
        title, hint = show_title(ws, s, args)
        print_tasks(s, out, title)
        if hint:
            out.say(hint)
        if args.events:
            from rich.table import Table

            t = Table(title="events", title_justify="left")
            for col in ("seq", "kind", "task", "attempt", "details"):
                t.add_column(col, overflow="fold")
            for e in events:
                t.add_row(
                    str(e.seq),
                    e.kind,
                    e.task_id or "",
                    "" if e.attempt is None else str(e.attempt),
                    json.dumps(e.details(), default=str)[:100],
                )
            out.table(t)
        if "svg" in payload:  # say where the file went, or it looks ignored
            out.say(f"graph written to {payload['svg']}")
    return EXIT_OK


def _writable(folder: Path) -> None:
    """Makes ``folder`` and checks it takes a file: a UsageError (exit 2) if not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".argus-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UsageError(
            f"cannot write to {str(folder)!r}: {e.strerror or e}; give --parquet a "
            "folder you can write to"
        ) from None


def cmd_export(args: argparse.Namespace, out: Out) -> int:
    """Write sessions' trajectories as parquet files (argus_lab.analysis.export)."""
    if bool(args.names) == bool(args.all):
        raise UsageError("name the sessions to export, or give --all (not both)")
    from argus_lab.analysis import export

    ws = workspace(args)
    folder = Path(args.parquet)
    if args.all:
        names = [i.name for i in ws.sessions()]
        _writable(folder)
        export(ws, folder)
    else:
        names = list(dict.fromkeys(args.names))
        for n in names:  # every name is checked before anything is written
            open_session(ws, n).close()
        _writable(folder)
        sessions = [ws.open(n) for n in names]
        try:
            export(sessions, folder)
        finally:
            for s in sessions:
                s.close()
    files = sorted(folder.glob("*.parquet"))
    out.data(
        {
            "folder": str(folder.resolve()),
            "sessions": names,
            "files": {f.name: f.stat().st_size for f in files},
        }
    )
    out.say(
        f"exported {len(names)} session(s) to {folder.resolve()}: "
        + ", ".join(f.name for f in files)
        + "\nread back: argus_lab.analysis.load(folder)"
    )
    return EXIT_OK
