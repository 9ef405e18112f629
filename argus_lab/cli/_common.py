"""What every ``argus`` command shares: exit codes, output, workspaces, task tables.

Loading the user's tools is in _tools.py, running a session with a progress bar
in _run.py.

Nothing heavy is imported here at module level (no pandas, rich or the runtime):
``argus --help`` must stay instant, so each helper imports what it needs.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from argus_lab.runtime.session import Session
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
    "OutputError",
    "UsageError",
    "argus_command",
    "cli_terms",
    "exit_code",
    "human_age",
    "human_bytes",
    "known_session",
    "need_task",
    "open_session",
    "plain",
    "resume_command",
    "styled",
    "vacant_name",
    "workspace",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PAUSED, EXIT_ERROR = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
EXIT_PIPE = 141  # 128 + SIGPIPE: the reader of our output went away


class UsageError(Exception):
    """Bad arguments or input: exit code 2 with a one-line reason."""


class CliError(Exception):
    """A refusal that is not a usage mistake (e.g. a session still running): 4."""


class OutputError(Exception):
    """Our output could not be written (stdout full, or a device error): main()
    says so in one line on stderr. A closed pipe stays a BrokenPipeError (141)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or str(error))
        self.error = error


@contextmanager
def _writing() -> Iterator[None]:
    if sys.stdout is None:  # started with stdout closed (`>&-`)
        raise OutputError(OSError(errno.EBADF, "stdout is closed"))
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as e:
        raise OutputError(e) from None


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
            with _writing():
                print(text, flush=True)

    def table(self, table: Any) -> None:
        """Print a rich Table (nothing in JSON mode)."""
        if not self.json_mode:
            with _writing():
                self.console.print(table)

    def data(self, value: Any) -> None:
        """Print the command's JSON result (only in JSON mode)."""
        if self.json_mode:
            with _writing():
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
        raise UsageError(ws._not_found(name, 8))
    return ws.resolve(name)


def vacant_name(
    ws: Workspace, name: str | None, args: argparse.Namespace, flag: str = "--name"
) -> None:
    """Refuse a new session's name that is taken, as bad input (exit 2).

    Raises:
        UsageError: A session of that name exists (the message says how to go on
            with it, in ``argus`` lines that work as printed).
    """
    if name is None or name not in ws:
        return
    from argus_lab.cli._tools import needs_tools
    from argus_lab.errors import ArgusError

    try:
        with ws.open(name) as old:
            needed = needs_tools(old.plan)
    except ArgusError:  # damaged: resuming it will say why
        needed = True
    # This command's --tools are for its own plan: named only if the old needs some.
    given = (
        args
        if needed
        else argparse.Namespace(workspace=getattr(args, "workspace", None))
    )
    raise UsageError(
        f"a session named {name!r} already exists in {ws.path}: "
        f"`{resume_command(name, given, needs_tools=needed)}` goes on with it, "
        f"`{argus_command(args, 'rm', name)}` removes it; or give {flag} another name"
    )


_CALL = re.compile(
    r"(\bcall )?\bs\.(approve|reject|retry|skip)\((['\"])([^'\"]*)\3[^)]*\)"
)


def cli_terms(text: str, name: str, args: argparse.Namespace) -> str:
    """The runtime's ``s.approve('t')``, ``s.reject('t', reason)``, ``s.retry('t')``
    and ``s.skip('t')`` hints as the ``argus`` lines that do the same here (a
    terminal has no ``s``)."""
    return _CALL.sub(
        lambda m: ("run " if m[1] else "") + argus_command(args, m[2], name, m[4]),
        text,
    )


def argus_command(args: argparse.Namespace, *words: str) -> str:
    """An ``argus`` command line to print for the user, with this command's
    ``-w`` (without it, a copied line would look in another workspace)."""
    import shlex

    parts = ["argus", *words]
    if getattr(args, "workspace", None):
        parts += ["-w", str(args.workspace)]
    return shlex.join(parts)


def resume_command(name: str, args: argparse.Namespace, *, needs_tools: bool) -> str:
    """The ``argus resume`` line that works for this session, copied as printed.

    A session's tools are code and are not stored, so the line repeats this
    command's ``--tools`` (and ``--planner``), or names the option when the
    session needs tools this command was not given; ``-w`` is repeated too.
    """
    parts = ["resume", name]
    tools = [t for t in getattr(args, "tools", None) or [] if t.strip()]
    if tools:
        parts += ["--tools", ",".join(tools)]
        if getattr(args, "planner", None):
            parts += ["--planner", str(args.planner)]
    elif needs_tools:
        parts += ["--tools", "MODULE_OR_FILE"]
    return argus_command(args, *parts)


def need_task(s: Session, task: str) -> None:
    """Refuse a task id the session does not have (exit 2, naming some it has)."""
    ids = [t.id for t in s.plan.tasks]
    if task not in ids:
        from argus_lab.runtime.state import no_such_task

        raise UsageError(no_such_task(s.name, task, ids, shown=12))


def open_session(ws: Workspace, name: str, **options: Any) -> Session:
    """``ws.open`` that turns a missing session into a UsageError (exit 2)."""
    known_session(ws, name)
    return ws.open(name, **options)


def task_rows(s: Session) -> list[dict[str, Any]]:
    """One dict per task: id, tool, status, interrupted, attempts, seconds,
    error. ``interrupted``: stored as running while no run goes on (its run
    was closed or its process died; ``run_live``): nothing runs it, and the
    next run reruns it or holds it in doubt. ``status`` keeps the stored word."""
    from argus_lab.runtime.session import intents_left

    recs = s.records
    left = intents_left(s, recs)
    rows = []
    for t in s.plan.tasks:
        r = recs.get(t.id) or s.record(t.id)
        dur = r.ended - r.started if r.ended and r.started else None
        rows.append(
            {
                "task": t.id,
                "tool": t.tool,
                "status": r.status,
                "interrupted": left and r.status == "running",
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


def print_tasks(
    s: Session,
    out: Out,
    title: str | None = None,
    args: argparse.Namespace | None = None,
) -> None:
    """The task table of a session (id, tool, status, tries, seconds, error)."""
    from rich.table import Table

    if title is None:
        title = f"{s.name} - {s.status}" + (f": {s.reason}" if s.reason else "")
        title = cli_terms(title, s.name, args or argparse.Namespace())
    table = Table(title=plain(title), title_justify="left")
    for col in ("task", "tool", "status", "tries", "seconds", "error"):
        table.add_column(col, overflow="fold")
    for row in task_rows(s):
        # As the widget draws it: nothing runs a task its dead run left.
        st = "interrupted" if row["interrupted"] else row["status"]
        table.add_row(
            plain(row["task"]),
            plain(row["tool"] or ""),
            styled(st),
            str(row["attempts"]),
            "" if row["seconds"] is None else f"{row['seconds']:.3f}",
            plain((row["error"] or "")[:120]),
        )
    out.table(table)
