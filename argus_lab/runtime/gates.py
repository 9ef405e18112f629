"""Attempts that end before their call: a recorded result served to a fork,
or an approval policy that asks a person or refuses, or a work folder that
cannot be made (attempt.py calls these); and what a fork starts with
(``fork_seed``, Session.fork calls it)."""

from __future__ import annotations

import json
import os
import weakref
from pathlib import Path
from typing import Any, Literal

from argus_lab.errors import StorageError
from argus_lab.model import TaskRecord
from argus_lab.plan.graph import iter_references, resolve_args
from argus_lab.runtime.options import tool_replay_key
from argus_lab.runtime.outcome import Rejected
from argus_lab.runtime.settle import Settler
from argus_lab.runtime.state import SessionState
from argus_lab.tools.approval import ApprovalPolicy
from argus_lab.tools.registry import Tool

__all__ = [
    "approved",
    "edited_args",
    "fork_seed",
    "hold_or_refuse",
    "make_workdir",
    "serve_replay",
    "watch_env",
]


def make_workdir(root: Path, session_id: str) -> Path:
    """Makes the tools' work folder of a session (``files/<id>``), or raises
    a ``StorageError`` saying what to fix (nothing has begun yet)."""
    workdir = root / "files" / session_id
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(
            f"cannot make the tools' work folder {workdir} ({e.strerror or e}); "
            f"make {workdir.parent} a folder this process can write, then "
            "run again: nothing was started"
        ) from e
    return workdir


_CHANGED = "the call changed since it was approved (its tool's code or arguments)"


def approved(rec: TaskRecord, tool: Tool, hashes: tuple[str, ...]) -> bool:
    """Whether a person's approval covers this call: the one they were shown.

    An approval is for a call, not a task id: a tool redefined after the ask
    (``update_tools``, a reopen with other tools) or arguments that resolve
    differently now (an upstream task rerun) make another call, which is asked
    about again. Edited arguments are the person's own and run as given.
    Approvals recorded before the hashes were kept hold as they did.
    ``hashes``: the call's ``input_hashes`` (stored, then in clear).
    """
    a = rec.approval
    if not a or a.get("state") != "approved":
        return False
    if a.get("tool_hash", tool.code_hash) != tool.code_hash:
        return False
    return a.get("edited_args") is not None or a.get("input_hash", hashes[0]) in hashes


def serve_replay(
    st: SessionState,
    tid: str,
    rec: TaskRecord,
    cached: dict[str, Any],
    in_hash: str,
    tool: Tool,
) -> None:
    """A fork re-running what its parent already did: the recorded result is
    the task's, committed without a call (invariant 9)."""
    now = st.now()
    rec = rec.model_copy(
        update={
            "status": "succeeded",
            "result": cached.get("result"),
            "result_ref": cached.get("result_ref"),
            "input_hash": in_hash,
            "tool_hash": tool.code_hash,
            "started": now,
            "ended": now,
            "error": None,
            "error_type": None,
            "traceback": None,
            "reason": None,
        }
    )
    ev = st.event(
        "task_succeeded",
        tid,
        attempt=rec.attempts,
        duration=0.0,
        cached=True,
    )
    st.commit([rec], [ev])
    st.sched.set(tid, "succeeded")


def edited_args(st: SessionState, args: dict[str, Any]) -> dict[str, Any]:
    """A person's edited arguments as the call gets them, like a task's own:
    ``${env.NAME}`` read now (and masked from then on), results resolved.

    Raises:
        UnresolvedReferenceError: a reference that cannot be resolved.
    """
    watch_env(st, args)
    return dict(resolve_args(args, st.result_of))


_BEGUN_WATCHED: weakref.WeakSet[SessionState] = weakref.WeakSet()
_NOT_BEGUN = frozenset({"pending", "blocked", "skipped"})


def watch_env(st: SessionState, args: Any) -> None:
    """Masks from now on the values of the ``${env.NAME}`` that ``args`` read:
    they are never stored, nor hashed (``input_hash``).

    The first call for ``st`` also watches those of every task that began
    before it was opened (a reopen, a fork): a task that ran after one of them
    hashed its arguments with those values masked, and its hash is compared
    again (``stale()``, a fork's replay lookup) in an order that may visit it
    first, such as dependency order for a task unordered with that one.
    """
    if st not in _BEGUN_WATCHED:
        _BEGUN_WATCHED.add(st)
        tasks = st.tasks
        for tid, status in list(st.records.status.items()):
            task = tasks.get(tid) if status not in _NOT_BEGUN else None
            if task is not None:
                _watch(st, task.args)
    _watch(st, args)


def _watch(st: SessionState, args: Any) -> None:
    for _, ref in iter_references(args):
        if ref is not None and ref.is_env and ref.path[0] in os.environ:
            st.redactor.add(os.environ[ref.path[0]])


