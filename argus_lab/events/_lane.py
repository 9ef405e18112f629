"""Plain event kinds, made and dumped without pydantic building their classes.

Event classes are built on first use (``defer_build``), and building one costs
~0.4 ms, nearly all of it pydantic generating a core schema in Python (a
schema for each of ~9 fields, by introspecting their annotations). Most kinds
have only plain fields (str, int, float, bool, None, Literal, and lists or
dicts of those). For those kinds this module does without the build:

- **Made**: when every value handed in already has its field's exact type
  (``str`` for a ``str`` field, a literal's own value), pydantic's validation
  would return each one unchanged, so ``Lane.build`` makes the instance
  directly, as ``model_construct`` does (a dict of the fields in their order,
  the set of those given, no extra, no private). Any other value (an ``int``
  for a ``float`` field, a string for an ``int``, a list) goes through a
  validator compiled from a written core schema (pydantic-core's
  ``SchemaValidator``, public API): the same coercions and the same errors as
  the class's own build.
- **Dumped**: a plain kind's fields hold plain JSON values, which
  ``pydantic_core.to_json`` writes exactly as the class's serializer does
  (non-finite floats as null, as pydantic's default ``ser_json_inf_nan``).
- **Compiled when it pays**: a kind's schema is compiled (validator and
  serializer) the first time a value needs the validator, or once
  ``EXACT_MAKES`` events of it were made; from then on it makes and dumps
  them. Compiling the four kinds a run writes costs a fresh process ~0.5 ms of
  CPU (cold code of pydantic-core, ~2M instructions: ~3-4% of a 100-step
  run), and making an event in Python ~0.35 us more than the compiled
  validator: a short run is cheaper without the schemas, a long one with them.

``test_event_lane`` compares both, value by value, with the class's own
build. The classes themselves stay deferred: whatever else asks one for its
schema (``model_dump``, ``model_validate``) builds it as before.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel
from pydantic_core import (
    PydanticUndefined,
    SchemaSerializer,
    SchemaValidator,
    to_json,
)
from pydantic_core import core_schema as cs

from argus_lab.events._base import EventBase

__all__ = ["EXACT_MAKES", "Lane", "lane_of"]

EXACT_MAKES = 128
"""Events of a kind made from exact values before its schema is compiled.

