"""The values of secret env vars kept out of LangGraph records, as references.

A graph resumes from its checkpoints, so masking a secret in them would hand
the resumed graph "***". Instead the codec (``_codec.py``) stores a string
value that holds the value of a secret-named env var (``OPENAI_API_KEY``,
``GH_TOKEN``: ``redact.SECRET_NAME``, less names that only say AUTHOR) as a
template, ``{"$": "secret", "v": template}``, in which the value reads
``${env.NAME}`` and every other ``$`` reads ``$$``. Bytes holding one (ASCII)
are kept as such a template of their Latin-1 text. Only value positions are
rewritten (state values, writes, metadata, interrupts, an error's message),
never a record's structure (channel and node names).

What the saver reads back for a graph (``get_tuple``, ``list``, so
``get_state`` too) has the values put back from the environment, which must
then hold the variable (``SecretUnsetError`` otherwise). Every other reader
(the analysis frames, the thread view) gets the template; a session's status
reason shows ``${env.NAME}`` (``Snapshot.shown``); a UUID, Path or enum
holding one reads there as that text. A variable whose value is the path of
a file or folder that exists (``SSH_AUTH_SOCK``) is left alone: a graph
resumed from another shell would get that shell's path. Reads for a view
(``viewing``: the thread view, the widget) keep the references even where the
saver reads for a graph, so a view works without the variables.

Not covered, and stored as committed: values given only as ``secrets=[...]``
elsewhere and key-shaped strings no env var holds (a resumed graph could not
get them back), a secret's encoded forms (base64 and the like), a
non-ASCII secret inside bytes, and a number equal to a numeric secret.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from argus_lab._redact_given import MIN_LEN
from argus_lab.errors import ArgusError
from argus_lab.langgraph._record import REFS_VERSION, lg_encode
from argus_lab.redact import SECRET_NAME

__all__ = [
    "Pass",
    "SecretUnsetError",
    "Snapshot",
    "current_pass",
    "encoded",
    "reveal",
    "revealing",
    "revealing_now",
    "secret_env",
    "viewing",
]

T = TypeVar("T")
V = TypeVar("V")
TAG = "$"  # (the codec's)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REF = re.compile(r"\$\$|\$\{env\.([A-Za-z_][A-Za-z0-9_]*)\}")
_REVEAL: ContextVar[str | None] = ContextVar("argus_lg_reveal", default=None)
"""While revealing: what is read ("LangGraph thread 't1'"), for errors."""
_PASS: ContextVar[Pass | None] = ContextVar("argus_lg_pass", default=None)
_VIEW: ContextVar[bool] = ContextVar("argus_lg_view", default=False)


class SecretUnsetError(ArgusError):
    """A checkpoint holds the value of an env var this process does not set."""


def _secret_name(name: str) -> bool:
    # GIT_AUTHOR_NAME is no secret; HTTP_AUTHORIZATION is.
    return SECRET_NAME.search(_AUTHOR.sub("", name.upper())) is not None


_AUTHOR = re.compile(r"AUTHOR(?!IZ)")


def _a_word(v: str) -> bool:
    """Whether ``v`` is a word, not a secret (AUTH_MODE=session): letters
    only, under 16 of them. A reference would stand for every "session" in a
    state, and a shell without the variable could not read it back."""
    return v.isalpha() and len(v) < 16


def _a_path(v: str) -> bool:
    """Whether ``v`` names a file or folder that exists (SSH_AUTH_SOCK): no
    secret, and another shell's would differ. A key that merely starts with
    "/" (base64 does, one in 64) is still one."""
    return v[0] in "/~" and os.path.exists(os.path.expanduser(v))


class Snapshot:
    """The secret env values at one moment: value -> name, and the regexes
    that find them. Never changed once made (threads share it)."""

    def __init__(self, seen: dict[str, str]) -> None:
        self.seen = seen  # name -> value, every secret-named variable
        self.names = {
            v: k
            for k, v in sorted(seen.items())
            if len(v) >= MIN_LEN
            and _NAME.fullmatch(k)
            and not _a_path(v)
            and not _a_word(v)
        }
        values = sorted(self.names, key=len, reverse=True)  # a longer one whole
        alts = [re.escape(v) for v in values]
        self.find = re.compile("|".join(alts)) if alts else None
        self._sub = re.compile("|".join([*alts, r"\$"])) if alts else None
        self.ascii = [v.encode() for v in values if v.isascii()]
        # Each value as JSON text writes it (quotes and backslashes escaped).
        self.forms = [json.dumps(v, ensure_ascii=False)[1:-1] for v in values]

    def hide(self, s: str) -> Any:
        """``s``, or its template tagged as a secret if it holds a value."""
        if self.find is None or self.find.search(s) is None:
            return s
        assert self._sub is not None
        names = self.names

        def ref(m: re.Match[str]) -> str:
            got = m.group()
            return "$$" if got == "$" else "${env." + names[got] + "}"

        return {TAG: "secret", "v": self._sub.sub(ref, s)}

    def shown(self, text: str) -> str:
        """``text`` for a person to read: each value as ``${env.NAME}``."""
        if self.find is None:
            return text
        return self.find.sub(lambda m: "${env." + self.names[m.group()] + "}", text)

    def in_bytes(self, b: bytes | bytearray) -> bool:
        return any(v in b for v in self.ascii)


class _Env:
    """os.environ's secret-named variables, looked at again when it changed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state: tuple[frozenset[Any], Snapshot] = (frozenset(), Snapshot({}))
        """(the names it was made from, the snapshot): one attribute, so a
        thread reading it never pairs one's names with another's values."""

    def current(self) -> Snapshot:
        env = os.environ
        # The set of names (bytes, in C: ~1 us), then the secret values only.
        keys = frozenset(getattr(env, "_data", ()))
        known, snap = self.state
        if (
            keys
            and keys == known
            and all(env.get(k) == v for k, v in snap.seen.items())
        ):
            return snap
        with self.lock:
            snap = Snapshot({k: v for k, v in env.items() if _secret_name(k)})
            self.state = (keys, snap)
        return snap