def hold_or_refuse(
    st: SessionState,
    settler: Settler,
    tid: str,
    rec: TaskRecord,
    tool: Tool,
    args: dict[str, Any],
    in_hash: str,
    decision: str,
    policy: ApprovalPolicy | None,
) -> None:
    """A policy said "ask" (the task waits for a person) or "reject" (it
    fails, settled by ``settler``) for this call (``in_hash``: its
    ``input_hash``, which an approval is bound to)."""
    rule = policy.describe() if policy else None
    if decision == "reject":
        reason = (policy.reason if policy else "") or "refused by policy"
        rec = rec.model_copy(
            update={
                "approval": {
                    "state": "rejected",
                    "by": "policy",
                    "at": st.now(),
                    "args": args,
                    "policy": rule,
                    "reason": reason,
                }
            }
        )
        settler.settle(
            tid,
            rec,
            Rejected(f"rejected by policy {rule}", by="policy"),
            extra=[
                st.event(
                    "approval_rejected",
                    tid,
                    by="policy",
                    reason=reason,
                    tool=tool.name,
                    args=args,
                    policy=rule,
                )
            ],
        )
        return
    reason = policy.reason if policy else ""
    if (rec.approval or {}).get("state") == "approved":  # see approved()
        reason = f"{_CHANGED}; {reason}" if reason else _CHANGED
    rec = rec.model_copy(
        update={
            "status": "awaiting_approval",
            "approval": {
                "state": "asked",
                "at": st.now(),
                "args": args,
                "policy": rule,
                "reason": reason,
                # What the approval will be for (approved() compares them).
                "tool_hash": tool.code_hash,
                "input_hash": in_hash,
            },
        }
    )
    st.commit(
        [rec],
        [
            st.event(
                "approval_requested",
                tid,
                tool=tool.name,
                args=args,
                policy=rule,
                reason=reason,
            )
        ],
    )
    st.sched.set(tid, "awaiting_approval")


def fork_seed(
    st: SessionState, at: str | None, reuse: Literal["cached", "none"]
) -> tuple[list[TaskRecord], dict[str, str]]:
    """What a fork from ``at`` starts with: the records it keeps and the
    replay cache it inherits (see ``Session.fork``).

    Made from what the parent committed (another process may be running it).
    A task whose attempt was running or in doubt there may have had its
    effect: it never starts afresh in the fork (invariant 2). One that may
    not be repeated is held in doubt for a person, whatever ``at`` and
    ``reuse`` say; one safe to repeat reruns, as a resume would. Both keep
    the parent's idempotency key for their generation (``key_of``).
    """
    redo = set() if at is None else {at, *st.sched.descendants(at)}
    committed = st.committed_records()
    kept: list[TaskRecord] = []
    for t in st.tasks:
        r = committed.get(t) or st.records[t]
        if r.status in ("running", "in_doubt"):
            kept.append(_carried(st, r))
        elif reuse == "cached" and t not in redo and r.status == "succeeded":
            kept.append(r.model_copy())
    replays: dict[str, str] = {}
    if reuse == "cached":
        # Invariant 9: what reruns in the fork is served from what the parent
        # recorded (model replies, and tool results for the same inputs and
        # code), so replaying a branch costs nothing and repeats no effect.
        replays = st.replays()
        for t in redo:
            r = committed.get(t) or st.records[t]
            if r.status == "succeeded" and r.input_hash and r.tool_hash:
                replays[tool_replay_key(t, r.input_hash, r.tool_hash)] = json.dumps(
                    {"result": r.result, "result_ref": r.result_ref}
                )
    return kept, replays


def _carried(st: SessionState, r: TaskRecord) -> TaskRecord:
    """A fork's record of a task whose attempt was running or in doubt in
    the parent ``st``: in doubt, or (safe to repeat) pending, with the key."""
    tid, of = r.task_id, r.key_of or st.info.id
    key = r.idempotency_key or r.key_in(st.info.id)
    rec = TaskRecord(
        task_id=tid,
        attempts=r.attempts,
        generation=r.generation,
        idempotency_key=key,
        key_of=of,
        input_hash=r.input_hash,
        unsafe_intent=r.unsafe_intent,
        started=r.started,
    )
    if r.status == "running" and not r.unsafe_intent:
        return rec  # reruns under the parent's key, as on a resume
    there = (
        "was in doubt"
        if r.status == "in_doubt"
        else "was running (it may be running still)"
    )
    return rec.model_copy(
        update={
            "status": "in_doubt",
            "reason": (
                f"its attempt {there} in session {st.info.name!r} when this "
                "fork was made from it: its call may have taken effect there, so "
                "the fork does not run it again on its own. Check (idempotency key "
                f"{key}), then s.retry({tid!r}) to run it here under the same "
                f"key, or s.skip({tid!r}) if it took effect"
            ),
        }
    )
