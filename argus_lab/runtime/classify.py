"""How an attempt whose tool raised ends: the exception, read as an outcome.

``error_outcome`` never raises, whatever the tool raised: an exception whose
``str()`` or ``retry_after`` raises, a cycle of causes, a timeout with no
timeout declared. A tool's failure that ended the run instead of its task
left every task running beside it in doubt.

For a write that is not idempotent, what matters is whether the request may
have gone out. A connection reset, a broken pipe, a lost or timed-out reply,
a truncated body: the remote side may have acted on it, and trying again may
act twice, so the task is in doubt and a person decides (invariant 2). Only a
failure that proves nothing was sent (the connection was refused or never
made, the name did not resolve) is retried as a transient failure. A
``TransientError`` the tool raises itself is its own word that trying again
is safe, unless what it wraps says otherwise (a ``TransientError`` raised
from a read timeout is in doubt all the same).

Idempotent tools and tools without side effects are retried as before:
timeouts, ``ConnectionError`` and ``TransientError`` are transient.
"""

from __future__ import annotations

import contextlib
import http.client
import math
import socket
import traceback
from typing import Literal

from argus_lab.errors import BudgetExceeded, InDoubtError, TransientError
from argus_lab.runtime.outcome import Failed, FailureKind, InDoubt, Outcome, TimedOut
from argus_lab.runtime.toolcall import error_text
from argus_lab.tools.registry import Tool

__all__ = ["Sent", "error_outcome", "request_sent"]

Sent = Literal["maybe", "no"]
"""Whether a failed request may have reached the remote side."""

_NOT_SENT: frozenset[tuple[str, str]] = frozenset(
    {
        # (top-level package, class name), matched along the class's MRO.
        ("httpx", "ConnectError"),
        ("httpx", "ConnectTimeout"),
        ("httpx", "PoolTimeout"),
        ("httpx", "UnsupportedProtocol"),
        ("httpcore", "ConnectError"),
        ("httpcore", "ConnectTimeout"),
        ("httpcore", "PoolTimeout"),
        ("httpcore", "UnsupportedProtocol"),
        ("requests", "ConnectTimeout"),
        ("urllib3", "NewConnectionError"),
        ("urllib3", "ConnectTimeoutError"),
        ("urllib3", "NameResolutionError"),
        ("aiohttp", "ClientConnectorError"),
        ("aiohttp", "ConnectionTimeoutError"),
    }
)
"""Failures to connect: no byte of the request went out."""

_MAYBE_SENT: frozenset[tuple[str, str]] = frozenset(
    {
        ("httpx", "ReadError"),
        ("httpx", "WriteError"),
        ("httpx", "ReadTimeout"),
        ("httpx", "WriteTimeout"),
        ("httpx", "RemoteProtocolError"),
        ("httpx", "CloseError"),
        ("httpcore", "ReadError"),
        ("httpcore", "WriteError"),
        ("httpcore", "ReadTimeout"),
        ("httpcore", "WriteTimeout"),
        ("httpcore", "RemoteProtocolError"),
        ("requests", "ReadTimeout"),
        ("requests", "ChunkedEncodingError"),
        ("urllib3", "ProtocolError"),
        ("urllib3", "ReadTimeoutError"),
        ("urllib3", "IncompleteRead"),
        ("urllib3", "ResponseError"),
        ("aiohttp", "ServerDisconnectedError"),
        ("aiohttp", "ClientPayloadError"),
        ("aiohttp", "ServerTimeoutError"),
        ("aiohttp", "SocketTimeoutError"),
        ("asyncio", "IncompleteReadError"),
    }
)
"""Failures after the request may have gone out, while the reply was awaited."""

_MAYBE_SENT_WRAPPERS: frozenset[tuple[str, str]] = frozenset(
    {
        # Broad classes: what they wrap (if it says) is the better witness.
        ("httpx", "NetworkError"),
        ("httpx", "TimeoutException"),
        ("httpx", "TransportError"),
        ("httpcore", "NetworkError"),
        ("httpcore", "TimeoutException"),
        ("requests", "ConnectionError"),
        ("requests", "Timeout"),
        ("urllib3", "MaxRetryError"),
        ("urllib3", "TimeoutError"),
        ("aiohttp", "ClientConnectionError"),
        ("aiohttp", "ClientOSError"),
    }
)

_LINKS = ("reason", "os_error")
"""Attributes some clients wrap the underlying error in (urllib3's
MaxRetryError and urllib's URLError: ``reason``; aiohttp: ``os_error``)."""
_MAX_LINKS = 64


_REFUSED = (ConnectionRefusedError, socket.gaierror, socket.herror)
"""Failures to connect that prove nothing was sent when the tool raises them
as they are (not a client library's, which may come after a redirect)."""


def _verdict(e: BaseException) -> tuple[Sent | None, bool]:
    """What ``e`` alone says: (whether the request may have been sent or
    None if it says nothing, whether that verdict is only a broad class's)."""
    if isinstance(e, _REFUSED):
        return "no", False
    if isinstance(
        e,
        http.client.ImproperConnectionState | http.client.InvalidURL,
    ):
        return None, False  # refused by the client itself, before sending
    names = [(c.__module__.partition(".")[0], c.__name__) for c in type(e).__mro__]
    if any(n in _NOT_SENT for n in names):
        return "no", False
    if any(n in _MAYBE_SENT for n in names):
        return "maybe", False
    if isinstance(e, TimeoutError | http.client.HTTPException):
        return "maybe", False  # incl. IncompleteRead, RemoteDisconnected
    if type(e) is ConnectionError:
        return "maybe", True
    if isinstance(e, ConnectionError):  # reset, aborted, broken pipe
        return "maybe", False
    if any(n in _MAYBE_SENT_WRAPPERS for n in names):
        return "maybe", True
    return None, False


