"""Validators and serializers of plain event kinds, built without pydantic's
schema generation.

Event classes are built on first use (``defer_build``), and building one costs
~0.4 ms, nearly all of it pydantic generating a core schema in Python (a
schema for each of ~9 fields, by introspecting their annotations). A fresh
process's run built four (started, succeeded, resumed, session succeeded):
~1.6 ms of a 100-step run's ~14 ms of CPU. Most kinds have only plain fields
(str, int, float, bool, None, Literal, and lists or dicts of those), whose
core schema is a few lines of ``pydantic_core.core_schema``. For those kinds
this module writes that schema directly and compiles it (pydantic-core's
``SchemaValidator`` and ``SchemaSerializer``, public API, in Rust: ~0.03 ms a
kind). ``make_event`` validates with it and the store dumps with it: the same
instances of the same classes, the same checks and coercions, the same JSON
(``test_event_lane`` compares both with what the class's own build gives).

The classes themselves stay deferred: whatever else asks one for its schema
(``model_dump``, ``model_validate``) builds it as before.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel
from pydantic_core import PydanticUndefined, SchemaSerializer, SchemaValidator
from pydantic_core import core_schema as cs

from argus_lab.events._base import EventBase

__all__ = ["Lane", "lane_of"]

_SCALARS: dict[Any, Any] = {
    str: cs.str_schema,
    int: cs.int_schema,
    float: cs.float_schema,
    bool: cs.bool_schema,
}


_CONFIG = {"defer_build": True, "extra": "allow"}
_DECORATORS = (
    "validators",
    "field_validators",
    "root_validators",
    "field_serializers",
    "model_serializers",
    "model_validators",
    "computed_fields",
)


class Lane:
    """A plain event kind's compiled validator and serializer."""

    __slots__ = ("serializer", "validator")

    def __init__(self, schema: cs.CoreSchema) -> None:
        self.validator = SchemaValidator(schema)
        self.serializer = SchemaSerializer(schema)


@functools.cache  # the common fields' annotations recur in every kind
def _schema(annotation: Any) -> cs.CoreSchema | None:
    """The core schema of a plain annotation; None for anything else."""
    if annotation in _SCALARS:
        return _SCALARS[annotation]()  # type: ignore[no-any-return]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal and all(type(a) in (str, int, bool) for a in args):
        return cs.literal_schema(list(args))
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        inner = [_schema(a) for a in rest]
        if not rest or any(s is None for s in inner):
            return None
        one = inner[0] if len(inner) == 1 else cs.union_schema(inner)  # type: ignore[arg-type]
        return cs.nullable_schema(one) if len(rest) < len(args) else one  # type: ignore[arg-type]
    if origin is list:
        item = _schema(args[0])
        return None if item is None else cs.list_schema(item)
    if origin is dict and args[0] is str:
        value = _schema(args[1])
        return None if value is None else cs.dict_schema(cs.str_schema(), value)
    return None


def lane_of(cls: type[EventBase]) -> Lane | None:
    """``cls``'s lane, or None when a field is not plain (its class's own
    build then serves it)."""
    # Only what is written here: no validators, serializers, computed fields,
    # aliases, constraints or settings beyond EventBase's, no __init__ or
    # model_post_init of its own.
    if cls.model_config != _CONFIG or any(
        getattr(cls.__pydantic_decorators__, k) for k in _DECORATORS
    ):
        return None
    init: object = cls.__init__
    if cls.__pydantic_post_init__ is not None or init is not BaseModel.__init__:
        return None
    fields: dict[str, cs.ModelField] = {}
    for name, info in cls.model_fields.items():
        annotation: Any = info.annotation  # (hashable: types, unions, Literal)
        schema = _schema(annotation)
        if schema is None or info.metadata or info.exclude or info.frozen:
            return None
        if info.alias or info.validation_alias or info.serialization_alias:
            return None
        if info.default_factory is not None:
            schema = cs.with_default_schema(
                schema,
                default_factory=info.default_factory,
            )
        elif info.default is not PydanticUndefined:
            schema = cs.with_default_schema(schema, default=info.default)
        fields[name] = cs.model_field(schema)
    name = cls.__name__
    config = cs.CoreConfig(title=name, extra_fields_behavior="allow")
    inner = cs.model_fields_schema(fields, model_name=name, extra_behavior="allow")
    return Lane(cs.model_schema(cls, inner, config=config, ref=name))
