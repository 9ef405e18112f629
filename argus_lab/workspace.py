"""Workspace: one folder holding sessions' checkpoints, their files and artifacts.

Layout::

    <root>/sessions/<session id>/   one diskcache (SQLite) per session
    <root>/index/                   name -> session id
    <root>/artifacts/               content-addressed large results
    <root>/files/<session id>/      tools' working files (ctx.workdir)
    <root>/memory/                  long-term memory (LanceDB), shared by sessions
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, overload

from argus_lab.errors import (
    ArgusError,
    ConcurrentSessionError,
    CorruptCheckpointError,
    PlanError,
)
from argus_lab.events import EventBase, Forked, PlanCreated, SessionCreated, make_event
from argus_lab.model import Budget, SessionInfo, TaskRecord
from argus_lab.plan import Plan
from argus_lab.plan.static import coerce_plan, refuse_literal_secrets
from argus_lab.redact import Redactor
from argus_lab.runtime.options import SessionArgs
from argus_lab.runtime.session import Session, SessionOptions
from argus_lab.runtime.shutdown import track
from argus_lab.store.artifacts import ArtifactStore
from argus_lab.store.checkpoints import Durability, Loaded, SessionStore
from argus_lab.store.folders import delete_session, session_folder_ids
from argus_lab.store.index import (
    IndexRebuiltWarning,
    mismatch,
    open_index,
    read_progress,
    rebuild_or_raise,
    scan_sessions,
    session_store,
)
from argus_lab.tools.approval import policies_from_data, policies_to_data
from argus_lab.tools.registry import Tool, as_toolset

if TYPE_CHECKING:
    import diskcache

    from argus_lab.store.memory import Memory
    from argus_lab.store.state import State

__all__ = ["Workspace"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_CREATING_S = 30.0
"""How long after its creation a session missing from the index is taken for a
create still in progress (its folder is written before its index entry)."""
ToolsArg = Iterable[Tool | Callable[..., Any]] | None
M = TypeVar("M")


def _slug(text: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.lower())[:4]
    return "-".join(words)[:40] or "session"


class Workspace:
    """A folder of sessions. Default: ``$ARGUS_HOME``, else ``./.argus``.

    Args:
        path: The folder (created if missing).
        durability: "normal" (survives process crashes; the default) or "full"
            (each commit fsynced: survives power loss, slower). See BENCHMARKS.md.
        embedder: For vector and hybrid memory search: a callable
            ``list[str] -> list[list[float]]`` (e.g. a sentence-transformers
            model's ``encode``) or a LanceDB embedding function; None: the
            default, WordLlama's bundled model (offline, loaded on first use).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        durability: Durability = "normal",
        embedder: Any = None,
    ) -> None:
        if durability not in ("normal", "full"):
            raise ValueError(
                f"durability must be 'normal' or 'full', got {durability!r}"
            )
        root = path if path is not None else os.environ.get("ARGUS_HOME") or ".argus"
        self.path = Path(root).expanduser().resolve()
        if self.path.exists() and not self.path.is_dir():
            raise ArgusError(f"workspace path {self.path} exists and is not a folder")
        try:
            (self.path / "sessions").mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ArgusError(
                f"cannot use {self.path} as a workspace: {self.path / 'sessions'} "
                f"cannot be made a folder ({e.strerror or e}); give a folder you "
                "can write to"
            ) from None
        self.durability: Durability = durability
        self.artifacts = ArtifactStore(
            self.path / "artifacts", fsync=durability == "full"
        )
        self._index_cache: diskcache.Cache | None = None
        self._index_lock = threading.Lock()
        self.embedder = embedder
        track(self)  # weakly: its index is closed at interpreter exit

    def __repr__(self) -> str:
        return f"Workspace({str(self.path)!r})"

    @property
    def _index(self) -> diskcache.Cache:
        # A cache of the session folders: rebuilt (with a warning) when damaged.
        with self._index_lock:  # analysis reads sessions from several threads
            if self._index_cache is None:
                self._index_cache = open_index(self.path, self.durability)
            return self._index_cache

    def _index_call(self, fn: Callable[[diskcache.Cache], Any]) -> Any:
        try:
            return fn(self._index)
        except sqlite3.DatabaseError as e:  # damaged after it was opened
            if self._index_cache is not None:
                self._index_cache.close()
                self._index_cache = None
            self._index_cache = rebuild_or_raise(self.path, self.durability, e)
            return fn(self._index_cache)

    @property
    def memory(self) -> Memory:
        """Long-term memory (LanceDB, full-text / vector / hybrid) in <root>/memory/.

        Vector and hybrid search use the default embedder unless the workspace
        was given another: ``Workspace(path, embedder=...)``.
        """
        from argus_lab.store.memory import open_memory

        return open_memory(self.path / "memory", embedder=self.embedder)

    def _session_dir(self, session_id: str) -> Path:
        return self.path / "sessions" / session_id

    # -- creating ------------------------------------------------------------

    def new_session(
        self,
        goal: str | None = None,
        plan: Plan | dict[str, Any] | str | Path | None = None,
        tools: ToolsArg = None,
        name: str | None = None,
        *,
        budget: Budget | None = None,
        **options: Unpack[SessionArgs],
    ) -> Session:
        """Validates the plan against the tools and creates a session for it.

        Args:
            goal: The goal; defaults to the plan's.
            plan: A Plan, a dict, YAML text, or the path of a YAML/JSON file.
            tools: The tools the plan's tasks call (Tool objects or functions).
            name: Unique in this workspace; default derived from the goal.
            budget: Session-wide limits (cost, tokens, wall time, steps);
                change them later with ``s.set_budget``.
            **options: SessionArgs: concurrency, backoff, lease_ttl, models,
                planner, approvals, secrets, ... (the SessionOptions fields).

        Raises:
            PlanError: when the plan is invalid for these tools (nothing written).
        """
        toolset = as_toolset(tools)
        planner: Any = options.get("planner")
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
        p = p.validate_against(toolset)
        opts = SessionOptions.of(options)
        refuse_literal_secrets(p, Redactor(opts.secrets))
        budgets = {"session": budget} if budget is not None else {}
        return self._create(p, toolset, opts, name=name, budgets=budgets)

    def _create(
        self,
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
        now = time.time()
        sid = (
            time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
            + "-"
            + uuid.uuid4().hex[:8]
        )
        red = Redactor(opts.secrets)
        if name is None:
            masked = red.text(plan.goal)  # a name is a key: no secret in it
            base = f"{parent.name}-fork" if parent else _slug(masked)
            name = f"{base}-{sid[-4:]}"
        if red.needed(name):
            # The name is a key of the index: refused, never masked.
            raise ValueError(
                "the session name holds a secret (it matches an API key, token or "
                "password, or a secret environment variable's value); names are "
                "stored as keys and cannot be masked. Choose another name"
            )
        if not _NAME.match(name):
            raise ValueError(
                f"session name {name!r} must start with a letter or digit and use "
                "only letters, digits, '.', '_' or '-' (at most 64)"
            )
        if self._lookup(name, scan=False) is not None:
            raise ArgusError(
                f"a session named {name!r} already exists in {self.path}; open it "
                f"with ws.open({name!r}) or choose another name"
            )
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
            approvals=None
            if opts.approvals is None
            else policies_to_data(opts.approvals),
        )
        ev: list[EventBase] = [
            SessionCreated(
                session_id=sid, ts=now, name=name, goal=plan.goal, parent=meta.parent
            ),
            PlanCreated(session_id=sid, ts=now, n_tasks=len(plan.tasks), version=1),
        ]
        # How the planner made the plan belongs to the trajectory (a fork's
        # plan was made for its parent: it records no planning of its own).
        planned = opts.planner if parent is None else None
        for d in getattr(planned, "decisions", None) or ():
            ev.append(make_event("htn_decision", d, session_id=sid, ts=now))
        for r in getattr(planned, "rounds", None) or ():  # LLM planning calls
            ev.append(make_event("llm_call", dict(r), session_id=sid, ts=now))
        if parent is not None:
            fork = {"parent": parent.id, "parent_name": parent.name, "at": at}
            kept_ids = [r.task_id for r in kept]
            ev.append(Forked(session_id=sid, ts=now, task_id=at, kept=kept_ids, **fork))
        store = SessionStore(self._session_dir(sid), sid, durability=self.durability)
        store.redactor = Redactor(opts.secrets)
        try:
            head = store.create(meta, plan, kept, ev, replays)
            if not self._index_call(
                lambda ix: (
                    ix.add("name:" + name, sid) or ix.get("name:" + name) == sid
                )  # a reader found the folder first
            ):
                raise ArgusError(f"a session named {name!r} was just created elsewhere")
        except BaseException:
            store.close()
            shutil.rmtree(self._session_dir(sid), ignore_errors=True)
            raise
        loaded = Loaded(
            head=head, meta=meta, plan=plan, records={r.task_id: r for r in kept}
        )
        return Session(self, store, loaded, tools, opts)

    def _fork_session(
        self,
        parent: Session,
        *,
        at: str | None,
        kept: list[TaskRecord],
        name: str | None,
        replays: dict[str, str] | None = None,
    ) -> Session:
        return self._create(
            parent.plan,
            parent.tools,
            parent.options,
            name=name,
            parent=parent,
            at=at,
            kept=kept,
            budgets=dict(parent.info.budgets),
            replays=replays,
        )

    # -- finding and opening -------------------------------------------------

    def _lookup(self, name_or_id: str, *, scan: bool = True) -> str | None:
        if not isinstance(name_or_id, str):
            raise TypeError(
                "a session name or id is text, got "
                f"{type(name_or_id).__name__}: {name_or_id!r}"
            )
        if not _NAME.match(name_or_id):
            return None  # no session has it (and it must not reach a path)
        # By id first: opening a session by id never depends on the index.
        if (self._session_dir(name_or_id) / "cache.db").exists():
            return name_or_id
        sid = self._index_call(lambda ix: ix.get("name:" + name_or_id))
        if isinstance(sid, str) and self._session_dir(sid).exists():
            return sid
        return self._find_in_folders(name_or_id) if scan else None

    def _find_in_folders(self, name: str) -> str | None:
        """A name the index does not know, looked for in the session folders.

        The index is a cache: an entry lost (a crash between the folder and
        the index, a rebuild that raced a create) is found and written back.
        """
        found = [i for i in self.sessions() if i.name == name]
        if len(found) != 1:
            return None
        sid = found[0].id
        self._index_call(lambda ix: ix.set("name:" + name, sid))
        if time.time() - found[0].created < _CREATING_S:
            # A create in progress writes its folder, then its index entry: a
            # reader in between has found it early, not found a lost entry.
            return sid
        warnings.warn(
            f"the workspace index {self.path / 'index'} did not know {name!r}; "
            f"found it in the session folders ({sid}) and added it back",
            IndexRebuiltWarning,
            stacklevel=3,
        )
        return sid

    def _store(self, sid: str) -> SessionStore:
        return session_store(self._session_dir(sid), sid, self.durability)

    def open(
        self,
        name_or_id: str,
        tools: ToolsArg = None,
        *,
        accept_lost_commits: bool = False,
        **options: Unpack[SessionArgs],
    ) -> Session:
        """Opens a session to inspect or continue it, exactly where it stopped.

        Tools are code, so they are handed in again; a task whose tool is
        missing fails with an error saying so when it comes to run.

        Args:
            accept_lost_commits: go on after a LostCommitsError: each task the
                lost commits touched is rerun with the same idempotency key if
                its tool is idempotent (or has no side effect) and held in
                doubt otherwise; every surviving result is kept.

        Raises:
            KeyError: no such session (the message lists some that exist).
            CorruptCheckpointError: a record of this session is damaged.
            LostCommitsError: commits this session had made were lost.
        """
        sid = self.resolve(name_or_id)
        store = self._store(sid)
        try:
            loaded = store.load(accept_lost_commits=accept_lost_commits)
            other = mismatch(self._session_dir(sid), loaded.meta)
            if other is not None:
                raise CorruptCheckpointError(other, session_id=sid)
            given = self._policies(store, loaded, dict(options))
        except BaseException:
            store.close()
            raise
        return Session(self, store, loaded, as_toolset(tools), SessionOptions.of(given))

    def resolve(self, name_or_id: str) -> str:
        """The id of the session with this name (or this id).

        Raises:
            KeyError: no such session (the message lists some that exist).
        """
        sid = self._lookup(name_or_id)
        if sid is None:
            names = ", ".join(i.name for i in self.sessions()[-10:]) or "none yet"
            raise KeyError(
                f"no session {name_or_id!r} in {self.path} (recent: {names})"
            )
        return sid

    def __contains__(self, name_or_id: object) -> bool:  # a name or an id
        return isinstance(name_or_id, str) and self._lookup(name_or_id) is not None

    def path_of(self, session: Session | SessionInfo | str) -> Path:
        """The checkpoint folder of a session (given as a Session, its info, its
        name or its id). Its working files are in ``ws.path / "files" / id``."""
        sid = self.resolve(session) if isinstance(session, str) else session.id
        return self._session_dir(sid)

    def session_ids(self) -> list[str]:
        """The id of every session folder, readable or not, oldest first."""
        return session_folder_ids(self.path)

    @contextmanager
    def store(self, name_or_id: str) -> Iterator[SessionStore]:
        """A session's store, opened without building a Session (analysis and
        ``argus gc`` read through it); closed on exit. Sessions write their own.

        Raises:
            KeyError: no such session.
            CorruptCheckpointError: its store cannot be opened.
        """
        store = self._store(self.resolve(name_or_id))
        try:
            yield store
        finally:
            store.close()

    def _policies(
        self, store: SessionStore, loaded: Loaded, options: dict[str, Any]
    ) -> dict[str, Any]:
        """Restores the stored approval policies, or stores the ones handed in."""
        stored = loaded.meta.approvals
        if "approvals" not in options:
            if stored is not None:
                label = loaded.meta.name
                options = options | {
                    "approvals": policies_from_data(stored, session=label)
                }
            return options
        given = options["approvals"]
        data = None if given is None else policies_to_data(tuple(given))
        if data != stored:  # replaced explicitly: they travel with the session
            meta = loaded.meta.model_copy(update={"approvals": data})
            try:
                loaded.head = store.commit(
                    loaded.head.version, "ws.open", meta=meta, lease="keep"
                )
                loaded.meta = meta
            except ConcurrentSessionError:
                pass  # another process runs it: they apply here, stored next open
        return options

    def sessions(self) -> list[SessionInfo]:
        """Every readable session, oldest first (see ``damaged_sessions``)."""
        return scan_sessions(self.path / "sessions", self.durability)[0]

    def progress(self, name_or_id: str) -> dict[str, Any]:
        """A session's status and task counts as its records say now.

        Returns ``{"status", "counts", "reason", "runner"}``: the stored status,
        except "interrupted" for one stored as running whose runner is gone (its
        process died); counts per task status from the task records; the live
        runner's pid and host, or None.

        Raises:
            KeyError: no such session.
        """
        sid = self._lookup(name_or_id)
        if sid is None:
            raise KeyError(f"no session {name_or_id!r} in {self.path}")
        store = self._store(sid)
        try:
            return read_progress(store)
        finally:
            store.close()

    def delete(self, name_or_id: str) -> int:
        """Deletes a session: its checkpoints, working files and name (its folder
        vanishes in one rename); returns the bytes freed. Artifacts it shared stay
        until ``argus gc`` finds them unreferenced.

        Raises:
            KeyError: no such session.
            ConcurrentSessionError: a live process is running it (stop it first).
        """
        sid = self.resolve(name_or_id)
        name, freed = delete_session(self.path, sid, self.durability)

        def release(ix: diskcache.Cache) -> None:  # the names that lead to it
            for key in {"name:" + name, "name:" + name_or_id}:
                if ix.get(key) == sid:
                    ix.delete(key)

        self._index_call(release)
        return freed

    def damaged_sessions(self) -> dict[str, str]:
        """Sessions that cannot be read: id -> the error saying why."""
        return scan_sessions(self.path / "sessions", self.durability)[1]

    # -- typed states (store/state.py) ------------------------------------------

    @overload
    def state(self, name: str, model: type[M], **options: Any) -> State[M]: ...
    @overload
    def state(self, name: str, model: None = None, **options: Any) -> State[Any]: ...
    def state(self, name: str, model: Any = None, **options: Any) -> State[Any]:
        """The typed state ``name``: created from ``model()``'s defaults the
        first time, loaded after. ``model=None``: a plain JSON document.

        Options: schema_version, max_size, growth_window, lock_ttl,
        snapshot_every (see ``argus_lab.store.state.State``).
        """
        from argus_lab.store.state import open_state

        return open_state(
            self.path / "states", name, model, durability=self.durability, **options
        )

    def states(self) -> list[str]:
        """The names of this workspace's states."""
        from argus_lab.store.state import state_names

        return state_names(self.path / "states")

    def close(self) -> None:
        """Closes the workspace index (idempotent; done for you at interpreter
        exit; sessions close on their own)."""
        if self._index_cache is not None:
            self._index_cache.close()
            self._index_cache = None
