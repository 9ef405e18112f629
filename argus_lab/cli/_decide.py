"""``argus approve | reject | retry | skip``: one decision on one task.

Each opens the session without its tools (a decision runs nothing), calls the
Session method, and prints the ``argus resume`` line that goes on from it.
"""

from __future__ import annotations

import argparse
import json

from argus_lab.cli._common import (
    EXIT_OK,
    Out,
    UsageError,
    need_task,
    open_session,
    resume_command,
    workspace,
)
from argus_lab.cli._tools import needs_tools

__all__ = ["cmd_approve", "cmd_reject", "cmd_retry", "cmd_skip"]


def _decide(args: argparse.Namespace, out: Out, approve: bool) -> int:
    edited = None
    if approve and args.args is not None:
        try:
            edited = json.loads(args.args)
        except json.JSONDecodeError as e:
            raise UsageError(f"--args is not JSON: {e}") from None
        if not isinstance(edited, dict):
            raise UsageError("--args must be a JSON object of argument names")
    ws = workspace(args)
    with open_session(ws, args.name) as s:
        need_task(s, args.task)
        status = s.record(args.task).status
        if status != "awaiting_approval":
            waiting = ", ".join(s.pending_approvals()) or "none"
            raise UsageError(
                f"task {args.task!r} is not waiting for approval (its status: "
                f"{status}; tasks waiting: {waiting})"
            )
        if approve:
            s.approve(args.task, edited, by="argus approve")
        else:
            s.reject(args.task, args.reason, by="argus reject")
        name = s.name
        again = resume_command(name, args, needs_tools=needs_tools(s.plan))
    decision = "approved" if approve else "rejected"
    out.data({"session": name, "task": args.task, "decision": decision})
    if approve:
        out.say(f"approved {args.task!r}; continue with: {again}")
    else:
        out.say(f"rejected {args.task!r}: {args.reason}")
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
