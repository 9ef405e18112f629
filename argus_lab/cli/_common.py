"""What every ``argus`` command shares: exit codes, output, workspaces, tools, runs.

Nothing heavy is imported here at module level (no pandas, rich or the runtime):
``argus --help`` must stay instant, so each helper imports what it needs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from argus_lab.events import EventBase
    from argus_lab.runtime.session import RunResult, Session
    from argus_lab.workspace import Workspace

__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PAUSED",
    "EXIT_PIPE",
    "EXIT_USAGE",
    "CliError",
    "Out",
    "UsageError",
    "exit_code",
    "human_age",
    "human_bytes",
    "known_session",
    "load_tools",
    "open_session",
    "plain",
    "run_session",
    "session_setup",
    "styled",
    "workspace",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PAUSED, EXIT_ERROR = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
EXIT_PIPE = 141  # 128 + SIGPIPE: the reader of our output went away


class UsageError(Exception):
    """Bad arguments or input: exit code 2 with a one-line reason."""


class CliError(Exception):
    """A refusal that is not a usage mistake (e.g. a session still running): 4."""


class Out:
    """Where a command's output goes: one JSON document, or text for a person.

    Args:
        json_mode: Print only JSON (for scripts); text and tables are dropped.
    """

    def __init__(self, json_mode: bool) -> None:
        self.json_mode = json_mode
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        """A rich Console on stdout (tables, colours when it is a terminal)."""
        if self._console is None:
            from rich.console import Console

            # Piped or captured, rich would fold tables at 80 columns: task ids
            # are worth a wider page.
            width = None if sys.stdout.isatty() else 140

            class _Console(Console):
                def on_broken_pipe(self) -> None:
                    # rich would exit 1 ("the session failed"): let main() say 141.
                    raise BrokenPipeError

            self._console = _Console(highlight=False, soft_wrap=False, width=width)
        return self._console

    def say(self, text: str = "") -> None:
        """Print a line for a person (nothing in JSON mode)."""
        if not self.json_mode:
            print(text, flush=True)

    def table(self, table: Any) -> None:
        """Print a rich Table (nothing in JSON mode)."""
        if not self.json_mode:
            self.console.print(table)

    def data(self, value: Any) -> None:
        """Print the command's JSON result (only in JSON mode)."""
        if self.json_mode:
            print(json.dumps(value, default=str), flush=True)


def exit_code(status: str) -> int:
    """0 for succeeded, 1 for failed, 3 for anything that waits (paused)."""
    return {"succeeded": EXIT_OK, "failed": EXIT_FAILED}.get(status, EXIT_PAUSED)


def human_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_age(then: float, now: float | None = None) -> str:
    """Seconds since ``then`` as ``42s``, ``5m``, ``3h`` or ``12d`` ago."""
    dt = max(0.0, (now if now is not None else time.time()) - then)
    for limit, unit in ((120, "s"), (7200, "m"), (172800, "h")):
        if dt < limit:
            div = {"s": 1, "m": 60, "h": 3600}[unit]
            return f"{dt / div:.0f}{unit} ago"
    return f"{dt / 86400:.0f}d ago"


def workspace_path(args: argparse.Namespace) -> Path:
    """The workspace folder: ``--workspace``, else ``$ARGUS_HOME``, else ./.argus."""
    root = args.workspace or os.environ.get("ARGUS_HOME") or ".argus"
    return Path(root).expanduser().resolve()


def workspace(args: argparse.Namespace, *, create: bool = False) -> Workspace:
    """Open the workspace; unless ``create``, refuse one that does not exist.

    Raises:
        UsageError: There is no workspace there (reading commands do not make one).
    """
    from argus_lab.workspace import Workspace

    path = workspace_path(args)
    if path.exists() and not path.is_dir():
        src = "-w" if args.workspace else "ARGUS_HOME"
        raise UsageError(
            f"the workspace {path} (from {src}) is a file, not a folder: point "
            f"{src} at a folder"
        )
    sessions = path / "sessions"
    if sessions.exists() and not sessions.is_dir():
        raise UsageError(
            f"the workspace {path} is damaged: {sessions} is a file, not a "
            "folder; move it away"
        )
    if create:
        try:
            sessions.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(
                f"cannot create the workspace {path}: {e.strerror or e}; give -w "
                "(or ARGUS_HOME) a folder you can write to"
            ) from None
    elif not sessions.is_dir():
        raise UsageError(
            f"no workspace at {path} (give -w DIR or set ARGUS_HOME; `argus demo` "
            "or `argus run` creates one)"
        )
    return Workspace(path)


