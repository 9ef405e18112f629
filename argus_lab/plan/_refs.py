"""``${...}`` references in task arguments, and the ``$${`` escape for a literal one.

A string argument may hold ``${task.result.path}`` (a dependency's result) or
``${env.NAME}`` (read when the task runs, never stored). ``$${`` writes a
literal ``${`` and starts no reference, as in docker-compose: in a run of
``$`` right before ``{`` each ``$$`` is one ``$`` and an odd last ``$`` starts
a reference. So ``"echo $${HOME}"`` reaches the tool as ``echo ${HOME}`` and
``"$$${price.result}"`` as ``$`` and the price. A ``$$`` anywhere else stays
as written (``"echo $$"`` is the shell's PID, as before).

Every reader of references goes through this module (validation, resolution,
HTN expansion, the plan's stored text): one rule, no second regex to drift.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "REFERENCE",
    "Reference",
    "iter_references",
    "sub_references",
    "whole_reference",
]

REFERENCE = re.compile(r"\$\{([^}]*)\}")
"""A ``${...}`` in a string (group 1: what is between the braces). It does not
know the ``$${`` escape: find references with ``iter_references`` or
``sub_references``."""
_TOKEN = re.compile(r"(\$+)\{(?:([^}]*)\})?")
"""A run of ``$`` before ``{`` (group 1), then the body up to ``}`` if closed."""
_REF_BODY = re.compile(r"^(?P<task>[^\s{}]+?)\.result(?P<path>(?:\.[^.\s{}]+)*)$")
_ENV_BODY = re.compile(r"^env\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)$")


class Reference:
    """One ``${task.result.a.b}`` or ``${env.NAME}`` reference in a task's args.

    ``${env.NAME}`` is read from the environment when the task runs and is never
    stored: the way to hand a tool a secret.
    """

    __slots__ = ("path", "task_id", "text")

    def __init__(self, text: str, task_id: str, path: tuple[str, ...]) -> None:
        self.text = text
        self.task_id = task_id
        self.path = path

    @property
    def is_env(self) -> bool:
        """Whether this reads an environment variable rather than a result."""
        return self.task_id == ""


def _parse_ref(body: str) -> Reference | None:
    env = _ENV_BODY.match(body.strip())
    if env is not None:
        return Reference("${" + body + "}", "", (env.group("name"),))
    m = _REF_BODY.match(body.strip())
    if m is None:
        return None
    path = tuple(p for p in m.group("path").split(".") if p)
    return Reference("${" + body + "}", m.group("task"), path)


def whole_reference(text: str) -> Reference | None:
    """The reference ``text`` is exactly (it then takes the value's type), or
    None: other text, an escaped ``$${...}``, or a malformed reference."""
    m = _TOKEN.fullmatch(text)
    if m is None or len(m.group(1)) != 1 or m.group(2) is None:
        return None
    return _parse_ref(m.group(2))


def sub_references(
    text: str,
    fn: Callable[[Reference | None, str], str | None],
    *,
    unescape: bool,
) -> str:
    """``text`` with each reference replaced by ``fn(reference, written)``.

    Args:
        text: A string argument.
        fn: Given the parsed reference (None when malformed) and its text as
            written (``"${...}"``); returns the replacement, or None to keep it.
        unescape: True for the text a tool receives (``$${`` becomes ``${``);
            False to keep every escape as written (a rewrite whose output is
            resolved again later: an HTN expansion, a decomposition).
    """

    def sub(m: re.Match[str]) -> str:
        run, body = m.group(1), m.group(2)
        pairs, opens = divmod(len(run), 2)
        dollars = "$" * pairs if unescape else "$$" * pairs
        if not opens or body is None:  # a literal "{...", or an unclosed "${"
            return dollars + "$" * opens + m.group(0)[len(run) :]
        written = "${" + body + "}"
        out = fn(_parse_ref(body), written)
        return dollars + (written if out is None else out)

    return _TOKEN.sub(sub, text)


def iter_references(value: Any) -> Iterator[tuple[str, Reference | None]]:
    """Yields (text, reference or None when malformed) for every ``${...}`` in value.

    An escaped ``$${...}`` is literal text, never yielded; an unclosed ``${`` is
    yielded as malformed (it would reach the tool as text). Walks without
    recursion and visits each container once, so deep nesting or a container
    inside itself (an HTN method's Python arguments) cannot blow the stack;
    such values are refused elsewhere before they are stored.
    """
    stack = [value]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if "${" not in v:
                continue
            for m in _TOKEN.finditer(v):
                if len(m.group(1)) % 2 == 0:
                    continue  # $${: a literal
                body = m.group(2)
                if body is None:
                    yield v[m.end(1) - 1 :][:60], None
                else:
                    yield "${" + body + "}", _parse_ref(body)
        elif isinstance(v, dict | list | tuple):
            if id(v) in seen:
                continue
            seen.add(id(v))
            items = list(v.values()) if isinstance(v, dict) else list(v)
            stack.extend(reversed(items))  # keep document order
