"""``argus rm NAME...`` and ``argus gc``: the commands over :mod:`._retention`."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from argus_lab.cli._common import (
    EXIT_OK,
    CliError,
    Out,
    UsageError,
    human_age,
    human_bytes,
    known_session,
    workspace,
)
from argus_lab.cli._retention import (
    GcPlan,
    lease_holder,
    plan_gc,
    run_gc,
    session_bytes,
)
from argus_lab.store.folders import is_open, open_refusal

__all__ = ["cmd_gc", "cmd_rm", "parse_age", "parse_size"]

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """``30d`` -> seconds; units s, m, h, d, w (an argparse ``type``).

    Raises:
        argparse.ArgumentTypeError: Not a number with one of those units.
    """
    m = _AGE.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: write a number and a unit, e.g. 30d, 12h, 90m, 2w"
        )
    return float(m.group(1)) * _SECONDS[m.group(2).lower()]


def parse_size(text: str) -> int:
    """``1G`` -> bytes (powers of 1024; K, M, G, T; an optional B or iB).

    Raises:
        argparse.ArgumentTypeError: Not a size.
    """
    m = _SIZE.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size: write e.g. 500M, 1G, 1.5GB or a byte count"
        )
    power = " kmgt".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * 1024**power)


def _confirm(question: str, yes: bool) -> bool:
    """True with --yes; else ask on a terminal; else refuse (a usage error)."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise UsageError(f"{question} - pass --yes to confirm (no terminal to ask)")
    answer = input(f"{question} [y/N] ").strip().lower()
    return answer in ("y", "yes")


def cmd_rm(args: argparse.Namespace, out: Out) -> int:
    """Remove sessions (checkpoints, working files, name); never a running one,
    nor one a Session object has open (a notebook kernel, another script)."""
    ws = workspace(args)
    targets: list[tuple[str, str]] = []
    for name in dict.fromkeys(args.names):  # check them all before removing any
        sid = known_session(ws, name)  # missing: exit 2; damaged: says why
        lease = lease_holder(ws, sid)
        if lease is not None:
            from argus_lab.store.head import lease_message

            raise CliError(
                lease_message(repr(name), lease, advice="stop that run first")
            )
        pids = is_open(ws.path_of(sid))
        if pids is not None:  # asked again, under its lock, as it is removed
            raise CliError(open_refusal(f"{name!r} ({sid})", pids))
        targets.append((name, sid))
    sizes = {sid: session_bytes(ws, sid) for _, sid in targets}
    listing = ", ".join(f"{n} ({human_bytes(sizes[s])})" for n, s in targets)
    if not _confirm(f"remove {len(targets)} session(s): {listing}?", args.yes):
        out.data({"removed": [], "bytes_freed": 0})
        out.say("nothing removed")
        return EXIT_OK
    removed: list[dict[str, Any]] = []
    for name, sid in targets:
        freed = ws.delete(sid)
        removed.append({"name": name, "id": sid, "bytes": freed})
        out.say(f"removed {name!r} ({sid}): {human_bytes(freed)} freed")
    total = sum(r["bytes"] for r in removed)
    out.data({"removed": removed, "bytes_freed": total})
    out.say("artifacts only they used are freed by: argus gc")
    return EXIT_OK


def cmd_gc(args: argparse.Namespace, out: Out) -> int:
    """Retention: drop old or excess sessions, then orphaned artifacts and files."""
    if args.keep is not None and args.keep < 0:
        raise UsageError("--keep must be >= 0")
    ws = workspace(args)
    plan = plan_gc(
        ws,
        older_than=args.older_than,
        max_size=args.max_size,
        keep=args.keep or 0,
    )
    sessions = [
        {"name": i.name, "id": i.id, "status": i.status, "bytes": b, "why": why}
        for i, b, why in plan.sessions
    ]
    summary = {
        "dry_run": args.dry_run,
        "sessions": sessions,
        "sessions_kept": plan.kept,
        "artifacts": len(plan.artifacts),
        "artifact_bytes": sum(b for _, _, b in plan.artifacts),
        "leftovers": [str(p) for p, _ in plan.leftovers],
        "young_artifacts_kept": plan.young,
        "sessions_open": [
            {"name": i.name, "id": i.id, "pids": pids} for i, pids in plan.opened
        ],
        "bytes_freed": 0 if args.dry_run else plan.bytes,
        "bytes_to_free": plan.bytes,
    }
    if sessions and not out.json_mode:
        from rich.table import Table

        table = Table(
            title=("would drop" if args.dry_run else "dropping") + " sessions",
            title_justify="left",
        )
        for col in ("name", "status", "updated", "size", "why"):
            table.add_column(col, overflow="fold")
        for info, size, why in plan.sessions:
            table.add_row(
                info.name, info.status, human_age(info.updated), human_bytes(size), why
            )
        out.table(table)
    verb = "would free" if args.dry_run else "freed"
    if args.dry_run:
        out.data(summary)
        out.say(_describe(plan, verb))
        return EXIT_OK
    if sessions and not _confirm(
        f"drop {len(sessions)} session(s) and their files?", args.yes
    ):
        out.data(summary | {"sessions": [], "bytes_freed": 0, "cancelled": True})
        out.say("nothing removed")
        return EXIT_OK
    summary["bytes_freed"] = run_gc(ws, plan)
    summary["sessions_skipped"] = [
        {"name": i.name, "id": i.id, "why": why} for i, why in plan.skipped
    ]
    summary["artifacts_rescued"] = plan.rescued
    for info, why in plan.skipped:
        out.say(f"kept {info.name!r} ({info.id}): {why}")
    out.data(summary)
    out.say(_describe(plan, verb, summary["bytes_freed"]))
    return EXIT_OK


def _describe(plan: GcPlan, verb: str, freed: int | None = None) -> str:
    done = len(plan.sessions) - len(plan.skipped)
    parts = [
        f"{done} session(s)",
        f"{len(plan.artifacts) - plan.rescued} orphaned artifact(s)",
        f"{len(plan.leftovers)} leftover folder(s)/file(s)",
    ]
    text = f"gc {verb} {human_bytes(plan.bytes if freed is None else freed)}: "
    text += ", ".join(parts) + f"; {plan.kept} session(s) kept"
    if plan.young:
        text += f"; {plan.young} orphaned artifact(s) kept as written or reused lately"
    if plan.opened:
        names = ", ".join(
            f"{i.name!r} (pid {', '.join(map(str, p)) or '?'})" for i, p in plan.opened
        )
        text += (
            f"; {len(plan.opened)} session(s) it would drop kept as open in a "
            f"Session object: {names} (close them there, then gc again)"
        )
    if plan.skipped:
        text += f"; {len(plan.skipped)} session(s) kept as run or opened since"
    if plan.rescued:
        text += f"; {plan.rescued} artifact(s) kept as referenced or stored since"
    return text