def known_session(ws: Workspace, name: str) -> str:
    """The id of session ``name``.

    Raises:
        UsageError: No such session (the message lists recent ones).
        CliError: An entry of that name is there but damaged (it says why).
    """
    if name not in ws and (why := ws.damaged_sessions().get(name)) is not None:
        raise CliError(why)  # it is there, but cannot be read: say why
    if name not in ws:
        recent = ", ".join(i.name for i in ws.sessions()[-8:]) or "none yet"
        raise UsageError(f"no session {name!r} in {ws.path} (recent: {recent})")
    return ws.resolve(name)


def open_session(ws: Workspace, name: str, **options: Any) -> Session:
    """``ws.open`` that turns a missing session into a UsageError (exit 2)."""
    known_session(ws, name)
    return ws.open(name, **options)


def load_tools(specs: Sequence[str]) -> list[Any]:
    """Import modules (names or .py paths) and collect their Tool objects.

    A module's ``TOOLS`` list wins; otherwise every module-level Tool is taken.

    Raises:
        UsageError: A module cannot be imported or holds no tools.
    """
    from argus_lab.tools.registry import Tool

    out: list[Any] = []
    names = [x.strip() for s in specs for x in s.split(",") if x.strip()]
    if specs and not names:
        raise UsageError(
            "--tools: name a module or a .py file holding the plan's tools"
        )
    for spec in names:
        mod = _import(spec, "--tools")
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


def _import(spec: str, flag: str) -> Any:
    if spec.endswith(".py") or os.sep in spec:
        path = Path(spec)
        if not path.exists():
            raise UsageError(f"{flag}: file {spec!r} does not exist")
        mspec = importlib.util.spec_from_file_location(path.stem, path)
        if mspec is None or mspec.loader is None:
            raise UsageError(f"{flag}: cannot import {spec!r}")
        mod = importlib.util.module_from_spec(mspec)
        sys.modules[path.stem] = mod
        try:
            mspec.loader.exec_module(mod)
        except Exception as e:
            sys.modules.pop(path.stem, None)
            raise UsageError(_import_error(flag, spec, e)) from None
        return mod
    try:
        return importlib.import_module(spec)
    except ImportError as e:
        raise UsageError(f"{flag}: cannot import module {spec!r}: {e}") from None
    except Exception as e:
        raise UsageError(_import_error(flag, spec, e)) from None


def _import_error(flag: str, spec: str, e: Exception) -> str:
    """One short block: where the module failed (file:line), the line, the error."""
    import traceback

    if isinstance(e, SyntaxError):
        where = f"{e.filename}:{e.lineno}"
        code = (e.text or "").rstrip("\n")
        what = f"SyntaxError: {e.msg}"
    else:
        frames = traceback.extract_tb(e.__traceback__)
        # The deepest frame outside importlib's machinery is the user's line.
        mine = [f for f in frames if "importlib" not in f.filename] or frames
        last = mine[-1] if mine else None
        where = f"{last.filename}:{last.lineno}" if last else spec
        code = (last.line or "") if last else ""
        what = f"{type(e).__name__}: {e}"
    text = f"{flag}: cannot import {spec!r}: {where}: {what}"
    return text + (f"\n    {code.strip()}" if code.strip() else "")


def load_planner(spec: str) -> Any:
    """``MODULE:NAME`` naming an HTNDomain or HTNPlanner -> an HTNPlanner."""
    from argus_lab.plan.domain import HTNDomain
    from argus_lab.plan.htn import HTNPlanner

    module, _, attr = spec.partition(":")
    if not attr:
        raise UsageError(f"--planner: give MODULE:NAME, not {spec!r}")
    obj = getattr(_import(module, "--planner"), attr, None)
    if isinstance(obj, HTNDomain):
        return HTNPlanner(obj)
    if isinstance(obj, HTNPlanner):
        return obj
    raise UsageError(f"--planner: {spec} is not an HTNDomain or HTNPlanner")


def session_setup(
    ws: Workspace, name: str, args: argparse.Namespace, **open_options: Any
) -> dict[str, Any]:
    """Options to reopen a session with: its tools (and planner, policies).

    Tools are code and are not stored. ``--tools`` (and ``--planner``) name them;
    without them, a demo session gets the demo's tools, planner and policies.

    Raises:
        UsageError: The session needs tools and none were named.
    """
    from argus_lab.plan.graph import EXPAND_TOOL

    opts: dict[str, Any] = {}
    if getattr(args, "concurrency", None):
        opts["concurrency"] = args.concurrency
    if args.tools:
        opts["tools"] = load_tools(args.tools)
        if args.planner:
            opts["planner"] = load_planner(args.planner)
        return opts
    from argus_lab.demo.runner import is_demo_plan, session_options

    with open_session(ws, name, **open_options) as s:
        plan = s.plan
    if is_demo_plan(plan):
        return session_options() | opts
    names = sorted({t.tool for t in plan.tasks if t.tool and t.tool != EXPAND_TOOL})
    if not names:
        return opts
    raise UsageError(
        f"session {name!r} needs its tools: --tools MODULE_OR_FILE (it uses "
        f"{', '.join(names)})"
    )


