"""The HTTP API over one Workspace (FastAPI): sessions, their tasks and events,
control, and typed states with JSON Patch and ETags. ``/docs`` and
``/openapi.json`` describe every route."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Annotated, Any, Literal

from fastapi import Body, Depends, FastAPI, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette.sse import EventSourceResponse

from argus_lab.errors import ArgusError
from argus_lab.events import event_adapter
from argus_lab.plan._refs import iter_references
from argus_lab.runtime.session import Session, intents_left
from argus_lab.server._errors import add_error_handlers
from argus_lab.server._guard import LOOPBACK, MAX_BODY, Guard
from argus_lab.server._states import add_state_routes
from argus_lab.store.state import State
from argus_lab.workspace import Workspace

__all__ = ["MAX_STREAMS", "Hub", "create_app"]

MAX_STREAMS = 32
"""Event streams open at once; each holds a session open. More get 503."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # unknown fields are refused (422)


class TaskRef(_Strict):
    task_id: str = Field(min_length=1, max_length=200)


class Approve(TaskRef):
    args: dict[str, Any] | None = None
    by: str | None = Field(default=None, max_length=200)


class Reason(TaskRef):
    reason: str = Field(default="by the API", max_length=2000)


class Breakpoint(TaskRef):
    on: bool = True


class Pause(_Strict):
    reason: str = Field(default="paused by the API", max_length=2000)


def _env_names(value: Any) -> set[str]:
    return {r.path[0] for _, r in iter_references(value) if r is not None and r.is_env}


def _refuse_new_env_references(s: Session, task_id: str, args: dict[str, Any]) -> None:
    """Edited args over HTTP may keep the plan's ``${env.NAME}`` references
    but not add one: it would be read from this server's environment when
    the task runs and sent to the tool, so a client holding the token could
    route any of the server's secrets to a write tool. (Typed states take a
    client's ``${env.NAME}`` as text for the same reason.)"""
    try:
        asked = s.plan.task(task_id).args
    except KeyError:
        return  # approve() says what is wrong with the task id
    added = _env_names(args) - _env_names(asked)
    if added:
        raise ArgusError(
            f"the edited args add ${{env.{sorted(added)[0]}}}: over HTTP an approval "
            "may keep the plan's environment references but not add one (it "
            "would send this server's secret to the tool). Approve from Python "
            "in the server's process, or change the plan"
        )


class ForkSession(_Strict):
    at: str | None = None
    name: str | None = None
    reuse: Literal["cached", "none"] = "cached"


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""What a session or state name (or id) can be: anything else cannot exist,
and never reaches the file system."""


def known_name(name: str, what: str = "session") -> str:
    """``name``, or KeyError (404) when no session or state can have it."""
    if not _NAME.fullmatch(name):
        raise KeyError(f"no {what} named {name[:80]!r}")
    return name


class Hub:
    """Open sessions and states, shared by the request threads."""

    def __init__(self, ws: Workspace, tools: list[Any]) -> None:
        self.ws = ws
        self.tools = tools
        self.controlled: dict[str, Session] = {}
        self.states: dict[str, State[Any]] = {}
        self.lock = threading.Lock()
        self.streams = 0  # changed on the event loop only

    def control(self, name: str) -> Session:
        """The session this server drives (kept open: it may run here)."""
        known_name(name)
        with self.lock:
            s = self.controlled.get(name)
            if s is None:
                s = self.controlled[name] = self.ws.open(name, tools=self.tools)
            return s

    @contextmanager
    def reading(self, name: str) -> Iterator[Session]:
        """A session to read: the one running here, else a fresh view of disk."""
        known_name(name)
        with self.lock:
            s = self.controlled.get(name)
            if s is not None and s.running:
                yield s
                return
        s = self.ws.open(name, tools=self.tools)
        try:
            yield s
        finally:
            s.close()

    def state(self, name: str) -> State[Any]:
        known_name(name, "state")
        with self.lock:
            st = self.states.get(name)
            if st is None:
                if name not in self.ws.states():
                    raise KeyError(f"no state {name!r} in {self.ws.path}")
                st = self.states[name] = self.ws.state(name)
            return st

    def close(self) -> None:
        for s in self.controlled.values():
            s.close()
        for st in self.states.values():
            st.close()


def _known_query(request: Request) -> None:
    """Refuses query parameters the route does not declare (a typo such as
    ``?sinse=5`` would otherwise be ignored silently)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    allowed = {p.alias for p in dependant.query_params}
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise RequestValidationError(
            [
                {"loc": ["query", k], "msg": "unknown query parameter", "type": "extra"}
                for k in unknown
            ]
        )


