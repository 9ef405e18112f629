"""The secret values a user hands in (``secrets=[...]``, ``${env.NAME}``):
checked, counted, and known to this process (``redact.py``)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

__all__ = [
    "KNOWN",
    "MIN_LEN",
    "check_secrets",
    "count_secrets",
    "known_secrets",
    "masked_strings",
]

MIN_LEN = 6  # shorter env values ("1", "true") are not worth masking everywhere
KNOWN: set[str] = set()
"""Secret values handed to any redactor of this process (see known_secrets)."""


def check_secrets(secrets: Iterable[object], reserved: Collection[str] = ()) -> None:
    """Refuses ``secrets=`` values a redactor could not mask as asked: not a
    list of strings, shorter than it masks (they were silently ignored), or
    one of the ``reserved`` words the session's own rows are made of, or part
    of one (masked there, they made the session unreadable). The errors never
    show the value.

    Raises:
        TypeError: ``secrets`` is one string, or holds something else.
        ValueError: a value is too short or is one of the rows' words.
    """
    if isinstance(secrets, str | bytes):
        raise TypeError(
            "secrets= takes a list of secret values, not one string (each of "
            "its characters would be a secret): secrets=[value]"
        )
    for i, v in enumerate(secrets):
        where = f"secrets=[...]: value {i + 1}"
        if not isinstance(v, str):
            raise TypeError(f"{where} is a {type(v).__name__}, not a string")
        if v and len(v) < MIN_LEN:
            raise ValueError(
                f"{where} has {len(v)} characters; a secret shorter than "
                f"{MIN_LEN} cannot be masked (it would mask ordinary text "
                "everywhere), so it would be stored as it is: pass the whole "
                "secret, or keep so short a value out of what tasks return"
            )
        if any(v in w for w in reserved):
            raise ValueError(
                f"{where} ({len(v)} characters) is one of the words Argus's own "
                "records are made of, or part of one (a task status, a field "
                "name, an event kind, the mask [REDACTED]): masking it there "
                "would make the session unreadable. A word like this is no "
                "secret; pass the secret itself"
            )


def count_secrets(secrets: Iterable[str]) -> int:
    """How many distinct values of ``secrets`` a redactor would mask."""
    return len({v for v in secrets if v and len(v) >= MIN_LEN})


def known_secrets() -> tuple[str, ...]:
    """Every secret value handed to a redactor of this process so far (a
    session's ``secrets=``, values read through ``${env.NAME}``), for code that
    writes outside a session and holds no session's redactor: a recording of
    model requests and replies sees the prompts those values went into."""
    return tuple(KNOWN.copy())  # copy(): atomic while another thread adds


def masked_strings(data: Any) -> Any:
    """JSON ``data`` with this process's known secrets and key shapes masked
    in every string, keys included; nothing masked for a key's name, so a
    hash over it moves only for a secret (``ModelRequest.hash``)."""
    from argus_lab.redact import Redactor  # (redact imports this module)

    mask = Redactor(known_secrets()).text

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {mask(k): walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return mask(v) if isinstance(v, str) else v

    return walk(data)
