"""Running a session from the command line: a progress bar, approvals on request.

``run_session`` runs until the session stops; with ``approve_as`` (``-y``) it
approves what asks and goes on. A Ctrl-C leaves the session paused; main() says
which, and whether attempts were left running.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from argus_lab.cli._common import Out

if TYPE_CHECKING:
    from argus_lab.events import EventBase
    from argus_lab.runtime.session import RunResult, Session

__all__ = ["run_session"]


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
        # attempts running (committed intents, as after a crash). Asked when
        # main() says so, after the session closed: an attempt running now may
        # still finish within the shutdown's grace, and is saved then.
        e.session = s.name  # type: ignore[attr-defined]
        e.in_flight = partial(_running, s)  # type: ignore[attr-defined]
        from argus_lab.cli._tools import needs_tools

        e.needs_tools = needs_tools(s.plan)  # type: ignore[attr-defined]
        raise


def _running(s: Session) -> list[str]:
    """The tasks whose attempt is still running (intent committed, no outcome)."""
    return [t.id for t in s.plan.tasks if s.record(t.id).status == "running"]


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
