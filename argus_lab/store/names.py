"""A workspace's session names: the index (name -> id) and how a name is found.

The index (store/index.py) is a cache of the session folders, opened on first use
and rebuilt when it is found damaged after it was opened. ``SessionNames`` is the
one place the Workspace asks "which session is this name or id?", claims a new
session's name, and releases the names of a deleted one.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.store.index import (
    IndexRebuiltWarning,
    open_index,
    rebuild_or_raise,
    scan_sessions,
)

if TYPE_CHECKING:
    import diskcache

    from argus_lab.store.envelope import Durability

__all__ = ["CREATING_S", "NAME", "SessionNames"]

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""What a session name (and id) looks like: safe as a key and as a folder name."""
CREATING_S = 30.0
"""How long after its creation a session missing from the index is taken for a
create still in progress (its folder is written before its index entry)."""


class SessionNames:
    """The name index of the workspace at ``root``.

    Args:
        root: The workspace folder (sessions are in ``root / "sessions"``).
        durability: The workspace's durability, for the index's cache too.
    """

    def __init__(self, root: Path, durability: Durability) -> None:
        self.root = root
        self.durability: Durability = durability
        self._cache: diskcache.Cache | None = None
        self._lock = threading.Lock()

    @property
    def cache(self) -> diskcache.Cache:
        """The index, opened on first use (rebuilt, with a warning, if damaged)."""
        with self._lock:  # analysis reads sessions from several threads
            if self._cache is None:
                self._cache = open_index(self.root, self.durability)
            return self._cache

    def call(self, fn: Callable[[diskcache.Cache], Any]) -> Any:
        """``fn(index)``; once more on a rebuilt index if it is found damaged."""
        try:
            return fn(self.cache)
        except sqlite3.DatabaseError as e:  # damaged after it was opened
            self.close()
            self._cache = rebuild_or_raise(self.root, self.durability, e)
            return fn(self._cache)

    def folder(self, session_id: str) -> Path:
        """The checkpoint folder of session ``session_id``."""
        return self.root / "sessions" / session_id

    def lookup(self, name_or_id: str, *, scan: bool = True) -> str | None:
        """The id of the session with this name or id, or None.

        ``scan``: look for a name the index does not know in the folders too.
        """
        if not isinstance(name_or_id, str):
            raise TypeError(
                "a session name or id is text, got "
                f"{type(name_or_id).__name__}: {name_or_id!r}"
            )
        if not NAME.match(name_or_id):
            return None  # no session has it (and it must not reach a path)
        # By id first: opening a session by id never depends on the index.
        if (self.folder(name_or_id) / "cache.db").exists():
            return name_or_id
        sid = self.call(lambda ix: ix.get("name:" + name_or_id))
        if isinstance(sid, str) and self.folder(sid).exists():
            return sid
        return self._find_in_folders(name_or_id) if scan else None

    def _find_in_folders(self, name: str) -> str | None:
        """A name the index does not know, looked for in the session folders.

        The index is a cache: an entry lost (a crash between the folder and
        the index, a rebuild that raced a create) is found and written back.
        """
        infos = scan_sessions(self.root / "sessions", self.durability)[0]
        found = [i for i in infos if i.name == name]
        if len(found) != 1:
            return None
        sid = found[0].id
        self.call(lambda ix: ix.set("name:" + name, sid))
        if time.time() - found[0].created < CREATING_S:
            # A create in progress writes its folder, then its index entry: a
            # reader in between has found it early, not found a lost entry.
            return sid
        warnings.warn(
            f"the workspace index {self.root / 'index'} did not know {name!r}; "
            f"found it in the session folders ({sid}) and added it back",
            IndexRebuiltWarning,
            stacklevel=3,
        )
        return sid

    def claim(self, name: str, session_id: str) -> bool:
        """Enters ``name`` for a new session; False if another session has it."""
        return bool(
            self.call(
                lambda ix: (
                    ix.add("name:" + name, session_id)
                    or ix.get("name:" + name) == session_id
                )  # a reader found the folder first
            )
        )

    def release(self, session_id: str, *names: str) -> None:
        """Removes the entries of ``names`` that lead to ``session_id``."""

        def release(ix: diskcache.Cache) -> None:
            for key in {"name:" + n for n in names}:
                if ix.get(key) == session_id:
                    ix.delete(key)

        self.call(release)

    def close(self) -> None:
        """Closes the index (it reopens on next use)."""
        if self._cache is not None:
            self._cache.close()
            self._cache = None
