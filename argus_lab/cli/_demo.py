"""``argus demo``: the research demo, end to end, saying what it shows as it goes.

A first run plans the study with the HTN domain, runs it, stops it part way and
reopens it from its checkpoint (as after Ctrl-C or a closed laptop), approves the
publishing step on the user's behalf (``--ask``: the user decides), and sums up:
lazy expansions, the retried transient failure, the resume, the approval, the
report. ``--crash-at N`` kills the process for real instead; ``--again NAME``
reruns a finished demo from its recorded results and compares the times.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.cli._common import (
    EXIT_PAUSED,
    Out,
    UsageError,
    argus_command,
    cli_terms,
    exit_code,
    open_session,
    print_tasks,
    workspace,
)
from argus_lab.cli._run import run_session
from argus_lab.events import (
    ApprovalGranted,
    PlanPatched,
    Resumed,
    RetryScheduled,
    TaskSucceeded,
)
from argus_lab.runtime.options import RunResult

if TYPE_CHECKING:
    from argus_lab.runtime.session import Session
    from argus_lab.workspace import Workspace

__all__ = ["cmd_demo"]

APPROVER = "argus demo, on your behalf"


class _Trigger:
    """Counts tasks that succeed in a run and acts once when ``at`` is reached."""

    def __init__(self, s: Session, at: int, action: str) -> None:
        self.at, self.action, self.count, self.fired = at, action, 0, False
        self._s = s
        self.unsubscribe = s.subscribe(self)

    def __call__(self, ev: Any) -> None:
        if ev.kind != "task_succeeded" or self.fired:
            return
        self.count += 1
        if self.count < self.at:
            return
        self.fired = True
        if self.action == "crash":
            sys.stdout.flush()
            sys.stderr.flush()
            # A real crash: no cleanup, no lease release, nothing flushed.
            os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))
        self._s.pause(
            f"stopped by argus demo after {self.at} tasks, to show a resume from "
            "the checkpoint"
        )


def _done(s: Session) -> int:
    return sum(1 for r in s.records.values() if r.status in ("succeeded", "skipped"))


def _say_approval(out: Out) -> Any:
    def say(tid: str, asked: dict[str, Any]) -> None:
        args = asked.get("args") or {}
        figures = len((args.get("report") or {}).get("figures", []))
        out.say(
            f"approval: task {tid!r} asks to run {asked.get('tool')} - "
            f"{asked.get('reason')}:\n"
            f"  copy report.md and {figures} figures to {args.get('dest')}\n"
            f"  approved by {APPROVER} (run `argus demo --ask` to decide yourself)"
        )

    return say


def _check_out(out: str) -> None:
    """Refuse an --out the report cannot be published to, before the study runs
    (publishing is its last task; the folder itself is made only when approved)."""
    path = Path(out).expanduser()
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise UsageError(
                    f"--out {out!r}: {p} is a file, not a folder; give --out a folder "
                    "(it need not exist yet)"
                )
            break


def cmd_demo(args: argparse.Namespace, out: Out) -> int:
    """Run the research demo (see the module docstring)."""
    if args.again:
        if args.crash_at is not None or args.ask:
            raise UsageError("--again replays a finished demo: drop --crash-at/--ask")
        return _again(args, out)
    if args.crash_at is not None and args.crash_at < 1:
        raise UsageError("--crash-at needs a number of tasks >= 1")
    _check_out(args.out)
    from argus_lab.demo import runner
    from argus_lab.demo.domain import GOAL
    from argus_lab.plan.graph import EXPAND_TOOL

    ws = workspace(args, create=True)
    name = args.name or time.strftime("demo-%Y%m%d-%H%M%S")
    start = time.perf_counter()
    fresh = name not in ws
    if fresh:
        s = runner.new_session(ws, name=name, out=args.out)
        lazy = [t.id for t in s.plan.tasks if t.tool == EXPAND_TOOL]
        out.say(
            "Argus Lab demo: a research study of the Palmer Penguins table "
            "(344 birds, CC0), offline and deterministic.\n"
            f"goal: {GOAL}\n"
            f"plan: an HTN domain planned {len(s.plan.tasks)} tasks; {len(lazy)} "
            f"compound tasks ({', '.join(lazy)}) expand when their inputs exist.\n"
            f"session {name!r} in {ws.path}"
        )
    else:
        with open_session(ws, name) as old:
            if not runner.is_demo_plan(old.plan):
                raise UsageError(
                    f"session {name!r} is not a demo: choose another --name"
                )
            finished = old.status == "succeeded"
        s = runner.open_session(ws, name)
        if finished:  # say what it did; running it again would only add events
            with s:
                out.say(f"demo session {name!r} already finished.")
                done = RunResult(s.status, s.reason, {"succeeded": _done(s)})
                return _summary(s, done, out, args, start, None)
        out.say(
            f"resuming demo session {name!r} from its checkpoint: {_done(s)} of "
            f"{len(s.plan.tasks)} tasks already done; running the rest."
        )
    try:
        trigger = None
        if args.crash_at is not None:
            out.say(
                f"--crash-at {args.crash_at}: this process kills itself (SIGKILL, no "
                f"cleanup) once {args.crash_at} tasks have succeeded; every finished "
                f"task is in the checkpoint. Then finish the run with:\n"
                f"  {argus_command(args, 'demo', '--name', name)}    (or: "
                f"{argus_command(args, 'resume', name, '--yes')}; without --yes "
                "it stops at the approval)"
            )
            trigger = _Trigger(s, args.crash_at, "crash")
        elif fresh and args.interrupt_at > 0:
            trigger = _Trigger(s, args.interrupt_at, "pause")
        res = run_session(s, out)
        if trigger is not None:
            trigger.unsubscribe()
            if not trigger.fired and args.crash_at is not None:
                out.say(
                    f"--crash-at {args.crash_at}: the run ended with {_done(s)} "
                    "tasks done, fewer than that: nothing was killed (pick a "
                    "smaller number to see a crash and its resume)"
                )
        interrupted = None
        if trigger is not None and trigger.fired and res.status == "paused":
            interrupted = _done(s)
            s.close()
            s = runner.open_session(ws, name)
            # The run is stopped once --interrupt-at tasks succeeded; the tasks
            # already running finish first, so more than that are kept.
            late = interrupted - trigger.at
            also = f"; the {late} already running finished first" if late > 0 else ""
            out.say(
                f"checkpointed resume: stopped the run after {trigger.at} tasks (as "
                f"Ctrl-C or a closed laptop would{also}) and closed the session; "
                f"reopened it from its checkpoint on disk: {_done(s)} finished tasks "
                "kept, none repeated; running the rest."
            )
            res = run_session(s, out)
        if res.status == "paused" and s.pending_approvals() and args.ask:
            return _ask(s, res, out, args)
        if res.status == "paused" and s.pending_approvals():
            res = run_session(
                s, out, approve_as=APPROVER, on_approval=_say_approval(out)
            )
        return _summary(s, res, out, args, start, interrupted)
    finally:
        s.close()


def _ask(s: Session, res: RunResult, out: Out, args: argparse.Namespace) -> int:
    tid, asked = next(iter(s.pending_approvals().items()))
    dest = (asked.get("args") or {}).get("dest")
    out.data(
        {
            "session": s.name,
            "id": s.id,
            "status": res.status,
            "pending_approvals": sorted(s.pending_approvals()),
            "counts": res.counts,
        }
    )
    out.say(
        f"approval needed: task {tid!r} ({asked.get('tool')}) {asked.get('reason')}: "
        f"{dest}\n"
        f"  approve: {argus_command(args, 'approve', s.name, tid)} && "
        f"{argus_command(args, 'resume', s.name)}\n"
        f"  refuse:  {argus_command(args, 'reject', s.name, tid)}"
    )
    return EXIT_PAUSED


def _summary(
    s: Session,
    res: RunResult,
    out: Out,
    args: argparse.Namespace,
    start: float,
    interrupted: int | None,
) -> int:
    events = s.events()
    expanded = {
        str(e.compound): len(e.added) for e in events if isinstance(e, PlanPatched)
    }
    retried = {
        str(e.task_id): str(e.error) for e in events if isinstance(e, RetryScheduled)
    }
    approved = [
        (str(e.task_id), str(e.by)) for e in events if isinstance(e, ApprovalGranted)
    ]
    recovered = [
        str(e.task_id)
        for e in events
        if isinstance(e, Resumed) and e.recovered == "rerun"
    ]
    tasks = {t.id for t in s.plan.tasks}
    report, published = (
        s.result(t) if t in tasks and s.record(t).status == "succeeded" else None
        for t in ("write_up/report", "write_up/publish")
    )
    seconds = time.perf_counter() - start
    out.data(
        {
            "session": s.name,
            "id": s.id,
            "status": res.status,
            "reason": res.reason,
            "counts": res.counts,
            "tasks": len(s.plan.tasks),
            "seconds": seconds,
            "workspace": str(s.workspace.path),
            "expanded": expanded,
            "retried": retried,
            "interrupted_after": interrupted,
            "recovered": recovered,
            "approved": approved,
            "report": report and report["path"],
            "figures": report and report["figures"],
            "published": published and published["folder"],
            "findings": report and report["findings"],
        }
    )
    if res.status != "succeeded":
        print_tasks(s, out, args=args)
        out.say(cli_terms(f"session {s.name!r} {res}", s.name, args))
        return exit_code(res.status)
    out.say(f"\ndone: {len(s.plan.tasks)} tasks succeeded in {seconds:.1f} s.")
    if expanded:
        out.say(
            "lazily expanded: "
            + ", ".join(f"{c} -> {n} tasks" for c, n in expanded.items())
        )
    for tid, err in retried.items():
        tries = s.record(tid).attempts if tid in tasks else "?"
        out.say(
            f"transient failure retried: {tid} - {err}; succeeded on attempt {tries}"
        )
    if interrupted is not None:
        out.say(f"resumed from the checkpoint after {interrupted} tasks (see above)")
    if recovered:
        out.say(
            f"crash recovery: {len(recovered)} task(s) were running when the "
            f"process died ({', '.join(recovered)}); they are idempotent, so they "
            "ran again with the same idempotency key"
        )
    for tid, by in approved:
        out.say(f"approved: {tid} by {by}")
    if report:
        out.say("findings:")
        for f in report["findings"]:
            out.say(f"  - {f}")
        out.say(f"report: {report['path']} ({len(report['figures'])} figures)")
    if published:
        out.say(f"published: {published['report']}")
    nexts = [
        (argus_command(args, "show", s.name), "its tasks (--events: the trajectory)"),
        (
            argus_command(args, "demo", "--again", s.name),
            "rerun it from the recorded cache",
        ),
        (argus_command(args, "export", s.name, "--parquet", "DIR"), ""),
    ]
    width = max(len(line) for line, _ in nexts) + 4
    out.say("next:")
    for line, what in nexts:
        out.say(f"  {line.ljust(width)}{what}".rstrip())
    return exit_code(res.status)


def _again(args: argparse.Namespace, out: Out) -> int:
    from argus_lab.demo import runner
    from argus_lab.demo.domain import ROOT

    ws = workspace(args)
    with open_session(ws, args.again) as parent:
        if not runner.is_demo_plan(parent.plan):
            raise UsageError(f"session {args.again!r} is not a demo session")
        if parent.status != "succeeded":
            raise UsageError(
                f"session {args.again!r} is {parent.status}: finish it first "
                f"({argus_command(args, 'demo', '--name', args.again)})"
            )
        origin, first = _original_run(ws, parent.info.parent, parent)
    start = time.perf_counter()
    fork = runner.rerun_cached(ws, args.again, new_name=args.name)
    with fork:
        res = run_session(fork, out)
        seconds = time.perf_counter() - start
        events = fork.events()
    replayed = sum(1 for e in events if isinstance(e, TaskSucceeded) and e.cached)
    executed = sum(1 for e in events if e.kind == "task_started")
    out.data(
        {
            "session": fork.name,
            "parent": args.again,
            "status": res.status,
            "tasks": len(fork.plan.tasks),
            "replayed": replayed,
            "executed": executed,
            "seconds": seconds,
            "first_run_seconds": first,
            "ratio": seconds / first if first else None,
        }
    )
    against = (
        f"against {first:.2f} s of work for the first run ({origin!r}): "
        f"{100 * seconds / first:.0f}% of it"
        if first
        else "the first run is no longer in the workspace to compare with"
    )
    out.say(
        f"cached rerun of {args.again!r} as {fork.name!r} (a fork at {ROOT!r} with "
        f"reuse='cached'): {replayed} of {len(fork.plan.tasks)} tasks served from "
        f"the recorded results, {executed} executed - nothing recomputed, redrawn "
        f"or published again.\ntime: {seconds:.2f} s, {against}."
    )
    return exit_code(res.status)


def _original_run(
    ws: Workspace, parent_id: str | None, s: Session
) -> tuple[str, float | None]:
    """The session that really ran the work (a fork's first ancestor that is
    not a fork) and its work time; None when that ancestor was removed."""
    name, seconds, parent = s.name, s.usage["wall_s"], parent_id
    while parent is not None:
        if parent not in ws:
            return name, None
        with ws.open(parent) as up:
            name, seconds, parent = up.name, up.usage["wall_s"], up.info.parent
    return name, seconds
