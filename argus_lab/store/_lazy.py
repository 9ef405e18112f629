"""A mapping whose values are validated when first read (records, plan tasks).

Shared by ``TaskRecords`` and ``PlanTasks``: each entry is either the validated
object or what it is made from (stored JSON text, a parsed dict); reading an
entry validates it once and keeps the result. The session's loop thread writes
entries while other threads read them, so a value validated on one thread never
replaces one that was written meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, KeysView, MutableMapping
from typing import Any, Generic, TypeVar

__all__ = ["LazyMap"]

V = TypeVar("V")


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
        self._keep([(key, v, made)])
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
        kind = self._kind
        return sum(1 for v in self._d.values() if v.__class__ is not kind)

    def _unread(self) -> list[tuple[str, Any]]:
        kind = self._kind
        return [(k, v) for k, v in self._d.items() if v.__class__ is not kind]

    def _keep(self, made: list[tuple[str, Any, V]]) -> None:
        """Caches made values, unless a newer one was written meanwhile."""
        d = self._d
        with self._lock:
            for k, was, value in made:
                if k in d and d[k] is was:
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
