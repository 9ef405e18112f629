"""The read side of a typed state, and what is registered on it.

``StateView`` holds the decorators that register invariants, migrations and
hooks (``@st.invariant``, ``@st.migration(n)``, ``@st.on_checkpoint``,
``@st.on_size_warning``) and the views that write nothing: the latest version,
any past version (``at``), the history as a DataFrame and the state's events.
``State`` (state.py) adds transactions, patches, compaction and forks.

``get`` and ``at`` are the program's reads: a secret stored as ``${env.NAME}``
comes back as its value (``SecretUnsetError`` if the variable is not set).
``get_json``, ``history`` and ``events`` are for people and servers: they show
the reference and work without the variable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from argus_lab._redact_refs import secret_env
from argus_lab.store.state_core import Hook, M, StateCore
from argus_lab.store.state_secrets import viewed

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["StateView"]


class StateView(StateCore[M]):
    """Registration and reads of one typed state (``State`` is the public face)."""

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

    def get(self) -> M:
        """A copy of the latest version (changing it changes nothing stored).

        Raises:
            SecretUnsetError: it holds the value of an env var, stored as a
                reference, that this process does not set.
        """
        k = self._current()
        return self._thaw(k.text, k.schema, k.doc, k.refs)

    def get_json(self, version: int | None = None) -> tuple[int, Any]:
        """(version, document) of the latest version, or of ``version``, for a
        person to read (servers and tools): a secret env value it holds reads
        ``${env.NAME}``, and no variable needs to be set. Not migrated."""
        if version is None:
            k = self._current()
            v, doc, refs = k.version, json.loads(k.text), k.refs
        else:
            v = version
            doc, _, refs = self._log.replay(version)
        doc = self._shown(doc) if refs else doc
        snap = secret_env()
        # A value stored before its variable was a secret (no reference then)
        # reads as a reference too, as State.patch's ops see it.
        return v, (doc if snap.find is None else viewed(snap, doc))

    def at(self, version: int) -> M:
        """The state as it was at ``version`` (KeyError when there is none);
        SecretUnsetError as ``get()``."""
        doc, schema, refs = self._log.replay(version)
        return self._thaw(None, schema, doc, refs)

    def history(self, *, since: int = 0, limit: int | None = None) -> pd.DataFrame:
        """One row per version: version, time, kind, size, changed, caller,
        snapshot (whether the version is stored in full). ``since``/``limit``:
        only versions after ``since``, at most ``limit`` of them."""
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
            for r in self._log.records(since + 1, limit=limit)
        ]
        df = pd.DataFrame(
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
        # The same dtypes with no rows as with many (an empty page, a filter).
        return df.astype(
            {
                "version": "int64",
                "time": "datetime64[ns, UTC]",
                "kind": "str",
                "size": "int64",
                "changed": object,
                "caller": "str",
                "snapshot": bool,
            }
        )

    def events(self, since: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
        """Size warnings, compactions, migrations and forks with seq > since,
        oldest first (at most ``limit``)."""
        return self._log.events(since, limit)
