"""HTN domains: operators (tool calls), compound tasks and the methods that split them.

A domain is the knowledge an :class:`~argus_lab.plan.htn.HTNPlanner` plans with:

- an **operator** is a primitive task; it becomes one plan Task calling a tool.
  Positional arguments are mapped to the tool's keyword arguments by ``params``
  (or by the tool's own signature when a Tool is given). An optional ``effect``
  simulates the operator on a planning *state* (GTPyhop style) so methods can
  look ahead; it returns the new state, or None when the operator cannot apply.
- a **compound** task is split by its **methods**, tried in the order they were
  registered. A method is ``method(ctx, *args, **kwargs)`` returning a list of
  subtasks, or None (or ``ctx.reject("why")``) when it does not apply.

Subtasks run in list order unless they say otherwise: a subtask without
``deps`` runs after the previous one; ``deps=[...]`` names earlier siblings by
local id (``deps=[]``: no sibling to wait for). ``${sibling.result.path}`` in
args refers to an earlier primitive sibling's result (and implies the dep).

```python
trip = HTNDomain("trip")
trip.operator("call_taxi", params=["who", "at"])
trip.operator("ride_taxi", params=["who", "to"])

@trip.method("travel")
def by_taxi(ctx, who, frm, to):
    return [("call_taxi", who, frm), ("ride_taxi", who, to)]
```

What a method returns (:class:`Subtask`, :data:`SubtaskLike`) and how it
declines (:class:`NotApplicable`) live in ``_subtask.py``; they are re-exported
here, where domain authors import them.

Hybrid planning: a compound may name a ``decomposer`` (an LLM, later) that is
tried after every method has been rejected; its output is validated like a
method's, and an invalid one is rejected rather than raised.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeAlias, TypeVar

from argus_lab.errors import PlanError
from argus_lab.plan._subtask import (
    NotApplicable,
    Subtask,
    SubtaskLike,
    as_subtask,
    call_text,
)

if TYPE_CHECKING:
    from argus_lab.tools.registry import Tool

__all__ = [
    "Compound",
    "Decomposer",
    "HTNContext",
    "HTNDomain",
    "Method",
    "NotApplicable",
    "Operator",
    "Subtask",
    "SubtaskLike",
    "as_subtask",
    "call_text",
]

NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$")
"""Task names and local subtask ids: a task-id segment without ``/``."""

Phase = Literal["plan", "expand", "backtrack"]


@dataclass(frozen=True, slots=True)
class HTNContext:
    """What a method (or decomposer) gets as its first argument."""

    state: Any
    """The planning state (None unless ``plan(..., state=...)`` was given);
    read it, never change it: operators' effects make new states."""
    task: Subtask
    """The compound task being decomposed, with its arguments."""
    results: Mapping[str, Any]
    """Results of the compound's dependencies, by task id and, for siblings, by
    local id too. Empty while planning ahead; filled when a lazy compound
    expands or a compound is re-decomposed at run time."""
    phase: Phase
    """"plan" (ahead of the run), "expand" (lazy, at ready time) or "backtrack"
    (re-decomposition after a subtree failed)."""
    domain: HTNDomain
    """The domain (a decomposer lists its operators and compounds from it)."""

    def reject(self, reason: str) -> NoReturn:
        """Declares that the method does not apply, saying why.

        Raises:
            NotApplicable: always; the planner records ``reason`` and moves on.
        """
        raise NotApplicable(reason)


MethodFn: TypeAlias = Callable[..., "Sequence[SubtaskLike] | None"]
Decomposer: TypeAlias = MethodFn
"""A fallback ``fn(ctx, *args, **kwargs) -> list of subtasks | None`` tried after
every method; ``ctx.task.task`` names the compound (the LLM hook of hybrid HTN)."""

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Method:
    """One way to decompose a compound task."""

    task: str
    """The compound task it decomposes."""
    name: str
    """Unique among the task's methods; decisions and backtracking name it."""
    fn: MethodFn
    """``fn(ctx, *args, **kwargs) -> list[SubtaskLike] | None``."""
    fallback: bool = False
    """True for a decomposer: invalid output is rejected instead of raised."""

    def check_call(self, ctx: HTNContext) -> None:
        """Raises PlanError when the task's arguments do not fit the signature."""
        try:
            inspect.signature(self.fn).bind(ctx, *ctx.task.args, **ctx.task.kwargs)
        except TypeError as e:
            raise PlanError(
                f"method {self.name!r} of {self.task!r} cannot take "
                f"{call_text(ctx.task)}: {e}"
            ) from None
        except ValueError:  # no signature (builtins): let the call decide
            return


