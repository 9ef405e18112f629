"""Attacks on invariant 2 (a write that is not idempotent is never silently
rerun) from the way a tool's call fails:

- whatever a tool raises ends its task as an outcome, never the run (a
  TimeoutError with no timeout declared once raised TypeError out of
  ``s.run()`` and left the tasks beside it in doubt);
- a non-idempotent write whose request may have gone out (a connection reset,
  a lost reply) is in doubt, not retried; only a failure that proves nothing
  was sent (refused, no such host) is retried;
- a sync call past its timeout, or past a close, runs on in its thread:
  ``s.retry`` refuses while it runs, and its end is recorded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import os
import socket
import threading
import urllib.error
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import urllib3.exceptions

import argus_lab as al
from argus_lab.runtime import abandoned
from argus_lab.runtime.classify import error_outcome, request_sent
from argus_lab.runtime.executor import run_attempt
from argus_lab.runtime.outcome import Failed, InDoubt, Outcome, TimedOut
from argus_lab.store.artifacts import ArtifactStore
from tests.conftest import FAST
from tests.waiting import DEADLINE, wait_until

# -- hostile exceptions ------------------------------------------------------


class _StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message for you")


class _ReprRaises(ConnectionResetError):
    def __str__(self) -> str:
        raise ValueError("nope")

    def __repr__(self) -> str:
        raise ValueError("nope")


class _RetryAfterRaises(al.TransientError):
    @property
    def retry_after(self) -> float:  # type: ignore[override]
        raise KeyError("retry_after")

    @retry_after.setter
    def retry_after(self, value: object) -> None:
        pass


class _OddRetryAfter(ConnectionRefusedError):
    def __init__(self, value: object) -> None:
        super().__init__("refused")
        self.retry_after = value


class _NoName(Exception):
    pass


_NoName.__name__ = ""


class _CustomBase(BaseException):
    pass


def _cyclic() -> BaseException:
    a, b = ValueError("a"), ConnectionResetError("b")
    a.__cause__, b.__cause__ = b, a
    return a


def _deep() -> BaseException:
    e: BaseException = KeyError("root")
    for i in range(5000):
        nxt = RuntimeError(f"level {i}")
        nxt.__context__ = e
        e = nxt
    return e


def _bad_notes() -> BaseException:
    e = OSError("notes")
    e.__notes__ = 5  # type: ignore[attr-defined]
    return e


def _bad_args() -> BaseException:
    e = ConnectionError()
    e.args = "not a tuple"  # type: ignore[assignment]
    return e


HOSTILE: list[BaseException] = [
    TimeoutError(),
    TimeoutError("The read operation timed out"),
    TimeoutError("timed out"),
    TimeoutError(),
    ConnectionError("x"),
    ConnectionResetError(104, "Connection reset by peer"),
    ConnectionRefusedError(111, "Connection refused"),
    ConnectionAbortedError(),
    BrokenPipeError(),
    socket.gaierror(-2, "Name or service not known"),
    http.client.IncompleteRead(b"partial", 10),
    http.client.RemoteDisconnected("Remote end closed connection"),
    http.client.BadStatusLine(""),
    http.client.CannotSendRequest(),
    urllib.error.URLError(ConnectionRefusedError(111, "refused")),
    urllib.error.URLError("a string reason"),
    httpx.ReadError("read"),
    httpx.ConnectError("connect"),
    httpx.ReadTimeout("slow"),
    httpx.RemoteProtocolError("bad"),
    httpx.PoolTimeout("pool"),
    requests.ConnectionError("conn"),
    requests.ReadTimeout("slow"),
    requests.ConnectTimeout("slow connect"),
    urllib3.exceptions.ProtocolError("aborted", ConnectionResetError()),
    al.TransientError("503", retry_after=2.0),
    al.ToolError("no"),
    al.BudgetExceeded("money"),
    al.InDoubtError("lost"),
    ValueError(),
    KeyError("k"),
    OSError(),
    RecursionError(),
    MemoryError(),
    UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"),
    _StrRaises(),
    _ReprRaises(),
    _RetryAfterRaises("x"),
    _OddRetryAfter("soon"),
    _OddRetryAfter(float("nan")),
    _OddRetryAfter(-5),
    _OddRetryAfter(float("inf")),
    _OddRetryAfter(True),
    _OddRetryAfter(10**400),
    _NoName(),
    _cyclic(),
    _deep(),
    _bad_notes(),
    _bad_args(),
    Exception("\x00\ud800 odd text " * 1000),
]


def _tool(kind: str, timeout: float | None = None) -> al.Tool:
    def fn() -> None:
        return None

    if kind == "unsafe":
        return al.tool(side_effect="write", idempotent=False, timeout=timeout)(fn)
    if kind == "idempotent":
        return al.tool(side_effect="write", idempotent=True, timeout=timeout)(fn)
    return al.tool(timeout=timeout)(fn)


@pytest.mark.parametrize("kind", ["unsafe", "idempotent", "none"])
@pytest.mark.parametrize("timeout", [None, 0.5])
def test_error_outcome_never_raises(kind: str, timeout: float | None) -> None:
    tool = _tool(kind, timeout)
    for e in HOSTILE:
        out = error_outcome(tool, e, timeout)
        assert isinstance(out, Failed | TimedOut | InDoubt), (e, out)
        assert isinstance(out.error, str) and out.error
        ra = getattr(out, "retry_after", None)
        assert ra is None or (isinstance(ra, float) and 0 <= ra < float("inf"))


@pytest.mark.parametrize(
    "e",
    [
        TimeoutError("The read operation timed out"),
        ConnectionResetError(),
        BrokenPipeError(),
        ConnectionAbortedError(),
        http.client.IncompleteRead(b""),
        http.client.RemoteDisconnected("closed"),
        httpx.ReadError("r"),
        httpx.ReadTimeout("r"),
        httpx.RemoteProtocolError("r"),
        httpx.WriteError("w"),
        requests.ReadTimeout("r"),
        requests.ConnectionError("r"),
        _ReprRaises(),
    ],
    ids=lambda e: type(e).__name__,
)
def test_an_unsafe_write_that_may_have_been_sent_is_in_doubt(e: Exception) -> None:
    out = error_outcome(_tool("unsafe"), e, None)
    assert isinstance(out, InDoubt), out
    assert "may have been sent" in out.error and "not retried" in out.error


def _wrapped(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as i:
            raise outer from i
    except BaseException as o:
        return o


@pytest.mark.parametrize(
    "e",
    [
        ConnectionRefusedError(111, "refused"),
        socket.gaierror(-2, "Name or service not known"),
        _wrapped(al.TransientError("could not connect"), ConnectionRefusedError()),
    ],
    ids=lambda e: type(e).__name__,
)
def test_an_unsafe_write_that_was_not_sent_is_retried(e: Exception) -> None:
    assert request_sent(e) == "no"
    out = error_outcome(_tool("unsafe"), e, None)
    assert isinstance(out, Failed) and out.kind == "transient", out


@pytest.mark.parametrize(
    "e",
    [
        httpx.ConnectError("refused"),
        httpx.ConnectTimeout("slow"),
        requests.ConnectTimeout("slow"),
        requests.ConnectionError(
            urllib3.exceptions.MaxRetryError(
                None,  # type: ignore[arg-type]
                "/",
                urllib3.exceptions.NewConnectionError(None, "refused"),  # type: ignore[arg-type]
            )
        ),
        urllib.error.URLError(ConnectionRefusedError(111, "refused")),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_clients_failure_to_connect_fails_an_unsafe_write_once(
    e: Exception,
) -> None:
    # A client library may follow a redirect after the write took effect (a
    # POST answered 303 to a host that is down, a reviewer's repro paid four
    # times): its refusal proves nothing. It fails once, as before.
    assert request_sent(e) == "no"
    out = error_outcome(_tool("unsafe"), e, None)
    assert isinstance(out, Failed) and out.kind == "error", out


def test_a_transient_error_wrapping_a_lost_reply_is_in_doubt() -> None:
    e = _wrapped(al.TransientError("gateway flaky"), httpx.ReadTimeout("slow"))
    assert isinstance(error_outcome(_tool("unsafe"), e, None), InDoubt)
    # The tool's own TransientError, with nothing behind it: its word stands.
    out = error_outcome(_tool("unsafe"), al.TransientError("429"), None)
    assert isinstance(out, Failed) and out.kind == "transient"


@pytest.mark.parametrize("kind", ["idempotent", "none"])
def test_safe_tools_keep_retrying_connection_errors(kind: str) -> None:
    tool = _tool(kind)
    assert isinstance(error_outcome(tool, TimeoutError("t"), None), TimedOut)
    for e in (ConnectionResetError(), ConnectionRefusedError(), ConnectionError()):
        out = error_outcome(tool, e, None)
        assert isinstance(out, Failed) and out.kind == "transient"


# -- in a run -------------------------------------------------------------------


def test_timeout_error_without_a_timeout_does_not_end_the_run(
    ws: al.Workspace,
) -> None:
    """The run goes on: the tasks beside the failing one commit their results."""
    beside = threading.Event()
    charged: list[str] = []

    @al.tool(side_effect="write", idempotent=False)
    def charge(order: str) -> dict[str, str]:
        charged.append(order)
        beside.wait(DEADLINE)  # the others are mid-call when this raises
        raise TimeoutError("The read operation timed out")

    @al.tool(side_effect="write", idempotent=False)
    def pay(task: str) -> dict[str, str]:
        beside.set()
        return {"paid": task}

    plan = {
        "goal": "g",
        "tasks": [
            {"id": "o1", "tool": "charge", "args": {"order": "o1"}},
            {"id": "p1", "tool": "pay", "args": {"task": "p1"}},
            {"id": "p2", "tool": "pay", "args": {"task": "p2"}},
        ],
    }
    s = ws.new_session(plan=plan, tools=[charge, pay], name="c", approvals=[])
    r = s.run()
    assert r.status == "paused"
    assert {t: s.record(t).status for t in ("o1", "p1", "p2")} == {
        "o1": "in_doubt",
        "p1": "succeeded",
        "p2": "succeeded",
    }
    assert "TimeoutError" in (s.record("o1").reason or "")
    assert charged == ["o1"]
    s.close()


def _raiser(e: BaseException, how: str) -> al.Tool:
    if how == "async":

        async def afn() -> None:
            raise e

        return al.tool(name="t_async", side_effect="write", idempotent=False)(afn)

    def fn() -> None:
        raise e

    if how == "inline":
        return al.tool(name="t_inline", inline=True)(fn)
    return al.tool(name="t_thread", side_effect="write", idempotent=False)(fn)


@pytest.mark.parametrize("how", ["thread", "async", "inline"])
def test_whatever_a_tool_raises_ends_its_task_not_the_run(
    ws: al.Workspace, how: str
) -> None:
    hostile = [*HOSTILE, KeyboardInterrupt(), GeneratorExit(), _CustomBase("odd")]
    for i, e in enumerate(hostile):
        tool = _raiser(e, how)
        plan = {"goal": "g", "tasks": [{"id": "t", "tool": tool.name, "retries": 0}]}
        s = ws.new_session(plan=plan, tools=[tool], name=f"{how}{i}", approvals=[])
        s.run()
        assert s.record("t").status in ("failed", "in_doubt"), (e, s.record("t"))
        s.close()


# -- a write that may have been sent is in doubt, not retried ---------------------


def _charging(exc: BaseException, **kw: Any) -> tuple[al.Tool, list[int]]:
    calls: list[int] = []

    @al.tool(name="charge", timeout=5, retries=2, **kw)
    def charge(order: str, *, ctx: al.ToolContext) -> dict[str, str]:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise exc
        return {"ok": order}

    return charge, calls


def _one(ws: al.Workspace, tool: al.Tool, name: str) -> al.Session:
    plan = {"goal": "g", "tasks": [{"id": "o1", "tool": "charge", "retries": 2}]}
    plan["tasks"][0]["args"] = {"order": "o1"}
    s = ws.new_session(plan=plan, tools=[tool], name=name, approvals=[], **FAST)
    s.run()
    return s


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionResetError("connection lost while reading the gateway's reply"),
        BrokenPipeError(),
        ConnectionAbortedError(),
        http.client.RemoteDisconnected("closed"),
        http.client.IncompleteRead(b"{"),
        httpx.ReadError("r"),
        TimeoutError("read"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_reset_non_idempotent_write_is_in_doubt_not_charged_twice(
    ws: al.Workspace, exc: BaseException
) -> None:
    tool, calls = _charging(exc, side_effect="write", idempotent=False)
    s = _one(ws, tool, "c")
    rec = s.record("o1")
    assert rec.status == "in_doubt" and calls == [1]
    assert "may have been sent" in (rec.reason or "")
    assert "s.retry('o1')" in (rec.reason or "")
    s.close()


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError(111, "Connection refused"),
        socket.gaierror(-2, "Name or service not known"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_refused_non_idempotent_write_is_retried(
    ws: al.Workspace, exc: BaseException
) -> None:
    tool, calls = _charging(exc, side_effect="write", idempotent=False)
    s = _one(ws, tool, "c")
    assert s.record("o1").status == "succeeded" and calls == [1, 2]
    s.close()


@pytest.mark.parametrize("kw", [{"side_effect": "write", "idempotent": True}, {}])
def test_a_reset_is_still_retried_for_safe_tools(
    ws: al.Workspace, kw: dict[str, Any]
) -> None:
    tool, calls = _charging(ConnectionResetError("reset"), **kw)
    s = _one(ws, tool, "c")
    assert s.record("o1").status == "succeeded" and calls == [1, 2]
    s.close()


def test_a_real_reset_after_the_request_went_out_is_in_doubt(
    ws: al.Workspace,
) -> None:
    """A loopback server that reads the request and resets the connection."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    received = threading.Event()

    def serve() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        received.set()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        conn.close()  # RST: the reply is lost

    threading.Thread(target=serve, daemon=True).start()
    calls: list[int] = []

    @al.tool(name="charge", side_effect="write", idempotent=False, retries=2)
    def charge(order: str, *, ctx: al.ToolContext) -> dict[str, Any]:
        calls.append(ctx.attempt)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)
        try:
            c.request("POST", "/charge", body=order)
            return {"status": c.getresponse().status}
        finally:
            c.close()

    s = _one(ws, charge, "c")
    srv.close()
    assert received.is_set() and calls == [1]
    assert s.record("o1").status == "in_doubt"
    s.close()


