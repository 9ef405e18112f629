"""Typed state transactions: ACID changes to one pydantic model, for any agent.

```python
st = ws.state("trader-1", model=PortfolioState)   # created with defaults once
with st.transaction() as s:                       # optimistic; lock=True: a lease
    s.cash -= 100
st.update(lambda s: s.positions.update(A=1), retries=5)
st.get(); st.at(3); st.history(); st.fork(at=3)
```

A transaction works on a copy; on exit the copy is validated against the model,
then against every ``@st.invariant``, diffed against the version it started
from, and committed as one JSON Patch in one SQLite transaction (``StateLog``).
Any exception, a failed validation or a broken invariant writes nothing, and
the state seen by ``get()`` stays as it was. The reads and the decorators are
in state_views.py (``StateView``), the commit path in state_core.py.

Secrets: a document holding the value of a secret-named env var
(``OPENAI_API_KEY``) is stored with ``${env.NAME}`` in its place, in its
snapshots and patches alike (state_secrets.py). What reads the state for the
program puts the values back from the environment, and raises
``SecretUnsetError`` naming a variable that is not set: ``get``, ``at``,
``transaction``, ``update``, ``patch``, ``compact`` and ``fork`` (a fork is
stored with references again). What a person reads shows the reference and
needs no variable: ``get_json`` (what ``argus serve`` returns), ``history``
and ``events`` (which hold no values). A dict key holding a value is refused
(``SecretInKeyError``). Not covered: versions committed before the variable
was set keep the value as written (the next commit stores the reference),
and what ``redact.py`` masks elsewhere but no env var holds (``secrets=[...]``
values, key-shaped strings) is stored as committed.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from argus_lab._redact_refs import secret_env
from argus_lab.errors import ConflictError
from argus_lab.store.envelope import Durability
from argus_lab.store.state_core import (
    InvariantViolation,
    M,
    _caller,
)
from argus_lab.store.state_diff import (
    MAX_PATCH_COPY,
    PatchTestFailed,
    PatchTooLarge,
    apply_ops,
)
from argus_lab.store.state_log import (
    DEFAULT_SNAPSHOT_EVERY,
    Commit,
    StateHead,
    StateLog,
    dumps,
)
from argus_lab.store.state_secrets import SecretInKeyError, schema_kept, viewed
from argus_lab.store.state_views import StateView

__all__ = [
    "MAX_PATCH_COPY",
    "InvariantViolation",
    "PatchTestFailed",
    "PatchTooLarge",
    "SecretInKeyError",
    "State",
    "open_state",
    "state_names",
]


class State(StateView[M]):
    """One typed state in a workspace. Get it with ``ws.state(name, model=...)``.

    Thread-safe; several processes may open the same state: commits are
    serialized by SQLite and checked against the version each started from.
    """

    def __repr__(self) -> str:
        kind = self.model.__name__ if isinstance(self.model, type) else "dict"
        return f"State({self.name!r}, model={kind}, version={self.version})"

    def close(self) -> None:
        """Closes the store's connections."""
        self._log.close()

    # -- writing -----------------------------------------------------------------

    @contextmanager
    def transaction(
        self, lock: bool = False, *, timeout: float = 30.0, caller: str | None = None
    ) -> Iterator[M]:
        """Yields a copy to change; commits it atomically when the block ends.

        Args:
            lock: Hold the state's lease for the whole block (pessimistic), so
                no other writer can commit meanwhile; it expires if this
                process dies. Default: optimistic.
            timeout: Seconds to wait for the lease (``lock=True``).
            caller: Recorded in the history (default: the calling code).

        Raises:
            ConflictError: another writer committed since the block began, or
                holds the lock. Nothing was written.
            pydantic.ValidationError: the changed state does not fit the model.
            InvariantViolation: an ``@st.invariant`` does not hold.
        """
        tx = self._begin(lock, timeout, caller or _caller())
        try:
            obj = self._thaw_tx(tx)
            yield obj
            self._finish(tx, obj)
        finally:
            self._release(tx)

    def update(
        self,
        fn: Callable[[M], M | None],
        *,
        retries: int = 3,
        lock: bool = False,
        timeout: float = 30.0,
        caller: str | None = None,
    ) -> M:
        """Runs ``fn`` on a fresh copy and commits it, re-running it after a
        ConflictError up to ``retries`` times. ``fn`` changes its argument in
        place or returns the new state. Returns the committed state."""
        who = caller or _caller()
        for attempt in range(retries + 1):
            tx = self._begin(lock, timeout, who)
            try:
                obj = self._thaw_tx(tx)
                out = fn(obj)
                want = self.model if self.model is not None else dict
                if out is not None and not isinstance(out, want):
                    raise TypeError(
                        f"st.update: fn returned a {type(out).__name__}; change "
                        f"its argument in place (return None) or return a new "
                        f"{want.__name__}"
                    )
                self._finish(tx, obj if out is None else out)
                return self.get()
            except ConflictError:
                if attempt == retries:
                    raise
            finally:
                self._release(tx)
            # Jittered backoff: writers that collided do not collide again.
            time.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempt)))
        raise AssertionError("unreachable")  # pragma: no cover

    def patch(
        self, ops: list[dict[str, Any]], *, expected: int | None, caller: str
    ) -> int:
        """Applies a JSON Patch to version ``expected`` (None: the latest) and
        commits it (the HTTP API's PATCH); returns the new version.

        Raises:
            ConflictError: the state is no longer at ``expected``.
            PatchTestFailed: a ``test`` operation did not hold.
            PatchTooLarge: the patch copies more than ``MAX_PATCH_COPY`` bytes.
            ValueError: the patch does not apply, or would leave a document
                that is not a JSON object where it was one.
        """
        tx = self._begin(False, 0.0, caller)
        if expected is not None and tx.version != expected:
            raise ConflictError(
                f"state {self.name} is at version {tx.version}, not {expected}",
                state=self.name,
                version=tx.version,
            )
        mine = self._reveal(tx.doc) if tx.refs else json.loads(dumps(tx.doc))
        mine = self._migrate(mine, tx.schema)
        snap = secret_env()
        if snap.find is not None:
            # The ops are tried first on the document as a view shows it
            # (get_json: a secret's value reads ${env.NAME}): a test op holds
            # against what GET gave, never against a guess of a value (no
            # oracle), and an error quotes no value. Then all but the tests
            # apply to the document itself: the same structure, so they apply
            # the same way, and a value a client sends is taken as written
            # (${env.NAME} in it is text: expanding it would let a client pull
            # any of the server's secrets into the program's data).
            apply_ops(viewed(snap, mine), ops)
            ops = [op for op in ops if op.get("op") != "test"]
        doc = apply_ops(mine, ops)
        obj = doc if self.model is None else self.model.model_validate(doc)  # type: ignore[attr-defined]
        self._finish(tx, obj)
        return self.version

    def compact(self, *, keep_history: bool = True) -> int:
        """Runs the ``@st.on_checkpoint`` hooks and writes the result as a full
        snapshot (a new version); ``keep_history=False`` also drops every older
        version. Returns the new version."""
        tx = self._begin(False, 0.0, _caller())
        obj = self._thaw_tx(tx)
        before = self._head().size
        for hook in self._on_checkpoint:
            out = hook(obj)
            obj = obj if out is None else out
        doc, text = self._validate(obj)
        if tx.schema == self.schema_version:
            self._keeps_fields(self._doc(tx), doc)
        doc, text, refs = self._stored(doc, text, tx.snap)
        ev = {"kind": "state_compacted", "state": self.name, "ts": time.time()}
        ev["payload"] = {
            "before": before,
            "after": len(text),
            "pruned": not keep_history,
        }
        c = Commit(
            doc, text, self.schema_version, tx.caller, "compact", events=[ev], refs=refs
        )
        self._commit(c, tx, prune=not keep_history)
        return self.version

    def fork(self, at: int | None = None, name: str | None = None) -> State[M]:
        """A new state starting from this one at version ``at`` (default: the
        latest), with the same model, invariants, migrations and hooks."""
        v = self.version if at is None else at
        src = self.at(v)
        name = name or f"{self.name}-fork-{uuid.uuid4().hex[:4]}"
        new: State[M] = open_state(
            self._log.directory.parent,
            name,
            self.model,
            schema_version=self.schema_version,
            max_size=self.max_size,
            growth_window=self.growth_window,
            lock_ttl=self.lock_ttl,
            durability=self._durability,
            snapshot_every=self._log.snapshot_every,
            initial=src,
            parent=(self.name, v),
            create_only=True,
            json_schema=self._head().json_schema,
        )
        new._invariants = list(self._invariants)
        new._migrations = dict(self._migrations)
        new._on_checkpoint = list(self._on_checkpoint)
        new._on_size = list(self._on_size)
        return new


