"""The commit path of a typed state: copies, validation, diff, lease, commit.

``State`` (state.py) is the public face; this base class holds what every
transaction goes through: ``_begin`` (the lease if asked, the version it starts
from), ``_thaw`` (a fresh typed copy), ``_validate`` (the model, or the stored
JSON schema, then the invariants), ``_finish`` (the JSON Patch) and ``_commit``
(one SQLite transaction, then the size-watch hooks).

What is stored, and cached in ``_known``, is the document's stored form
(state_secrets.py): the document itself unless it holds the value of a secret
env var, then with references in place of those values (``refs``). Patches
are diffs between stored forms, so that replaying them over a stored snapshot
gives the stored form again; the model, the invariants and migrations see the
document, with the values (``_reveal``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from argus_lab._redact_refs import Snapshot, secret_env
from argus_lab.errors import ArgusError, ConflictError, SchemaVersionError
from argus_lab.store.envelope import Durability
from argus_lab.store.head import make_lease
from argus_lab.store.state_diff import diff
from argus_lab.store.state_lease import _HOLDING, _Renewer
from argus_lab.store.state_log import Commit, StateHead, StateLog, dumps
from argus_lab.store.state_records import corrupt
from argus_lab.store.state_secrets import revealed, schema_kept, shown, stored

__all__ = ["InvariantViolation", "StateCore"]

M = TypeVar("M")
Hook = Callable[[Any], Any]
log = logging.getLogger("argus_lab.state")


class InvariantViolation(ArgusError, ValueError):
    """A transaction broke an ``@st.invariant``; nothing was written."""


@dataclass
class _Known:
    """The last version this process has seen (immutable once cached)."""

    version: int
    doc: Any
    text: str
    schema: int
    refs: bool = False
    """``doc`` and ``text`` are a stored form holding references."""


@dataclass
class _Tx:
    version: int
    doc: Any
    schema: int
    holder: str | None
    caller: str
    renewer: _Renewer | None = None
    refs: bool = False
    snap: Snapshot = field(default_factory=secret_env)
    """The secret env values when it began: a token refreshed inside the
    block leaves the values the program was given hidden, and its "before"
    as the program saw it."""


class StateCore(Generic[M]):
    """What every transaction of a ``State`` goes through (see state.py)."""

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
        self._copies_known: bool | None = None
        self._mutex = threading.Lock()
        self._invariants: list[Callable[[M], Any]] = []
        self._migrations: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
        self._on_checkpoint: list[Hook] = []
        self._on_size: list[Hook] = []

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
            doc, schema, refs = self._log.replay(head.version, start)
            k = _Known(head.version, doc, dumps(doc), schema, refs)
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
            try:
                out = fn(doc)
            except Exception as e:
                raise SchemaVersionError(
                    f"state {self.name}: the migration from schema version {v} "
                    f"({getattr(fn, '__name__', fn)}) raised {e!r}; nothing was "
                    "written. Fix the migration and open the state again."
                ) from e
            doc = doc if out is None else out  # changed in place, as update() allows
        return doc

    def _thaw(
        self, text: str | None, schema: int, doc: Any = None, refs: bool = False
    ) -> M:
        """A fresh object of the model (nothing shared with the cache), from
        a stored form (``refs``: its values put back from the environment).

        ``doc``, the parsed ``text`` when the caller has it, is validated
        directly (~3x faster than parsing 1 MB again) when the model copies
        every container it validates; see ``_copies``."""
        if refs:
            doc = self._reveal(json.loads(text or "") if doc is None else doc)
            text = None
        model: Any = self.model
        fast = schema == self.schema_version and model is not None and doc is not None
        if fast and self._copies():
            with contextlib.suppress(ValidationError):  # e.g. strict models
                return model.model_validate(doc)  # type: ignore[no-any-return]
        if text is None:
            text = dumps(doc)
        if schema == self.schema_version:
            if model is None:
                return json.loads(text)  # type: ignore[no-any-return]
            return model.model_validate_json(text)  # type: ignore[no-any-return]
        fresh = self._migrate(json.loads(text), schema)
        return fresh if model is None else model.model_validate(fresh)  # type: ignore[no-any-return]

    def _reveal(self, doc: Any, snap: Snapshot | None = None) -> Any:
        """The document of a stored form holding references, new containers
        all the way down, the values from the environment or ``snap``
        (SecretUnsetError: a variable is not set)."""
        try:
            return revealed(doc, self.name, None if snap is None else snap.seen)
        except ValueError as e:  # a tag no argus-lab writes
            raise corrupt(self.name, "document", e) from None

    def _shown(self, doc: Any) -> Any:
        """The document of a stored form holding references, as a person
        reads it (``${env.NAME}``; no variable needed)."""
        try:
            return shown(doc)
        except ValueError as e:  # a tag no argus-lab writes
            raise corrupt(self.name, "document", e) from None

    def _doc(self, tx: _Tx) -> Any:
        """The document ``tx`` started from, as the model sees it (no copy
        when it holds no reference: read it, do not change it)."""
        return self._reveal(tx.doc, tx.snap) if tx.refs else tx.doc

    def _stored(
        self, doc: Any, text: str, since: Snapshot | None = None
    ) -> tuple[Any, str, bool]:
        """The stored form of a validated document and its text, and whether
        it holds references. With no secret-named env var set (or none of their
        values in ``text``), the document itself, after one cheap check.
        ``since``: the secret values when the transaction began, hidden too."""
        snap = secret_env()
        if since is not None and since is not snap:
            snap = Snapshot(snap.seen, older=since)
        got = None if snap.find is None else stored(snap, doc, text, self.name)
        return (doc, text, False) if got is None else (got[0], got[1], True)

    def _copies(self) -> bool:
        """Whether validating a dict builds new containers all the way down.

        Pydantic keeps the very objects it is given where a field is ``Any``,
        an arbitrary type or a plain/wrap validator: a copy made from the
        cached document would share them, and a transaction changing them in
        place would change the cache. Such models take the slower JSON path."""
        if self._copies_known is None:
            schema = getattr(self.model, "__pydantic_core_schema__", None)
            self._copies_known = schema is not None and not _shares(schema)
        return self._copies_known

    def _begin(self, lock: bool, timeout: float, caller: str) -> _Tx:
        if not lock:
            k = self._current()
            return _Tx(k.version, k.doc, k.schema, None, caller, refs=k.refs)
        held: set[str] = _HOLDING.__dict__.setdefault("dirs", set())
        key = str(self._log.directory.resolve())
        if key in held:
            raise ArgusError(
                f"state {self.name}: transaction(lock=True) inside another locked "
                "transaction of the same state in this thread would wait for itself "
                "until the lease expires; make the changes in the outer block"
            )
        holder = self._acquire(timeout)
        tx = _Tx(0, None, 0, holder, caller)
        tx.renewer = _Renewer(self._log, holder, self.lock_ttl)
        held.add(key)
        try:
            k = self._current()
        except BaseException:
            self._release(tx)
            raise
        tx.version, tx.doc, tx.schema, tx.refs = k.version, k.doc, k.schema, k.refs
        return tx

    def _thaw_tx(self, tx: _Tx) -> M:
        k = self._known
        text = k.text if k is not None and k.doc is tx.doc else None
        return self._thaw(text, tx.schema, tx.doc, tx.refs)

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

    def _stop_renewing(self, tx: _Tx, *, check: bool = False) -> None:
        """Stops the lease's renewal; ``check``: ConflictError if it was lost
        (before a commit; never on the way out of a failed block, whose own
        exception must be the one the caller sees)."""
        if tx.renewer is not None:
            tx.renewer.stop()
            _HOLDING.__dict__.get("dirs", set()).discard(
                str(self._log.directory.resolve())
            )
            if check and tx.renewer.lost and tx.holder is not None:
                tx.renewer = None
                raise ConflictError(
                    f"state {self.name}: the lock of this transaction(lock=True) "
                    f"expired (lock_ttl={self.lock_ttl}s; the process was stalled "
                    "past it) and another writer took it; nothing was written",
                    state=self.name,
                )
            tx.renewer = None

    def _release(self, tx: _Tx) -> None:
        self._stop_renewing(tx)
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

                if "properties" in schema and "additionalProperties" not in schema:
                    # The model ignores unknown fields, and a typed reader
                    # would refuse to drop them: refuse them at the door.
                    schema = {**schema, "additionalProperties": False}
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

    def _keeps_fields(self, before: Any, after: Any) -> None:
        """Refuses a commit that would drop stored top-level fields the model
        does not know (a field renamed or removed without a migration), unless
        the model says ``extra="ignore"`` itself."""
        model: Any = self.model
        if model is None or not isinstance(before, dict) or not isinstance(after, dict):
            return
        if "extra" in model.model_config:  # explicit: ignore, allow or forbid
            return
        lost = sorted(set(before) - set(after))
        if lost:
            raise SchemaVersionError(
                f"state {self.name}: the stored state has field(s) {lost} that "
                f"{model.__name__} does not have (renamed or removed?); this "
                "commit would drop them, so nothing was written. Raise "
                "schema_version and register @st.migration(from_version=...) "
                "that moves or drops them, or set model_config = "
                "ConfigDict(extra='ignore') to let them go."
            )

    def _finish(self, tx: _Tx, obj: Any) -> None:
        doc, text = self._validate(obj)
        before = self._doc(tx)
        if tx.schema == self.schema_version:
            self._keeps_fields(before, doc)
        sdoc, stext, refs = self._stored(doc, text, tx.snap)
        c = Commit(sdoc, stext, self.schema_version, tx.caller, refs=refs)
        if tx.schema == self.schema_version:
            ops = diff(before, doc)
            if not ops and dumps(before) == dumps(doc):
                return  # nothing changed: no version
            changed = sorted({_field(op["path"]) for op in ops})
            if refs or tx.refs:
                # The patch goes from stored form to stored form: replayed
                # over the stored snapshot, it gives this stored form.
                ops = diff(tx.doc, sdoc)
            # Empty ops that changed the text: a change diff() cannot see,
            # stored whole (patch None means a snapshot).
            c.patch = ops or None
            c.changed = changed
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
        self._stop_renewing(tx, check=True)  # before the commit releases it
        if c.schema != tx.schema and isinstance(self.model, type):
            c.json_schema = schema_kept(self.model.model_json_schema())  # type: ignore[attr-defined]
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
                self._known = _Known(head.version, c.doc, c.text, c.schema, c.refs)
        for ev in c.events:
            if ev["kind"] == "state_size_warning":
                log.warning(
                    "state %s: %s (%d bytes)",
                    self.name,
                    ev["payload"]["reason"],
                    ev["payload"]["size"],
                )
                for hook in self._on_size:
                    hook(ev)


_SHARING = frozenset(
    {"any", "is-instance", "is-subclass", "callable", "function-plain", "function-wrap"}
)


def _shares(schema: Any) -> bool:
    """Whether a pydantic core schema has a node that returns its input as is."""
    if isinstance(schema, dict):
        if schema.get("type") in _SHARING:
            return True
        return any(_shares(v) for v in schema.values())
    if isinstance(schema, list | tuple):
        return any(_shares(v) for v in schema)
    return False


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
