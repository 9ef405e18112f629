"""Workspace: one folder holding sessions' checkpoints, their files and artifacts.

Layout::

    <root>/sessions/<session id>/   one diskcache (SQLite) per session
    <root>/index/                   name -> session id
    <root>/artifacts/               content-addressed large results
    <root>/files/<session id>/      tools' working files (ctx.workdir)
    <root>/memory/                  long-term memory (LanceDB), shared by sessions
    <root>/marks/<session id>       its latest commit's version, outside its folder
                                    (an older copy of the folder put back is seen)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, overload

from argus_lab._workspace_create import (
    check_models,
    create_session,
    prepare_plan,
    workspace_root,
)
from argus_lab.errors import (
    ConcurrentSessionError,
    CorruptCheckpointError,
    PlanError,
    SessionNotFoundError,
)
from argus_lab.model import Budget, SessionInfo, TaskRecord
from argus_lab.plan import Plan
from argus_lab.plan.static import masked_error, refuse_literal_secrets
from argus_lab.redact import count_secrets
from argus_lab.runtime.options import SessionArgs
from argus_lab.runtime.session import Session, SessionOptions
from argus_lab.runtime.shutdown import track
from argus_lab.store._vocabulary import session_redactor
from argus_lab.store.artifacts import ArtifactStore
from argus_lab.store.checkpoints import Loaded, SessionStore
from argus_lab.store.envelope import Durability
from argus_lab.store.folders import delete_session, session_folder_ids
from argus_lab.store.index import (
    live_runner,
    mismatch,
    read_progress,
    scan_sessions,
    session_store,
)
from argus_lab.store.names import SessionNames
from argus_lab.tools.approval import policies_from_data, policies_to_data
from argus_lab.tools.registry import Tool, as_toolset

if TYPE_CHECKING:
    from argus_lab.store.memory import Memory
    from argus_lab.store.state import State

__all__ = ["Workspace"]

ToolsArg = Iterable[Tool | Callable[..., Any]] | None
M = TypeVar("M")


class Workspace:
    """A folder of sessions. Default: ``$ARGUS_HOME``, else ``./.argus``.

    Args:
        path: The folder (created if missing).
        durability: "normal" (survives process crashes; the default) or "full"
            (each commit fsynced: survives power loss, slower). See BENCHMARKS.md.
        embedder: For vector and hybrid memory search: a callable
            ``list[str] -> list[list[float]]`` (e.g. a sentence-transformers
            model's ``encode``) or a LanceDB embedding function; None: the
            default, the bundled MiniLM model (offline, loaded on first use;
            a memory built by WordLlama, the default before, keeps it).
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
        self.path = workspace_root(path)
        self.durability: Durability = durability
        self.artifacts = ArtifactStore(
            self.path / "artifacts", fsync=durability == "full"
        )
        self._names = SessionNames(self.path, durability)
        """The name index: finds a session by name, claims and releases names."""
        self.embedder = embedder
        track(self)  # weakly: its index is closed at interpreter exit

    def __repr__(self) -> str:
        return f"Workspace({str(self.path)!r})"

    @property
    def memory(self) -> Memory:
        """Long-term memory (LanceDB, full-text / vector / hybrid) in <root>/memory/.

        Vector and hybrid search use the default embedder unless the workspace
        was given another: ``Workspace(path, embedder=...)``.
        """
        from argus_lab.store.memory import open_memory

        return open_memory(self.path / "memory", embedder=self.embedder)

    def _session_dir(self, session_id: str) -> Path:
        return self._names.folder(session_id)

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
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str, got {name!r} ({type(name).__name__})")
        if budget is not None and not isinstance(budget, Budget | dict):
            raise TypeError(
                f"budget must be al.Budget(...) or a dict of its limits "
                f"(max_cost_usd, max_tokens, max_wall_s, max_steps), got {budget!r}"
            )
        if budget is not None:
            budget = Budget.of(budget)  # a bad limit: one line, nothing written
        toolset = as_toolset(tools)
        opts = SessionOptions.of(options)
        red = session_redactor(opts.secrets)
        try:
            p = prepare_plan(goal, plan, toolset, options.get("planner"))
        except PlanError as e:
            raise masked_error(e, red) from e.__cause__  # it quotes the plan
        check_models(p, opts.models)
        refuse_literal_secrets(p, red)
        budgets = {"session": budget} if budget is not None else {}
        return create_session(
            self, self._names, p, toolset, opts, name=name, budgets=budgets
        )

    def _fork_session(
        self,
        parent: Session,
        *,
        at: str | None,
        kept: list[TaskRecord],
        name: str | None,
        replays: dict[str, str] | None = None,
    ) -> Session:
        # Session.fork's way in: the fork is created like any session.
        return create_session(
            self,
            self._names,
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

    def _store(self, sid: str) -> SessionStore:
        return session_store(self._session_dir(sid), sid, self.durability)

    def open(
        self,
        name_or_id: str,
        tools: ToolsArg = None,
        *,
        accept_lost_commits: bool = False,
        accept_copy: bool = False,
        **options: Unpack[SessionArgs],
    ) -> Session:
        """Opens a session to inspect or continue it, exactly where it stopped.

        Tools are code, so they are handed in again; a task whose tool is
        missing fails with an error saying so when it comes to run.

        Args:
            accept_lost_commits: go on after a LostCommitsError: a task the
                lost commits touched reruns (same idempotency key) if its tool
                is idempotent, else waits in doubt; surviving results are kept.
            accept_copy: run it though its files were copied while a run held
                it (a ConcurrentSessionError said so), no other copy to run.

        Raises:
            KeyError: no such session (the message lists some that exist).
            CorruptCheckpointError: a record of this session is damaged.
            LostCommitsError: commits this session had made were lost.
        """
        sid = self.resolve(name_or_id)
        store = self._store(sid)
        store.accept_copy = accept_copy
        try:
            store.hold_open()  # no removal under it from now on
            loaded = store.load(accept_lost_commits=accept_lost_commits)
            other = mismatch(self._session_dir(sid), loaded.meta)
            if other is not None:
                raise CorruptCheckpointError(other, session_id=sid)
            given = self._policies(store, loaded, dict(options))
            _secrets_handed_in(loaded.meta, given.get("secrets", ()))
        except BaseException:
            store.close()
            raise
        return Session(self, store, loaded, as_toolset(tools), SessionOptions.of(given))

    def resolve(self, name_or_id: str) -> str:
        """The id of the session with this name (or this id).

        Raises:
            KeyError: no such session (the message lists some that exist).
        """
        sid = self._names.lookup(name_or_id)
        if sid is None:
            raise SessionNotFoundError(self._not_found(name_or_id, 10))
        return sid

    def _not_found(self, given: str, recent: int) -> str:
        """Why ``given`` names no session: the sessions whose name or id starts
        with it (a prefix is no name: it could name another one tomorrow), or
        close to it, else the most recent ones."""
        infos = self.sessions()
        starts = [
            i
            for i in infos
            if given and (i.name.startswith(given) or i.id.startswith(given))
        ]
        if starts:
            shown = ", ".join(f"{i.name} ({i.id})" for i in starts[:8])
            more = f" and {len(starts) - 8} more" if len(starts) > 8 else ""
            return (
                f"no session {given!r} in {self.path}: a session is named by its "
                f"whole name or id, and {len(starts)} "
                f"{'starts' if len(starts) == 1 else 'start'} with it: {shown}{more}"
            )
        import difflib

        by_name = {i.name: i for i in infos}
        close = difflib.get_close_matches(given, list(by_name), n=3, cutoff=0.75)
        if close:
            return (
                f"no session {given!r} in {self.path}; did you mean "
                + " or ".join(map(repr, close))
                + "?"
            )
        names = ", ".join(i.name for i in infos[-recent:]) or "none yet"
        return f"no session {given!r} in {self.path} (recent: {names})"

    def __contains__(self, name_or_id: object) -> bool:  # a name or an id
        return (
            isinstance(name_or_id, str) and self._names.lookup(name_or_id) is not None
        )

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
        if data is not None:
            # Stored masked, as new_session stores them (the store has no
            # Redactor before the Session is built): compared masked too, or
            # every open with a secret in a reason would write them again.
            data = session_redactor(options.get("secrets") or ()).value(data)
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

        Returns ``{"status", "counts", "tasks", "reason", "runner"}``: the
        stored status, except "interrupted" for one stored as running whose
        runner is gone (its process died); counts per task status and each
        task's status from the task records; the live runner's pid and host,
        or None.

        Raises:
            KeyError: no such session.
        """
        with self._looked_up(name_or_id) as store:
            return read_progress(store)

    def runner(self, name_or_id: str) -> dict[str, Any] | None:
        """The live process running a session (``{"pid", "host"}``), or None:
        nobody runs it, or its runner died (``progress`` says "interrupted").
        Reads the head alone, not the records.

        Raises:
            KeyError: no such session.
        """
        with self._looked_up(name_or_id) as store:
            return live_runner(store.read_head())

    @contextmanager
    def _looked_up(self, name_or_id: str) -> Iterator[SessionStore]:
        """``store()`` for questions asked often (``argus serve`` polls them):
        a miss is a short KeyError, without ``resolve``'s list of sessions."""
        sid = self._names.lookup(name_or_id)
        if sid is None:
            raise SessionNotFoundError(f"no session {name_or_id!r} in {self.path}")
        store = self._store(sid)
        try:
            yield store
        finally:
            store.close()

    def delete(self, name_or_id: str) -> int:
        """Deletes a session: its checkpoints, working files and name (its folder
        vanishes in one rename); returns the bytes freed. Artifacts it shared stay
        until ``argus gc`` finds them unreferenced.

        Raises:
            KeyError: no such session.
            ConcurrentSessionError: a live process is running it (stop it
                first), or a Session has it open, here or in another process
                (close it first: ``s.close()``); the message names the pid.
        """
        sid = self.resolve(name_or_id)
        name, freed = delete_session(self.path, sid, self.durability)
        self._names.release(sid, name, name_or_id)  # the names that lead to it
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
        snapshot_every (see ``argus_lab.store.state.State``), and
        accept_lost_commits (go on after a LostCommitsError from the version
        that survived a damaged write-ahead log).
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
        self._names.close()


def _secrets_handed_in(meta: SessionInfo, secrets: Iterable[str]) -> None:
    """Warns when a session is opened with fewer ``secrets=`` values than it was
    made with: they are not stored (they are the secrets), so until handed in
    again a rerun, retry or fork would store them in clear."""
    missing = meta.n_secrets - count_secrets(secrets)
    if missing > 0:
        warnings.warn(
            f"session {meta.name}: {missing} secret value"
            f"{' was' if missing == 1 else 's were'} handed in as secrets=[...] "
            "when it was made and not now; they are never stored, so what it runs "
            "from now on will not mask them. Hand them in again with "
            f"ws.open({meta.name!r}, secrets=[...]).",
            UserWarning,
            stacklevel=3,
        )