_NAME_OK = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
)


def _check_name(name: str) -> None:
    from argus_lab.redact import Redactor, known_secrets, refuse_secret_key

    refuse_secret_key(  # a folder name and a key, like a session's name
        Redactor(known_secrets()),
        name,
        "the state name",
        "names are stored as folder names and keys",
        "Choose another name",
    )
    if not (0 < len(name) <= 64 and name[0].isalnum() and set(name) <= _NAME_OK):
        raise ValueError(
            f"state name {name!r} must start with a letter or digit and use only "
            "letters, digits, '.', '_' or '-' (at most 64)"
        )


@contextmanager
def _creating(root: Path, name: str) -> Iterator[None]:
    """Holds an exclusive lock on creating the state ``root/name`` (threads and
    processes alike; where fcntl is missing, the commit's own check remains)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        yield
        return
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.create-lock", "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def state_names(root: Path) -> list[str]:
    """The names of the states under ``root`` (a workspace's states/ folder).

    A folder whose create (or fork) was killed before its one transaction
    committed holds a cache.db with no state in it: it is not listed (opening
    that name would otherwise make a fresh state from the model's defaults,
    where a fork was meant). A committed state has a witness file; one from
    before witnesses is checked for its head.
    """
    if not root.is_dir():
        return []
    return sorted(
        d.name
        for d in root.iterdir()
        if (d / "cache.db").exists() and ((d / "witness").exists() or _has_head(d))
    )


def _has_head(folder: Path) -> bool:
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{folder / 'cache.db'}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT 1 FROM Cache WHERE key = 'head'").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return True  # unreadable: listed, and opening it says what is wrong
    return row is not None


def open_state(
    root: Path,
    name: str,
    model: Any = None,
    *,
    schema_version: int = 1,
    max_size: int | None = None,
    growth_window: int = 0,
    lock_ttl: float = 30.0,
    durability: Durability = "normal",
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
    initial: Any = None,
    parent: tuple[str, int] | None = None,
    create_only: bool = False,
    caller: str | None = None,
    json_schema: dict[str, Any] | None = None,
    accept_lost_commits: bool = False,
) -> State[Any]:
    """Opens the state ``root/name``, creating it (from ``initial``, else the
    model's defaults) when it does not exist yet.

    Raises:
        LostCommitsError: committed versions were lost (a damaged WAL); with
            ``accept_lost_commits`` it goes on from the version that survived.
    """
    _check_name(name)
    if model is not None and not (
        isinstance(model, type) and issubclass(model, BaseModel)
    ):
        raise TypeError(f"model must be a pydantic BaseModel class, not {model!r}")
    with _creating(root, name):
        # One opener at a time: two that both found the state missing would
        # otherwise both take themselves for its creator.
        log = StateLog(
            root / name,
            name,
            durability=durability,
            snapshot_every=snapshot_every,
            accept_lost_commits=accept_lost_commits,
        )
        st: State[Any] = State(
            log,
            model,
            schema_version=schema_version,
            max_size=max_size,
            growth_window=growth_window,
            lock_ttl=lock_ttl,
            durability=durability,
        )
        if create_only and log.head() is not None:
            # It exists: made earlier, or by the opener that held the lock before.
            log.close()
            raise ConflictError(
                f"a state named {name!r} already exists in {root}",
                state=name,
                version=1,
            )
        if log.head() is None:
            if initial is None and model is None:
                initial = {}
            obj = initial if initial is not None else model()
            try:
                doc, text = st._validate(obj)
                doc, text, refs = st._stored(doc, text)
            except BaseException:
                log.close()
                raise
            head = StateHead(schema=schema_version)
            if parent is not None:
                head.parent, head.forked_at = parent
            head.json_schema = schema_kept(
                model.model_json_schema() if model is not None else json_schema
            )
            kind = "fork" if parent else "create"
            who = caller or _caller()
            # Another process may have created it first: then use theirs (or,
            # with create_only, say so: the caller meant to make a new one).
            try:
                c = Commit(doc, text, schema_version, who, kind, refs=refs)
                log.create(c, head)
            except ConflictError:
                if create_only:
                    log.close()
                    raise ConflictError(
                        f"a state named {name!r} already exists in {root}",
                        state=name,
                        version=1,
                    ) from None
        return st
