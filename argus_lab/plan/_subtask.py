"""What a method returns: subtasks, and how a method says it does not apply.

The vocabulary between a domain's methods and the planner that expands them
(:mod:`argus_lab.plan.domain` declares the domain; ``htn.py`` and
``_decompose.py`` turn subtasks into plan Tasks). A method lists
:data:`SubtaskLike` items; :func:`as_subtask` normalises each to a
:class:`Subtask`; :class:`NotApplicable` is how it declines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

from argus_lab.errors import PlanError

__all__ = [
    "NotApplicable",
    "Subtask",
    "SubtaskLike",
    "as_subtask",
    "call_text",
    "short_repr",
]


class NotApplicable(Exception):
    """A method does not apply; raised by :meth:`HTNContext.reject`.

    Not an error: the planner records the reason and tries the next method.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Subtask:
    """One subtask a method returns: a task name, its arguments and its order.

    Args:
        task: An operator or compound task name of the domain.
        *args: Positional arguments (operators map them with ``params``).
        id: Local id among its siblings; default the task name (``-2``, ``-3``
            appended for repeats). The plan id is ``<parent id>/<local id>``.
        deps: Local ids of earlier siblings to wait for. None (default): the
            previous sibling; ``[]``: none (start with the parent).
        lazy: Keep this compound as a placeholder task and decompose it when it
            becomes ready, with its dependencies' results in hand. Compounds
            whose args hold ``${...result}`` references are lazy anyway.
        **kwargs: Keyword arguments (for operators: the tool's own arguments).

    ``id``, ``deps`` and ``lazy`` are reserved: pass a tool argument of one of
    those names positionally, through the operator's ``params``.
    """

    __slots__ = ("args", "deps", "id", "kwargs", "lazy", "task")

    def __init__(
        self,
        task: str,
        /,
        *args: Any,
        id: str | None = None,
        deps: Sequence[str] | None = None,
        lazy: bool = False,
        **kwargs: Any,
    ) -> None:
        if not isinstance(task, str):
            raise TypeError(f"Subtask needs a task name first, got {task!r}")
        if isinstance(deps, str):
            raise TypeError(f"deps must be a list of sibling ids, got {deps!r}")
        self.task = task
        self.args: tuple[Any, ...] = args
        self.kwargs: dict[str, Any] = kwargs
        self.id = id
        self.deps: tuple[str, ...] | None = None if deps is None else tuple(deps)
        self.lazy = lazy

    def __repr__(self) -> str:
        opts = [f"{k}={v!r}" for k, v in self._options().items()]
        return f"Subtask({', '.join([repr(self.task), *self._call_parts(), *opts])})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Subtask):
            return NotImplemented
        return (self.task, self.args, self.kwargs, self._options()) == (
            other.task,
            other.args,
            other.kwargs,
            other._options(),
        )

    def _call_parts(self) -> list[str]:
        return [short_repr(a) for a in self.args] + [
            f"{k}={short_repr(v)}" for k, v in self.kwargs.items()
        ]

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {}
        if self.id is not None:
            opts["id"] = self.id
        if self.deps is not None:
            opts["deps"] = list(self.deps)
        if self.lazy:
            opts["lazy"] = True
        return opts


SubtaskLike: TypeAlias = "Subtask | tuple[Any, ...] | str"
"""What a method may list: a Subtask, a ``(task, *args)`` tuple or a bare name."""


def as_subtask(item: object) -> Subtask:
    """Normalises a SubtaskLike to a Subtask.

    Raises:
        PlanError: when the item is none of the accepted shapes.
    """
    if isinstance(item, Subtask):
        return item
    if isinstance(item, str):
        return Subtask(item)
    if isinstance(item, tuple) and item and isinstance(item[0], str):
        return Subtask(item[0], *item[1:])
    raise PlanError(
        f"bad subtask {item!r}: give a Subtask(...), a (task, *args) tuple or a "
        "task name"
    )


def short_repr(value: Any) -> str:
    """repr(), except for an integer past Python's 4,300-digit limit (it has none)."""
    try:
        return repr(value)
    except ValueError:
        return f"<{type(value).__name__} too long to print>"


def call_text(task: Subtask, limit: int = 100) -> str:
    """``travel('alice', 'park')``: a short human label for a task call."""
    text = f"{task.task}({', '.join(task._call_parts())})"
    return text if len(text) <= limit else text[: limit - 4] + "...)"