@dataclass(slots=True)
class Operator:
    """A primitive task: one plan Task that calls ``tool``."""

    name: str
    """The task name methods use."""
    tool: str
    """The tool the Task calls."""
    params: tuple[str, ...] | Callable[..., dict[str, Any]] | None = None
    """Names for positional args, or a function mapping (*args, **kwargs) to the
    tool's arguments; None: keyword arguments only."""
    effect: Callable[..., Any] | None = None
    """``effect(state, *args, **kwargs) -> new state | None`` for planning ahead;
    gets a copy of the state, so it may change and return it."""
    retries: int | None = None
    """Copied to the Task (None: the tool's default)."""
    timeout: float | None = None
    """Copied to the Task (None: the tool's default)."""
    description: str = ""
    """Copied to the Task."""

    def tool_args(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        """Maps a call's arguments to the tool's keyword arguments.

        Raises:
            PlanError: naming the operator when positional args cannot be mapped.
        """
        if callable(self.params):
            out = self.params(*args, **kwargs)
            if not isinstance(out, dict):
                raise PlanError(
                    f"operator {self.name!r}: params() must return a dict of tool "
                    f"arguments, got {type(out).__name__}"
                )
            return out
        names = self.params or ()
        if len(args) > len(names):
            raise PlanError(
                f"operator {self.name!r} got {len(args)} positional argument(s) "
                f"{args!r} but names only {list(names)}: declare "
                f"params=[...] or pass keyword arguments"
            )
        out = dict(zip(names, args, strict=False))
        for k, v in kwargs.items():
            if k in out:
                raise PlanError(f"operator {self.name!r} got {k!r} twice")
            out[k] = v
        return out


@dataclass(slots=True)
class Compound:
    """A compound task: its methods in order, and how it expands."""

    name: str
    """The task name."""
    methods: list[Method] = field(default_factory=list)
    """Tried in this order."""
    lazy: bool = False
    """Always a placeholder, decomposed when it becomes ready."""
    decomposer: Decomposer | None = None
    """Tried after every method was rejected (overrides the domain's)."""
    description: str = ""
    """What the task is for (shown on its placeholder)."""


class HTNDomain:
    """Operators, compound tasks and methods; what an HTNPlanner plans with.

    Args:
        name: A label for the domain.
        decomposer: Fallback for every compound task whose methods all fail
            (a compound's own ``decomposer`` takes precedence).

    Attributes:
        operators: Operators by task name.
        compounds: Compound tasks by name.
    """

    def __init__(self, name: str, *, decomposer: Decomposer | None = None) -> None:
        self.name = name
        self.decomposer = decomposer
        self.operators: dict[str, Operator] = {}
        self.compounds: dict[str, Compound] = {}

    def __repr__(self) -> str:
        return (
            f"<HTNDomain {self.name}: {len(self.operators)} operators, "
            f"{len(self.compounds)} compound tasks>"
        )

    def operator(
        self,
        name: str,
        *,
        tool: str | Tool | Callable[..., Any] | None = None,
        params: Sequence[str] | Callable[..., dict[str, Any]] | None = None,
        effect: Callable[..., Any] | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        description: str = "",
    ) -> Operator:
        """Declares a primitive task that calls a tool.

        Args:
            name: The task name methods use.
            tool: Tool name (default ``name``), or a Tool or function, whose
                signature then gives ``params`` when they are not given.
            params: Tool argument names for positional args, in order, or a
                function ``(*args, **kwargs) -> dict`` of tool arguments.
            effect: ``effect(state, *args, **kwargs) -> state | None``: what the
                operator does to the planning state (None: not applicable).
            retries: Retries copied to each Task.
            timeout: Timeout copied to each Task.
            description: Copied to each Task.

        Returns:
            The Operator.
        """
        self._check_name(name, "operator")
        if name in self.compounds:
            raise ValueError(f"{name!r} is already a compound task of {self.name!r}")
        tool_name = name
        if isinstance(tool, str):
            tool_name = tool
        elif tool is not None:  # a Tool, or a plain function the session wraps
            fn = getattr(tool, "fn", tool)
            tool_name = getattr(tool, "name", None) or fn.__name__
            if params is None:
                params = _signature_params(fn)
        if isinstance(params, str):
            raise TypeError(f"params must be a list of names, got {params!r}")
        op = Operator(
            name=name,
            tool=tool_name,
            params=params if params is None or callable(params) else tuple(params),
            effect=effect,
            retries=retries,
            timeout=timeout,
            description=description,
        )
        self.operators[name] = op
        return op

    def compound(
        self,
        name: str,
        *,
        lazy: bool = False,
        decomposer: Decomposer | None = None,
        description: str = "",
    ) -> Compound:
        """Declares (or updates) a compound task's options; methods add to it.

        Args:
            name: The task name.
            lazy: Always expand it when it becomes ready, not ahead of the run.
            decomposer: Tried after every method was rejected (the LLM hook).
            description: What the task is for.

        Returns:
            The Compound.
        """
        c = self._compound(name)
        c.lazy = lazy
        c.decomposer = decomposer
        c.description = description
        return c

    def method(self, task: str, *, name: str | None = None) -> Callable[[F], F]:
        """Registers the decorated function as the next method of ``task``.

        Args:
            task: The compound task it decomposes (declared on first use).
            name: Method name; default the function's name.

        Returns:
            A decorator that returns the function unchanged.
        """

        def register(fn: F) -> F:
            c = self._compound(task)
            mname = name or getattr(fn, "__name__", "")
            if not mname or mname == "<lambda>":
                raise ValueError(f"give the method of {task!r} a name=")
            if any(m.name == mname for m in c.methods):
                raise ValueError(f"{task!r} already has a method named {mname!r}")
            c.methods.append(Method(task, mname, fn))
            return fn

        return register

    def kind(self, task: str) -> Literal["operator", "compound"] | None:
        """Whether ``task`` is an operator, a compound task, or unknown (None)."""
        if task in self.operators:
            return "operator"
        if task in self.compounds:
            return "compound"
        return None

    def methods_for(self, task: str) -> list[Method]:
        """The methods of a compound task in order, its decomposer last."""
        c = self.compounds[task]
        out = list(c.methods)
        fallback = c.decomposer or self.decomposer
        if fallback is not None:
            fname = getattr(fallback, "__name__", "decomposer")
            out.append(Method(task, f"{fname}", fallback, fallback=True))
        return out

    def known(self) -> str:
        """``operators: a, b; compound tasks: c`` for error messages."""
        ops = ", ".join(sorted(self.operators)) or "(none)"
        cs = ", ".join(sorted(self.compounds)) or "(none)"
        return f"operators: {ops}; compound tasks: {cs}"

    def _compound(self, name: str) -> Compound:
        if name not in self.compounds:
            self._check_name(name, "compound task")
            if name in self.operators:
                raise ValueError(f"{name!r} is already an operator of {self.name!r}")
            self.compounds[name] = Compound(name)
        return self.compounds[name]

    @staticmethod
    def _check_name(name: str, what: str) -> None:
        if not isinstance(name, str) or not NAME.match(name):
            raise ValueError(
                f"{what} name {name!r} must be 1-64 letters, digits or '_.:-' "
                "(no '/', which separates levels of task ids)"
            )


def _signature_params(fn: Callable[..., Any]) -> tuple[str, ...]:
    # Tools are called by keyword, so only these can take a positional's value.
    return tuple(
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name != "ctx"
    )
