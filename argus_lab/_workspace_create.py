"""Creating a session in a workspace: its plan, its name, its first records; and
the checks on a workspace's own folder before anything is made in it.

``Workspace.new_session`` and ``Session.fork`` end here. A session is written in one
transaction (its info, plan, kept records and first events) and only then entered
in the name index; a create that fails leaves no folder behind.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.errors import ArgusError, PlanError, StorageError
from argus_lab.events import (
    EventBase,
    Forked,
    HtnDecision,
    make_event,
)
from argus_lab.model import Budget, SessionInfo, TaskRecord
from argus_lab.plan import Plan
from argus_lab.plan.static import coerce_plan, masked_plan
from argus_lab.redact import Redactor, count_secrets, refuse_secret_key
from argus_lab.runtime.session import Session, SessionOptions
from argus_lab.store._vocabulary import session_redactor
from argus_lab.store.checkpoints import Loaded, SessionStore
from argus_lab.store.folders import fsync_dir, remove_session_folders
from argus_lab.store.names import NAME, SessionNames
from argus_lab.tools.approval import policies_to_data
from argus_lab.tools.registry import Tool

if TYPE_CHECKING:
    from argus_lab.workspace import Workspace

__all__ = ["create_session", "prepare_plan"]


def _slug(text: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.lower())[:4]
    return "-".join(words)[:40] or "session"


def prepare_plan(
    goal: str | None,
    plan: Plan | dict[str, Any] | str | Path | None,
    toolset: dict[str, Tool],
    planner: Any,
) -> Plan:
    """The plan a new session runs, validated against its tools.

    An LLMPlanner (``planner``) plans ``goal`` when no plan is given.

    Raises:
        PlanError: no plan, or one invalid for these tools.
    """
    if plan is None and goal and hasattr(planner, "rounds"):
        # An LLMPlanner plans the goal here; its calls become llm_call events.
        plan = planner.plan(goal, tools=list(toolset.values()))
    if plan is None:
        raise PlanError(
            "new_session needs a plan: a Plan, a dict, YAML text or a file path, "
            "or planner=al.LLMPlanner(model) with a goal (an HTN plan comes "
            "from al.HTNPlanner(domain).plan(task, *args))"
        )
    p = coerce_plan(plan)
    if goal is not None and goal != p.goal:
        p = p.model_copy(update={"goal": goal})
    return p.validate_against(toolset)


def _check_name(name: str, red: Redactor, names: SessionNames) -> None:
    # The name is a key of the index: refused, never masked.
    refuse_secret_key(
        red, name, "the session name", "names are stored as keys", "Choose another name"
    )
    if not NAME.match(name):
        raise ValueError(
            f"session name {name!r} must start with a letter or digit and use "
            "only letters, digits, '.', '_' or '-' (at most 64)"
        )
    if names.lookup(name, scan=False) is not None:
        raise ArgusError(
            f"a session named {name!r} already exists in {names.root}; open it "
            f"with ws.open({name!r}, tools=[...]) or choose another name"
        )


def _first_events(
    meta: SessionInfo,
    plan: Plan,
    opts: SessionOptions,
    parent: Session | None,
    kept: list[TaskRecord],
) -> list[EventBase]:
    sid, now = meta.id, meta.created
    ev: list[EventBase] = [
        # (make_event: no pydantic schema built for these two; events/_lane.py)
        make_event(
            "session_created",
            session_id=sid,
            ts=now,
            name=meta.name,
            goal=plan.goal,
            parent=meta.parent,
        ),
        make_event(
            "plan_created", session_id=sid, ts=now, n_tasks=len(plan.tasks), version=1
        ),
    ]
    # How the planner made the plan belongs to the trajectory (a fork's
    # plan was made for its parent: it records no planning of its own).
    planned = opts.planner if parent is None else None
    for d in getattr(planned, "decisions", None) or ():
        ev.append(HtnDecision(session_id=sid, ts=now, **HtnDecision.fields_of(d)))
    for r in getattr(planned, "rounds", None) or ():  # LLM planning calls
        ev.append(make_event("llm_call", session_id=sid, ts=now, **r))
    if parent is not None:
        fork = {"parent": parent.id, "parent_name": parent.name, "at": meta.forked_at}
        done = [r.task_id for r in kept if r.status == "succeeded"]
        carried = [r.task_id for r in kept if r.status != "succeeded"]
        ev.append(
            Forked(
                session_id=sid,
                ts=now,
                task_id=meta.forked_at,
                kept=done,
                carried=carried,
                **fork,
            )
        )
    return ev


def create_session(
    ws: Workspace,
    names: SessionNames,
    plan: Plan,
    tools: dict[str, Tool],
    opts: SessionOptions,
    *,
    name: str | None,
    parent: Session | None = None,
    at: str | None = None,
    kept: list[TaskRecord] = [],  # noqa: B006 - read only
    budgets: dict[str, Budget] | None = None,
    replays: dict[str, str] | None = None,
) -> Session:
    """Writes a new session of ``plan`` in ``ws`` and returns it, ready to run.

    ``parent``, ``at``, ``kept`` and ``replays`` make it a fork: the records kept
    from the parent, and its replay cache.

    Raises:
        ValueError: the name is not a valid name, or holds a secret.
        ArgusError: a session of that name exists.
    """
    now = time.time()
    sid = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + uuid.uuid4().hex[:8]
    red = session_redactor(opts.secrets)
    # The store keeps the plan masked; the live session must show it the same
    # way, or a secret in its goal or a title reaches tasks_df and a
    # notebook's saved output (widget HTML, repr) though reopening shows
    # [REDACTED].
    plan = masked_plan(plan, red)
    if name is None:
        masked = red.text(plan.goal)  # a name is a key: no secret in it
        base = f"{parent.name}-fork" if parent else _slug(masked)
        name = f"{base}-{sid[-4:]}"
    _check_name(name, red, names)
    meta = SessionInfo(
        id=sid,
        name=name,
        goal=plan.goal,
        created=now,
        updated=now,
        parent=parent.id if parent else None,
        forked_at=at,
        n_tasks=len(plan.tasks),
        budgets=budgets if budgets is not None else {},
        # Masked as stored, so the live s.info shows what a reopen shows.
        approvals=(
            None
            if opts.approvals is None
            else red.value(policies_to_data(opts.approvals))
        ),
        # A fork of a session reopened without them still owes them.
        n_secrets=max(
            count_secrets(opts.secrets), parent.info.n_secrets if parent else 0
        ),
    )
    ev = _first_events(meta, plan, opts, parent, kept)
    folder = names.folder(sid)
    store = SessionStore(folder, sid, durability=ws.durability)
    store.redactor = session_redactor(opts.secrets)
    try:
        store.hold_open()  # no removal under it (argus gc) from now on
        head = store.create(meta, plan, kept, ev, replays)
        if ws.durability == "full":  # the new folder's name, before the index's
            fsync_dir(folder.parent)
        if not names.claim(name, sid):
            raise ArgusError(f"a session named {name!r} was just created elsewhere")
    except BaseException:
        store.close()
        # Moved aside first (one rename): a removal cut short must not leave
        # a folder listed as a damaged or lost session.
        remove_session_folders(names.root, sid)
        raise
    loaded = Loaded(
        head=head, meta=meta, plan=plan, records={r.task_id: r for r in kept}
    )
    return Session(ws, store, loaded, tools, opts)


def check_models(plan: Plan, models: Any) -> None:
    """Refuses LLM tasks that name a model the session is not given, now rather
    than when they come to run (without ``models=``, ``ws.open`` may add them)."""
    if models is None:
        return
    names = sorted(models) if isinstance(models, Mapping) else ["default"]
    problems = [
        f"LLM task {t.id!r} asks for model {t.model or 'default'!r}; the session "
        f"has {', '.join(map(repr, names))} (models={{name: model}} names them)"
        for t in plan.tasks
        if t.kind == "llm" and (t.model or "default") not in names
    ]
    if problems:
        raise PlanError("invalid plan:\n- " + "\n- ".join(problems), problems=problems)


def workspace_root(path: str | Path | None) -> Path:
    """The workspace folder for ``path`` (default $ARGUS_HOME, else ./.argus),
    made if missing, or an error saying what to give instead."""
    if isinstance(path, str) and not path.strip():
        # Path("") is the current folder: an unset variable would quietly
        # turn a project checkout into a workspace.
        raise ValueError(
            f"the workspace path is empty ({path!r}); give a folder, or None "
            "for the default ($ARGUS_HOME, else ./.argus)"
        )
    root = path if path is not None else os.environ.get("ARGUS_HOME") or ".argus"
    p = Path(root).expanduser().resolve()
    if p.exists() and not p.is_dir():
        raise ArgusError(f"workspace path {p} exists and is not a folder")
    _refuse_a_folder_inside_a_workspace(p)
    try:
        (p / "sessions").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArgusError(
            f"cannot use {p} as a workspace: {p / 'sessions'} cannot be made a "
            f"folder ({e.strerror or e}); give a folder you can write to"
        ) from None
    if not os.access(p / "sessions", os.W_OK | os.X_OK):
        # Even reading a session takes a lock file and SQLite's journal:
        # refused here, rather than listed as empty or as damaged.
        raise StorageError(
            f"workspace {p} is read-only here (a read-only mount, or no write "
            "permission): Argus writes lock files and SQLite journals even to "
            f"read a session; copy it to a folder you can write to (cp -a {p} "
            "/tmp/argus-copy) and open the copy"
        )
    return p


def _refuse_a_folder_inside_a_workspace(path: Path) -> None:
    """A workspace's sessions/, memory/ or one session's folder, given as the
    workspace, would become a new empty workspace nested inside it."""
    parent = path.parent
    if (path / "cache.db").is_file() and parent.name == "sessions":
        raise ArgusError(
            f"{path} is the folder of one session, not a workspace: open it with "
            f"al.Workspace({str(parent.parent)!r}).open({path.name!r})"
        )
    # The name index's database, not any folder called index (a project's own).
    if (
        path.name in ("sessions", "memory")
        and (parent / "index" / "cache.db").is_file()
    ):
        raise ArgusError(
            f"{path} is the {path.name} folder of the workspace at {parent}, not "
            f"a workspace: use al.Workspace({str(parent)!r})"
        )
