"""Budgets: pure checks of what was used, plus what the next step needs, against
the limits of the session, the task and every HTN subtree the task is in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from argus_lab.model import Budget, TaskRecord

if TYPE_CHECKING:
    from argus_lab.runtime.state import SessionState

__all__ = ["LIMITS", "BudgetChecker", "BudgetHit", "budget_scope", "check", "merge"]

LIMITS: tuple[tuple[str, str], ...] = (
    ("max_cost_usd", "cost_usd"),
    ("max_tokens", "tokens"),
    ("max_wall_s", "wall_s"),
    ("max_steps", "steps"),
)
"""(Budget field, usage counter) pairs."""


@dataclass(frozen=True)
class BudgetHit:
    """A limit the next step would cross."""

    scope: str
    """"session", "task:<id>" or "subtree:<prefix>"."""
    limit: str
    """The Budget field, e.g. max_cost_usd."""
    value: float
    """The limit."""
    used: float
    """Used so far in that scope."""
    needed: float
    """What the next step would add (an estimate for model calls)."""

    def message(self) -> str:
        """What happened and how to go on."""
        left = max(0.0, self.value - self.used)
        return (
            f"budget exceeded: {self.scope} {self.limit}={self.value:g} (used "
            f"{self.used:.6g}, {left:.6g} left, the next step needs "
            f"~{self.needed:.6g}); raise it with "
            f"s.set_budget({self.scope!r}, {self.limit}=...) and run again"
        )

    def event_fields(self) -> dict[str, object]:
        """The ``budget_exceeded`` event's own fields."""
        return {
            "budget": self.scope,
            "limit": self.limit,
            "value": self.value,
            "used": self.used,
            "needed": self.needed,
        }


def _task_usage(rec: TaskRecord) -> dict[str, float]:
    return {
        "cost_usd": rec.cost_usd,
        "tokens": float(rec.tokens),
        "steps": float(rec.attempts),
        "wall_s": 0.0,
    }


def check(
    budgets: Mapping[str, Budget],
    session_usage: Mapping[str, float],
    records: Mapping[str, TaskRecord],
    task_id: str | None,
    need: Mapping[str, float],
    task_budget: Budget | None = None,
) -> BudgetHit | None:
    """The first limit that ``need`` more would cross, or None.

    Scopes are checked session first, then the task, then its subtrees.
    """
    scopes: list[tuple[str, Budget, Mapping[str, float]]] = []
    if (b := budgets.get("session")) is not None:
        scopes.append(("session", b, session_usage))
    if task_id is not None:
        tb = budgets.get(f"task:{task_id}", task_budget)
        if tb is not None:
            scopes.append((f"task:{task_id}", tb, _task_usage(records[task_id])))
        for scope, b in budgets.items():
            prefix = scope.removeprefix("subtree:")
            if scope.startswith("subtree:") and (
                task_id == prefix or task_id.startswith(prefix.rstrip("/") + "/")
            ):
                total: dict[str, float] = {}
                for t, r in records.items():
                    if t == prefix or t.startswith(prefix.rstrip("/") + "/"):
                        for k, v in _task_usage(r).items():
                            total[k] = total.get(k, 0.0) + v
                scopes.append((scope, b, total))
    for scope, budget, used in scopes:
        for field, key in LIMITS:
            limit = getattr(budget, field)
            if limit is None:
                continue
            u, n = used.get(key, 0.0), need.get(key, 0.0)
            if u + n > limit or (n == 0 and key == "wall_s" and u >= limit):
                return BudgetHit(scope, field, float(limit), u, n)
    return None


class BudgetChecker:
    """Checks the next step of a task against the session's current limits.

    Args:
        state: The session state (limits, usage counters, records).
    """

    def __init__(self, state: SessionState) -> None:
        self._state = state

    def check(self, task_id: str | None, need: Mapping[str, float]) -> BudgetHit | None:
        """The first limit that ``need`` more would cross for ``task_id``, or None."""
        st = self._state
        task = st.tasks.get(task_id) if task_id is not None else None
        budgets = st.info.budgets
        if not budgets and (task is None or task.budget is None):
            return None  # no limit anywhere (every step asks: no scopes built)
        return check(
            budgets,
            st.usage,
            st.records,
            task_id,
            need,
            task.budget if task is not None else None,
        )


def budget_scope(scope: str) -> tuple[str, str]:
    """Splits "session", "task:<id>" or "subtree:<id>" into (kind, target).

    Raises:
        ValueError: any other shape, saying which are allowed.
    """
    kind, _, target = scope.partition(":")
    if kind not in ("session", "task", "subtree") or (kind != "session") != bool(
        target
    ):
        raise ValueError(
            f"budget scope must be 'session', 'task:<id>' or 'subtree:<id>', "
            f"got {scope!r}"
        )
    return kind, target


def merge(old: Budget | None, **limits: float | int | None) -> Budget:
    """``old`` with the given limits replaced (unknown names raise TypeError,
    bad values ValueError)."""
    data = old.model_dump() if old is not None else {}
    for k in limits:
        if k not in Budget.model_fields:
            known = ", ".join(Budget.model_fields)
            raise TypeError(f"unknown budget limit {k!r}; limits are: {known}")
    data.update(limits)
    return Budget.of(data)
