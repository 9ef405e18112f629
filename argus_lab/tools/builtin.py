"""Built-in tools, opt-in by name: ``al.builtin_tools("python", "read_file", ...)``.

- ``python(code, timeout=None, check=True)``: runs code in a sandboxed process
  (sandbox.py, threat model in docs/sandbox.md); returns exit code, stdout,
  stderr and the files it produced. Code that raises, exits non-zero or times
  out fails the task (``check=False``: returned as a result instead).
- ``read_file(path)``, ``write_file(path, content)``, ``list_files(path=".")``:
  confined to the session's folder (files.py).

- ``memory_add``, ``memory_search``: the workspace memory; they live beside it
  (store/memory_tools.py, above this layer) and register here with
  :func:`provide_builtin` when imported (``import argus_lab`` imports them).
"""

from __future__ import annotations

from argus_lab.tools.files import MAX_READ_BYTES, MAX_WRITE_BYTES, make_file_tools
from argus_lab.tools.registry import Tool
from argus_lab.tools.sandbox import Limits, make_python_tool

__all__ = ["BUILTIN_NAMES", "builtin_tools", "provide_builtin"]

BUILTIN_NAMES = (
    "python",
    "read_file",
    "write_file",
    "list_files",
    "memory_add",
    "memory_search",
)
"""The names ``builtin_tools`` knows, in order."""

_defaults: dict[str, Tool] = {}
_provided: dict[str, Tool] = {}


def provide_builtin(*tools: Tool) -> None:
    """Registers built-in tools made by a layer above this one (the memory tools).

    Args:
        *tools: Tools whose names are in ``BUILTIN_NAMES``.
    """
    for t in tools:
        if t.name not in BUILTIN_NAMES:
            raise ValueError(f"{t.name!r} is not a built-in tool name")
        _provided[t.name] = t


def _default_tools() -> dict[str, Tool]:
    # One shared Tool per name for the default options, so two calls give the same
    # objects and a session handed both lists sees no name clash.
    if not _defaults:
        _defaults.update(make_file_tools())
        _defaults["python"] = make_python_tool()
    _defaults.update(_provided)
    return _defaults


def builtin_tools(
    *names: str,
    sandbox: Limits | None = None,
    max_read_bytes: int = MAX_READ_BYTES,
    max_write_bytes: int = MAX_WRITE_BYTES,
) -> list[Tool]:
    """Returns the named built-in tools, in the order asked.

    Args:
        *names: Any of "python", "read_file", "write_file", "list_files".
        sandbox: Limits of the ``python`` tool (default ``Limits()``: 60 s wall
            time, 2 GiB of memory for the process tree, a 256 MiB task folder,
            64 processes, no network).
        max_read_bytes: Largest file ``read_file`` reads (default 1 MiB).
        max_write_bytes: Largest content ``write_file`` writes (default 1 MiB).

    Raises:
        ValueError: No name given, an unknown name (the message lists the known
            ones), or a memory tool (they come with the memory module).
    """
    known = ", ".join(BUILTIN_NAMES)
    if not names:
        raise ValueError(f"name the built-in tools you want, from: {known}")
    for name in names:
        if name not in BUILTIN_NAMES:
            raise ValueError(f"unknown built-in tool {name!r}; known: {known}")
    default = (
        sandbox is None
        and max_read_bytes == MAX_READ_BYTES
        and max_write_bytes == MAX_WRITE_BYTES
    )
    if default:
        tools = _default_tools()
    else:
        tools = make_file_tools(
            max_read_bytes=max_read_bytes, max_write_bytes=max_write_bytes
        )
        tools["python"] = make_python_tool(sandbox)
        tools.update(_provided)
    missing = [n for n in names if n not in tools]
    if missing:  # the memory tools register when their module is imported
        raise RuntimeError(
            f"built-in tools {missing} are not registered: import "
            "argus_lab.store.memory_tools (al.builtin_tools does it for you)"
        )
    return [tools[n] for n in dict.fromkeys(names)]
