"""Reading plan text and data defensively: JSON types only, bounded, with lines.

A plan file is user input, often hand-written and sometimes hostile. Whatever it
holds, reading it raises ``PlanError`` (naming the file and line where there is
one) and nothing else: no RecursionError from self-referencing anchors or deep
nesting, no ValueError from a code point past U+10FFFF or an integer of 4,301
digits, no OSError from a folder named ``x.yaml``, no UnicodeDecodeError, and no
Python object that only JSON-less YAML tags can make (``!!binary``, ``!!set``,
``!!timestamp``, ``!!python/...``): a plan is stored as JSON, so it may only
hold what JSON holds.
"""

from __future__ import annotations

import functools
import math
import os
import stat
from pathlib import Path
from typing import Any

from argus_lab.errors import PlanError

__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_PLAN_BYTES",
    "check_json",
    "load_yaml",
    "read_text",
]

MAX_DEPTH = 100
"""Containers nested deeper than this are refused (real plans use < 10)."""
MAX_NODES = 1_000_000
"""Values visited (aliases counted each time) before a plan counts as a bomb."""
MAX_PLAN_BYTES = 8 * 1024 * 1024
"""Plan files, plan text and the text in a plan's data are refused past this.

The pure-Python YAML reader takes about 30 s for 100,000 tasks (3 MB): a plan
is a DAG of tool calls, and its data belongs in files the tools read.
"""
_TOO_BIG = "keep large data in files the tools read"
_MAX_INT_BITS = 13_000
"""About 3,900 decimal digits: below Python's 4,300-digit conversion limit."""
_JSON_TAGS = ("null", "bool", "int", "float", "str", "seq", "map")


def read_text(source: str | Path) -> tuple[str, str]:
    """(text, name) from a file path or from text itself ("<plan text>")."""
    if isinstance(source, bytes | bytearray):
        raise PlanError(
            "plan text must be str (or a file path), got bytes: decode it first, "
            "e.g. Plan.from_yaml(data.decode('utf-8'))"
        )
    if not isinstance(source, str | Path):
        hint = ": pass f.read() or the file's path" if hasattr(source, "read") else ""
        raise PlanError(
            "Plan.from_yaml takes YAML/JSON text or a file path, "
            f"got {type(source).__name__}{hint}"
        )
    looks_like_path = isinstance(source, Path) or (
        "\n" not in source and source.strip().endswith((".yaml", ".yml", ".json"))
    )
    if isinstance(source, str) and not looks_like_path:
        if len(source) > MAX_PLAN_BYTES:
            raise PlanError(
                f"the plan text is {len(source):,} characters: a plan may be at "
                f"most {MAX_PLAN_BYTES:,} ({_TOO_BIG})"
            )
        return source, "<plan text>"
    name = str(source)
    data = _read_file(name)
    try:
        return data.decode("utf-8"), name
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise PlanError(
            f"{name}:{line}: the plan file is not UTF-8 text (byte "
            f"0x{data[e.start]:02x} at offset {e.start}); save it as UTF-8"
        ) from None


