"""``@tool``: plain Python functions made into validated, described, schema'd tools."""

from __future__ import annotations

import hashlib
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from argus_lab.errors import ToolArgumentsError
from argus_lab.redact import Redactor
from argus_lab.tools._plain_args import PlainFields, plain_fields, plain_kwargs

__all__ = ["SideEffect", "Tool", "ToolContext", "as_toolset", "tool"]

SideEffect = Literal["none", "read", "write"]
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a running tool may know about where it runs.

    Declare it as a keyword-only parameter ``ctx: al.ToolContext`` to receive it.
    """

    session_id: str
    """The session running the task."""
    task_id: str
    """The task this attempt belongs to."""
    attempt: int
    """1 for the first attempt, 2 for the first retry, and so on."""
    idempotency_key: str
    """Stable across crash-retries and transient retries of the same task;
    hand it to remote APIs so a repeated request takes effect once. A tool an
    LLM task's model calls gets its own: ``<task key>:<tool_use id>``."""
    workspace: Path
    """The workspace folder."""
    workdir: Path
    """A folder for this session's files (made before the session's first call of
    a tool that takes ``ctx``)."""
    redactor: Redactor | None = None
    """The session's secret masker: what a tool writes into the workspace
    itself (files, memory) goes through it first (invariant 7)."""
    _key_of: str | None = field(default=None, repr=False, compare=False)
    # The session whose idempotency key this is, if not ``session_id`` (a
    # fork's task carried in doubt from its parent): a call abandoned while
    # it runs is guarded there too (runtime/abandoned.py).

    def __reduce__(self) -> tuple[Any, ...]:
        # The redactor holds the secret values themselves: a context pickled
        # (to a Dask worker, say) travels without it.
        ids = (self.session_id, self.task_id, self.attempt, self.idempotency_key)
        return (ToolContext, (*ids, self.workspace, self.workdir))


def _fn_name(fn: Callable[..., Any]) -> str:
    """How the user wrote the function they passed, for an example."""
    name = getattr(fn, "__name__", "")
    return name if name.isidentifier() else "fn"


def _doc_parts(doc: str | None) -> tuple[str, dict[str, str]]:
    """Splits a Google-style docstring into (description, {param: text})."""
    if not doc:
        return "", {}
    text = inspect.cleandoc(doc)
    lines = text.splitlines()
    desc: list[str] = []
    params: dict[str, str] = {}
    i = 0
    while i < len(lines) and lines[i].strip() not in ("Args:", "Arguments:"):
        if re.match(r"^(Returns|Raises|Yields|Examples?|Notes?):\s*$", lines[i]):
            break
        desc.append(lines[i])
        i += 1
    if i < len(lines) and lines[i].strip() in ("Args:", "Arguments:"):
        current = None
        for line in lines[i + 1 :]:
            if line and not line.startswith(" "):
                break
            m = re.match(r"^\s{2,8}(\*{0,2}\w+)(?:\s*\(.*?\))?:\s*(.*)$", line)
            if m and (current is None or len(line) - len(line.lstrip()) <= 8):
                current = m.group(1).lstrip("*")
                params[current] = m.group(2).strip()
            elif current and line.strip():
                params[current] = (params[current] + " " + line.strip()).strip()
    return "\n".join(desc).strip(), params