# -- a call that runs on after its attempt was abandoned ------------------------


ORDER_PLAN = {
    "goal": "g",
    "tasks": [{"id": "o1", "tool": "charge", "args": {"order": "o1"}}],
}
"""One charge, for ``_slow_charge``'s tool."""


def _slow_charge(
    release: threading.Event, entered: threading.Event, charged: list[int]
) -> al.Tool:
    @al.tool(name="charge", side_effect="write", idempotent=False, timeout=0.05)
    def charge(order: str, *, ctx: al.ToolContext) -> dict[str, str]:
        if ctx.attempt == 1:
            entered.set()
            release.wait(DEADLINE)  # a slow gateway: lands after the timeout
        charged.append(ctx.attempt)
        return {"charged": order}

    return charge


def test_a_timed_out_call_still_running_blocks_its_retry(ws: al.Workspace) -> None:
    release, entered, charged = threading.Event(), threading.Event(), []
    tool = _slow_charge(release, entered, charged)
    plan = ORDER_PLAN
    s = ws.new_session(plan=plan, tools=[tool], name="c", approvals=[])
    try:
        assert s.run().status == "paused"
        rec = s.record("o1")
        assert rec.status == "in_doubt"
        # Stored: read by other processes too, so it names this one.
        assert f"still running in process {os.getpid()} on host" in (rec.reason or "")
        with pytest.raises(al.ArgusError, match="still running in this process"):
            s.retry("o1")  # would charge beside the call still running
        assert s.record("o1").status == "in_doubt" and charged == []
        release.set()
        assert abandoned.wait(s.id, "o1", DEADLINE)
        wait_until(
            lambda: "has since ended: it returned" in (s.record("o1").reason or ""),
            "the session to record how the abandoned call ended",
        )
        ended = [e for e in s.events() if getattr(e, "call_ended", None)]
        assert [e.call_ended for e in ended] == ["returned"]  # type: ignore[attr-defined]
        assert charged == [1]
        s.skip("o1", "the charge went through")  # the person decides with facts
        assert s.record("o1").status == "skipped"
    finally:
        release.set()
        s.close()