_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _read_file(name: str) -> bytes:
    """The bytes of a regular file of at most MAX_PLAN_BYTES, or PlanError.

    Opened once and checked on that descriptor (no stat-then-read race): a
    FIFO opens without blocking (O_NONBLOCK) and is refused, like a device
    (/dev/zero never ends) or a socket.
    """
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise PlanError(f"plan file {name!r} does not exist") from None
    except (OSError, ValueError) as e:  # permissions, a loop, a NUL in the name
        why = getattr(e, "strerror", None) or str(e)
        raise PlanError(f"cannot read plan file {name!r}: {why}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise PlanError(
                f"plan file {name!r} is a folder, not a file: name the YAML file in it"
            )
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a file")
            raise PlanError(
                f"plan file {name!r} is {kind}, not a regular file: save the plan "
                "to a file"
            )
        if st.st_size > MAX_PLAN_BYTES:
            raise PlanError(
                f"plan file {name!r} is {st.st_size:,} bytes: a plan may be at "
                f"most {MAX_PLAN_BYTES:,} bytes ({_TOO_BIG})"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_PLAN_BYTES + 1)  # it may have grown since fstat
    except OSError as e:
        raise PlanError(f"cannot read plan file {name!r}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_PLAN_BYTES:
        raise PlanError(
            f"plan file {name!r} grew past {MAX_PLAN_BYTES:,} bytes while read "
            f"({_TOO_BIG})"
        )
    return data


@functools.cache
def _loader_class() -> Any:
    import yaml

    class PlanLoader(yaml.SafeLoader):
        """SafeLoader limited to JSON types; remembers where each container began."""

        # Only JSON's types: other tags (binary, set, timestamp, omap, python/*)
        # fall through to construct_undefined and are refused with their line.
        yaml_constructors = {
            **{
                f"tag:yaml.org,2002:{t}": yaml.SafeLoader.yaml_constructors[
                    f"tag:yaml.org,2002:{t}"
                ]
                for t in _JSON_TAGS
            },
            None: yaml.SafeLoader.yaml_constructors[None],
        }
        # An unquoted 2024-01-01 stays text (not a date JSON cannot hold), and
        # a lone "=" stays text (not the constructor-less "value" tag).
        yaml_implicit_resolvers = {
            k: [
                (tag, rx)
                for tag, rx in v
                if tag not in ("tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value")
            ]
            for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
        }

        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self.lines: dict[int, int] = {}

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            # YAML keeps the last of two equal keys; in a plan the first one
            # (an id, a dependency list) would vanish without a word. Merge keys
            # (<<) may still be overridden: only written keys are compared.
            if isinstance(node, yaml.MappingNode):
                seen: set[tuple[str, str]] = set()
                for key, _ in node.value:
                    if not isinstance(key, yaml.ScalarNode) or key.tag.endswith(
                        ":merge"
                    ):
                        continue
                    k = (key.tag, key.value)
                    if k in seen:
                        raise yaml.constructor.ConstructorError(
                            None,
                            None,
                            f"the key {key.value!r} is written twice in one "
                            "mapping (the first one would be lost)",
                            key.start_mark,
                        )
                    seen.add(k)
            return super().construct_mapping(node, deep)

        def construct_object(self, node: Any, deep: bool = False) -> Any:
            try:
                data = super().construct_object(node, deep)
            except ValueError as e:  # int("9" * 4301), ...
                raise yaml.constructor.ConstructorError(
                    None, None, str(e), node.start_mark
                ) from None
            if isinstance(data, dict | list):
                self.lines.setdefault(id(data), node.start_mark.line + 1)
            return data

    return PlanLoader


def load_yaml(text: str, name: str) -> tuple[Any, dict[int, int]]:
    """Parses YAML/JSON text; returns the data and {id(container): line}."""
    import yaml

    loader = None
    try:
        loader = _loader_class()(text)  # its reader refuses control characters
        return loader.get_single_data(), loader.lines
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        what = " ".join(str(x) for x in (e.context, e.problem) if x)
        if "could not determine a constructor for the tag" in what:
            tag = str(e.problem).rsplit(" ", 1)[-1].strip("'")
            tag = tag.replace("tag:yaml.org,2002:", "!!")
            what = (
                f"the tag {tag} is not allowed: a plan holds only JSON types "
                "(text, numbers, true/false, null, lists, mappings)"
            )
        elif "integer string conversion" in what:
            what = "an integer with more than 4,300 digits; write it as text"
        elif "'\\t' that cannot start any token" in what:
            what += " (YAML indents with spaces, never tabs: replace the tabs)"
        raise PlanError(f"{where}: the plan is not valid YAML: {what}") from None
    except yaml.YAMLError as e:
        raise PlanError(f"{name}: the plan is not valid YAML: {e}") from None
    except RecursionError:
        raise PlanError(
            f"{name}: the plan is nested too deeply to read (at most {MAX_DEPTH} "
            "levels of lists and mappings)"
        ) from None
    except ValueError as e:  # the scanner's chr() of an escape past U+10FFFF
        line = f":{loader.get_mark().line + 1}" if loader is not None else ""
        raise PlanError(f"{name}{line}: the plan is not valid YAML: {e}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _path_text(path: tuple[Any, ...]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "the plan"


def check_json(
    data: Any, *, name: str | None = None, lines: dict[int, int] | None = None
) -> None:
    """Refuses (PlanError) anything JSON cannot hold exactly, or that is unbounded.

    Walks without recursion: cycles (a YAML anchor inside itself), depth over
    MAX_DEPTH, more than MAX_NODES values (alias bombs), non-text keys, text
    that is not valid Unicode, integers too long to print, NaN and infinities,
    and any other type (bytes, sets, dates, objects).
    """
    lines = lines or {}

    def fail(path: tuple[Any, ...], what: str, near: Any) -> PlanError:
        line = next(
            (lines[id(c)] for c in reversed(near) if id(c) in lines),
            None,
        )
        where = f"{name}:{line}: " if name and line else (f"{name}: " if name else "")
        return PlanError(f"{where}{_path_text(path)}: {what}")

    # (value, path, containers above it); exit markers pop the ancestor set.
    stack: list[tuple[Any, tuple[Any, ...], tuple[Any, ...]]] = [(data, (), ())]
    seen = 0
    chars = 0
    while stack:
        value, path, above = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise fail((), f"more than {MAX_NODES:,} values (an alias bomb?)", ())
        if isinstance(value, dict | list | tuple):
            if any(value is c for c in above):
                raise fail(
                    path, "refers to itself (a YAML anchor inside itself)", above
                )
            if len(above) >= MAX_DEPTH:
                raise fail(path, f"nested more than {MAX_DEPTH} levels deep", above)
            inner = (*above, value)
            if isinstance(value, dict):
                for k, v in value.items():
                    if not isinstance(k, str):
                        raise fail(
                            path,
                            f"key {k!r} is not text; quote it (YAML reads "
                            "unquoted yes/no/on/off and numbers as other types)",
                            inner,
                        )
                    stack.append((k, (*path, "[key]"), inner))
                    stack.append((v, (*path, k), inner))
            else:
                stack.extend((v, (*path, i), inner) for i, v in enumerate(value))
        elif value is None or isinstance(value, bool):
            continue
        elif isinstance(value, int):
            if value.bit_length() > _MAX_INT_BITS:
                raise fail(path, "an integer too long to store (use text)", above)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise fail(path, f"{value} is not a JSON number", above)
        elif isinstance(value, str):
            chars += len(value)
            if chars > MAX_PLAN_BYTES:
                raise PlanError(
                    (f"{name}: " if name else "")
                    + f"the plan holds more than {MAX_PLAN_BYTES:,} characters of "
                    f"text: {_TOO_BIG}"
                )
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise fail(
                    path, "text holds a lone surrogate (not valid Unicode)", above
                ) from None
        else:
            raise fail(
                path,
                f"a {type(value).__name__} is not plain data; plans hold only "
                "text, numbers, true/false, null, lists and mappings",
                above,
            )
