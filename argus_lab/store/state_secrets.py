"""The values of secret env vars kept out of a typed state's files, as references.

A program reads its state back to go on with it, so a secret in it cannot be
masked. A commit whose document holds the value of a secret-named env var
(``_redact_refs.py``: ``OPENAI_API_KEY``, ``GH_TOKEN``) stores it in its
*stored form*: each string value holding one is ``{"$": "secret", "v":
template}`` (``${env.NAME}`` for the value, ``$$`` for any other ``$``), and
each dict key starting with ``$`` gets one more ``$`` in front, so the only
key ``"$"`` in it is a tag's. A document holding no value is stored as it is
(the stored form is then the document itself, as before references).

``revealed`` turns a stored form back into the document, the values put back
from the environment (``SecretUnsetError`` naming a variable that is not set);
``shown`` turns it into what a person reads, ``${env.NAME}`` in place of each
value, with no variable needed.

Keys are the document's structure (JSON Patch paths, the fields ``history()``
lists as changed): a dict key holding a secret's value is refused
(``SecretInKeyError``), never stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from argus_lab._redact_refs import (
    TAG,
    SecretUnsetError,
    Snapshot,
    fill,
    secret_env,
    show,
    unset_error,
)
from argus_lab.errors import ArgusError
from argus_lab.store.state_records import dumps

__all__ = [
    "SecretInKeyError",
    "revealed",
    "schema_kept",
    "shown",
    "stored",
    "viewed",
]


class SecretInKeyError(ArgusError, ValueError):
    """A dict key of a state holds the value of a secret env var; nothing was
    written (keys are structure, never stored as references)."""


def stored(snap: Snapshot, doc: Any, text: str, name: str) -> tuple[Any, str] | None:
    """The stored form of ``doc`` (JSON data) and its text, or None when it
    holds no secret value of ``snap`` (then ``doc`` and ``text`` are stored).
    The look is one substring test per value over ``text``.

    Raises:
        SecretInKeyError: a dict key holds a value.
    """
    if snap.find is None or not snap.in_text(text):
        return None
    out = _hide(snap, doc, "", name)
    return out, dumps(out)


def _hide(snap: Snapshot, x: Any, path: str, name: str) -> Any:
    t = type(x)
    if t is str:
        return snap.hide(x)
    if t is list:
        return [_hide(snap, v, f"{path}/{i}", name) for i, v in enumerate(x)]
    if t is not dict:
        return x
    find = snap.find
    assert find is not None
    out = {}
    for k, v in x.items():
        if find.search(k) is not None:
            raise SecretInKeyError(
                f"state {name}: the key {snap.shown(k)!r} at {path or '/'} holds "
                "the value of a secret env var; keys are the state's structure "
                "(patch paths, history) and are not stored as references, so "
                "nothing was written. Keep the secret in a value instead"
            )
        p = f"{path}/{k}"
        out["$" + k if k[:1] == "$" else k] = _hide(snap, v, p, name)
    return out


def revealed(doc: Any, name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The document of a stored form, its values put back from the
    environment, or ``environ`` (new containers all the way down).

    Raises:
        SecretUnsetError: a variable it refers to is not set.
    """

    def unset(var: str) -> SecretUnsetError:
        return unset_error(f"state {name}", var, "program", "the state")

    return _walk(doc, lambda t: fill(t, unset, environ))


def shown(doc: Any) -> Any:
    """The document of a stored form as a person reads it: ``${env.NAME}`` in
    place of each value (no variable needed)."""
    return _walk(doc, show)


def _walk(x: Any, text: Any) -> Any:
    t = type(x)
    if t is list:
        return [_walk(v, text) for v in x]
    if t is not dict:
        return x
    if TAG in x:  # a tag: the only "$" key a stored form has
        v = x.get("v")
        if x[TAG] != "secret" or type(v) is not str:
            raise ValueError(f"unknown tag {x[TAG]!r} in a state's stored form")
        return text(v)
    return {(k[1:] if k[:1] == "$" else k): _walk(v, text) for k, v in x.items()}


def viewed(snap: Snapshot, doc: Any) -> Any:
    """A document with its values (not a stored form) as a view shows it:
    ``${env.NAME}`` in place of each value ``snap`` holds (new containers)."""
    return _strings(doc, snap.shown)


def _strings(x: Any, text: Any) -> Any:
    t = type(x)
    if t is str:
        return text(x)
    if t is list:
        return [_strings(v, text) for v in x]
    if t is dict:
        return {k: _strings(v, text) for k, v in x.items()}
    return x


def schema_kept(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """A model's JSON schema as a state's head keeps it: a field's default
    that holds a secret env value (``api_key: str = os.environ[...]``) reads
    ``${env.NAME}`` (a schema's defaults are read by no one)."""
    snap = secret_env()
    if schema is None or snap.find is None:
        return schema
    out: dict[str, Any] = viewed(snap, schema)
    return out