def test_a_forks_retry_waits_for_its_parents_call_still_running(
    ws: al.Workspace,
) -> None:
    # A reviewer forked a session whose timed-out charge still ran: the fork
    # carried the task in doubt, but its retry charged beside the first call.
    release, entered, charged = threading.Event(), threading.Event(), []
    tool = _slow_charge(release, entered, charged)
    plan = ORDER_PLAN
    s = ws.new_session(plan=plan, tools=[tool], name="c", approvals=[])
    try:
        assert s.run().status == "paused"
        f = s.fork()
        assert f.record("o1").status == "in_doubt"
        with pytest.raises(al.ArgusError, match="still running in this process"):
            f.retry("o1")
        f2 = f.fork()  # and a fork of the fork
        with pytest.raises(al.ArgusError, match="still running in this process"):
            f2.retry("o1")
        release.set()
        assert abandoned.wait(s.id, "o1", DEADLINE)
        f.retry("o1")  # ended: a person who checked may run it again
        assert f.run().status == "succeeded" and charged == [1, 2]
        f.close()
        f2.close()
    finally:
        release.set()
        s.close()


def test_an_ended_call_that_raised_says_so_and_retry_then_runs(
    ws: al.Workspace,
) -> None:
    release, entered = threading.Event(), threading.Event()
    calls: list[int] = []

    @al.tool(name="charge", side_effect="write", idempotent=False, timeout=0.05)
    def charge(*, ctx: al.ToolContext) -> str:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            entered.set()
            release.wait(DEADLINE)
            raise ValueError("card declined")
        return "ok"

    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "o1", "tool": "charge"}]},
        tools=[charge],
        name="c",
        approvals=[],
    )
    try:
        s.run()
        release.set()
        assert abandoned.wait(s.id, "o1", DEADLINE)
        wait_until(
            lambda: "raised ValueError: card declined" in (s.record("o1").reason or ""),
            "the reason to say how the call ended",
        )
        s.retry("o1")
        assert s.run().status == "succeeded" and calls == [1, 2]
    finally:
        release.set()
        s.close()


