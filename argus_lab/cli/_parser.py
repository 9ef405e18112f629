"""The ``argus`` command line's grammar: commands, options, help and epilog.

Argument types check what they can without importing the runtime (a session
name's rule, a positive count), and a mistake is said in one line with exit
code 2, so ``argus --help`` and a typo stay instant.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from argus_lab.cli._common import EXIT_USAGE

__all__ = ["EPILOG", "EXIT_CODES", "build_parser"]

EXIT_CODES = (
    "exit codes: 0 succeeded, 1 failed, 2 bad usage or input (e.g. no such "
    "session), 3 paused (needs a decision), 4 other Argus error (e.g. the session "
    "is being run elsewhere), 130 interrupted (Ctrl-C; the session is paused), "
    "141 output closed early (e.g. piped to head)"
)
EPILOG = f"""{EXIT_CODES}

workspace: -w DIR, else $ARGUS_HOME, else ./.argus

start here:
  argus demo                       a 62-task research study of a real dataset
  argus show NAME                  its tasks; --events for the whole trajectory
  argus demo --again NAME          rerun it from the recorded cache
  argus run plan.yaml --tools my_tools.py
"""


class UsageExit(SystemExit):
    """A usage mistake argparse found: exit 2, with the line it printed."""

    def __init__(self, line: str) -> None:
        super().__init__(EXIT_USAGE)
        self.line = line


class _Parser(argparse.ArgumentParser):
    """argparse that says a mistake in one line (not usage text, then the error)."""

    def error(self, message: str) -> NoReturn:
        from argus_lab.redact import Redactor  # light: re and os

        more = f"({self.prog} --help says more)"
        # argparse repeats what was typed ("unrecognized arguments: ..."):
        # a key pasted in the wrong place is not printed back.
        line = Redactor().text(f"{self.prog}: {message} {more}")
        self._print_message(line + "\n", sys.stderr)
        raise UsageExit(line)


def _positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def _session_name(text: str) -> str:
    """An argparse type: a valid session name (the workspace's rule)."""
    import re

    from argus_lab.redact import Redactor  # light: re and os

    # A name is a key of the workspace's index, so it cannot be masked: a name
    # that looks like a key or holds a secret env var's value is refused here,
    # in one line, rather than by the workspace with a traceback. Checked
    # first: the rule's message below repeats the name (a real key breaks the
    # rule too, being longer than 64).
    if Redactor().needed(text):
        raise argparse.ArgumentTypeError(
            "the session name looks like a secret (an API key, a token, or the "
            "value of a secret environment variable); names are stored as they "
            "are and cannot be masked: choose another name"
        )
    # The workspace's own rule, without importing the runtime for --help.
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", text):
        raise argparse.ArgumentTypeError(
            f"session name {text!r} must start with a letter or digit and use "
            "only letters, digits, '.', '_' or '-' (at most 64)"
        )
    return text


def _tool_options(sp: argparse.ArgumentParser, *, required: bool = False) -> None:
    sp.add_argument(
        "--tools",
        action="append",
        default=[],
        required=required,
        metavar="MODULE_OR_FILE",
        help="module name or .py file whose Tool objects the plan uses (repeat or "
        "comma-separate); a demo session needs none",
    )
    sp.add_argument(
        "--planner",
        metavar="MODULE:NAME",
        help="an HTNDomain or HTNPlanner, for plans with lazy HTN compounds",
    )
    sp.add_argument(
        "--concurrency", type=_positive, metavar="N", help="tasks at once (default 4)"
    )
    sp.add_argument(
        "-y", "--yes", action="store_true", help="approve every call that asks"
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``argus`` parser: every command, its options and its help."""
    from argus_lab.cli._cleanup import parse_age, parse_size

    common = _Parser(add_help=False)
    common.add_argument(
        "-w", "--workspace", default=argparse.SUPPRESS, help="workspace folder"
    )
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print one JSON document for scripts",
    )
    p = _Parser(
        prog="argus",
        description="Argus Lab: run agent plans as durable, resumable sessions.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-w", "--workspace", help="workspace folder")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    from argus_lab import __version__

    p.add_argument("--version", action="version", version=f"argus-lab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    def add(name: str, text: str, more: str = "") -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            parents=[common],
            help=text,
            description=f"{text}. {more}" if more else text,
            epilog=EXIT_CODES,
        )

    d = add("demo", "run the offline research demo (Palmer Penguins study)")
    d.add_argument(
        "--name",
        type=_session_name,
        help="session name (default demo-<time>); an "
        "unfinished one of that name is resumed",
    )
    d.add_argument(
        "--out",
        default="argus-report",
        metavar="DIR",
        help="where the report is published (default ./argus-report)",
    )
    d.add_argument(
        "--ask",
        action="store_true",
        help="stop at the approval and let you run `argus approve`",
    )
    d.add_argument(
        "--interrupt-at",
        type=int,
        default=20,
        metavar="N",
        help="stop after N tasks and resume from the checkpoint, to show "
        "it (default 20; 0: don't)",
    )
    d.add_argument(
        "--crash-at",
        type=int,
        metavar="N",
        help="kill this process (SIGKILL) after N tasks; finish with "
        "`argus demo --name NAME` (or `argus resume NAME --yes`: without --yes "
        "it stops at the approval)",
    )
    d.add_argument(
        "--again",
        metavar="NAME",
        help="rerun a finished demo from its recorded results and time it",
    )

    r = add("run", "run a YAML/JSON plan as a new session")
    r.add_argument("plan", help="path of a YAML or JSON plan file")
    r.add_argument(
        "--name", type=_session_name, help="session name (default: from the goal)"
    )
    _tool_options(r, required=True)

    add("ls", "list the sessions of the workspace")

    s = add("show", "show a session's tasks (and events)")
    s.add_argument("name", help="session name or id")
    s.add_argument("--events", action="store_true", help="list its events too")
    s.add_argument(
        "--limit",
        type=_positive,
        metavar="N",
        help="only the last N events (implies --events)",
    )
    s.add_argument(
        "--svg", metavar="FILE", help="also write the graph as a standalone SVG file"
    )

    rs = add("resume", "continue a session exactly where it stopped")
    rs.add_argument("name", help="session name or id")
    rs.add_argument(
        "--accept-lost-commits",
        action="store_true",
        help="go on after commits were lost (see the error that said so)",
    )
    rs.add_argument(
        "--accept-copy",
        action="store_true",
        help="run it although its files were copied while a run held it "
        "(see the error that said so)",
    )
    _tool_options(rs)

    f = add("fork", "branch a session: keep results before a task, redo the rest")
    f.add_argument("name", help="session name or id")
    f.add_argument(
        "--at",
        metavar="TASK",
        help="the task to start again from (it and what follows); without it "
        "the fork keeps every finished result and runs what is left",
    )
    f.add_argument(
        "--reuse",
        choices=("cached", "none"),
        default="cached",
        help="cached: serve unchanged calls from the recordings "
        "(default); none: execute everything again",
    )
    f.add_argument(
        "--name",
        dest="new_name",
        type=_session_name,
        metavar="NEW",
        help="the fork's name",
    )
    f.add_argument("--run", action="store_true", help="run the fork now")
    _tool_options(f)

    ap = add("approve", "approve a task that waits for approval (then: argus resume)")
    ap.add_argument("name", help="session name or id")
    ap.add_argument("task", help="the task id")
    ap.add_argument(
        "--args",
        metavar="JSON",
        help="the task's new arguments, as a JSON object: they REPLACE all of its "
        "arguments (nothing is merged: repeat the ones to keep); checked against "
        "its tool when the tool is known (--tools, or a demo session)",
    )
    ap.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE_OR_FILE",
        help="module name or .py file holding the task's tool, to check --args "
        "against it before approving (a demo session needs none)",
    )

    rj = add("reject", "refuse a task that waits for approval (it fails)")
    rj.add_argument("name", help="session name or id")
    rj.add_argument("task", help="the task id")
    rj.add_argument(
        "--reason",
        default="rejected on the command line",
        help="why, recorded with the decision and shown as the task's error "
        "(default: %(default)r)",
    )

    rt = add(
        "retry",
        "make a failed or in-doubt task pending again (then: argus resume)",
        "An in-doubt task (a non-idempotent tool cut off by a crash) may or may "
        "not have taken effect: check, then retry it, or skip it if it did.",
    )
    rt.add_argument("name", help="session name or id")
    rt.add_argument("task", help="the task id")

    sk = add(
        "skip",
        "mark a task skipped so that its dependents may run (then: argus resume)",
    )
    sk.add_argument("name", help="session name or id")
    sk.add_argument("task", help="the task id")
    sk.add_argument(
        "--reason",
        default="skipped on the command line",
        help="why, recorded with the task and shown by `argus show` "
        "(default: %(default)r)",
    )

    e = add("export", "write sessions' trajectories as parquet (pandas frames)")
    e.add_argument("names", nargs="*", metavar="NAME", help="sessions to export")
    e.add_argument("--all", action="store_true", help="every session")
    e.add_argument("--parquet", required=True, metavar="DIR", help="folder to write")

    rm = add(
        "rm",
        "remove sessions (never one being run or open)",
        "Removes each session's checkpoints, working files and name; artifacts "
        "it shared stay until `argus gc` finds nothing uses them. Refuses a "
        "session being run, or open in a Session object in any process (a "
        "notebook kernel with it paused for an approval): the error names the "
        "process; close it there (s.close()) and remove it again.",
    )
    rm.add_argument("names", nargs="+", metavar="NAME", help="sessions to remove")
    rm.add_argument("-y", "--yes", action="store_true", help="do not ask")

    g = add(
        "gc",
        "retention: drop old/excess sessions, then orphaned artifacts",
        "Without options it only deletes what nothing uses: artifacts no session "
        "references, working files of removed sessions, interrupted removals. "
        "Sessions being run, or open in a Session object in any process, are "
        "never dropped (it says which and who holds them). Orphaned artifacts "
        "stored in the last hour (written, or reused) are kept: a session may "
        "be about to reference them. Everything is checked again as it is "
        "deleted, after the [y/N]: what a session committed meanwhile stays.",
    )
    g.add_argument(
        "--older-than",
        type=parse_age,
        metavar="AGE",
        help="drop sessions not updated for AGE (e.g. 30d, 12h)",
    )
    g.add_argument(
        "--max-size",
        type=parse_size,
        metavar="SIZE",
        help="drop the oldest sessions until the workspace takes at "
        "most SIZE (e.g. 1G, 500M)",
    )
    g.add_argument(
        "--keep",
        type=int,
        metavar="N",
        help="never drop the N most recently updated sessions",
    )
    g.add_argument("--dry-run", action="store_true", help="only say what would go")
    g.add_argument("-y", "--yes", action="store_true", help="do not ask")
    from argus_lab.cli._serve import add_serve

    add_serve(add("serve", "serve the workspace over HTTP (needs the serve extra)"))
    return p
