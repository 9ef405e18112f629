"""The state routes of the HTTP API: GET with an ETag, PATCH with a JSON Patch
and If-Match (412 when stale), create, history, events, fork."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import Body, FastAPI, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from argus_lab.errors import ConflictError

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


def _state_response(version: int, doc: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(
        doc,
        status_code=status,
        headers={"ETag": _etag(version), "X-Argus-Version": str(version)},
    )


def add_state_routes(app: FastAPI, hub: Hub) -> None:
    """Adds the /states routes over ``hub``'s workspace."""
    ws = hub.ws

    # -- states ------------------------------------------------------------------

    @app.get("/states", summary="States with their versions")
    def states() -> dict[str, Any]:
        return {
            "items": [{"name": n, "version": hub.state(n).version} for n in ws.states()]
        }

    @app.post("/states/{name}", status_code=201, summary="Create a state")
    def create_state(
        request: Request, name: str, doc: Annotated[dict[str, Any], Body()]
    ) -> JSONResponse:
        if name in ws.states():
            raise ConflictError(f"state {name!r} already exists", state=name)
        who = f"http {request.client.host if request.client else '?'}"
        ws.state(name, initial=doc, caller=who).close()
        return _state_response(*hub.state(name).get_json(), status=201)

    @app.get("/states/{name}", summary="The state (ETag: its version)")
    def get_state(name: str, version: int | None = Query(None, ge=1)) -> JSONResponse:
        st = hub.state(name)
        if version is None:
            return _state_response(*st.get_json())
        return _state_response(version, st.at(version))

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
            return JSONResponse({"detail": f"send Content-Type: {PATCH_TYPE}"}, 415)
        if if_match is None:
            return JSONResponse(
                {"detail": "If-Match with the state's ETag is required"}, 428
            )
        try:
            raw = json.loads(await request.body())
            ops = [PatchOp.model_validate(o) for o in raw]
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return JSONResponse({"detail": f"malformed JSON: {e}"}, 422)
        except (ValidationError, TypeError) as e:
            return JSONResponse({"detail": f"not a JSON Patch: {e}"[:2000]}, 422)
        st = hub.state(name)
        tag = if_match.strip().removeprefix("W/").strip('"')
        expected = st.version if tag == "*" else int(tag) if tag.isdigit() else -1
        plain = [o.model_dump(by_alias=True, exclude_unset=True) for o in ops]
        who = f"http {request.client.host if request.client else '?'}"
        try:
            await run_in_threadpool(st.patch, plain, expected=expected, caller=who)
        except ConflictError as e:
            return JSONResponse(
                {"detail": e.message, "version": e.version},
                412,
                headers={"ETag": _etag(e.version or 0)},
            )
        return _state_response(*st.get_json())

    @app.get("/states/{name}/history", summary="One row per version")
    def state_history(name: str) -> dict[str, Any]:
        h = hub.state(name).history()
        h["time"] = h["time"].map(lambda t: t.isoformat())
        return {"items": h.to_dict(orient="records")}

    @app.get("/states/{name}/events", summary="Size warnings, compactions, forks")
    def state_events(name: str, since: int = Query(0, ge=0)) -> dict[str, Any]:
        return {"items": hub.state(name).events(since)}

    @app.post("/states/{name}/fork", status_code=201, summary="Fork a state")
    def fork_state(name: str, body: ForkState) -> JSONResponse:
        f = hub.state(name).fork(at=body.at, name=body.name)
        try:
            r = _state_response(*f.get_json(), status=201)
        finally:
            f.close()
        r.headers["X-Argus-State"] = f.name
        return r
