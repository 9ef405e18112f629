"""The ``argus`` command: run plans headless, inspect, resume, fork, clean up, demo.

Every command takes ``--help``, ``--json`` (one JSON document on stdout, for
scripts) and ``-w/--workspace DIR`` (default ``$ARGUS_HOME``, else ./.argus).

Exit codes: 0 done (succeeded), 1 the session failed, 2 bad usage or input (a
missing session or task, a malformed argument, an invalid plan, a missing
optional extra), 3 the session paused and needs a decision (an approval, an
in-doubt task, a budget), 4 another Argus error (a session being run
elsewhere, a damaged store, output that cannot be written), 130 interrupted
(Ctrl-C: the session is paused, nothing failed), 141 the output was closed
early (piped to ``head``): no traceback, and never 1, which means "failed".

Modules: ``_parser`` (the commands' options and help), ``_common`` (exit codes,
output, workspaces, task tables), ``_tools`` (loading the user's tools and
planners), ``_run`` (a run with a progress bar), ``_sessions`` (run,
resume, fork, ls, show, export), ``_decide`` (approve, reject, retry, skip),
``_retention`` and ``_cleanup`` (rm, gc), ``_demo`` (demo). Imports stay light
until a command needs more, so ``argus --help`` is instant (no pandas, rich,
lancedb or anthropic).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from argus_lab.cli._common import (
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PAUSED,
    EXIT_PIPE,
    EXIT_USAGE,
    CliError,
    Out,
    OutputError,
    UsageError,
)
from argus_lab.cli._parser import UsageExit, build_parser
from argus_lab.cli._tools import load_tools
from argus_lab.errors import ArgusError, PlanError

__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PAUSED",
    "EXIT_PIPE",
    "EXIT_USAGE",
    "load_tools",
    "main",
]

Command = Callable[[argparse.Namespace, Out], int]


def _commands() -> dict[str, Command]:
    from argus_lab.cli._cleanup import cmd_gc, cmd_rm
    from argus_lab.cli._decide import cmd_approve, cmd_reject, cmd_retry, cmd_skip
    from argus_lab.cli._demo import cmd_demo
    from argus_lab.cli._serve import cmd_serve
    from argus_lab.cli._sessions import (
        cmd_export,
        cmd_fork,
        cmd_ls,
        cmd_resume,
        cmd_run,
        cmd_show,
    )

    return {
        "demo": cmd_demo,
        "run": cmd_run,
        "ls": cmd_ls,
        "show": cmd_show,
        "resume": cmd_resume,
        "fork": cmd_fork,
        "approve": cmd_approve,
        "reject": cmd_reject,
        "retry": cmd_retry,
        "skip": cmd_skip,
        "export": cmd_export,
        "rm": cmd_rm,
        "gc": cmd_gc,
        "serve": cmd_serve,
    }


def _fail(
    out: Out, command: str, message: str, code: int, *, said: bool = False
) -> int:
    """Say ``message`` on stderr (unless argparse ``said`` it), and under
    --json in the document on stdout too; return ``code``."""
    from argus_lab.redact import Redactor

    # Errors repeat what was typed (a session name, a path): a key pasted in
    # the wrong place is not printed back, nor put in --json's document.
    message = Redactor().text(message)
    if not said:
        print(f"argus {command}: {message}", file=sys.stderr)
    try:
        out.data({"error": message, "exit_code": code})
    except OutputError:  # the error is said on stderr: that is enough
        _stdout_to_devnull()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``argus`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageExit as e:  # printed on stderr; a script reading --json gets it too
        given = sys.argv[1:] if argv is None else argv
        return _fail(Out("--json" in given), "", e.line, EXIT_USAGE, said=True)
    except SystemExit as e:  # --help, --version (0)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    out = Out(args.json)
    try:
        return _commands()[args.command](args, out)
    except UsageError as e:
        return _fail(out, args.command, str(e), EXIT_USAGE)
    except PlanError as e:
        return _fail(out, args.command, e.message, EXIT_USAGE)
    except CliError as e:
        return _fail(out, args.command, str(e), EXIT_ERROR)
    except ArgusError as e:
        return _fail(out, args.command, e.message, EXIT_ERROR)
    except KeyboardInterrupt as e:
        return _fail(out, args.command, _interrupted(e, args), EXIT_INTERRUPTED)
    except BrokenPipeError:
        return _closed_pipe()
    except OutputError as e:
        # Not _fail(): it would write --json's document to the same stdout.
        print(f"argus {args.command}: cannot write the output: {e}", file=sys.stderr)
        _stdout_to_devnull()
        return EXIT_ERROR


def _interrupted(e: KeyboardInterrupt, args: argparse.Namespace) -> str:
    from argus_lab.cli._common import resume_command

    name = getattr(e, "session", None)
    if not name:
        return "interrupted (Ctrl-C)"
    # The line to go on with, as it works when copied: with this run's --tools.
    again = resume_command(name, args, needs_tools=getattr(e, "needs_tools", False))
    try:
        running: list[str] = getattr(e, "in_flight", list)()
    except Exception:  # the records could not be read: say what is known
        return (
            f"interrupted; session {name!r} may have tasks left running, "
            f"which {again} reruns if their tools are idempotent, else holds "
            "in doubt"
        )
    if not running:
        return (
            "interrupted: running tasks finished and were saved; session "
            f"{name!r} is paused ({again} goes on)"
        )
    ids = ", ".join(running[:5]) + (", ..." if len(running) > 5 else "")
    return (
        f"interrupted again before {len(running)} running task(s) finished "
        f"({ids}); session {name!r} is paused and nothing failed: {again} "
        "reruns them if their tools are idempotent, else holds them in doubt"
    )


def _closed_pipe() -> int:
    # The reader (``| head``) has gone: say nothing more.
    _stdout_to_devnull()
    return EXIT_PIPE


def _stdout_to_devnull() -> None:
    # Output that could not be written is still buffered: point stdout at
    # /dev/null so the interpreter's final flush does not print a traceback
    # (nor turn the exit code into 120).
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # captured, or none at all
        pass
