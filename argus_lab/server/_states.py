"""The state routes of the HTTP API: GET with an ETag, PATCH with a JSON Patch
and If-Match (412 when stale), create, history, events, fork."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import Body, FastAPI, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from argus_lab.errors import ConflictError, StorageError
from argus_lab.server._errors import error_answer
from argus_lab.store.state import PatchTestFailed, PatchTooLarge

if TYPE_CHECKING:
    from argus_lab.server._app import Hub

__all__ = ["PATCH_TYPE", "add_state_routes"]

PATCH_TYPE = "application/json-patch+json"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # unknown fields are refused (422)


class ForkState(_Strict):
    at: int | None = Field(default=None, ge=1)
    name: str | None = None


class PatchOp(_Strict):
    op: Literal["add", "remove", "replace", "move", "copy", "test"]
    path: str = Field(max_length=2000)
    value: Any = None
    from_: str | None = Field(default=None, alias="from", max_length=2000)


def _etag(version: int) -> str:
    return f'"{version}"'


_TAG = re.compile(r'\s*(W/)?"([^"]*)"\s*(?:,|$)')


def parse_if_match(header: str) -> tuple[set[int] | None, bool]:
    """The versions an ``If-Match`` header accepts (None: ``*``, any), and
    whether it held a weak tag (which never matches: RFC 9110, 13.1.1).
    ValueError when it is not a quoted ETag, a list of them, or ``*``."""
    if header.strip() == "*":
        return None, False
    versions: set[int] = set()
    weak, pos = False, 0
    while pos < len(header):
        m = _TAG.match(header, pos)
        if m is None or m.end() == pos:
            bare = header.strip()
            hint = f'; send "{bare}"' if bare.isdigit() else ""
            raise ValueError(
                f'If-Match must be the ETag as sent, quoted (e.g. "3"), a list '
                f"of them, or *; got {header[:80]!r}{hint}"
            )
        if m.group(1):
            weak = True
        elif m.group(2).isdigit():
            versions.add(int(m.group(2)))
        pos = m.end()
    return versions, weak


def _state_response(version: int, doc: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(
        doc,
        status_code=status,
        headers={"ETag": _etag(version), "X-Argus-Version": str(version)},
    )


def _stale(name: str, sent: str, current: int, why: str) -> JSONResponse:
    return error_answer(
        {
            "detail": f"state {name} is at version {current} (ETag "
            f"{_etag(current)}), which If-Match {sent[:80]} does not name{why}; "
            "GET it again and send the patch against it",
            "version": current,
        },
        412,
        {"ETag": _etag(current)},
    )


def _valid_op(o: Any) -> bool:
    try:
        PatchOp.model_validate(o)
    except ValidationError:
        return False
    return True


def _first(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])


def add_state_routes(app: FastAPI, hub: Hub) -> None:
    """Adds the /states routes over ``hub``'s workspace."""
    ws = hub.ws

    # -- states ------------------------------------------------------------------

    @app.get("/states", summary="States with their versions")
    def states() -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        for n in ws.states():
            try:
                items.append({"name": n, "version": hub.state(n).version})
            except StorageError as e:
                # One damaged state is listed as such; the others still list.
                items.append({"name": n, "version": None, "error": e.message})
        return {"items": items}

    @app.post("/states/{name}", status_code=201, summary="Create a state")
    def create_state(
        request: Request, name: str, doc: Annotated[dict[str, Any], Body()]
    ) -> JSONResponse:
        if name in ws.states():
            raise ConflictError(f"state {name!r} already exists", state=name)
        who = f"http {request.client.host if request.client else '?'}"
        # create_only: of two racing creates, the loser gets 409 too.
        ws.state(name, initial=doc, caller=who, create_only=True).close()
        return _state_response(*hub.state(name).get_json(), status=201)

    @app.get(
        "/states/{name}",
        summary="The state (ETag: its version; If-None-Match: 304 when unchanged)",
    )
    def get_state(
        name: str,
        version: int | None = Query(None, ge=1),
        if_none_match: str | None = Header(None),
    ) -> Response:
        st = hub.state(name)
        v = st.version if version is None else version
        # If-None-Match compares weakly: W/"3" names version 3 too.
        tags = [t.strip().removeprefix("W/") for t in (if_none_match or "").split(",")]
        if if_none_match is not None and (
            if_none_match.strip() == "*" or _etag(v) in tags
        ):
            return Response(status_code=304, headers={"ETag": _etag(v)})
        # A view: a secret env value reads ${env.NAME} (store/state_secrets.py).
        return _state_response(*st.get_json(version))

    @app.patch(
        "/states/{name}",
        summary="Commit a JSON Patch (RFC 6902) against the If-Match version",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {PATCH_TYPE: {"schema": {"type": "array"}}},
            }
        },
    )
    async def patch_state(
        request: Request, name: str, if_match: str | None = Header(None)
    ) -> JSONResponse:
        if request.headers.get("content-type", "").split(";")[0] != PATCH_TYPE:
            return error_answer({"detail": f"send Content-Type: {PATCH_TYPE}"}, 415)
        if if_match is None:
            return error_answer(
                {"detail": "If-Match with the state's ETag is required"}, 428
            )
        try:
            accepted, weak = parse_if_match(if_match)
        except ValueError as e:
            return error_answer({"detail": str(e)}, 400)
        try:
            raw = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return error_answer({"detail": f"malformed JSON: {e}"}, 422)
        if not isinstance(raw, list):
            return error_answer(
                {"detail": "a JSON Patch is a list of operations (RFC 6902)"}, 422
            )
        try:
            ops = [PatchOp.model_validate(o) for o in raw]
        except ValidationError as e:
            i = next(i for i, o in enumerate(raw) if not _valid_op(o))
            return error_answer(
                {"detail": f"operation {i} is not a JSON Patch operation: {_first(e)}"},
                422,
            )
        st = hub.state(name)
        current = st.version
        if accepted is None:
            expected = None  # *: whatever the latest version is
        elif current in accepted:
            expected = current
        else:
            why = " (weak tags never match If-Match)" if weak else ""
            return _stale(name, if_match, current, why)
        plain = [o.model_dump(by_alias=True, exclude_unset=True) for o in ops]
        who = f"http {request.client.host if request.client else '?'}"
        try:
            await run_in_threadpool(st.patch, plain, expected=expected, caller=who)
        except ConflictError as e:
            return _stale(name, if_match, e.version or 0, "")
        except PatchTestFailed as e:  # (its words may quote the values tested)
            return error_answer({"detail": str(e)}, 409)
        except PatchTooLarge as e:
            return error_answer({"detail": str(e)}, 413)
        return _state_response(*st.get_json())

    @app.get("/states/{name}/history", summary="One row per version (paged)")
    def state_history(
        name: str,
        since: int = Query(0, ge=0, description="versions after this one"),
        limit: int = Query(1000, ge=1, le=10000),
    ) -> dict[str, Any]:
        h = hub.state(name).history(since=since, limit=limit + 1)
        more = len(h) > limit
        h = h.iloc[:limit].copy()
        h["time"] = h["time"].map(lambda t: t.isoformat())
        items = h.to_dict(orient="records")
        nxt = int(items[-1]["version"]) if items else since
        return {"items": items, "next": nxt, "more": more}

    @app.get(
        "/states/{name}/events", summary="Size warnings, compactions, forks (paged)"
    )
    def state_events(
        name: str,
        since: int = Query(0, ge=0),
        limit: int = Query(1000, ge=1, le=10000),
    ) -> dict[str, Any]:
        evs = hub.state(name).events(since, limit + 1)
        items = evs[:limit]
        nxt = items[-1]["seq"] if items else since
        return {"items": items, "next": nxt, "more": len(evs) > limit}

    @app.post("/states/{name}/fork", status_code=201, summary="Fork a state")
    def fork_state(name: str, body: ForkState) -> JSONResponse:
        f = hub.state(name).fork(at=body.at, name=body.name)
        try:
            r = _state_response(*f.get_json(), status=201)
        finally:
            f.close()
        r.headers["X-Argus-State"] = f.name
        return r
