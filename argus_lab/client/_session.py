"""A session that lives in the server's process, read and steered over HTTP."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from argus_lab.events import EventBase, event_adapter
from argus_lab.model import SessionInfo, TaskRecord
from argus_lab.plan import Plan

if TYPE_CHECKING:
    from argus_lab.client import RemoteWorkspace

__all__ = ["RemoteSession"]

log = logging.getLogger("argus_lab.client")


class RemoteSession:
    """A session that lives in the server's process."""

    def __init__(self, ws: RemoteWorkspace, name: str) -> None:
        self.workspace = ws
        self.name = name
        self._view: dict[str, Any] = {}
        self._plan: tuple[int, Plan] | None = None
        self._path = ws.path("sessions", name)
        self._blocking = 0
        self._blocking_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<RemoteSession {self.name!r} {self._view.get('status')}>"

    def _post(self, action: str, body: dict[str, Any] | None = None) -> Any:
        return self.workspace.request(
            "POST", f"{self._path}/{action}", json=body or {}
        ).json()

    def refresh(self) -> dict[str, Any]:
        """Reads the session's info, status and counts again."""
        self._view = self.workspace.request("GET", self._path).json()
        return self._view

    @property
    def info(self) -> SessionInfo:
        known = set(SessionInfo.model_fields)
        return SessionInfo.model_validate(
            {k: v for k, v in self.refresh().items() if k in known}
        )

    @property
    def status(self) -> str:
        return str(self.refresh()["status"])

    @property
    def running(self) -> bool:
        return bool(self.refresh()["running"])

    def counts(self) -> dict[str, int]:
        """Tasks per status."""
        return dict(self.refresh()["counts"])

    def pending_approvals(self) -> dict[str, dict[str, Any]]:
        """Tasks waiting for a decision, with the arguments they would run with."""
        return dict(self.refresh()["pending_approvals"])

    @property
    def reason(self) -> str | None:
        return self.refresh()["reason"]  # type: ignore[no-any-return]

    @property
    def breakpoints(self) -> list[str]:
        return list(self.refresh()["breakpoints"])

    @property
    def usage(self) -> dict[str, float]:
        return dict(self.refresh()["usage"])

    def stale(self) -> list[str]:
        """Tasks whose tool (as the server has it) or inputs changed."""
        return list(self.refresh()["stale"])

    @property
    def plan(self) -> Plan:
        """The plan (fetched again only when its version changed)."""
        version = int(self._view.get("plan_version") or self.refresh()["plan_version"])
        if self._plan is None or self._plan[0] != version:
            d = self.workspace.request("GET", f"{self._path}/plan").json()
            self._plan = (version, Plan.model_validate(d))
        return self._plan[1]

    def record(self, task_id: str) -> TaskRecord:
        """One task's record (KeyError for an unknown task)."""
        recs = self.records
        if task_id not in recs:
            raise KeyError(f"session {self.name} has no task {task_id!r}")
        return recs[task_id]

    def result(self, task_id: str) -> Any:
        """A task's result (large artifacts come back as their text form)."""
        # HTN task ids hold "/": sent as %2F, so "a/../b" cannot climb the URL.
        path = f"{self._path}/tasks/{quote(task_id, safe='')}/result"
        return self.workspace.request("GET", path).json()

    def context_breakdown(self, task_id: str) -> dict[str, Any] | None:
        """Not served over HTTP (the widget shows none for a remote session)."""
        return None

    @property
    def blocking_run(self) -> bool:
        """Whether a ``step()`` of this client is waiting for the server (its
        caller, e.g. a notebook cell, is blocked until it returns); the widget
        says its controls wait for it, as for a local blocking ``run()``. A
        run in the server (``start()``) never blocks a cell here: False."""
        return self._blocking > 0

    def step(self) -> list[str]:
        """Runs the next ready task(s) once, in the server; returns their ids."""
        with self._blocking_lock:
            self._blocking += 1
        try:
            return list(self._post("step")["ran"])
        finally:
            with self._blocking_lock:
                self._blocking -= 1

    def set_breakpoint(self, task_id: str, on: bool = True) -> None:
        self._post("breakpoint", {"task_id": task_id, "on": on})

    def subscribe(self, callback: Callable[[EventBase], Any]) -> Callable[[], None]:
        """Calls ``callback(event)`` for each event committed from now on, from
        a background thread reading the server-sent-event stream (reconnecting
        where it left off). Returns an unsubscribe function. With it a
        ``GraphWidget`` shows a session that runs in another process."""
        stop = threading.Event()
        ws = self.workspace
        live: dict[str, Any] = {}

        last: int | None = None

        started = threading.Event()

        def mark(seq: int) -> None:
            nonlocal last
            if last is None:
                last = seq  # where the tail began: a reconnect resumes from here
            started.set()

        def follow() -> None:
            nonlocal last
            pause = 0.5
            with httpx.Client(
                base_url=ws.url,
                headers=ws._http.headers,
                # The server pings every 15 s: a silent minute is a dead link.
                timeout=httpx.Timeout(30.0, read=60.0),
            ) as http:
                while not stop.is_set():
                    params: dict[str, Any] = (
                        {"tail": True} if last is None else {"since": last}
                    )
                    try:
                        with http.stream(
                            "GET", f"{self._path}/events/stream", params=params
                        ) as r:
                            live["response"] = r
                            if stop.is_set():
                                return
                            if r.status_code >= 400:  # e.g. 503: too many streams
                                r.read()
                                log.warning(
                                    "events of %s: %s refused the stream (%d); "
                                    "retrying in %.1f s",
                                    self.name,
                                    ws.url,
                                    r.status_code,
                                    pause,
                                )
                            else:
                                pause = 0.5
                                for ev in _events(r, on_start=mark, stop=stop):
                                    last = ev.seq
                                    try:
                                        callback(ev)
                                    except Exception:  # a subscriber's bug: log it
                                        log.exception(
                                            "subscriber of %s failed", self.name
                                        )
                    except (httpx.HTTPError, httpx.StreamError):
                        pass  # closed by unsubscribe(), or the server went away
                    # Never a tight loop: wait before reconnecting, longer
                    # while the server keeps refusing.
                    if stop.wait(pause):
                        return
                    pause = min(pause * 2, 10.0)

        t = threading.Thread(
            target=follow, name=f"argus-remote-{self.name}", daemon=True
        )
        t.start()
        # Returns once the stream is open: every event committed after this
        # call is heard (a tail opened later would miss the first ones).
        if not started.wait(ws._timeout):
            log.warning("events of %s: the stream is not open yet", self.name)

        def unsubscribe() -> None:
            stop.set()
            r = live.get("response")
            if r is not None:
                _hang_up(r)
                r.close()

        return unsubscribe

    @property
    def records(self) -> dict[str, TaskRecord]:
        out: dict[str, TaskRecord] = {}
        offset = 0
        while True:
            page = self.workspace.request(
                "GET", f"{self._path}/tasks", params={"offset": offset}
            ).json()
            for d in page["items"]:
                out[d["task_id"]] = TaskRecord.model_validate(d)
            offset += len(page["items"])
            if not page["items"] or offset >= page["total"]:
                return out

    def events(self, since: int = 0) -> list[EventBase]:
        """Committed events with seq > since, in order."""
        ad = event_adapter()
        out: list[EventBase] = []
        while True:
            page = self.workspace.request(
                "GET", f"{self._path}/events", params={"since": since}
            ).json()
            out += [ad.validate_python(d) for d in page["items"]]
            since = page["next"]
            if not page["more"]:
                return out

    def stream(self, since: int = 0) -> Generator[EventBase, None, None]:
        """Yields events as they are committed (server-sent events); stop by
        breaking out of the loop."""
        with self.workspace._http.stream(
            "GET",
            f"{self._path}/events/stream",
            params={"since": since},
            timeout=httpx.Timeout(30.0, read=None),
        ) as r:
            if r.status_code >= 400:
                r.read()
                self.workspace.fail("GET", f"{self._path}/events", r)
            yield from _events(r)

    def start(self) -> None:
        """Runs the session in the background, in the server's process."""
        self._post("run")

    def pause(self, reason: str = "paused by the API") -> None:
        self._post("pause", {"reason": reason})

    def approve(
        self, task_id: str, args: dict[str, Any] | None = None, *, by: str | None = None
    ) -> None:
        self._post("approve", {"task_id": task_id, "args": args, "by": by})

    def reject(self, task_id: str, reason: str = "rejected") -> None:
        self._post("reject", {"task_id": task_id, "reason": reason})

    def retry(self, task_id: str) -> None:
        self._post("retry", {"task_id": task_id})

    def skip(self, task_id: str, reason: str = "skipped by the user") -> None:
        self._post("skip", {"task_id": task_id, "reason": reason})

    def fork(
        self, at: str | None = None, *, name: str | None = None, reuse: str = "cached"
    ) -> RemoteSession:
        info = self._post("fork", {"at": at, "name": name, "reuse": reuse})
        return self.workspace.open(info["name"])


def _hang_up(r: httpx.Response) -> None:
    """Shuts the response's socket down, so the thread blocked reading it
    wakes at once. Closing the response from another thread does not: the
    reader would wait for the next event (pings carry none), and the server
    would keep the stream (one of its few) for a subscriber that is gone."""
    stream = r.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _events(
    r: httpx.Response,
    on_start: Callable[[int], Any] | None = None,
    stop: threading.Event | None = None,
) -> Iterator[EventBase]:
    """The events of a server-sent-event response, as they arrive; the
    ``stream_started`` message (its id: the seq the stream starts after) goes
    to ``on_start``."""
    ad = event_adapter()
    kind, ident = "", ""
    for line in r.iter_lines():
        if stop is not None and stop.is_set():  # checked on pings too
            return
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("id:"):
            ident = line[3:].strip()
        elif line.startswith("data:"):
            if kind == "stream_started":
                if on_start is not None and ident.isdigit():
                    on_start(int(ident))
            else:
                yield ad.validate_json(line[5:].strip())
        elif not line:
            kind, ident = "", ""