def test_close_then_reopen_in_the_same_process_waits_for_the_call(
    ws: al.Workspace,
) -> None:
    release, entered, charged = threading.Event(), threading.Event(), []
    tool = _slow_charge(release, entered, charged)
    tool.timeout = None  # no timeout: close() abandons it instead
    plan = ORDER_PLAN
    s0 = ws.new_session(
        plan=plan, tools=[tool], name="c", approvals=[], shutdown_grace=0.0
    )
    s = None
    try:
        s0.start()
        assert entered.wait(DEADLINE)
        s0.close()
        s = ws.open("c", tools=[tool], approvals=[])
        assert s.run().status == "paused"
        rec = s.record("o1")
        assert rec.status == "in_doubt"
        assert "still running in this process" in (rec.reason or "")
        assert "was interrupted" not in (rec.reason or "")
        with pytest.raises(al.ArgusError, match="still running in this process"):
            s.retry("o1")
        release.set()
        assert abandoned.wait(s.id, "o1", DEADLINE)
        wait_until(
            lambda: "has since ended: it returned" in (s.record("o1").reason or ""),
            "the reopened session to record how the call ended",
        )
        assert charged == [1]
    finally:
        release.set()
        if s is not None:
            s.close()


def test_an_async_write_stopped_by_its_timeout_is_in_doubt_not_running(
    ws: al.Workspace,
) -> None:
    @al.tool(name="charge", side_effect="write", idempotent=False, timeout=0.05)
    async def charge() -> str:
        await asyncio.Event().wait()  # never set: our timeout cancels it
        return "never"

    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "o1", "tool": "charge"}]},
        tools=[charge],
        name="c",
        approvals=[],
    )
    s.run()
    rec = s.record("o1")
    assert rec.status == "in_doubt" and "cancelled mid-call" in (rec.reason or "")
    assert abandoned.running(s.id, "o1") is None
    s.close()


