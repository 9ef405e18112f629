"""The values of secret env vars kept out of LangGraph records, as references.

A graph resumes from its checkpoints, so masking a secret in them would hand
the resumed graph "***". Instead, a string that holds the value of a
secret-named env var (``OPENAI_API_KEY``, ``GH_TOKEN``: ``redact.SECRET_NAME``)
is stored as a template in which the value reads ``${env.NAME}`` and a literal
``${`` reads ``$${`` (as in plans): ``{"$": "secret", "v": template}``. What
the saver reads back for a graph (``get_tuple``, ``list``, so ``get_state``
too) has the values put back from the environment, which must then hold the
variable (``SecretUnsetError`` otherwise). Every other reader (the analysis
frames, the thread view) gets the template, which holds no secret.

A variable whose value is a path (``SSH_AUTH_SOCK=/tmp/ssh-...``: it starts
with "/" or "~") is no secret here: a reference would hand a graph resumed
from another shell that shell's path.

Not covered, and stored as committed: values given only as ``secrets=[...]``
elsewhere and key-shaped strings no env var holds (a resumed graph could not
get them back), and a secret's encoded forms (base64 and the like).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from argus_lab._redact_given import MIN_LEN
from argus_lab.errors import ArgusError
from argus_lab.redact import SECRET_NAME

__all__ = ["SecretUnsetError", "hidden", "reveal", "revealing", "secret_env"]

TAG = "$"  # (the codec's)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REF = re.compile(r"\$\$\{|\$\{env\.([A-Za-z_][A-Za-z0-9_]*)\}")
_REVEAL: ContextVar[bool] = ContextVar("argus_lg_reveal", default=False)


class SecretUnsetError(ArgusError):
    """A checkpoint holds the value of an env var this process does not set."""


class _Env:
    """os.environ's secret-named variables, read again only when it changed."""

    def __init__(self) -> None:
        self.size = -1
        self.seen: dict[str, str] = {}
        self.pattern: re.Pattern[str] | None = None
        self.names: dict[str, str] = {}  # value -> name
        self.forms: list[str] = []  # each value as JSON text writes it

    def current(self) -> _Env:
        env = os.environ
        if self.size != len(env) or any(env.get(k) != v for k, v in self.seen.items()):
            self.size = len(env)
            self.seen = {k: v for k, v in env.items() if SECRET_NAME.search(k)}
            self.names = {
                v: k
                for k, v in sorted(self.seen.items())
                if len(v) >= MIN_LEN and _NAME.fullmatch(k) and v[0] not in "/~"
            }
            # Longest first: a value inside another is not split.
            values = sorted(self.names, key=len, reverse=True)
            self.forms = [json.dumps(v, ensure_ascii=False)[1:-1] for v in values]
            alts = [re.escape(v) for v in values]
            self.pattern = re.compile("|".join([*alts, r"\$\{"])) if alts else None
        return self


_ENV = _Env()


def secret_env() -> _Env:
    """The secret env values now (looked at again once per transaction: a
    look costs ~1 us per secret-named variable)."""
    return _ENV.current()


def hidden(data: Any, text: str, env: _Env) -> Any | None:
    """``data`` (JSON-ready; ``text`` is its JSON) with every value of ``env``
    (``secret_env()``) made a reference; None when ``text`` holds none (the
    common case: one substring test per secret)."""
    if env.pattern is None or not any(f in text for f in env.forms):
        return None
    return _walk(data, env.pattern, env.names)


def _walk(x: Any, pattern: re.Pattern[str], names: dict[str, str]) -> Any:
    if type(x) is str:
        if not any(v in x for v in names):
            return x

        def ref(m: re.Match[str]) -> str:
            s = m.group()
            return "$${" if s == "${" else "${env." + names[s] + "}"

        return {TAG: "secret", "v": pattern.sub(ref, x)}
    if type(x) is list:
        return [_walk(v, pattern, names) for v in x]
    if type(x) is dict:
        if any(type(k) is str and any(v in k for v in names) for k in x):
            # A key cannot be a tagged object: the codec's form for such dicts.
            pairs = [
                [_walk(k, pattern, names), _walk(v, pattern, names)]
                for k, v in x.items()
            ]
            return {TAG: "dict", "v": pairs}
        return {k: _walk(v, pattern, names) for k, v in x.items()}
    return x


@contextmanager
def revealing() -> Iterator[None]:
    """Secrets read inside this block are put back from the environment."""
    token = _REVEAL.set(True)
    try:
        yield
    finally:
        _REVEAL.reset(token)


def reveal(template: str) -> str:
    """A stored template's text: its values put back while ``revealing``,
    else the template itself (which holds no secret)."""
    if not _REVEAL.get():
        return template

    def value(m: re.Match[str]) -> str:
        name = m.group(1)
        if name is None:
            return "${"
        got = os.environ.get(name)
        if got is None:
            raise SecretUnsetError(
                f"this LangGraph checkpoint holds the value of the env var {name}, "
                "which Argus stored as a reference to it (secrets are never "
                f"stored), and {name} is not set in this process: set it (to the "
                "value the graph should go on with) and read the checkpoint again"
            )
        return got

    return _REF.sub(value, template)