def _chain(e: BaseException) -> list[BaseException]:
    """``e`` and what it wraps: causes, contexts, ``reason``, exceptions among
    its args (requests wraps urllib3's that way); breadth first, each once."""
    seen = {id(e)}
    out = [e]
    i = 0
    while i < len(out) and len(out) < _MAX_LINKS:
        cur = out[i]
        i += 1
        links: list[object] = [cur.__cause__, cur.__context__]
        for name in _LINKS:
            with contextlib.suppress(Exception):  # a property that raises
                links.append(getattr(cur, name, None))
        args = cur.args if isinstance(cur.args, tuple) else ()
        links.extend(args[:8])
        for link in links:
            if isinstance(link, BaseException) and id(link) not in seen:
                seen.add(id(link))
                out.append(link)
    return out


def request_sent(e: BaseException) -> Sent | None:
    """Whether the request of a call that raised ``e`` may have gone out.

    "maybe": a connection broke or timed out after it may have been sent
    (anywhere in ``e``'s chain of causes); "no": a failure to connect, and
    nothing in the chain says it may have been sent; None: ``e`` is no
    transport failure we know (a broad ``ConnectionError`` with nothing more
    specific inside is "maybe").
    """
    verdicts = [_verdict(x) for x in _chain(e)]
    if any(v == "maybe" and not broad for v, broad in verdicts):
        return "maybe"
    if any(v == "no" for v, _ in verdicts):
        return "no"
    if any(v == "maybe" for v, _ in verdicts):
        return "maybe"
    return None


def _retry_after(e: BaseException) -> float | None:
    """``e.retry_after`` if it is a usable number of seconds (a string, a NaN,
    a negative number or a property that raises: none)."""
    try:
        value = getattr(e, "retry_after", None)
        if value is None or isinstance(value, bool):
            return None
        seconds = float(value)
    except Exception:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def _traceback(e: BaseException) -> str | None:
    try:
        return "".join(traceback.format_exception(e))
    except Exception:  # a hostile __notes__, a frame that cannot be read
        return None


def failed(e: BaseException, kind: FailureKind = "error", *, tb: bool = True) -> Failed:
    """The ``Failed`` outcome of ``e`` (never raises)."""
    return Failed(
        kind=kind,
        error=error_text(e),
        error_type=_type_name(e),
        traceback=_traceback(e) if tb else None,
        retry_after=_retry_after(e),
    )


def _type_name(e: BaseException) -> str:
    name = getattr(type(e), "__name__", None)
    return name if isinstance(name, str) and name else "Exception"


def error_outcome(tool: Tool, e: BaseException, timeout: float | None) -> Outcome:
    """How an attempt whose call raised ``e`` itself ended (never raises).

    ``timeout``: the call's declared timeout; ``e`` is the tool's own error
    even when it is a TimeoutError (the executor's own timeout is told apart
    before this). For a tool that cannot be classified (a bug here), a write
    that is not idempotent is in doubt and anything else failed.
    """
    try:
        return _classify(tool, e, timeout)
    except Exception as bug:  # never end the run over how to read an error
        text = f"{_type_name(e)} (it could not be classified: {_type_name(bug)})"
        if tool.unsafe_to_repeat:
            return InDoubt(
                f"tool {tool.name!r} raised {text} and may or may not have taken effect"
            )
        return Failed("error", text, _type_name(e))


def _classify(tool: Tool, e: BaseException, timeout: float | None) -> Outcome:
    if isinstance(e, InDoubtError):  # e.g. a cluster lost a write mid-way
        return InDoubt(error_text(e), traceback=_traceback(e))
    if isinstance(e, BudgetExceeded):  # an LLM task's check (the hit is kept)
        return failed(e, "budget")
    if tool.unsafe_to_repeat:
        sent = request_sent(e)
        if sent == "maybe":
            return InDoubt(
                f"tool {tool.name!r} raised {_type_name(e)}: {error_text(e)}. "
                "Its request may have been sent before the connection broke "
                "or the reply timed out, so it may or may not have taken "
                "effect; it is not idempotent, so it is not retried "
                "automatically",
                traceback=_traceback(e),
            )
        if isinstance(e, TransientError):  # the tool's own word: safe to retry
            return failed(e, "transient")
        if sent == "no" and isinstance(e, _REFUSED):
            return failed(e, "transient")  # raised as it is: nothing went out
        # A client library's failure to connect proves less: it may follow a
        # redirect after the write took effect (a POST answered 303 to a host
        # that is down), or the tool may have made its write before another
        # request. It fails once, as any other error of the tool.
        return failed(e)
    if isinstance(e, TimeoutError):
        return TimedOut(
            error_text(e),
            _type_name(e),
            traceback=_traceback(e),
            retry_after=_retry_after(e),
        )
    if isinstance(e, TransientError | ConnectionError):
        return failed(e, "transient")
    return failed(e)