_ENV = _Env()


def secret_env() -> Snapshot:
    """The secret env values now."""
    return _ENV.current()


class Pass:
    """One encoding of a record: looking for secrets, or hiding them."""

    def __init__(self, snap: Snapshot, hide: bool) -> None:
        self.snap = snap
        self.hide = hide
        self.hit = False
        """Bytes holding a secret were met (their base64 hides it from a look
        at the JSON text)."""


def current_pass() -> Pass | None:
    """The encoding ``encoded`` is making (None: no secret to look for)."""
    return _PASS.get()


def encoded(
    snap: Snapshot, build: Callable[[], T], record: Callable[[T], Any]
) -> tuple[T, str]:
    """``build()`` (which encodes values with the codec) and the stored text of
    ``record(...)`` (its JSON data), built again with the strings that hold a
    secret env value of ``snap`` as references if the first one held one (a
    record version 2: ``_record.REFS_VERSION``). The look is one substring
    test per value over the text the record is stored as anyway."""
    if snap.find is None:
        out = build()
        return out, lg_encode(record(out))
    with _set(_PASS, look := Pass(snap, hide=False)):
        out = build()
    text = lg_encode(record(out))
    if not look.hit and not any(f in text for f in snap.forms):
        return out, text
    with _set(_PASS, Pass(snap, hide=True)):
        out = build()
    return out, lg_encode(record(out), REFS_VERSION)


def revealing(what: str) -> AbstractContextManager[None]:
    """Secrets read inside this block are put back from the environment
    (unless a view reads: ``viewing``); ``what`` is read, for errors."""
    return _set(_REVEAL, None if _VIEW.get() else what)


def viewing() -> AbstractContextManager[None]:
    """Reads inside this block are a view's (the thread view, the widget):
    secrets stay references even where the saver reads for a graph, so a view
    works in a process without the variables. Nothing read so may be written
    back: a graph's own reads (invoke, update_state) must not run inside."""
    return _set(_VIEW, True)


@contextmanager
def _set(var: ContextVar[V], value: V) -> Iterator[None]:
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def revealing_now() -> bool:
    """Whether values read now are put back (``revealing``)."""
    return _REVEAL.get() is not None


def reveal(template: str) -> str:
    """A stored template's text: its values put back while ``revealing``,
    else as a person reads it, with ``${env.NAME}`` in their place."""
    what = _REVEAL.get()
    if what is None:
        return _REF.sub(lambda m: "$" if m.group(1) is None else m.group(), template)

    def value(m: re.Match[str]) -> str:
        name = m.group(1)
        if name is None:
            return "$"
        got = os.environ.get(name)
        if got is None:
            raise SecretUnsetError(
                f"{what}: its checkpoint holds the value of the env var {name}, "
                "which Argus stored as a reference to it (secrets are never "
                f"stored), and {name} is not set in this process: set it (to the "
                "value the graph should go on with) and read the checkpoint again"
            )
        return got

    return _REF.sub(value, template)
