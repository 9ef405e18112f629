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
the state seen by ``get()`` stays as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import jsonpatch
from pydantic import BaseModel

from argus_lab.errors import ArgusError, ConflictError, SchemaVersionError
from argus_lab.store.checkpoints import Durability, make_lease
from argus_lab.store.state_diff import diff
from argus_lab.store.state_log import (
    DEFAULT_SNAPSHOT_EVERY,
    Commit,
    StateHead,
    StateLog,
    dumps,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["InvariantViolation", "State", "open_state", "state_names"]

M = TypeVar("M")
Hook = Callable[[Any], Any]


class InvariantViolation(ArgusError, ValueError):
    """A transaction broke an ``@st.invariant``; nothing was written."""


@dataclass
class _Known:
    """The last version this process has seen (immutable once cached)."""

    version: int
    doc: Any
    text: str
    schema: int


@dataclass
class _Tx:
    version: int
    doc: Any
    schema: int
    holder: str | None
    caller: str


class State(Generic[M]):
    """One typed state in a workspace. Get it with ``ws.state(name, model=...)``.

    Thread-safe; several processes may open the same state: commits are
    serialized by SQLite and checked against the version each started from.
    """

    def __init__(
        self,
        log: StateLog,
        model: type[M] | None,
        *,
        schema_version: int = 1,
        max_size: int | None = None,
        growth_window: int = 0,
        lock_ttl: float = 30.0,
        durability: Durability = "normal",
    ) -> None:
        self._log = log
        self.name = log.name
        self.model = model
        self.schema_version = schema_version
        self.max_size = max_size
        """Size watch: bytes past which a commit emits ``state_size_warning``."""
        self.growth_window = growth_window
        """Size watch: warn after this many commits in a row grew the state."""
        self.lock_ttl = lock_ttl
        self._durability = durability
        self._known: _Known | None = None
        self._mutex = threading.Lock()
        self._invariants: list[Callable[[M], Any]] = []
        self._migrations: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
        self._on_checkpoint: list[Hook] = []
        self._on_size: list[Hook] = []

    def __repr__(self) -> str:
        kind = self.model.__name__ if isinstance(self.model, type) else "dict"
        return f"State({self.name!r}, model={kind}, version={self.version})"

    def close(self) -> None:
        """Closes the store's connections."""
        self._log.close()

    # -- registration ------------------------------------------------------------

    def invariant(self, fn: Callable[[M], Any]) -> Callable[[M], Any]:
        """Decorator: ``fn(state)`` must not return False nor raise
        AssertionError for a commit to go through."""
        self._invariants.append(fn)
        return fn

    def migration(
        self, from_version: int
    ) -> Callable[[Callable[[dict[str, Any]], Any]], Callable[[dict[str, Any]], Any]]:
        """Decorator: upgrades a stored document (a dict) from ``from_version``
        to the next schema version; chained up to ``schema_version``."""

        def register(fn: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
            self._migrations[from_version] = fn
            return fn

        return register

    def on_checkpoint(self, fn: Hook) -> Hook:
        """Decorator: ``fn(state)`` drops derived data when ``compact()`` writes
        a checkpoint (mutate the state in place)."""
        self._on_checkpoint.append(fn)
        return fn

    def on_size_warning(self, fn: Hook) -> Hook:
        """Decorator: ``fn(event)`` is called after a commit that set off the
        size watch (``max_size`` or ``growth_window``)."""
        self._on_size.append(fn)
        return fn

    # -- reading -----------------------------------------------------------------

    @property
    def version(self) -> int:
        """The latest committed version."""
        return self._head().version

    def _head(self) -> StateHead:
        head = self._log.head()
        if head is None:
            raise KeyError(f"state {self.name} was deleted")
        return head

    def _current(self) -> _Known:
        head = self._head()
        with self._mutex:
            k = self._known
            if k is not None and k.version == head.version:
                return k
            # Catch up from what we know (a fresh copy: cached docs are shared).
            start = (k.version, json.loads(k.text)) if k else None
            doc, schema = self._log.replay(head.version, start)
            k = _Known(head.version, doc, dumps(doc), schema)
            if self._known is None or self._known.version < k.version:
                self._known = k
            return k

    def _migrate(self, doc: Any, schema: int) -> Any:
        if schema > self.schema_version:
            raise SchemaVersionError(
                f"state {self.name} is at schema version {schema}, newer than this "
                f"model's ({self.schema_version}); open it with the newer model"
            )
        for v in range(schema, self.schema_version):
            fn = self._migrations.get(v)
            if fn is None:
                raise SchemaVersionError(
                    f"state {self.name}: no migration from schema version {v}; "
                    f"register one with @st.migration(from_version={v})"
                )
            doc = fn(doc)
        return doc

    def _thaw(self, text: str, schema: int) -> M:
        """A fresh object of the model (nothing shared with the cache)."""
        if schema == self.schema_version:
            if self.model is None:
                return json.loads(text)  # type: ignore[no-any-return]
            return self.model.model_validate_json(text)  # type: ignore[attr-defined,no-any-return]
        doc = self._migrate(json.loads(text), schema)
        return doc if self.model is None else self.model.model_validate(doc)  # type: ignore[attr-defined,no-any-return]

    def get(self) -> M:
        """A copy of the latest version (changing it changes nothing stored)."""
        k = self._current()
        return self._thaw(k.text, k.schema)

    def get_json(self) -> tuple[int, Any]:
        """(version, document as stored); for servers and tools."""
        k = self._current()
        return k.version, json.loads(k.text)

    def at(self, version: int) -> M:
        """The state as it was at ``version`` (KeyError when there is none)."""
        doc, schema = self._log.replay(version)
        return self._thaw(dumps(doc), schema)

    def history(self) -> pd.DataFrame:
        """One row per version: version, time, kind, size, changed, caller,
        snapshot (whether the version is stored in full)."""
        import pandas as pd

        rows = [
            {
                "version": r["v"],
                "time": pd.Timestamp(r["ts"], unit="s", tz="UTC"),
                "kind": r["kind"],
                "size": r["size"],
                "changed": list(r.get("changed") or []),
                "caller": r["caller"],
                "snapshot": "snapshot" in r,
            }
            for r in self._log.records()
        ]
        return pd.DataFrame(
            rows,
            columns=[
                "version",
                "time",
                "kind",
                "size",
                "changed",
                "caller",
                "snapshot",
            ],
        )

    def events(self, since: int = 0) -> list[dict[str, Any]]:
        """Size warnings, compactions, migrations and forks, oldest first."""
        return self._log.events(since)

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

    def patch(self, ops: list[dict[str, Any]], *, expected: int, caller: str) -> int:
        """Applies a JSON Patch to version ``expected`` and commits it (the
        HTTP API's PATCH); returns the new version. ConflictError when stale."""
        tx = self._begin(False, 0.0, caller)
        if tx.version != expected:
            raise ConflictError(
                f"state {self.name} is at version {tx.version}, not {expected}",
                state=self.name,
                version=tx.version,
            )
        doc = self._migrate(json.loads(dumps(tx.doc)), tx.schema)
        try:
            doc = jsonpatch.apply_patch(doc, ops, in_place=True)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
            raise ValueError(f"the JSON Patch does not apply: {e}") from None
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
        ev = {"kind": "state_compacted", "state": self.name, "ts": time.time()}
        ev["payload"] = {
            "before": before,
            "after": len(text),
            "pruned": not keep_history,
        }
        c = Commit(doc, text, self.schema_version, tx.caller, "compact", events=[ev])
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
        )
        new._invariants = list(self._invariants)
        new._migrations = dict(self._migrations)
        new._on_checkpoint = list(self._on_checkpoint)
        new._on_size = list(self._on_size)
        return new

    # -- the commit path -----------------------------------------------------------

    def _begin(self, lock: bool, timeout: float, caller: str) -> _Tx:
        holder = self._acquire(timeout) if lock else None
        try:
            k = self._current()
        except BaseException:
            if holder:
                self._log.set_lease(holder, None)
            raise
        return _Tx(k.version, k.doc, k.schema, holder, caller)

    def _thaw_tx(self, tx: _Tx) -> M:
        k = self._known
        text = k.text if k is not None and k.doc is tx.doc else dumps(tx.doc)
        return self._thaw(text, tx.schema)

    def _acquire(self, timeout: float) -> str:
        holder = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        end = time.monotonic() + timeout
        pause = 0.0005
        while self._log.set_lease(holder, make_lease(holder, self.lock_ttl)) is None:
            if time.monotonic() > end:
                raise ConflictError(
                    f"state {self.name}: the lock was not free within {timeout}s "
                    "(another transaction(lock=True) holds it)",
                    state=self.name,
                )
            time.sleep(random.uniform(0, pause))
            pause = min(pause * 2, 0.02)
        return holder

    def _release(self, tx: _Tx) -> None:
        if tx.holder is not None:
            self._log.set_lease(tx.holder, None)
            tx.holder = None

    def _validate(self, obj: Any) -> tuple[Any, str]:
        """Validates against the model (or the stored JSON schema) and the
        invariants; returns the document and its JSON text."""
        if self.model is None:
            text = dumps(obj)  # TypeError names what is not JSON
            doc = json.loads(text)
            head = self._log.head()
            schema = head.json_schema if head is not None else None
            if schema:
                import jsonschema

                jsonschema.validate(doc, schema)
            valid: Any = doc
        else:
            raw = obj.model_dump(warnings=False) if isinstance(obj, BaseModel) else obj
            valid = self.model.model_validate(raw)  # type: ignore[attr-defined]
            text = valid.model_dump_json()
            doc = valid.model_dump(mode="json")
        for inv in self._invariants:
            try:
                ok = inv(valid)
            except AssertionError as e:
                ok, why = False, f": {e}" if str(e) else ""
            else:
                why = ""
            if ok is False:
                raise InvariantViolation(
                    f"state {self.name}: invariant {inv.__name__!r} does not hold"
                    f"{why}; nothing was written"
                )
        return doc, text

    def _finish(self, tx: _Tx, obj: Any) -> None:
        doc, text = self._validate(obj)
        c = Commit(doc, text, self.schema_version, tx.caller)
        if tx.schema == self.schema_version:
            ops = diff(tx.doc, doc)
            if not ops and dumps(tx.doc) == dumps(doc):
                return  # nothing changed: no version
            # Empty ops that changed the text: a change diff() cannot see,
            # stored whole (patch None means a snapshot).
            c.patch = ops or None
            c.changed = sorted({_field(op["path"]) for op in ops})
        else:
            c.kind = "migrate"
            c.events.append(
                {
                    "kind": "state_migrated",
                    "state": self.name,
                    "ts": time.time(),
                    "payload": {"from": tx.schema, "to": self.schema_version},
                }
            )
        self._commit(c, tx)

    def _commit(self, c: Commit, tx: _Tx, *, prune: bool = False) -> None:
        if c.schema != tx.schema and isinstance(self.model, type):
            c.json_schema = self.model.model_json_schema()  # type: ignore[attr-defined]
        head = self._log.commit(
            c,
            tx.version,
            tx.holder,
            release=tx.holder is not None,
            prune=prune,
            max_size=self.max_size,
            growth_window=self.growth_window,
        )
        tx.holder = None  # released by the commit
        with self._mutex:
            if self._known is None or self._known.version < head.version:
                self._known = _Known(head.version, c.doc, c.text, c.schema)
        for ev in c.events:
            if ev["kind"] == "state_size_warning":
                import logging

                logging.getLogger("argus_lab.state").warning(
                    "state %s: %s (%d bytes)",
                    self.name,
                    ev["payload"]["reason"],
                    ev["payload"]["size"],
                )
                for hook in self._on_size:
                    hook(ev)


def _field(path: str) -> str:
    top = path.split("/")[1] if path.count("/") else ""
    return top.replace("~1", "/").replace("~0", "~")


def _caller() -> str:
    """``function (file:line)`` of the first frame outside Argus and contextlib."""
    f = sys._getframe(1)
    here = str(Path(__file__).parent.parent)
    while f is not None and (
        f.f_code.co_filename.startswith(here) or "contextlib" in f.f_code.co_filename
    ):
        f = f.f_back  # type: ignore[assignment]
    if f is None:
        return f"pid {os.getpid()}"
    name = Path(f.f_code.co_filename).name
    return f"{f.f_code.co_name} ({name}:{f.f_lineno}) pid {os.getpid()}"


_NAME_OK = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
)


