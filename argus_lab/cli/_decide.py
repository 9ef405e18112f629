"""``argus approve | reject | retry | skip``: one decision on one task.

Each opens the session without its tools (a decision runs nothing), calls the
Session method, and prints the ``argus resume`` line that goes on from it. An
approval with edited ``--args`` is the exception: the session is opened with
the tools when the CLI can know them (``--tools``, or a demo session's own), so
that the arguments are checked against the task's tool now, as
``Session.approve`` checks them, rather than failing the task on resume.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from argus_lab.cli._common import (
    EXIT_OK,
    Out,
    UsageError,
    need_task,
    open_session,
    resume_command,
    workspace,
)
from argus_lab.cli._tools import load_tools, needs_tools

if TYPE_CHECKING:
    from argus_lab.runtime.session import Session

__all__ = ["cmd_approve", "cmd_reject", "cmd_retry", "cmd_skip"]


def _edited_args(text: str) -> dict[str, Any]:
    try:
        edited = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"--args is not JSON: {e}") from None
    if not isinstance(edited, dict):
        raise UsageError(
            "--args must be a JSON object of argument names, e.g. "
            '\'{"msg": "hi"}\' (it replaces all of the task\'s arguments)'
        )
    return edited


def _demo_tools(s: Session) -> list[Any] | None:
    """A demo session's own tools, to check edited --args against; None for
    any other session (the CLI cannot know its tools without --tools)."""
    from argus_lab.demo.runner import is_demo_plan

    if not is_demo_plan(s.plan):
        return None
    from argus_lab.demo import TOOLS

    return list(TOOLS)


def _decide(args: argparse.Namespace, out: Out, approve: bool) -> int:
    from argus_lab.errors import ToolArgumentsError

    edited = None
    if approve and args.args is not None:
        edited = _edited_args(args.args)
    ws = workspace(args)
    # A bad --tools is a usage error before the session is opened.
    given = load_tools(args.tools) if approve and args.tools else None
    with open_session(ws, args.name) as s:
        tools = None
        if edited is not None:  # checked against the tool when it can be known
            tools = given if given is not None else _demo_tools(s)
            if tools is not None:
                s.update_tools(*tools)
        need_task(s, args.task)
        status = s.record(args.task).status
        if status != "awaiting_approval":
            waiting = ", ".join(s.pending_approvals()) or "none"
            raise UsageError(
                f"task {args.task!r} is not waiting for approval (its status: "
                f"{status}; tasks waiting: {waiting})"
            )
        tool = next(t.tool for t in s.plan.tasks if t.id == args.task)
        if tools is not None and tool not in {t.name for t in tools}:
            raise UsageError(
                f"--tools: task {args.task!r} calls tool {tool!r}, which the given "
                f"modules do not hold (they have: "
                f"{', '.join(sorted(t.name for t in tools))})"
            )
        if approve:
            try:
                s.approve(args.task, edited, by="argus approve")
            except ToolArgumentsError as e:  # bad input, and nothing was committed
                raise UsageError(
                    f"--args: {e.message} (nothing was approved)"
                ) from None
        else:
            s.reject(args.task, args.reason, by="argus reject")
        name = s.name
        again = resume_command(name, args, needs_tools=needs_tools(s.plan))
    decision = "approved" if approve else "rejected"
    checked = None if edited is None else tools is not None
    out.data(
        {"session": name, "task": args.task, "decision": decision}
        | ({} if checked is None else {"args_checked": checked})
    )
    if not approve:
        out.say(f"rejected {args.task!r}: {args.reason}")
    elif checked is False:
        out.say(
            f"approved {args.task!r} with edited args, which replace all of its "
            f"args; they were NOT checked against tool {tool!r} (its code is not "
            "stored: give `argus approve` --tools MODULE_OR_FILE to check them "
            f"before approving), so a mistake fails the task when it runs; "
            f"continue with: {again}"
        )
    else:
        what = "" if edited is None else " with edited args (checked against its tool)"
        out.say(f"approved {args.task!r}{what}; continue with: {again}")
    return EXIT_OK


def _task_action(args: argparse.Namespace, out: Out, action: str) -> int:
    """``retry`` or ``skip`` one task: the Session method, one line, exit 2 if
    the task is in no state for it (a session has no tools to run here)."""
    from argus_lab.errors import SessionStateError

    ws = workspace(args)
    with open_session(ws, args.name) as s:
        need_task(s, args.task)
        try:
            if action == "retry":
                s.retry(args.task)
            else:
                s.skip(args.task, args.reason)
        except SessionStateError as e:
            raise UsageError(e.message) from None
        name, status = s.name, s.record(args.task).status
        again = resume_command(name, args, needs_tools=needs_tools(s.plan))
    out.data({"session": name, "task": args.task, "status": status})
    out.say(f"task {args.task!r} is {status}; continue with: {again}")
    return EXIT_OK


def cmd_retry(args: argparse.Namespace, out: Out) -> int:
    """Make a failed or in-doubt task (and what it blocked) pending again."""
    return _task_action(args, out, "retry")


def cmd_skip(args: argparse.Namespace, out: Out) -> int:
    """Mark a task skipped: its dependents may run."""
    return _task_action(args, out, "skip")


def cmd_approve(args: argparse.Namespace, out: Out) -> int:
    """Approve a task that waits for approval."""
    return _decide(args, out, approve=True)


def cmd_reject(args: argparse.Namespace, out: Out) -> int:
    """Refuse a task that waits for approval (it fails)."""
    return _decide(args, out, approve=False)
