"""``al.connect(url, token)``: a Workspace served by ``argus serve``, over HTTP.

A second kernel, a dashboard or a CI job reads and steers sessions and states
that live in another process, without opening their files::

    remote = al.connect("http://127.0.0.1:8765", token)
    s = remote.open("conf")
    s.start(); s.approve("book_venue", {"city": "Lyon"})
    for ev in s.stream():        # server-sent events, as they are committed
        print(ev.kind, ev.task_id)
    st = remote.state("trader-1")
    st.update(lambda d: d.update(cash=d["cash"] - 100), retries=5)
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

import httpx
import jsonpatch

from argus_lab.errors import ArgusError, ConflictError
from argus_lab.events import EventBase, event_adapter
from argus_lab.model import Plan, SessionInfo, TaskRecord

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["RemoteSession", "RemoteState", "RemoteWorkspace", "connect"]

log = logging.getLogger("argus_lab.client")


def connect(url: str, token: str, *, timeout: float = 30.0) -> RemoteWorkspace:
    """The Workspace served at ``url`` (``argus serve``), authenticated by
    ``token``. Checks the token at once (ArgusError when refused)."""
    remote = RemoteWorkspace(url, token, timeout=timeout)
    try:
        remote.states()  # fail here, not at first use, on a wrong URL or token
    except BaseException:
        remote.close()
        raise
    return remote


class RemoteWorkspace:
    """The read and control API of a Workspace over HTTP."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )

    def __repr__(self) -> str:
        return f"RemoteWorkspace({self.url!r})"

    def close(self) -> None:
        """Closes the HTTP connections."""
        self._http.close()

    def __enter__(self) -> RemoteWorkspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """One call; HTTP errors become Argus errors with the server's detail."""
        r = self._http.request(method, path, **kw)
        if r.status_code >= 400:
            self.fail(method, path, r)
        return r

    def fail(self, method: str, path: str, r: httpx.Response) -> None:
        """Raises the Argus error for a failed response."""
        try:
            detail = r.json().get("detail", r.text)
        except ValueError:
            detail = r.text
        msg = f"{method} {path}: {r.status_code} {detail}"
        if r.status_code == 404:
            raise KeyError(msg)
        if r.status_code in (409, 412):
            ver = r.headers.get("etag", "").strip('"')
            raise ConflictError(msg, version=int(ver) if ver.isdigit() else None)
        if r.status_code == 401:
            raise ArgusError(f"{self.url} refused the token: {detail}")
        raise ArgusError(msg)

    def sessions(self) -> list[SessionInfo]:
        """Every session, oldest first."""
        out: list[SessionInfo] = []
        offset = 0
        while True:
            page = self.request("GET", "/sessions", params={"offset": offset}).json()
            out += [SessionInfo.model_validate(d) for d in page["items"]]
            offset += len(page["items"])
            if not page["items"] or offset >= page["total"]:
                return out

    def open(self, name: str) -> RemoteSession:
        """A session by name or id (KeyError when there is none)."""
        s = RemoteSession(self, name)
        s.refresh()
        return s

    def states(self) -> list[str]:
        """The names of the served workspace's states."""
        items = self.request("GET", "/states").json()["items"]
        return [d["name"] for d in items]

    def state(self, name: str) -> RemoteState:
        """A state by name (created on first ``create``)."""
        return RemoteState(self, name)


