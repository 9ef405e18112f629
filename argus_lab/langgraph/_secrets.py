"""The values of secret env vars kept out of LangGraph records, as references.

A graph resumes from its checkpoints, so masking a secret in them would hand
the resumed graph "***". Instead the codec (``_codec.py``) stores a string
value that holds the value of a secret-named env var (``OPENAI_API_KEY``,
``GH_TOKEN``: ``redact.SECRET_NAME``, less names that only say AUTHOR) as a
template, ``{"$": "secret", "v": template}``, in which the value reads
``${env.NAME}`` and every other ``$`` reads ``$$``. Bytes holding one (ASCII)
are kept as such a template of their Latin-1 text. Only value positions are
rewritten (state values, writes, metadata, interrupts, an error's message),
never a record's structure (channel and node names). Finding the values and
the templates' syntax are shared with typed states (``_redact_refs.py``).

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

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from argus_lab._redact_refs import (
    SecretUnsetError,
    Snapshot,
    fill,
    secret_env,
    show,
    unset_error,
)
from argus_lab.langgraph._record import REFS_VERSION, lg_encode

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
_REVEAL: ContextVar[str | None] = ContextVar("argus_lg_reveal", default=None)
"""While revealing: what is read ("LangGraph thread 't1'"), for errors."""
_PASS: ContextVar[Pass | None] = ContextVar("argus_lg_pass", default=None)
_VIEW: ContextVar[bool] = ContextVar("argus_lg_view", default=False)


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
    if not look.hit and not snap.in_text(text):
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
        return show(template)

    def unset(name: str) -> SecretUnsetError:
        return unset_error(f"{what}: its checkpoint", name, "graph", "the checkpoint")

    return fill(template, unset)