def test_a_call_that_never_left_the_queue_is_retried_not_in_doubt(
    tmp_path: Path, ctx: al.ToolContext
) -> None:
    """Its timeout ran out while every tool thread was busy: it never began."""
    gate = threading.Event()

    @al.tool(side_effect="write", idempotent=False)
    def charge() -> str:
        return "ok"

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        busy = pool.submit(gate.wait, DEADLINE)

        async def attempt() -> Outcome:
            return await run_attempt(
                charge,
                {},
                ctx,
                timeout=0.01,
                success=None,
                pool=pool,
                artifacts=lambda: ArtifactStore(tmp_path / "a"),
            )

        out = asyncio.run(attempt())
        gate.set()
        busy.result()
    assert isinstance(out, TimedOut) and "before its call began" in out.error
    assert abandoned.running(ctx.session_id, ctx.task_id) is None


def test_a_lost_reply_behind_a_suppressed_context_is_still_in_doubt() -> None:
    """runtime/dask.py raises TransientError ``from None`` when a call times
    out on a worker (whose thread runs on): for a write that is not
    idempotent that is in doubt, not a retry."""
    try:
        try:
            raise TimeoutError
        except TimeoutError:
            raise al.TransientError("timed out on the Dask cluster") from None
    except al.TransientError as caught:
        e = caught
    assert isinstance(error_outcome(_tool("unsafe"), e, 5.0), InDoubt)
    out = error_outcome(_tool("idempotent"), e, 5.0)
    assert isinstance(out, Failed) and out.kind == "transient"


