"""Calling a tool's function: a ``sys.exit()`` inside it fails its task.

SystemExit is not an Exception: ``except Exception`` lets it through, and
asyncio re-raises it out of the event loop, which stops the session's loop
(``run()`` never returns). Every call of a tool's function goes through these
(the executor's, inline, on a thread or awaited, and an LLM task's tool calls),
and the text of what it raised is read through ``error_text``.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = [
    "ToolBaseException",
    "ToolCancelled",
    "ToolExit",
    "await_tool",
    "call_tool",
    "error_text",
]


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


class ToolCancelled(Exception):
    """A tool raised ``asyncio.CancelledError`` while nobody cancelled it (a
    client library's leaked cancellation, a cancelled future it awaited).

    Let through, it read as the cancellation of the session's own run: the
    run ended with it, and the session and the task stayed "running".
    """

    def __init__(self, e: BaseException) -> None:
        why = f" ({error_text(e)})" if e.args else ""
        super().__init__(f"the tool raised CancelledError{why} without being cancelled")


class ToolBaseException(Exception):
    """A tool raised a BaseException that is not an Exception (KeyboardInterrupt,
    GeneratorExit, a library's own): the tool's, never a signal to the session.

    Let through, it passed every ``except Exception`` and ended the run (on
    the loop thread, asyncio re-raises it out of the loop), leaving the tasks
    running beside it in doubt.
    """

    def __init__(self, e: BaseException) -> None:
        super().__init__(
            f"the tool raised {type(e).__name__}"
            + (f" ({error_text(e)})" if e.args else "")
            + ", which is not an Exception: a tool ends its task by returning "
            "or raising an Exception"
        )


def call_tool(fn: Any, kwargs: dict[str, Any]) -> Any:
    """``fn(**kwargs)`` with a SystemExit turned into ToolExit, a
    CancelledError (nothing cancels a sync call) into ToolCancelled and any
    other BaseException into ToolBaseException."""
    try:
        return fn(**kwargs)
    except Exception:
        raise
    except SystemExit as e:
        raise ToolExit(e) from e
    except asyncio.CancelledError as e:
        raise ToolCancelled(e) from e
    except BaseException as e:
        raise ToolBaseException(e) from e


async def await_tool(fn: Any, kwargs: dict[str, Any]) -> Any:
    """``await fn(**kwargs)`` with a SystemExit turned into ToolExit (inside
    the awaiting task, before asyncio's Task would re-raise it to the loop),
    a CancelledError into ToolCancelled unless the call was cancelled, and any
    other BaseException into ToolBaseException."""
    try:
        return await fn(**kwargs)
    except Exception:
        raise
    except SystemExit as e:
        raise ToolExit(e) from e
    except asyncio.CancelledError as e:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise  # a real cancellation (a timeout, a shutdown): not the tool's
        raise ToolCancelled(e) from e
    except BaseException as e:
        raise ToolBaseException(e) from e


def error_text(e: BaseException) -> str:
    """``str(e)``, or the class name when that is empty or raises: a tool's
    exception whose ``__str__`` fails must fail its task, not end the run
    (raising to the caller a message no redactor had seen)."""
    name = type(e).__name__ or "an exception"  # a class may be renamed ""
    try:
        text = str(e)
        if not isinstance(text, str) or not text:
            return name
        if isinstance(e, KeyError) and type(e).__str__ is KeyError.__str__:
            # str(KeyError("x")) is "'x'": a task's error read "'x'" alone.
            return f"{name}: {text}"
        return text
    except Exception:
        return f"{name} (its message could not be read)"
