"""The ready set, kept by incremental in-degrees; pure (no I/O, no clock).

Ready tasks come out longest-remaining-path first, so long chains are not starved
by wide fans when concurrency is limited (DESIGN.md section 5).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

from argus_lab.model import Status

__all__ = ["DONE", "Scheduler"]

DONE: frozenset[Status] = frozenset({"succeeded", "skipped"})
"""Statuses that satisfy a dependency."""


class Scheduler:
    """Tracks which tasks may run next.

    Args:
        deps: Task id -> ids it depends on (every task of the plan, in plan order).
        statuses: Current status of each task.
    """

    def __init__(
        self, deps: Mapping[str, Iterable[str]], statuses: Mapping[str, Status]
    ):
        self.deps = {t: list(d) for t, d in deps.items()}
        self.children: dict[str, list[str]] = {t: [] for t in self.deps}
        for t, ds in self.deps.items():
            for d in ds:
                self.children[d].append(t)
        self.index = {t: i for i, t in enumerate(self.deps)}
        self.topo: list[str] = []
        """Every task, dependencies before dependents."""
        self.rank = self._ranks()
        self.status: dict[str, Status] = dict(statuses)
        self.remaining = {
            t: sum(1 for d in ds if self.status[d] not in DONE)
            for t, ds in self.deps.items()
        }
        self._heap: list[tuple[int, int, str]] = []
        self._queued: set[str] = set()
        for t in self.deps:
            self._maybe_ready(t)

    def _ranks(self) -> dict[str, int]:
        # Longest path (in tasks) from each task to a sink, in reverse topological
        # order (Kahn's algorithm on the children), O(V + E).
        out_deg = {t: len(c) for t, c in self.children.items()}
        stack = [t for t, n in out_deg.items() if n == 0]
        rank: dict[str, int] = {}
        order: list[str] = []
        while stack:
            t = stack.pop()
            order.append(t)
            rank[t] = 1 + max((rank[c] for c in self.children[t]), default=0)
            for d in self.deps[t]:
                out_deg[d] -= 1
                if out_deg[d] == 0:
                    stack.append(d)
        self.topo = order[::-1]
        return rank

    def _maybe_ready(self, t: str) -> None:
        if (
            self.status[t] == "pending"
            and self.remaining[t] == 0
            and t not in self._queued
        ):
            heapq.heappush(self._heap, (-self.rank.get(t, 0), self.index[t], t))
            self._queued.add(t)

    def has_ready(self) -> bool:
        """Whether some task can start now."""
        return bool(self._heap)

    def pop(self) -> str | None:
        """Takes the most urgent ready task (marks nothing; call ``set`` next)."""
        while self._heap:
            _, _, t = heapq.heappop(self._heap)
            self._queued.discard(t)
            if self.status[t] == "pending" and self.remaining[t] == 0:
                return t
        return None

    def peek_all(self) -> list[str]:
        """The ready tasks in the order ``pop`` would give them."""
        return [t for _, _, t in sorted(self._heap)]

    def set(self, t: str, status: Status) -> list[str]:
        """Records a status change; returns tasks that became ready because of it."""
        old = self.status[t]
        self.status[t] = status
        newly: list[str] = []
        if (old in DONE) != (status in DONE):
            delta = -1 if status in DONE else 1
            for c in self.children[t]:
                self.remaining[c] += delta
                if delta < 0 and self.remaining[c] == 0 and self.status[c] == "pending":
                    self._maybe_ready(c)
                    newly.append(c)
        if status == "pending":
            self._maybe_ready(t)
        return newly

    def descendants(self, t: str) -> list[str]:
        """Every task downstream of t, in breadth-first order."""
        seen: dict[str, None] = {}
        frontier = list(self.children[t])
        while frontier:
            nxt: list[str] = []
            for c in frontier:
                if c not in seen:
                    seen[c] = None
                    nxt.extend(self.children[c])
            frontier = nxt
        return list(seen)
