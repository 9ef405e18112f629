"""Calling a tool's function: a ``sys.exit()`` inside it fails its task.

SystemExit is not an Exception: ``except Exception`` lets it through, and
asyncio re-raises it out of the event loop, which stops the session's loop
(``run()`` never returns). Every call of a tool's function goes through these
(the executor's, inline, on a thread or awaited, and an LLM task's tool calls),
and the text of what it raised is read through ``error_text``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ToolExit", "await_tool", "call_tool", "error_text"]


class ToolExit(Exception):
    """A tool called ``sys.exit()`` (an argparse error, a CLI's ``main``).

    SystemExit raised by a tool ends its task as a failure. Let through, it
    would stop the session's event loop (asyncio re-raises it out of the loop)
    and ``run()`` would never return; on a thread it would reach the loop all
    the same when the call's future is awaited.
    """

    def __init__(self, e: SystemExit) -> None:
        super().__init__(
            f"the tool called sys.exit({e.code!r}): a tool ends its task by "
            "returning or raising; exiting ends neither the session nor the "
            "process"
        )


def call_tool(fn: Any, kwargs: dict[str, Any]) -> Any:
    """``fn(**kwargs)`` with a SystemExit turned into ToolExit."""
    try:
        return fn(**kwargs)
    except SystemExit as e:
        raise ToolExit(e) from e


async def await_tool(fn: Any, kwargs: dict[str, Any]) -> Any:
    """``await fn(**kwargs)`` with a SystemExit turned into ToolExit (inside
    the awaiting task, before asyncio's Task would re-raise it to the loop)."""
    try:
        return await fn(**kwargs)
    except SystemExit as e:
        raise ToolExit(e) from e


def error_text(e: BaseException) -> str:
    """``str(e)``, or the class name when that is empty or raises: a tool's
    exception whose ``__str__`` fails must fail its task, not end the run
    (raising to the caller a message no redactor had seen)."""
    try:
        return str(e) or type(e).__name__
    except Exception:
        return f"{type(e).__name__} (its message could not be read)"
