"""Arguments that need no validation: plain scalars of exactly the declared type.

A tool's inputs are validated by a pydantic model built from its signature
(``Tool.input_model``). Building that model costs 0.3-0.5 ms, once per tool and
process, and is part of the first run of every fresh process (a script, a CLI
resume, a benchmark's child); each validation then costs a few microseconds
per call. For the common tool whose parameters are ``str``, ``int``, ``float``
or ``bool`` and whose arguments are already values of exactly those types,
the model would hand back the very same values: those calls skip it. Anything
else (a coercion such as ``"4"`` for an ``int``, a missing or unknown key, a
richer annotation) goes to the model as before, which also words the errors.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PlainFields", "plain_fields", "plain_kwargs"]

_SCALARS = (str, int, float, bool)
_DEFAULTS = (str, int, float, bool, type(None))

PlainFields = tuple[frozenset[str], dict[str, type], dict[str, Any]]
"""(required names, name -> exact type, optional name -> default)."""


def plain_fields(fields: dict[str, tuple[Any, Any]], extra: bool) -> PlainFields | None:
    """The plain shape of a signature's fields (``Tool._fields``), or None if
    some field is not a plain scalar (or ``**kwargs`` takes extra keys)."""
    if extra:
        return None
    types: dict[str, type] = {}
    defaults: dict[str, Any] = {}
    for name, (ann, default) in fields.items():
        if ann not in _SCALARS:
            return None
        types[name] = ann
        if default is not ...:
            if type(default) not in _DEFAULTS:  # a mutable default: the model's
                return None
            defaults[name] = default
    return frozenset(types.keys() - defaults.keys()), types, defaults


def plain_kwargs(
    shape: PlainFields | None, args: dict[str, Any]
) -> dict[str, Any] | None:
    """The call's keyword arguments if ``args`` need no validation, else None."""
    if shape is None:
        return None
    required, types, defaults = shape
    for name, value in args.items():
        # Exactly the type: no bool for an int, no int for a float (coerced).
        if types.get(name) is not type(value):
            return None
    if not required.issubset(args.keys()):
        return None
    return {**defaults, **args}