Made in Python, a step's ``task_started`` costs ~1.2 us against ~0.85 us
validated by the compiled schema, and compiling a kind's schema costs a
fresh process ~0.1-0.15 ms of CPU (cold code of pydantic-core): a short run
is cheaper without it, a long one with it. 128 events cost at most ~0.05 ms
more than validated ones.
"""

_SCALARS: dict[Any, Any] = {
    str: cs.str_schema,
    int: cs.int_schema,
    float: cs.float_schema,
    bool: cs.bool_schema,
}
_Exact = tuple[frozenset[type], frozenset[Any]]
"""The value types validation returns unchanged; the literals, as (type, value)."""
_SCALAR_EXACT: dict[Any, _Exact] = {
    t: (frozenset({t}), frozenset()) for t in (str, int, float, bool)
}
_LITERAL_TYPES = (str, int, bool)
_IMMUTABLE = (type(None), str, int, float, bool)

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
_new = object.__new__
_set = object.__setattr__


class Lane:
    """A plain event kind: made from exact values directly, else validated by
    a schema compiled on first need; dumped by pydantic-core."""

    __slots__ = (
        "checker",
        "cls",
        "defaults",
        "factories",
        "literals",
        "made",
        "required",
        "serializer",
        "types",
    )

    def __init__(self, cls: type[EventBase], fields: dict[str, _Field]) -> None:
        self.cls = cls
        self.checker: SchemaValidator | None = None
        """The compiled validator (``compile``); None until then."""
        self.serializer: SchemaSerializer | None = None
        """The compiled serializer (``compile``); None until then."""
        self.made = 0
        # Field -> the value types validation returns unchanged; the literal
        # values it accepts as (type, value) (True == 1, so the type too).
        self.types = {k: f.types for k, f in fields.items()}
        self.literals = {k: f.literals for k, f in fields.items() if f.literals}
        self.required = frozenset(k for k, f in fields.items() if f.required)
        self.factories = tuple((k, f.factory) for k, f in fields.items() if f.factory)
        # Every field in order (a required one's placeholder is overwritten);
        # None: a default that is not an immutable scalar, which build leaves
        # to the validator (pydantic's handling of those is its own).
        self.defaults: dict[str, Any] | None = {}
        for k, f in fields.items():
            if not isinstance(f.default, _IMMUTABLE):
                self.defaults = None
                break
            self.defaults[k] = f.default

    def build(self, fields: dict[str, Any]) -> EventBase | None:
        """The event, if every value already has its field's exact type (what
        validation would return unchanged); None: the validator decides."""
        defaults = self.defaults
        if defaults is None or self.made >= EXACT_MAKES:
            return None
        if not self.required <= fields.keys():
            return None
        kinds = self.types
        for k, v in fields.items():
            t = type(v)
            allowed = kinds.get(k)
            if allowed is None:  # a key no field has: the validator keeps it
                return None
            if t in allowed:
                continue
            lit = self.literals.get(k)
            if lit is None or t not in _LITERAL_TYPES or (t, v) not in lit:
                return None
        values = defaults.copy()
        values.update(fields)
        for k, factory in self.factories:
            if k not in fields:
                values[k] = factory()
        self.made += 1  # (threads may race here: a count, not a limit)
        event: EventBase = _new(self.cls)
        _set(event, "__dict__", values)
        _set(event, "__pydantic_fields_set__", set(fields))
        _set(event, "__pydantic_extra__", {})
        _set(event, "__pydantic_private__", None)
        return event

    def compile(self) -> SchemaValidator:
        """The kind's validator, compiled from its written schema, with its
        serializer (``checker``, ``serializer``: ``build`` makes no more)."""
        if self.checker is None:
            schema = _model_schema(self.cls)
            self.serializer = SchemaSerializer(schema)
            self.checker = SchemaValidator(schema)
        return self.checker

    @staticmethod
    def dump(event: EventBase) -> bytes:
        """``event.model_dump_json()``, as bytes, without the compiled
        serializer (``dump_event`` uses that one once there is one)."""
        extra = event.__pydantic_extra__
        values = {**event.__dict__, **extra} if extra else event.__dict__
        return to_json(values, inf_nan_mode="null")


class _Field:
    """What ``Lane.build`` needs of one field."""

    __slots__ = ("default", "factory", "literals", "required", "types")

    def __init__(self, found: _Exact, default: Any, factory: Any) -> None:
        self.types, self.literals = found
        self.required = default is PydanticUndefined and factory is None
        self.default = None if self.required or factory is not None else default
        self.factory = factory


def _exact(annotation: Any) -> _Exact | None:
    """For a plain annotation, the value types validation returns unchanged
    and its literal values as (type, value); None for anything else (the
    same annotations ``_schema`` refuses)."""
    if type(annotation) is type:
        return _SCALAR_EXACT.get(annotation)
    if typing.get_origin(annotation) is Literal:  # one per kind: not cached
        # (and typing hashes a Literal slowly, from all its values each time)
        args = typing.get_args(annotation)
        if all(type(a) in _LITERAL_TYPES for a in args):
            return frozenset(), frozenset((type(a), a) for a in args)
        return None
    return _exact_of(annotation)


@functools.cache  # the common fields' annotations recur in every kind
def _exact_of(annotation: Any) -> _Exact | None:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        inner = [_exact(a) for a in rest]
        if not rest or any(i is None for i in inner):
            return None
        kinds = frozenset().union(*(i[0] for i in inner if i is not None))
        literals = frozenset().union(*(i[1] for i in inner if i is not None))
        if len(rest) < len(args):
            kinds |= {type(None)}
        return kinds, literals
    if origin is list or (origin is dict and args[0] is str):
        # Plain, but its items are the validator's to check.
        return None if _schema(annotation) is None else (frozenset(), frozenset())
    return None


@functools.cache
def _schema(annotation: Any) -> cs.CoreSchema | None:
    """The core schema of a plain annotation; None for anything else."""
    if annotation in _SCALARS:
        return _SCALARS[annotation]()  # type: ignore[no-any-return]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal and all(type(a) in _LITERAL_TYPES for a in args):
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
    fields: dict[str, _Field] = {}
    for name, info in cls.model_fields.items():
        found = _exact(info.annotation)  # (hashable: types, unions, Literal)
        if found is None or info.metadata or info.exclude or info.frozen:
            return None
        if info.alias or info.validation_alias or info.serialization_alias:
            return None
        fields[name] = _Field(found, info.default, info.default_factory)
    return Lane(cls, fields)


def _model_schema(cls: type[EventBase]) -> cs.CoreSchema:
    """The written core schema of a plain kind (``lane_of`` said it is one)."""
    fields: dict[str, cs.ModelField] = {}
    for name, info in cls.model_fields.items():
        annotation: Any = info.annotation
        schema = _schema(annotation)
        assert schema is not None
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
    return cs.model_schema(cls, inner, config=config, ref=name)