def _check_name(name: str) -> None:
    if not (0 < len(name) <= 64 and name[0].isalnum() and set(name) <= _NAME_OK):
        raise ValueError(
            f"state name {name!r} must start with a letter or digit and use only "
            "letters, digits, '.', '_' or '-' (at most 64)"
        )


def state_names(root: Path) -> list[str]:
    """The names of the states under ``root`` (a workspace's states/ folder)."""
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if (d / "cache.db").exists())


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
) -> State[Any]:
    """Opens the state ``root/name``, creating it (from ``initial``, else the
    model's defaults) when it does not exist yet."""
    _check_name(name)
    if model is not None and not (
        isinstance(model, type) and issubclass(model, BaseModel)
    ):
        raise TypeError(f"model must be a pydantic BaseModel class, not {model!r}")
    if create_only and (root / name / "cache.db").exists():
        raise ArgusError(f"a state named {name!r} already exists in {root}")
    log = StateLog(
        root / name, name, durability=durability, snapshot_every=snapshot_every
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
    if log.head() is None:
        if initial is None and model is None:
            initial = {}
        obj = initial if initial is not None else model()
        try:
            doc, text = st._validate(obj)
        except BaseException:
            log.close()
            raise
        head = StateHead(schema=schema_version)
        if parent is not None:
            head.parent, head.forked_at = parent
        head.json_schema = model.model_json_schema() if model is not None else None
        kind = "fork" if parent else "create"
        who = caller or _caller()
        # Another process may have created it first: then use theirs.
        with contextlib.suppress(ConflictError):
            log.create(Commit(doc, text, schema_version, who, kind), head)
    return st