class Tool:
    """A function the runtime can call for a task; build one with ``@al.tool``.

    Calling the Tool calls the function unchanged.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        retries: int = 0,
        side_effect: SideEffect = "none",
        idempotent: bool | None = None,
        inline: bool | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"@tool needs a function, got {type(fn).__name__}")
        if side_effect not in ("none", "read", "write"):
            raise ValueError(
                f"side_effect must be 'none', 'read' or 'write', got {side_effect!r}"
            )
        self.fn = fn
        self.name = name or fn.__name__
        if not _NAME.match(self.name):
            raise ValueError(
                f"tool name {self.name!r} must be 1-64 letters, digits, '_' or '-'"
                + (
                    ": a lambda has no name of its own, give it one: "
                    "al.tool(lambda ...: ..., name='my_tool')"
                    if self.name == "<lambda>"
                    else ""
                    if name
                    else f"; give it one with name=, e.g. al.tool({_fn_name(fn)}, "
                    "name='my_tool')"
                )
            )
        if inspect.isasyncgenfunction(fn):
            raise TypeError(
                f"tool {self.name!r} is an async generator function: a task "
                "calls its tool once and stores what it returns; collect the "
                "items and return them as a list"
            )
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries!r}")
        doc_desc, self._param_docs = _doc_parts(fn.__doc__)
        self.description = description or doc_desc or self.name
        self.timeout = timeout
        self.retries = retries
        self.side_effect: SideEffect = side_effect
        self.idempotent = (side_effect != "write") if idempotent is None else idempotent
        self.is_async = inspect.iscoroutinefunction(fn)
        if inline and (self.is_async or timeout is not None):
            raise ValueError(
                f"tool {self.name!r}: inline=True is for quick sync functions "
                "without a timeout (nothing can interrupt a call on the event "
                "loop); drop the timeout or inline=True"
            )
        self.inline = inline
        """True: sync calls run on the session's event loop, not a tool thread;
        False: never; None: decided per session by ``InlineGate``
        (runtime/executor.py) from how long the tool's calls took."""
        sig = inspect.signature(fn)
        self.takes_ctx = "ctx" in sig.parameters
        if self.takes_ctx and sig.parameters["ctx"].kind is not (
            inspect.Parameter.KEYWORD_ONLY
        ):
            raise TypeError(
                f"tool {self.name!r}: declare ctx keyword-only: def f(..., *, ctx)"
            )
        self._signature = sig
        if any(
            p.kind is inspect.Parameter.VAR_POSITIONAL for p in sig.parameters.values()
        ):
            raise TypeError(
                f"tool {self.name!r} takes *args, which a task cannot fill: its "
                "arguments are a mapping of names (args: {a: 1}); name the "
                "parameters (def f(a, b)), or take **kwargs"
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    @property
    def unsafe_to_repeat(self) -> bool:
        """Whether a call may make a write that is not idempotent: Argus never
        runs one again on its own when it may have taken effect (invariant 2)."""
        return self.side_effect == "write" and not self.idempotent

    def __repr__(self) -> str:
        return f"<Tool {self.name} side_effect={self.side_effect}>"

    @cached_property
    def _fields(self) -> tuple[dict[str, Any], bool]:
        try:
            hints = typing.get_type_hints(self.fn, include_extras=True)
        except Exception:  # unresolvable annotations: validate loosely
            hints = {}
        fields: dict[str, Any] = {}
        extra = False
        for p in self._signature.parameters.values():
            if p.name == "ctx":
                continue
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                extra = True
                continue
            if p.kind is inspect.Parameter.VAR_POSITIONAL:
                raise TypeError(f"tool {self.name!r}: *args cannot be passed by name")
            ann = hints.get(p.name, Any)
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[p.name] = (ann, default)
        return fields, extra

    @cached_property
    def _plain(self) -> PlainFields | None:
        return plain_fields(*self._fields)

    @cached_property
    def input_model(self) -> type[BaseModel]:
        """The pydantic model of the tool's inputs, built from its signature."""
        fields, extra = self._fields
        cfg = ConfigDict(
            extra="allow" if extra else "forbid", arbitrary_types_allowed=True
        )
        model: type[BaseModel] = create_model(
            f"{self.name}_input", __config__=cfg, **fields
        )
        return model

    def schema(self) -> dict[str, Any]:
        """The tool in the Anthropic Messages API format."""
        js = self.input_model.model_json_schema()
        js.pop("title", None)
        for pname, prop in js.get("properties", {}).items():
            prop.pop("title", None)
            if pname in self._param_docs and "description" not in prop:
                prop["description"] = self._param_docs[pname]
        return {"name": self.name, "description": self.description, "input_schema": js}

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        """Validates args and returns the keyword arguments to call the function with.

        Raises:
            ToolArgumentsError: naming each bad field.
        """
        plain = plain_kwargs(self._plain, args)  # exact scalars: nothing to do
        if plain is not None:
            return plain
        try:
            m = self.input_model.model_validate(args)
        except ValidationError as e:
            raise ToolArgumentsError(
                f"tool {self.name!r} got bad arguments: "
                + _errors_text(e, accepts=list(self._fields[0]))
            ) from None
        out = {k: getattr(m, k) for k in type(m).model_fields}
        if m.model_extra:
            out.update(m.model_extra)
        return out

    def check_args(self, args: dict[str, Any], *, deferred: set[str]) -> list[str]:
        """Checks literal args against the signature; ``deferred`` ones come later.

        Returns:
            One message per problem, each naming the field.
        """
        fields, extra = self._fields
        problems: list[str] = []
        for name, (_, default) in fields.items():
            if default is ... and name not in args:
                problems.append(
                    f"missing argument {name!r} for tool {self.name!r} "
                    f"(accepts: {', '.join(fields)})"
                )
        for name, value in args.items():
            if name not in fields:
                if not extra:
                    problems.append(
                        f"unknown argument {name!r} for tool {self.name!r} "
                        f"(accepts: {', '.join(fields) or 'no arguments'})"
                    )
                continue
            if name in deferred:
                continue
            try:
                _adapter(fields[name][0]).validate_python(value)
            except ValidationError as e:
                problems.append(
                    f"argument {name!r} of tool {self.name!r}: "
                    + _errors_text(e, prefix=name)
                )
        return problems

    @cached_property
    def code_hash(self) -> str:
        """A hash of the function's code, stable across processes and cells.

        Built from the compiled code (bytecode, constants, names, nested code
        objects) and defaults rather than the source text, so it works for
        functions defined in a notebook cell or by exec, where no source exists.
        Constants and defaults are hashed with secrets masked: the hash is
        stored with every result, and a default read from a secret-named
        variable (``pin=os.environ["BANK_PIN_PASSWORD"]``; ``redact.SECRET_NAME``
        says which names are secrets) or a key-shaped constant must not be
        testable against it (a 6-digit PIN is a million tries); a key
        changing is no change of code.
        """
        from argus_lab.redact import Redactor, known_secrets

        parts: list[bytes | str] = []  # code as bytes, the rest as text
        fn = inspect.unwrap(self.fn)
        code = getattr(fn, "__code__", None)
        if code is None:
            parts.append(repr(fn))
        else:
            _code_parts(code, parts)
            parts.append(repr(getattr(fn, "__defaults__", None)))
            parts.append(repr(getattr(fn, "__kwdefaults__", None)))
        red = Redactor(known_secrets())
        texts = "\0".join(p for p in parts if isinstance(p, str))
        masked = red.needed(texts)  # one look at them all: most hold nothing
        h = hashlib.sha256()
        for p in parts:
            h.update(
                p if isinstance(p, bytes) else (red.text(p) if masked else p).encode()
            )
        return h.hexdigest()[:16]


def _code_parts(code: types.CodeType, parts: list[bytes | str]) -> None:
    parts.append(code.co_code)
    parts.append(repr((code.co_names, code.co_varnames, code.co_freevars)))
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_parts(c, parts)
        else:
            parts.append(repr(c))


_adapters: dict[Any, TypeAdapter[Any]] = {}


def _adapter(tp: Any) -> TypeAdapter[Any]:
    """A TypeAdapter for an annotation, built once per annotation.

    Keyed by the annotation itself (equal annotations share one), which also keeps
    it alive: an ``id`` could be reused by another type once the first is gone.
    """
    try:
        return _adapters[tp]
    except KeyError:
        pass
    except TypeError:  # an unhashable annotation (Annotated with a dict, ...)
        return TypeAdapter(tp, config=ConfigDict(arbitrary_types_allowed=True))
    ad = _adapters[tp] = TypeAdapter(
        tp, config=ConfigDict(arbitrary_types_allowed=True)
    )
    return ad


def _errors_text(
    e: ValidationError, prefix: str | None = None, accepts: list[str] | None = None
) -> str:
    """One line naming each bad field. ``accepts``: the tool's argument names,
    for a top-level argument it does not take or that is missing (pydantic's
    "Extra inputs are not permitted" does not say which ones it takes)."""
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        where = ".".join(p for p in (prefix, loc) if p)
        msg = err["msg"]
        if accepts is not None and len(err["loc"]) == 1:
            if err["type"] == "extra_forbidden":
                msg = f"unknown argument (accepts: {', '.join(accepts) or 'none'})"
            elif err["type"] == "missing":
                msg = "missing argument"
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    retries: int = 0,
    side_effect: SideEffect = "none",
    idempotent: bool | None = None,
    inline: bool | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    retries: int = 0,
    side_effect: SideEffect = "none",
    idempotent: bool | None = None,
    inline: bool | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Makes a function a tool; use bare (``@al.tool``) or with options.

    Args:
        fn: The function (sync or async). Its signature gives the input schema,
            its docstring the description and per-argument help.
        name: Tool name; defaults to the function name.
        description: Overrides the docstring.
        timeout: Seconds per attempt (a task's ``timeout`` overrides it).
        retries: Retries after a TransientError (a task's ``retries`` overrides it).
        side_effect: "none", "read" or "write" (changes the world outside).
        idempotent: Safe to repeat with the same ``ctx.idempotency_key``; defaults
            to True unless ``side_effect="write"``.
        inline: Run a sync tool's calls on the session's event loop instead of
            a tool thread (saves the thread hop, ~0.1 ms a call; the loop waits
            for the call, and no timeout can interrupt it). None (default):
            a sync tool with ``side_effect="none"`` and no timeout goes inline by
            itself once a call on a thread took under a millisecond, and back
            to threads for the session if an inline call takes longer or fails.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            timeout=timeout,
            retries=retries,
            side_effect=side_effect,
            idempotent=idempotent,
            inline=inline,
        )

    return wrap(fn) if fn is not None else wrap


def as_toolset(tools: Iterable[Tool | Callable[..., Any]] | None) -> dict[str, Tool]:
    """Normalises tools (a list, a dict by name, or one tool or function) to a
    dict by name."""
    if isinstance(tools, str) or callable(tools):
        tools = [tools]
    elif isinstance(tools, Mapping):
        tools = list(tools.values())
    out: dict[str, Tool] = {}
    for t in tools or ():
        if isinstance(t, str):  # a name is not code: the session needs the tool
            raise TypeError(
                f"tools holds the name {t!r}; pass the tool itself (the function "
                "decorated with @al.tool), e.g. tools=[my_tool]"
            )
        tt = t if isinstance(t, Tool) else Tool(t)
        if tt.name in out and out[tt.name] is not tt:
            raise ValueError(
                f"two tools are named {tt.name!r}; tool names must be unique"
            )
        out[tt.name] = tt
    return out