@contextmanager
def _progress(s: Session, out: Out) -> Iterator[None]:
    """A progress bar on stderr while the session runs (only on a terminal)."""
    if out.json_mode or not sys.stderr.isatty():
        yield
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from argus_lab.events import PlanPatched, RetryScheduled  # pydantic: used here

    done = ("succeeded", "skipped")
    total = len(s.plan.tasks)
    completed = sum(1 for t in s.plan.tasks if s.record(t.id).status in done)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
        console=Console(stderr=True),
        transient=True,
    ) as prog:
        bar = prog.add_task(s.name, total=total, completed=completed, last="")

        def on_event(ev: EventBase) -> None:
            nonlocal total
            if ev.kind in ("task_succeeded", "task_skipped"):
                prog.update(bar, advance=1, last=ev.task_id or "")
            elif isinstance(ev, PlanPatched):  # a lazy compound expanded
                total += len(ev.added) - len(ev.removed)
                prog.update(bar, total=total, last=f"expanded {ev.compound}")
            elif isinstance(ev, RetryScheduled):
                err = str(ev.error)[:60]
                prog.update(bar, last=f"{ev.task_id}: retrying ({err})")

        unsubscribe = s.subscribe(on_event)
        try:
            yield
        finally:
            unsubscribe()


def run_session(
    s: Session,
    out: Out,
    *,
    approve_as: str | None = None,
    on_approval: Callable[[str, dict[str, Any]], None] | None = None,
) -> RunResult:
    """Run with a progress bar; with ``approve_as``, approve what asks and go on.

    Args:
        s: The session.
        out: Where to say what was approved.
        approve_as: Who approves on the user's behalf (None: nobody, the run
            stops paused at the first approval).
        on_approval: Called with (task id, what was asked) before approving;
            default: one line saying who approved what.
    """
    try:
        return _run(s, out, approve_as, on_approval)
    except KeyboardInterrupt as e:
        # main() says which session paused, and whether a second Ctrl-C left
        # attempts running (committed intents, as after a crash).
        e.session = s.name  # type: ignore[attr-defined]
        e.in_flight = [  # type: ignore[attr-defined]
            t.id for t in s.plan.tasks if s.record(t.id).status == "running"
        ]
        raise


def _run(
    s: Session,
    out: Out,
    approve_as: str | None,
    on_approval: Callable[[str, dict[str, Any]], None] | None,
) -> RunResult:
    with _progress(s, out):
        res = s.run()
    while approve_as and res.status == "paused" and s.pending_approvals():
        for tid, asked in s.pending_approvals().items():
            if on_approval is not None:
                on_approval(tid, asked)
            else:
                why = asked.get("reason") or "it asks"
                out.say(
                    f"approval: task {tid!r} calls {asked.get('tool')!r} ({why}) "
                    f"- approved by {approve_as}"
                )
            s.approve(tid, by=approve_as)
        with _progress(s, out):
            res = s.run()
    return res


def task_rows(s: Session) -> list[dict[str, Any]]:
    """One dict per task: id, tool, status, attempts, seconds, error."""
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


STATUS_COLORS = {
    "interrupted": "red",
    "damaged": "red",
    "lost_commits": "red",
    "succeeded": "green",
    "failed": "red",
    "blocked": "yellow",
    "in_doubt": "magenta",
    "running": "cyan",
    "awaiting_approval": "bold yellow",
    "paused": "yellow",
    "skipped": "dim",
}


def styled(status: str) -> str:
    """A status as rich markup: coloured if it has a colour, never bare brackets."""
    from rich.markup import escape

    color = STATUS_COLORS.get(status)
    return f"[{color}]{escape(status)}[/]" if color else escape(status)


def plain(text: str) -> str:
    """User text (names, goals, errors) made safe for rich: brackets print as-is."""
    from rich.markup import escape

    return escape(text)


def print_tasks(s: Session, out: Out, title: str | None = None) -> None:
    """The task table of a session (id, tool, status, tries, seconds, error)."""
    from rich.table import Table

    if title is None:
        title = f"{s.name} - {s.status}" + (f": {s.reason}" if s.reason else "")
    table = Table(title=plain(title), title_justify="left")
    for col in ("task", "tool", "status", "tries", "seconds", "error"):
        table.add_column(col, overflow="fold")
    for row in task_rows(s):
        st = row["status"]
        table.add_row(
            plain(row["task"]),
            plain(row["tool"] or ""),
            styled(st),
            str(row["attempts"]),
            "" if row["seconds"] is None else f"{row['seconds']:.3f}",
            plain((row["error"] or "")[:120]),
        )
    out.table(table)
