"""A mapping whose values are validated when first read (records, plan tasks).

Shared by ``TaskRecords`` and ``PlanTasks``: each entry is either the validated
object or what it is made from (stored JSON text, a parsed dict); reading an
entry validates it once and keeps the result. The session's loop thread writes
entries while other threads read them, so a value validated on one thread never
replaces one that was written meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, KeysView, MutableMapping, Sequence
from itertools import compress, repeat
from operator import is_, is_not
from typing import Any, Generic, TypeVar

__all__ = ["LazyMap"]

V = TypeVar("V")

_ABSENT = object()


class LazyMap(MutableMapping[str, V], Generic[V]):
    """Key -> value of class ``kind``; other entries are made into one on read.

    Args:
        entries: Key -> a value of class ``kind``, or what ``make`` takes.
        kind: The class of finished values (checked exactly, not isinstance).
    """

    def __init__(self, entries: dict[str, Any], kind: type[V]) -> None:
        self._d = entries
        self._kind = kind
        self._lock = threading.Lock()

    def _make(self, key: str, raw: Any) -> V:
        """Makes the value of ``key`` from its raw entry."""
        raise NotImplementedError

    def __getitem__(self, key: str) -> V:
        v = self._d[key]
        if v.__class__ is self._kind:
            return v
        made = self._make(key, v)
        d = self._d
        with self._lock:  # ``_keep`` for one key (every step reads one)
            if d.get(key, _ABSENT) is v:
                d[key] = made
        return made

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` (validated now if need be), else ``default``."""
        if key in self._d:
            return self[key]
        return default

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def keys(self) -> KeysView[str]:
        """The keys, as the underlying dict's view (set operations in C)."""
        return self._d.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def unread(self) -> int:
        """How many entries are not validated yet."""
        return len(self._unread())

    def _unread(self) -> list[tuple[str, Any]]:
        """(key, raw entry) of every entry not validated yet, in order."""
        # compress/map: the class of 50,000 entries compared in C
        d = self._d
        return list(
            compress(d.items(), map(is_not, map(type, d.values()), repeat(self._kind)))
        )

    def _keep(
        self, keys: Sequence[str], was: Sequence[Any], values: Sequence[V]
    ) -> None:
        """Caches made values, unless a newer one was written meanwhile."""
        d = self._d
        with self._lock:
            # An absent key is never ``was`` (a fresh record's entry is None,
            # and a plan patch may have removed its task meanwhile).
            now = map(d.get, keys, repeat(_ABSENT))
            if all(map(is_, now, was)):  # the usual case, in C
                d.update(zip(keys, values, strict=True))
                return
            for k, old, value in zip(keys, was, values, strict=True):
                if k in d and d[k] is old:
                    d[k] = value

    def __setitem__(self, key: str, value: V) -> None:
        with self._lock:
            self._d[key] = value

    def __delitem__(self, key: str) -> None:
        with self._lock:
            del self._d[key]

    def __repr__(self) -> str:
        name, n = type(self).__name__, len(self._d)
        return f"<{name}: {n} entries, {self.unread()} not validated yet>"
