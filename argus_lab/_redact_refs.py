"""The values of secret env vars, found in text and kept as references to them.

Stores that must give a program back what it wrote (a LangGraph checkpoint,
``langgraph/_secrets.py``; a typed state, ``store/state_secrets.py``) cannot
mask a secret: they store a string value that holds the value of a
secret-named env var (``OPENAI_API_KEY``, ``GH_TOKEN``: ``redact.SECRET_NAME``,
less names that only say AUTHOR) as a template, ``{"$": "secret", "v":
template}``, in which the value reads ``${env.NAME}`` and every other ``$``
reads ``$$`` (``Snapshot.hide``). ``fill`` puts the values back from the
environment for a program; ``show`` gives the text a person reads, with
``${env.NAME}`` in their place, and needs no variable.

Not a secret here: a value shorter than ``_redact_given.MIN_LEN``, a word
(letters only, under 16: AUTH_MODE=session), or the path of a file or folder
that exists (SSH_AUTH_SOCK: another shell's would differ).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from argus_lab._redact_given import MIN_LEN
from argus_lab.errors import SecretUnsetError
from argus_lab.redact import SECRET_NAME

__all__ = [
    "TAG",
    "SecretUnsetError",
    "Snapshot",
    "fill",
    "secret_env",
    "show",
    "unset_error",
]

TAG = "$"
"""The key of a tagged value: ``{"$": "secret", "v": template}``."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REF = re.compile(r"\$\$|\$\{env\.([A-Za-z_][A-Za-z0-9_]*)\}")


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

    def __init__(self, seen: dict[str, str], older: Snapshot | None = None) -> None:
        self.seen = seen  # name -> value, every secret-named variable
        self.names = {
            v: k
            for k, v in sorted(seen.items())
            if len(v) >= MIN_LEN
            and _NAME.fullmatch(k)
            and not _a_path(v)
            and not _a_word(v)
        }
        if older is not None:
            # Values a variable had before (a token refreshed since): hidden
            # too, as a reference to the variable, which reads its new value.
            for v, k in older.names.items():
                self.names.setdefault(v, k)
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

    def in_text(self, text: str) -> bool:
        """Whether JSON ``text`` may hold a value: one substring test each."""
        return any(f in text for f in self.forms)

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


def show(template: str) -> str:
    """A stored template as a person reads it: ``${env.NAME}`` for a value."""
    return _REF.sub(lambda m: "$" if m.group(1) is None else m.group(), template)


def unset_error(holder: str, var: str, user: str, again: str) -> SecretUnsetError:
    """The error for a reference to ``var``, which this process does not set:
    ``holder`` holds it ("state s1"), ``user`` goes on with its value ("program"),
    ``again`` is what to read again ("the state")."""
    return SecretUnsetError(
        f"{holder} holds the value of the env var {var}, which Argus stored as "
        f"a reference to it (secrets are never stored), and {var} is not set in "
        f"this process: set it (to the value the {user} should go on with) and "
        f"read {again} again"
    )


def fill(
    template: str,
    unset: Callable[[str], SecretUnsetError],
    environ: Mapping[str, str] | None = None,
) -> str:
    """A stored template with its values put back from the environment (or
    ``environ``); ``unset(name)`` is the error to raise for a variable that
    is not set."""
    env = os.environ if environ is None else environ

    def value(m: re.Match[str]) -> str:
        name = m.group(1)
        if name is None:
            return "$"
        got = env.get(name)
        if got is None:
            raise unset(name)
        return got

    return _REF.sub(value, template)