def _page(items: list[Any], offset: int, limit: int) -> dict[str, Any]:
    return {
        "items": items[offset : offset + limit],
        "total": len(items),
        "offset": offset,
    }


def _interrupted(ws: Workspace, d: dict[str, Any], here: bool = False) -> None:
    """Adds ``interrupted``: stored as running, but no live process runs it
    (it died mid-run; ``argus ls`` says "interrupted"). ``status`` keeps the
    stored word, which clients validate; a resume is what ends it."""
    gone = False
    if d.get("status") == "running" and not here:
        with contextlib.suppress(ArgusError, KeyError, OSError):
            gone = ws.runner(d["id"]) is None  # the head alone, not the records
    d["interrupted"] = gone


def _session_view(s: Session) -> dict[str, Any]:
    d = s.info.model_dump(mode="json")
    d.update(
        status=s.status,
        reason=s.reason,
        counts=s.counts(),
        running=s.running,
        pending_approvals=s.pending_approvals(),
        stale=s.stale(),
        usage=s.usage,
    )
    _interrupted(s.workspace, d, here=s.running)
    return d


def create_app(
    ws: Workspace,
    token: str,
    *,
    tools: list[Any] | None = None,
    host: str = "127.0.0.1",
    allow_hosts: list[str] | tuple[str, ...] = (),
) -> Any:
    """The ASGI app: FastAPI routes behind the token/size/log guard. ``host``:
    the address it is bound to; requests naming another Host are refused
    (every interface, 0.0.0.0 or ::, accepts any)."""
    hub = Hub(ws, list(tools or []))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        hub.close()

    app = FastAPI(
        title="Argus Lab",
        summary="Sessions, their trajectories and typed states over HTTP.",
        version="1",
        lifespan=lifespan,
        dependencies=[Depends(_known_query)],
    )

    add_error_handlers(app)

    @app.get("/health", summary="Liveness (no token needed)")
    def health() -> dict[str, Any]:
        return {"ok": True}

    # -- sessions --------------------------------------------------------------

    @app.get("/sessions", summary="Sessions, oldest first (paged)")
    def sessions(
        offset: int = Query(0, ge=0), limit: int = Query(100, ge=1, le=1000)
    ) -> dict[str, Any]:
        infos = [i.model_dump(mode="json") for i in ws.sessions()]
        for d in infos:
            _interrupted(ws, d)
        return _page(infos, offset, limit)

    @app.get("/sessions/{name}", summary="One session: info, status, counts")
    def session(name: str) -> dict[str, Any]:
        with hub.reading(name) as s:
            return _session_view(s)

    @app.get("/sessions/{name}/tasks", summary="Task records (paged)")
    def tasks(
        name: str,
        offset: int = Query(0, ge=0),
        limit: int = Query(500, ge=1, le=5000),
    ) -> dict[str, Any]:
        with hub.reading(name) as s:
            records = s.records
            recs = [r.model_dump(mode="json") for r in records.values()]
            gone = intents_left(s, records)  # as argus show and tasks_df say it
        for d in recs:
            d["interrupted"] = gone and d["status"] == "running"
        return _page(recs, offset, limit)

    @app.get("/sessions/{name}/events", summary="Events with seq > since (paged)")
    def events(
        name: str,
        since: int = Query(0, ge=0),
        limit: int = Query(1000, ge=1, le=10000),
    ) -> dict[str, Any]:
        ad = event_adapter()
        with hub.reading(name) as s:
            # Only the page (and one more, to tell whether there is more) is
            # parsed, however long the trajectory.
            raw = list(itertools.islice(s.event_json(since), limit + 1))
        items = [ad.validate_json(b).model_dump(mode="json") for b in raw[:limit]]
        nxt = items[-1]["seq"] if items else since
        return {"items": items, "next": nxt, "more": len(raw) > limit}

    @app.get(
        "/sessions/{name}/events/stream",
        summary="Server-sent events: each committed event as it lands",
        response_class=Response,
    )
    async def stream(
        request: Request,
        name: str,
        since: int = Query(0, ge=0),
        tail: bool = Query(False, description="only events committed from now on"),
    ) -> Response:
        known_name(name)
        if hub.streams >= MAX_STREAMS:
            return JSONResponse(
                {
                    "detail": f"{MAX_STREAMS} event streams are open already; "
                    "close one, or poll GET /sessions/{name}/events?since=N"
                },
                503,
                headers={"Retry-After": "5"},
            )
        hub.streams += 1  # given back when the stream ends, however it ends
        try:
            s = await run_in_threadpool(ws.open, name)
        except BaseException:
            hub.streams -= 1
            raise
        if tail:
            try:
                past = await run_in_threadpool(s.events, since)
            except BaseException:
                hub.streams -= 1
                await run_in_threadpool(s.close)
                raise
            since = past[-1].seq if past else since
        resume = request.headers.get("last-event-id", "")
        if resume.isdigit():  # a reconnecting EventSource goes on where it was
            since = max(since, int(resume))

        async def gen() -> AsyncIterator[dict[str, str]]:
            last = since
            try:
                # Where the stream starts, so a client can resume from there.
                yield {"event": "stream_started", "id": str(since), "data": "{}"}
                while not await request.is_disconnected():
                    for e in await run_in_threadpool(s.events, last):
                        last = e.seq
                        yield {
                            "event": e.kind,
                            "id": str(e.seq),
                            "data": e.model_dump_json(),
                        }
                    await asyncio.sleep(0.2)  # the store is polled: any writer
            finally:
                hub.streams -= 1
                await run_in_threadpool(s.close)

        return EventSourceResponse(gen(), ping=15)

    @app.get("/sessions/{name}/plan", summary="The session's plan")
    def plan(name: str) -> dict[str, Any]:
        with hub.reading(name) as s:
            return s.plan.model_dump(mode="json")

    @app.get("/sessions/{name}/tasks/{task_id:path}/result", summary="A task's result")
    def result(name: str, task_id: str) -> Any:
        with hub.reading(name) as s:
            value = s.result(task_id)
        # Artifacts (frames, images) come back as their text form.
        return json.loads(json.dumps(value, default=str))

    @app.post("/sessions/{name}/step", summary="Run the next ready task(s) once")
    def step(name: str) -> dict[str, Any]:
        recs = hub.control(name).step()
        return {"ran": [r.task_id for r in recs]}

    @app.post("/sessions/{name}/breakpoint", summary="Set or clear a breakpoint")
    def breakpoint(name: str, body: Breakpoint) -> dict[str, Any]:
        s = hub.control(name)
        s.set_breakpoint(body.task_id, on=body.on)
        return {"breakpoints": s.breakpoints}

    @app.post("/sessions/{name}/run", status_code=202, summary="Run in background")
    def run(name: str) -> dict[str, Any]:
        s = hub.control(name)
        s.start()
        return {"running": True, "name": s.name}

    @app.post("/sessions/{name}/pause", summary="Ask a run to stop")
    def pause(
        name: str, body: Annotated[Pause, Body(default_factory=Pause)]
    ) -> dict[str, Any]:
        hub.control(name).pause(body.reason)
        return {"ok": True}

    @app.post("/sessions/{name}/approve", summary="Approve a task (edited args)")
    def approve(name: str, body: Approve) -> dict[str, Any]:
        s = hub.control(name)
        if body.args is not None:
            _refuse_new_env_references(s, body.task_id, body.args)
        s.approve(body.task_id, body.args, by=body.by or "api")
        return {"ok": True}

    @app.post("/sessions/{name}/reject", summary="Refuse a task")
    def reject(name: str, body: Reason) -> dict[str, Any]:
        hub.control(name).reject(body.task_id, body.reason, by="api")
        return {"ok": True}

    @app.post("/sessions/{name}/retry", summary="Make a failed task pending")
    def retry(name: str, body: TaskRef) -> dict[str, Any]:
        hub.control(name).retry(body.task_id)
        return {"ok": True}

    @app.post("/sessions/{name}/skip", summary="Skip a task")
    def skip(name: str, body: Reason) -> dict[str, Any]:
        hub.control(name).skip(body.task_id, body.reason)
        return {"ok": True}

    @app.post("/sessions/{name}/fork", status_code=201, summary="Fork a session")
    def fork(name: str, body: ForkSession) -> dict[str, Any]:
        with hub.reading(name) as s:
            f = s.fork(at=body.at, name=body.name, reuse=body.reuse)
        try:
            return f.info.model_dump(mode="json")
        finally:
            f.close()

    add_state_routes(app, hub)

    hosts = (
        None
        if host in ("0.0.0.0", "::", "")
        else LOOPBACK | {host.strip("[]"), *allow_hosts}
    )
    return Guard(app, token=token, max_body=MAX_BODY, hosts=hosts)
