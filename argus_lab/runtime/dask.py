"""Tool calls on a Dask cluster: ``DaskExecutor``, a RemoteExecutor over distributed.

The session (scheduler, store, approvals, budgets, events) stays in the driver
process; only the calls of *sync* tools are shipped to the cluster. Each call is
one Dask task under a fresh key, awaited on the Dask client's own event loop and
bridged back to the session's loop, so neither loop ever blocks on the other::

    session loop (its thread)                 client loop (distributed's thread)
    call(fn, kwargs) ── run_coroutine_threadsafe ──▶ submit(on_worker, fn, kwargs)
         ▲                                           await it
         └──────────── wrap_future ◀──────────── result | tool's error | lost

When the call has a timeout, the task first logs a "started" event on the worker
(a Dask event topic of this executor), then calls the tool: the timeout counts
from that moment, as it does locally, not from submission (time queued for a
free worker thread is free). The event costs up to ~1.5 ms per call at low
concurrency (benchmarks/results_dask.md); calls without a timeout skip it.

How a call can end:

- the tool returned: its value comes back as a Python object; the session turns
  it into JSON or artifacts (nothing is pickled into a checkpoint);
- the tool raised: the same exception comes back (with the worker's traceback),
  so a ToolError stays permanent and a TransientError stays retryable;
- the call or its result cannot be pickled: ToolError (permanent, like a result
  that is not JSON; it is not taken for a lost worker and run again);
- the timeout passed: TransientError. A thread on a worker cannot be
  interrupted, so the call runs on there, and its Dask future is kept (then
  released when it ends) rather than cancelled: cancelling it would make the
  scheduler see a free thread that is not free, and queue the next calls behind
  the stuck one;
- the cluster lost the call (``KilledWorker``, the connection to a worker or the
  scheduler closed, a scheduler restart cancelled it): it is resubmitted under a
  new key up to ``retries_on_lost_worker`` times, then TransientError is raised
  for the session to retry (per the task's ``retries``) with the same
  idempotency key;
- the session cancelled the call (it is closing): the Dask future is cancelled.

``distributed`` is an optional extra (``pip install "argus-lab[dask]"``) and is
imported only when a DaskExecutor is made.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import re
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from argus_lab.errors import (
    ArgusError,
    InDoubtError,
    ToolError,
    TransientError,
)
from argus_lab.runtime.dask_call import (
    Lost,
    Raised,
    Returned,
    cancel,
    collect,
    connect_client,
    describe,
    import_distributed,
    on_worker,
)

if TYPE_CHECKING:
    from distributed import Client, Future

__all__ = ["DaskExecutor"]

log = logging.getLogger("argus_lab")

_OPEN = ("running", "connecting", "newly-created")
"""Client statuses in which a submitted task will be sent to the scheduler."""


class DaskExecutor:
    """Runs sync tool calls on a Dask cluster (``distributed``).

    Pass it as ``executor=`` to ``ws.new_session(...)`` or ``ws.open(...)``;
    async tools, the scheduler and the store stay in this process::

        from distributed import Client, LocalCluster

        client = Client(LocalCluster(n_workers=4, processes=True))
        ex = al.DaskExecutor(client)
        s = ws.new_session(plan=plan, tools=tools, executor=ex,
                           concurrency=2 * ex.nthreads())

    A session's ``concurrency`` caps the calls in flight; about twice the
    cluster's threads keeps a call queued on each worker, so none waits for the
    driver between calls (queued time does not count against timeouts).

    Workers need ``argus-lab`` installed (the task wrapper and ``ctx``, an
    ``al.ToolContext``, come from it) and must be able to unpickle the tools:
    cloudpickle ships functions defined in a notebook or script by value, while
    functions of an importable module need that module on the workers. A
    tool's ``ctx.workspace`` and ``ctx.workdir`` are the driver's paths: on a
    cluster without a shared file system, return data instead of writing
    files there.

    Args:
        client_or_address: A synchronous ``distributed.Client`` (the default
            kind; an asynchronous one lives on a loop that ``s.run()``
            blocks), a scheduler address such as ``"tcp://10.0.0.5:8786"``, or
            a cluster object such as a ``LocalCluster``. From an address or a
            cluster the executor makes its own Client and closes it in
            ``close()``; a Client you pass stays yours.
        retries_on_lost_worker: How many times one call is resubmitted after
            the cluster lost it (KilledWorker, a closed connection, a
            scheduler restart) before the loss reaches the session as a
            TransientError. Resubmissions reuse the call's ToolContext (same
            attempt, same idempotency key) and do not count against the
            task's ``retries``; 0 leaves every loss to the session. The Dask
            scheduler itself also reruns a task whose worker died, up to
            ``distributed.scheduler.allowed-failures`` times (default 3),
            before it reports KilledWorker: set that to 0 on the cluster if a
            tool that is not idempotent must never run twice.

    Raises:
        MissingDependency: ``distributed`` is not installed.
        ArgusError: the scheduler at the address cannot be reached.
        TypeError: the client is asynchronous, or neither a Client, a Cluster
            nor an address was given.
        ValueError: ``retries_on_lost_worker`` is negative, or no address.
    """

    def __init__(
        self, client_or_address: Client | str | Any, *, retries_on_lost_worker: int = 2
    ) -> None:
        distributed = import_distributed()
        if retries_on_lost_worker < 0:
            raise ValueError(
                f"retries_on_lost_worker must be >= 0, got {retries_on_lost_worker}"
            )
        self.retries_on_lost_worker = retries_on_lost_worker
        if isinstance(client_or_address, distributed.Client):
            client = client_or_address
            self._owns_client = False
        else:
            client = connect_client(distributed, client_or_address)
            self._owns_client = True
        if getattr(client, "_asynchronous", False):
            raise TypeError(
                "DaskExecutor needs a synchronous distributed.Client (the default, "
                "Client(address)) or the scheduler address: an asynchronous Client "
                "runs on your event loop, which s.run() would block"
            )
        self.client: Client = client
        """The Dask client calls are submitted through."""
        self._c: Any = client  # distributed is only partly typed
        self._token = uuid.uuid4().hex[:8]
        self._counter = itertools.count(1)
        # Dask key -> set when its task starts on a worker (client loop only).
        self._started: dict[str, asyncio.Event] = {}
        self._abandoned: set[Future[Any]] = set()
        self._topic = f"argus-started-{self._token}"
        self._subscribed_on: Any = None  # the scheduler connection subscribed on
        self.submitted = 0
        """Dask tasks submitted so far (resubmissions included)."""
        self.lost = 0
        """Calls the cluster lost so far (each resubmitted or raised)."""
        self.timed_out = 0
        """Calls that timed out (each ran on, then was released)."""

    def __repr__(self) -> str:
        address = getattr(self._c.scheduler, "address", None)
        return f"DaskExecutor({address!r})"

    def nthreads(self) -> int:
        """Worker threads in the cluster now: a good session ``concurrency``."""
        return int(sum(self._c.nthreads().values()))

    def close(self) -> None:
        """Stops listening to the cluster; closes the Client if this executor made it.

        A Client passed in stays open. Calls that timed out and still run on a
        worker are left to finish there.
        """
        if self._subscribed_on is not None and self._c.status in _OPEN:
            self._c.unsubscribe_topic(self._topic)
            self._subscribed_on = None
        if self._owns_client:
            self._c.close()

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the RemoteExecutor protocol ------------------------------------------

    async def call(
        self,
        fn: Callable[..., Any],
        kwargs: dict[str, Any],
        *,
        timeout: float | None,
        key: str,
        idempotent: bool = True,
    ) -> Any:
        """Runs ``fn(**kwargs)`` on the cluster and returns its result.

        Awaited on the session's loop; the Dask side runs on the client's loop.

        Args:
            fn: The tool's function (picklable by cloudpickle).
            kwargs: Its validated arguments (with ``ctx`` if it takes one).
            timeout: Seconds the call may run once it started on a worker;
                None: no limit.
            key: The attempt's idempotency key (part of each Dask key).
            idempotent: Whether the call may run again safely. A lost call of a
                tool that is not is never resubmitted: it may have taken effect,
                so InDoubtError is raised and the session asks a person.

        Returns:
            What ``fn`` returned.

        Raises:
            TransientError: the timeout passed, or the cluster lost the call
                more than ``retries_on_lost_worker`` times.
            ToolError: the call could not be pickled to be sent, or its
                result to be sent back.
            ArgusError: the Dask client is closed.
            Exception: whatever ``fn`` raised, unchanged.
        """
        self._check_open()
        loop: asyncio.AbstractEventLoop = self._c.loop.asyncio_loop
        cf = asyncio.run_coroutine_threadsafe(
            self._remote(fn, kwargs, timeout=timeout, key=key, idempotent=idempotent),
            loop,
        )
        # Cancelling this await (the session closing) cancels the coroutine on
        # the client's loop, which cancels the Dask future.
        out = await asyncio.wrap_future(cf)
        if isinstance(out, Raised):
            raise out.error
        return out.value

    # -- internals (the _remote side runs on the client's loop) -----------------

    def _check_open(self) -> None:
        if self._c.status not in _OPEN:
            raise ArgusError(
                f"the Dask client is {self._c.status}: no tool call can be sent; "
                "make a new DaskExecutor, reopen the session with executor=it, "
                "and retry the failed tasks (s.retry(task_id))"
            )

    def _subscribe(self) -> None:
        # A scheduler forgets a client's subscriptions when the connection
        # drops: subscribe again on each new connection.
        comm = self._c.scheduler_comm
        if comm is not self._subscribed_on:
            self._c.subscribe_topic(self._topic, self._on_started)
            self._subscribed_on = comm

    def _on_started(self, event: tuple[float, Any]) -> None:
        started = self._started.get(event[1])
        if started is not None:
            started.set()

    async def _remote(
        self,
        fn: Callable[..., Any],
        kwargs: dict[str, Any],
        *,
        timeout: float | None,
        key: str,
        idempotent: bool = True,
    ) -> Returned | Raised:
        what = describe(fn, kwargs)
        resubmits = 0
        while True:
            try:
                return await self._run_once(fn, kwargs, timeout, key, what)
            except Lost as e:
                self.lost += 1
                if not idempotent:
                    raise InDoubtError(
                        f"{what}: the Dask cluster lost the call ({e}) of a tool "
                        "with side effects that is not idempotent: it may or may "
                        "not have taken effect"
                    ) from None
                if resubmits >= self.retries_on_lost_worker:
                    raise TransientError(
                        f"{what}: the Dask cluster lost the call ({e}); "
                        f"resubmitted {resubmits} time(s)"
                    ) from None
                resubmits += 1
                log.warning(
                    "%s: the Dask cluster lost the call (%s); resubmitting (%d/%d)",
                    what,
                    e,
                    resubmits,
                    self.retries_on_lost_worker,
                )

    async def _run_once(
        self,
        fn: Callable[..., Any],
        kwargs: dict[str, Any],
        timeout: float | None,
        key: str,
        what: str,
    ) -> Returned | Raised:
        # The prefix names the task group on the dashboard; the token keeps a
        # restarted driver's keys apart from its predecessor's orphans.
        name = re.sub(r"[^A-Za-z0-9_]", "_", getattr(fn, "__name__", "tool"))
        dkey = f"{name}-{key}-{self._token}-{next(self._counter)}"
        started = asyncio.Event()
        if timeout is not None:
            self._subscribe()
            self._started[dkey] = started  # set by _on_started
        try:
            fut = self._submit(fn, kwargs, dkey, what, clock=timeout is not None)
        except BaseException:
            self._started.pop(dkey, None)
            raise
        outcome = asyncio.ensure_future(collect(fut, what))
        waiter = asyncio.ensure_future(started.wait())
        try:
            # Queued for a worker thread: no clock yet.
            await asyncio.wait({outcome, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if not outcome.done():  # started, with a timeout
                try:
                    await asyncio.wait_for(outcome, timeout)
                except TimeoutError:
                    self._abandon(fut)
                    raise TransientError(
                        f"{what} timed out after {timeout:g}s on the Dask cluster; "
                        "a worker thread cannot be interrupted, so the call runs "
                        "on there and its result will be dropped"
                    ) from None
            return outcome.result()
        except asyncio.CancelledError:
            outcome.cancel()
            await cancel(fut)
            raise
        finally:
            waiter.cancel()
            self._started.pop(dkey, None)

    def _submit(
        self,
        fn: Callable[..., Any],
        kwargs: dict[str, Any],
        dkey: str,
        what: str,
        *,
        clock: bool,
    ) -> Future[Any]:
        self._check_open()
        # One opaque callable: tool arguments named like submit's own options
        # (key, priority, workers, ...) cannot clash, and nothing in them is
        # read as part of a Dask graph.
        topic = self._topic if clock else None
        call = functools.partial(on_worker, topic, fn, kwargs)
        try:
            fut: Future[Any] = self._c.submit(call, key=dkey, pure=False, retries=0)
        except Exception as e:
            self._check_open()
            raise ToolError(
                f"{what} could not be sent to the Dask cluster: "
                f"{type(e).__name__}: {e}. Tools that run on Dask, and their "
                "arguments, must be picklable (cloudpickle)"
            ) from e
        self.submitted += 1
        return fut

    def _abandon(self, fut: Future[Any]) -> None:
        """Keeps a timed-out future until its task ends, then releases it."""
        self.timed_out += 1
        self._abandoned.add(fut)

        def ended(f: Future[Any]) -> None:  # in distributed's callback thread
            self._abandoned.discard(f)
            f.release()  # type: ignore[no-untyped-call]

        fut.add_done_callback(ended)  # type: ignore[no-untyped-call]
