"""A JSON codec for LangGraph channel values and writes: no pickle, no msgpack.

JSON's own types pass through unchanged (but for a string holding the value
of a secret env var, stored as a reference to it: ``_secrets.py``). Everything
else a LangGraph graph commonly keeps in its state is written as a small tagged
object ``{"$": tag, ...}``: tuples, sets, bytes, dates, UUIDs, Decimals, enums,
pydantic models (so LangChain messages), dataclasses (so ``Interrupt`` and
``Command``), ``Send`` and ``_DeltaSnapshot``. A dict that happens to use the
key ``"$"`` is escaped, so no user value is ever mistaken for a tag.

A value of any other type is refused with ``UnsafeValueError`` naming the channel
and the type: LangGraph's own serializer would fall back to pickle (or to
msgpack's constructor calls), and a checkpoint that needs pickle to load is one
that runs code on load.

Classes named in a record (models, dataclasses, enums) are imported by module and
qualified name on load, and only when they are such classes.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import importlib
import math
import pathlib
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from argus_lab.errors import ArgusError
from argus_lab.langgraph._secrets import Pass, current_pass, reveal, revealing_now

__all__ = ["StoredError", "UnsafeValueError", "decode", "encode"]

TAG = "$"


class UnsafeValueError(ArgusError, TypeError):
    """Raised when a value cannot be stored as JSON without pickle.

    Attributes:
        channel: The LangGraph channel (state key) the value was written to.
        type_name: The offending value's type, as ``module.Name``.
    """

    def __init__(self, channel: str, type_name: str, where: str = "") -> None:
        at = f" at {where}" if where else ""
        super().__init__(
            f"channel {channel!r}: cannot store a value of type {type_name}{at}: "
            "ArgusSaver keeps checkpoints as JSON and never pickles. Store JSON "
            "data, a pydantic model, a dataclass or a LangChain message instead "
            "(or convert this value in the node before returning it)"
        )
        self.channel = channel
        self.type_name = type_name


class StoredError(RuntimeError):
    """An exception read back from a checkpoint whose class is not a builtin.

    A node's error is stored as its class name and message (``__error__``
    writes); only builtin exception classes are rebuilt as themselves, so that
    loading a checkpoint never calls an arbitrary class's constructor.

    Attributes:
        type_name: The original class, as ``module:QualName``.
        message: The original ``str(error)``.
    """

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name.rpartition(':')[2]}: {message}")
        self.type_name = type_name
        self.message = message


def _path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _load_class(path: str) -> type:
    mod, _, qual = path.partition(":")
    obj: Any = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise TypeError(f"{path} is not a class")
    return obj


def _is_pydantic(obj: Any) -> bool:
    return hasattr(type(obj), "model_fields") and hasattr(obj, "model_dump")


_PLAIN = frozenset((bool, int, str))
"""Types stored as they are (exact types: a subclass goes through ``enc``)."""


_SCALARS = frozenset((bool, int))
"""``_PLAIN`` less str: what is stored as it is while secrets are hidden."""


class _Encoder:
    def __init__(self, channel: str, secrets: Pass | None) -> None:
        self.channel = channel
        self.secrets = secrets
        """Looking for secret env values (``_secrets.py``), or None."""
        self.hide = secrets.snap if secrets is not None and secrets.hide else None
        """Storing those values as references, or None."""
        self.plain = _PLAIN if self.hide is None else _SCALARS

    def refuse(self, obj: Any, where: str) -> UnsafeValueError:
        return UnsafeValueError(self.channel, _path(type(obj)).replace(":", "."), where)

    def enc(self, obj: Any, where: str = "") -> Any:
        t = type(obj)
        if t is str:
            return obj if self.hide is None else self.hide.hide(obj)
        if obj is None or t is bool or t is int:
            return obj
        if t is float:
            return obj if math.isfinite(obj) else {TAG: "float", "v": repr(obj)}
        if t is list:
            # Scalars are kept inline: a value's path is built only for what
            # may need it (an error message), not once per item.
            plain, hide = self.plain, self.hide
            return [
                v
                if type(v) in plain or v is None
                else hide.hide(v)
                if hide is not None and type(v) is str
                else self.enc(v, f"{where}[{i}]")
                for i, v in enumerate(obj)
            ]
        if t is dict:
            hide = self.hide
            if (
                TAG in obj
                or not all(type(k) is str for k in obj)
                or (hide is not None and any(type(hide.hide(k)) is dict for k in obj))
            ):
                return {
                    TAG: "dict",
                    "v": [
                        [self.enc(k, where), self.enc(v, f"{where}[{k!r}]")]
                        for k, v in obj.items()
                    ],
                }
            plain = self.plain
            return {
                k: v
                if type(v) in plain or v is None
                else hide.hide(v)
                if hide is not None and type(v) is str
                else self.enc(v, f"{where}[{k!r}]")
                for k, v in obj.items()
            }
        return self.enc_other(obj, where)

    def enc_other(self, obj: Any, where: str) -> Any:
        from langgraph.checkpoint.serde.types import _DeltaSnapshot
        from langgraph.types import Send

        if isinstance(obj, _DeltaSnapshot):
            return {TAG: "delta_snapshot", "v": self.enc(obj.value, where)}
        if isinstance(obj, Send):
            return {
                TAG: "send",
                "node": obj.node,
                "arg": self.enc(obj.arg, f"{where}.arg"),
                "timeout": self.enc(getattr(obj, "timeout", None), where),
            }
        if isinstance(obj, BaseException):
            # A node's error (``__error__``): kept as its class and message.
            cls = obj.type_name if isinstance(obj, StoredError) else _path(type(obj))
            msg = obj.message if isinstance(obj, StoredError) else str(obj)
            args = getattr(obj, "args", ())
            plain = all(type(a) in (str, int, float, bool) or a is None for a in args)
            out: dict[str, Any] = {TAG: "error", "cls": cls, "v": self.enc(msg)}
            if plain and not isinstance(obj, StoredError):
                out["args"] = [self.enc(a) for a in args]
            return out
        if isinstance(obj, enum.Enum):
            return {TAG: "enum", "cls": _path(type(obj)), "v": self.enc(obj.value)}
        # Subclasses of the JSON scalars (numpy's float64, a str subclass) are
        # stored as the plain scalar: the value survives, the subclass does not.
        if isinstance(obj, bool):
            return bool(obj)
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return self.enc(float(obj), where)
        if isinstance(obj, str):
            return self.enc(str(obj), where)
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return {TAG: "tuple", "v": [self.enc(v, where) for v in obj]}
        if isinstance(obj, set | frozenset):
            kind = "set" if isinstance(obj, set) else "frozenset"
            return {TAG: kind, "v": [self.enc(v, where) for v in obj]}
        if isinstance(obj, deque):
            return {TAG: "deque", "v": [self.enc(v, where) for v in obj]}
        if isinstance(obj, bytes | bytearray):
            kind = "bytes" if isinstance(obj, bytes) else "bytearray"
            secrets = self.secrets
            if secrets is not None and secrets.snap.in_bytes(obj):
                secrets.hit = True
                if self.hide is not None:
                    return {TAG: kind, "t": self.hide.hide(obj.decode("latin-1"))}
            return {TAG: kind, "v": base64.b64encode(obj).decode()}
        if isinstance(obj, dt.datetime | dt.date | dt.time):
            return {TAG: type(obj).__name__, "v": obj.isoformat()}
        if isinstance(obj, dt.timedelta):
            return {TAG: "timedelta", "v": obj.total_seconds()}
        if isinstance(obj, uuid.UUID):
            return {TAG: "uuid", "v": self.enc(str(obj))}
        if isinstance(obj, decimal.Decimal):
            return {TAG: "decimal", "v": self.enc(str(obj))}
        if isinstance(obj, pathlib.PurePath):
            return {TAG: "path", "v": self.enc(str(obj))}
        if _is_pydantic(obj):
            fields = type(obj).model_fields
            return {
                TAG: "model",
                "cls": _path(type(obj)),
                "v": {
                    k: self.enc(getattr(obj, k), f"{where}.{k}")
                    for k in fields
                    if hasattr(obj, k)
                },
            }
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return {
                TAG: "dataclass",
                "cls": _path(type(obj)),
                "v": {
                    f.name: self.enc(getattr(obj, f.name), f"{where}.{f.name}")
                    for f in dataclasses.fields(obj)
                    if f.init and hasattr(obj, f.name)
                },
            }
        if isinstance(obj, tuple):  # a NamedTuple
            return {
                TAG: "namedtuple",
                "cls": _path(type(obj)),
                "v": [self.enc(v, where) for v in obj],
            }
        if isinstance(obj, type) and (
            dataclasses.is_dataclass(obj) or hasattr(obj, "model_fields")
        ):
            return {TAG: "type", "cls": _path(obj)}
        raise self.refuse(obj, where)


def encode(value: Any, channel: str) -> Any:
    """Turns ``value`` into JSON-ready data.

    Raises:
        UnsafeValueError: for a value that only pickle could store.
    """
    return _Encoder(channel, current_pass()).enc(value)


_SIMPLE: dict[str, Callable[[Any], Any]] = {
    "float": float,
    "uuid": uuid.UUID,
    "decimal": decimal.Decimal,
    "path": pathlib.Path,
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "time": dt.time.fromisoformat,
}


def decode(data: Any) -> Any:
    """Rebuilds a value from what ``encode`` produced."""
    t = type(data)
    if t is list:
        return [decode(v) for v in data]
    if t is not dict:
        return data
    tag = data.get(TAG)
    if tag is None:
        return {k: decode(v) for k, v in data.items()}
    v = data.get("v")
    if tag == "secret":
        return reveal(v)
    if tag in _SIMPLE:
        text = decode(v)  # (a secret's template: a str again)
        if type(v) is dict and not revealing_now():
            return text  # a view's: the reference, which no UUID or Path parses
        return _SIMPLE[tag](text)
    if tag == "dict":
        return {decode(k): decode(x) for k, x in v}
    if tag == "tuple":
        return tuple(decode(x) for x in v)
    if tag == "set":
        return {decode(x) for x in v}
    if tag == "frozenset":
        return frozenset(decode(x) for x in v)
    if tag == "deque":
        return deque(decode(x) for x in v)
    if tag in ("bytes", "bytearray"):
        if "t" in data and not revealing_now():
            return decode(data["t"])  # a view's: the reference, as text
        raw = (
            decode(data["t"]).encode("latin-1") if "t" in data else base64.b64decode(v)
        )
        return raw if tag == "bytes" else bytearray(raw)
    if tag == "timedelta":
        return dt.timedelta(seconds=v)
    if tag == "delta_snapshot":
        from langgraph.checkpoint.serde.types import _DeltaSnapshot

        return _DeltaSnapshot(decode(v))
    if tag == "send":
        from langgraph.types import Send

        timeout = decode(data.get("timeout"))
        if timeout is None:
            return Send(data["node"], decode(data["arg"]))
        return Send(data["node"], decode(data["arg"]), timeout=timeout)
    if tag == "error":
        return _decode_error(
            str(data.get("cls")), str(decode(v)), decode(data.get("args"))
        )
    return _decode_class(tag, data)


def _decode_error(path: str, message: str, args: Any) -> BaseException:
    import builtins

    mod, _, name = path.partition(":")
    cls = getattr(builtins, name, None) if mod == "builtins" else None
    if isinstance(cls, type) and issubclass(cls, BaseException):
        try:
            return cls(*args) if isinstance(args, list) else cls(message)
        except Exception:  # a builtin needing other arguments (UnicodeError)
            pass
    return StoredError(path, message)


def _decode_class(tag: str, data: dict[str, Any]) -> Any:
    if not revealing_now():
        # A view's read: a secret's reference in place of a value may not
        # validate as the class (an enum's value, a field with a pattern).
        try:
            return _build_class(tag, data)
        except Exception:
            if not _holds_secret(data):
                raise
            return decode(data.get("v"))
    return _build_class(tag, data)


def _holds_secret(data: Any) -> bool:
    """Whether encoded ``data`` holds a secret's reference (``_secrets.py``)."""
    if type(data) is list:
        return any(_holds_secret(x) for x in data)
    if type(data) is dict:
        return data.get(TAG) == "secret" or any(_holds_secret(x) for x in data.values())
    return False


def _build_class(tag: str, data: dict[str, Any]) -> Any:
    cls = _load_class(data["cls"])
    if tag == "type":
        return cls
    if tag == "enum" and issubclass(cls, enum.Enum):
        return cls(decode(data["v"]))
    if tag == "namedtuple" and issubclass(cls, tuple):
        return cls(*(decode(x) for x in data["v"]))
    fields = {k: decode(x) for k, x in data["v"].items()}
    if tag == "model" and hasattr(cls, "model_validate"):
        return cls.model_validate(fields)
    if tag == "dataclass" and dataclasses.is_dataclass(cls):
        return cls(**fields)
    raise TypeError(f"record names {data['cls']} as a {tag}, which it is not")
