"""The Dask side of one tool call (see dask.py): the task run on a worker, and
what comes back from it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from argus_lab.errors import ArgusError, MissingDependency, ToolError

if TYPE_CHECKING:
    from distributed import Future

__all__ = [
    "Lost",
    "Raised",
    "Returned",
    "cancel",
    "collect",
    "connect_client",
    "describe",
    "fetch",
    "import_distributed",
    "on_worker",
]


def import_distributed() -> Any:
    """The ``distributed`` module, or MissingDependency naming the extra."""
    try:
        import distributed
    except ImportError as e:
        raise MissingDependency(
            "DaskExecutor needs dask's distributed scheduler, which is not "
            f'installed ({e}); install it with: pip install "argus-lab[dask]"'
        ) from None
    return distributed


def on_worker(topic: str | None, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """The Dask task: says it started (the timeout's clock), then calls the tool."""
    if topic is not None:
        from distributed import get_worker

        try:
            worker = get_worker()
        except ValueError:  # not on a worker (dask's local schedulers): no clock
            pass
        else:
            worker.log_event(topic, worker.get_current_task())
    return fn(**kwargs)


@dataclass(frozen=True, slots=True)
class Returned:
    """What the tool returned."""

    value: Any


@dataclass(frozen=True, slots=True)
class Raised:
    """What the tool raised (or a ToolError for a result that cannot come back)."""

    error: BaseException


class Lost(Exception):
    """The cluster lost a call (not the tool's doing); worth resubmitting."""


async def fetch(fut: Future[Any], what: str) -> Returned | Raised:
    """The task's result or the tool's own error; raises Lost if the cluster
    lost the call."""
    from distributed import KilledWorker
    from distributed.client import FutureCancelledError

    try:
        # On the client's loop a Future's result() is a coroutine.
        return Returned(await fut.result())
    except KilledWorker as e:
        raise Lost(f"KilledWorker: {e}") from e
    except FutureCancelledError as e:
        raise Lost(f"the future was cancelled: {e}") from e
    except Exception as e:
        if fut.status == "error":  # raised by the tool itself
            return Raised(e)
        if isinstance(e, OSError):
            # Fetching the result failed: the worker holding it or the
            # scheduler went away (CommClosedError, a reset, a timeout).
            raise Lost(f"{type(e).__name__}: {e}") from e
        # The tool returned, but its result cannot come back (it does not
        # pickle, or not here): as permanent as a result that is not JSON.
        error = ToolError(
            f"{what} returned a result that could not be sent back from the "
            f"Dask worker: {type(e).__name__}: {e}"
        )
        error.__cause__ = e
        return Raised(error)


def describe(fn: Callable[..., Any], kwargs: dict[str, Any]) -> str:
    """How messages name a call: the tool, and its task if known."""
    name = getattr(fn, "__name__", repr(fn))
    ctx = kwargs.get("ctx")
    task = getattr(ctx, "task_id", None)
    return f"tool {name!r}" + (f" of task {task!r}" if task else "")


async def collect(fut: Future[Any], what: str) -> Returned | Raised:
    """Waits for the task and fetches its result, then releases its future.

    Raises Lost; on cancellation (a timeout, the session closing) the
    future is left to the caller.
    """
    try:
        out = await fetch(fut, what)
    except Lost:
        # Released, or the scheduler would recompute it for us while we
        # resubmit it under a new key.
        fut.release()  # type: ignore[no-untyped-call]
        raise
    fut.release()  # type: ignore[no-untyped-call]
    return out


async def cancel(fut: Future[Any]) -> None:
    """Cancels a call's Dask future (on the client's loop)."""
    # On the client's loop cancel() returns a coroutine; a closing client
    # may refuse, and then there is nothing left to cancel.
    with contextlib.suppress(Exception):
        await fut.cancel(reason="argus-cancelled")  # type: ignore[no-untyped-call]


_ADDRESS_HINT = (
    "give a distributed.Client or a scheduler address such as "
    "'tcp://127.0.0.1:8786'; for a cluster on this machine: "
    "DaskExecutor(Client(LocalCluster(n_workers=2)))"
)


def connect_client(distributed: Any, address: Any) -> Any:
    """A Client of the scheduler at ``address``, or an error saying what to give.

    Client(None) would quietly start a cluster of worker processes (and its
    dashboard) instead of connecting to one.
    """
    if address is None or (isinstance(address, str) and not address.strip()):
        raise ValueError(
            f"DaskExecutor got no scheduler address ({address!r}): " + _ADDRESS_HINT
        )
    if not isinstance(address, str) and not hasattr(address, "scheduler_address"):
        raise TypeError(
            f"DaskExecutor got a {type(address).__name__}: " + _ADDRESS_HINT
        )
    try:
        return distributed.Client(address, set_as_default=False)
    except (OSError, ValueError) as e:  # refused, timed out, malformed address
        raise ArgusError(
            f"could not connect to the Dask scheduler at {address!r} ({e}): is "
            "it running and reachable from here? Otherwise " + _ADDRESS_HINT
        ) from e