def test_the_registry_of_abandoned_calls_under_many_threads() -> None:
    release = threading.Event()
    n = 64

    def call(i: int) -> int:
        release.wait(DEADLINE)
        if i % 2:
            raise ValueError(f"declined {i}")
        return i

    heard: list[str] = []
    lock = threading.Lock()

    def on_end(c: abandoned.AbandonedCall) -> None:
        with lock:
            heard.append(c.task_id)

    class Owner:
        pass

    owner = Owner()
    abandoned.watch("reg", on_end, owner=owner)
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        for i in range(n):
            fut = pool.submit(call, i)
            abandoned.abandon(
                fut, session_id="reg", task_id=f"t{i}", attempt=1, tool="c", why="w"
            )
        assert all(abandoned.running("reg", f"t{i}") for i in range(n))
        release.set()
        assert all(abandoned.wait("reg", f"t{i}", DEADLINE) for i in range(n))
    abandoned.unwatch("reg", on_end)
    assert sorted(heard) == sorted(f"t{i}" for i in range(n))
    for i in range(n):
        c = abandoned.lookup("reg", f"t{i}")
        assert c is not None and abandoned.running("reg", f"t{i}") is None
        want = f"raised ValueError: declined {i}" if i % 2 else "returned"
        assert c.ended == want
