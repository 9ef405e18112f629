"""The ready set, kept by incremental in-degrees; pure (no I/O, no clock).

Ready tasks come out longest-remaining-path first, so long chains are not starved
by wide fans when concurrency is limited (DESIGN.md section 5).

Built on every reopen, so it does per task only what the ready set needs: a
reopened 50,000-task session with a few tasks left counts unfinished
dependencies for the unfinished tasks alone, and computes a task's rank (its
longest path to a sink) when the task first becomes ready, from its own
descendants.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

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
        self, deps: Mapping[str, Sequence[str]], statuses: Mapping[str, Status]
    ):
        self.deps: dict[str, Sequence[str]] = dict(deps)
        children: dict[str, list[str]] = {}
        get = children.get
        for t, ds in self.deps.items():
            for d in ds:
                c = get(d)
                if c is None:
                    children[d] = [t]
                else:
                    c.append(t)
        self.children = children
        """Task id -> the tasks that depend on it (absent: none)."""
        self.index = dict(zip(self.deps, range(len(self.deps)), strict=True))
        self._rank: dict[str, int] = {}
        self._topo: list[str] | None = None
        self.status: dict[str, Status] = dict(statuses)
        # Unfinished dependencies, kept for unfinished tasks only: a finished
        # task's count is taken afresh if it ever leaves DONE (see ``set``).
        status = self.status
        self.remaining: dict[str, int] = {
            t: self._count(t) for t, st in status.items() if st not in DONE
        }
        self._heap: list[tuple[int, int, str]] = []
        self._queued: set[str] = set()
        for t, n in self.remaining.items():
            if n == 0:
                self._maybe_ready(t)

    def _count(self, t: str) -> int:
        status = self.status
        return sum(1 for d in self.deps[t] if status[d] not in DONE)

    @property
    def topo(self) -> list[str]:
        """Every task, dependencies before dependents."""
        if self._topo is None:
            # Kahn's algorithm on the children, from the sinks, O(V + E).
            out_deg = {t: len(self.children.get(t, ())) for t in self.deps}
            stack = [t for t, n in out_deg.items() if n == 0]
            order: list[str] = []
            while stack:
                t = stack.pop()
                order.append(t)
                for d in self.deps[t]:
                    out_deg[d] -= 1
                    if out_deg[d] == 0:
                        stack.append(d)
            self._topo = order[::-1]
        return self._topo

    def rank_of(self, t: str) -> int:
        """Longest path (in tasks) from ``t`` to a sink."""
        rank = self._rank
        got = rank.get(t)
        if got is not None:
            return got
        # Depth first over the descendants not ranked yet, children before
        # parents; a task met again on the current path (a cycle, which a
        # validated plan never has) counts as rank 0 rather than looping.
        children = self.children
        on_path = {t}
        stack = [(t, iter(children.get(t, ())))]
        while stack:
            x, kids = stack[-1]
            for c in kids:
                if c not in rank and c not in on_path:
                    on_path.add(c)
                    stack.append((c, iter(children.get(c, ()))))
                    break
            else:
                stack.pop()
                on_path.discard(x)
                rank[x] = 1 + max(
                    (rank.get(c, 0) for c in children.get(x, ())), default=0
                )
        return rank[t]

    def _maybe_ready(self, t: str) -> None:
        if (
            self.status[t] == "pending"
            and self.remaining[t] == 0
            and t not in self._queued
        ):
            heapq.heappush(self._heap, (-self.rank_of(t), self.index[t], t))
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
            remaining = self.remaining
            for c in self.children.get(t, ()):
                n = remaining.get(c)
                if n is None:  # c is finished: counted afresh if it reopens
                    continue
                remaining[c] = n = n + delta
                if delta < 0 and n == 0 and self.status[c] == "pending":
                    self._maybe_ready(c)
                    newly.append(c)
            if status in DONE:
                del remaining[t]
            else:
                remaining[t] = self._count(t)
        if status == "pending":
            self._maybe_ready(t)
        return newly

    def descendants(self, t: str) -> list[str]:
        """Every task downstream of t, in breadth-first order."""
        seen: dict[str, None] = {}
        children = self.children
        frontier = list(children.get(t, ()))
        while frontier:
            nxt: list[str] = []
            for c in frontier:
                if c not in seen:
                    seen[c] = None
                    nxt.extend(children.get(c, ()))
            frontier = nxt
        return list(seen)