class RemoteSession:
    """A session that lives in the server's process."""

    def __init__(self, ws: RemoteWorkspace, name: str) -> None:
        self.workspace = ws
        self.name = name
        self._view: dict[str, Any] = {}
        self._plan: tuple[int, Plan] | None = None

    def __repr__(self) -> str:
        return f"<RemoteSession {self.name!r} {self._view.get('status')}>"

    def _post(self, action: str, body: dict[str, Any] | None = None) -> Any:
        return self.workspace.request(
            "POST", f"/sessions/{self.name}/{action}", json=body or {}
        ).json()

    def refresh(self) -> dict[str, Any]:
        """Reads the session's info, status and counts again."""
        self._view = self.workspace.request("GET", f"/sessions/{self.name}").json()
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
            d = self.workspace.request("GET", f"/sessions/{self.name}/plan").json()
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
        path = f"/sessions/{self.name}/tasks/{task_id}/result"
        return self.workspace.request("GET", path).json()

    def context_breakdown(self, task_id: str) -> dict[str, Any] | None:
        """Not served over HTTP (the widget shows none for a remote session)."""
        return None

    def step(self) -> list[str]:
        """Runs the next ready task(s) once, in the server; returns their ids."""
        return list(self._post("step")["ran"])

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

        def mark(seq: int) -> None:
            nonlocal last
            last = seq  # where the tail began: a reconnect resumes from here

        def follow() -> None:
            nonlocal last
            with httpx.Client(
                base_url=ws.url,
                headers=ws._http.headers,
                timeout=httpx.Timeout(30.0, read=None),
            ) as http:
                while not stop.is_set():
                    params: dict[str, Any] = (
                        {"tail": True} if last is None else {"since": last}
                    )
                    try:
                        with http.stream(
                            "GET", f"/sessions/{self.name}/events/stream", params=params
                        ) as r:
                            live["response"] = r
                            for ev in _events(r, on_start=mark):
                                if stop.is_set():
                                    return
                                last = ev.seq
                                try:
                                    callback(ev)
                                except Exception:  # a subscriber's bug: log it
                                    log.exception("subscriber of %s failed", self.name)
                    except (httpx.HTTPError, httpx.StreamError):
                        # Closed by unsubscribe(), or the server went away: retry.
                        if not stop.wait(0.5):
                            continue

        t = threading.Thread(
            target=follow, name=f"argus-remote-{self.name}", daemon=True
        )
        t.start()

        def unsubscribe() -> None:
            stop.set()
            r = live.get("response")
            if r is not None:
                r.close()

        return unsubscribe

    @property
    def records(self) -> dict[str, TaskRecord]:
        out: dict[str, TaskRecord] = {}
        offset = 0
        while True:
            page = self.workspace.request(
                "GET", f"/sessions/{self.name}/tasks", params={"offset": offset}
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
                "GET", f"/sessions/{self.name}/events", params={"since": since}
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
            f"/sessions/{self.name}/events/stream",
            params={"since": since},
            timeout=httpx.Timeout(30.0, read=None),
        ) as r:
            if r.status_code >= 400:
                r.read()
                self.workspace.fail("GET", f"/sessions/{self.name}/events", r)
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


def _events(
    r: httpx.Response, on_start: Callable[[int], Any] | None = None
) -> Iterator[EventBase]:
    """The events of a server-sent-event response, as they arrive; the
    ``stream_started`` message (its id: the seq the stream starts after) goes
    to ``on_start``."""
    ad = event_adapter()
    kind, ident = "", ""
    for line in r.iter_lines():
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


class RemoteState:
    """A typed state held by the server; documents are plain JSON dicts."""

    def __init__(self, ws: RemoteWorkspace, name: str) -> None:
        self.workspace = ws
        self.name = name
        self._path = f"/states/{name}"

    def __repr__(self) -> str:
        return f"RemoteState({self.name!r})"

    def create(self, doc: dict[str, Any]) -> int:
        """Creates the state with ``doc`` as version 1 (ConflictError if it exists)."""
        r = self.workspace.request("POST", self._path, json=doc)
        return int(r.headers["x-argus-version"])

    def get_json(self, version: int | None = None) -> tuple[int, Any]:
        """(version, document)."""
        params = {} if version is None else {"version": version}
        r = self.workspace.request("GET", self._path, params=params)
        return int(r.headers["x-argus-version"]), r.json()

    def get(self) -> Any:
        return self.get_json()[1]

    def at(self, version: int) -> Any:
        return self.get_json(version)[1]

    @property
    def version(self) -> int:
        return self.get_json()[0]

    def patch(self, ops: list[dict[str, Any]], expected: int) -> int:
        """Commits a JSON Patch against version ``expected``; returns the new
        version. ConflictError when another writer got there first."""
        r = self.workspace.request(
            "PATCH",
            self._path,
            content=json.dumps(ops),
            headers={
                "Content-Type": "application/json-patch+json",
                "If-Match": f'"{expected}"',
            },
        )
        return int(r.headers["x-argus-version"])

    def update(self, fn: Callable[[Any], Any], *, retries: int = 3) -> tuple[int, Any]:
        """Runs ``fn`` on a fresh copy (change it in place or return a new
        one), commits the difference, and re-runs on a conflict."""
        for attempt in range(retries + 1):
            version, doc = self.get_json()
            new = json.loads(json.dumps(doc))
            out = fn(new)
            new = new if out is None else out
            ops = jsonpatch.make_patch(doc, new).patch
            if not ops:
                return version, doc
            try:
                return self.patch(ops, version), new
            except ConflictError:
                if attempt == retries:
                    raise
            time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
        raise AssertionError("unreachable")  # pragma: no cover

    def history(self) -> pd.DataFrame:
        """One row per version, as ``State.history()``."""
        import pandas as pd

        items = self.workspace.request("GET", self._path + "/history").json()["items"]
        df = pd.DataFrame(items)
        if "time" in df:
            df["time"] = pd.to_datetime(df["time"], utc=True)
        return df

    def fork(self, at: int | None = None, name: str | None = None) -> RemoteState:
        """A new state from this one at ``at`` (default: the latest version)."""
        r = self.workspace.request(
            "POST", self._path + "/fork", json={"at": at, "name": name}
        )
        return RemoteState(self.workspace, r.headers["x-argus-state"])
