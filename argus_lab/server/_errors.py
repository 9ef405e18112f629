"""How the HTTP API turns exceptions into JSON answers.

Every error body is ``{"detail": "..."}`` saying what was wrong and what to do;
none carries a traceback, a header or the token. A missing session or state is
404, a conflict 409, a damaged record or lost commits 500 (naming state and
version), a full disk 507, a document that breaks a state's model 422 with the
``field``, any other failure a 500 naming only the exception's type (the
server's log has the rest).

Every detail is masked as stored rows are (``Redactor``: secret env values,
``secrets=[...]`` values, key shapes): an error's words may quote what it was
about (a JSON Patch ``test`` that failed quotes the value it found, a schema
error the value it refused), and a state's views show a secret as
``${env.NAME}`` only.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from jsonschema.exceptions import ValidationError as SchemaError
from pydantic import ValidationError

from argus_lab.errors import (
    ArgusError,
    ConcurrentSessionError,
    ConflictError,
    CorruptCheckpointError,
    SessionNotFoundError,
    StorageError,
    StorageFullError,
)

__all__ = ["add_error_handlers", "error_answer"]


def error_answer(
    body: dict[str, Any],
    status: int,
    headers: dict[str, str] | None = None,
    *,
    said: str = "",
) -> JSONResponse:
    """The error answer ``body``, its detail masked (see the module doc).

    ``said``: what the client sent that the detail may echo (the URL's path
    and query). A secret value in it is the client's own and is echoed as
    sent: masking it would answer "yes, that is a secret" to a guess (a
    six-digit DB_PASSWORD found by trying names in ``/sessions/<guess>``).
    """
    import os

    from argus_lab.redact import Redactor, known_secrets

    red = Redactor(
        [v for v in known_secrets() if v not in said],
        environ={k: v for k, v in os.environ.items() if v not in said},
    )
    detail = red.value(body["detail"])
    return JSONResponse({**body, "detail": detail}, status, headers=headers)


def _said(request: Request) -> str:
    """The URL's path and query as sent (decoded): what a detail may echo."""
    from urllib.parse import unquote

    return unquote(f"{request.url.path}?{request.url.query}")


_NOT_FOUND = (
    "not found: the session, task or state this request names does not exist "
    "(GET /sessions, /sessions/{name}/tasks and /states list them)"
)


def add_error_handlers(app: FastAPI) -> None:
    """Registers the JSON error answers on ``app``."""

    @app.exception_handler(KeyError)
    @app.exception_handler(SessionNotFoundError)  # (an ArgusError too: 404 first)
    async def _missing(request: Request, e: KeyError) -> JSONResponse:
        if request.method != "GET":  # the name may come from the body: not echoed
            return error_answer({"detail": _NOT_FOUND}, 404)
        detail = str(e.args[0]) if e.args else _NOT_FOUND
        return error_answer({"detail": detail}, 404, said=_said(request))

    @app.exception_handler(ConflictError)
    @app.exception_handler(ConcurrentSessionError)
    async def _conflict(request: Request, e: ArgusError) -> JSONResponse:
        return error_answer({"detail": e.message}, 409, said=_said(request))

    @app.exception_handler(ArgusError)
    async def _argus(request: Request, e: ArgusError) -> JSONResponse:
        return error_answer({"detail": e.message}, 400, said=_said(request))

    @app.exception_handler(CorruptCheckpointError)
    @app.exception_handler(StorageError)  # lost commits, a schema too new
    async def _damaged(_: Request, e: ArgusError) -> JSONResponse:
        return error_answer({"detail": e.message}, 500)  # the server's data, not ours

    @app.exception_handler(StorageFullError)
    async def _full(_: Request, e: ArgusError) -> JSONResponse:
        return error_answer({"detail": e.message}, 507)

    @app.exception_handler(Exception)
    async def _bug(_: Request, e: Exception) -> JSONResponse:
        # Logged with its traceback by the server; the body names only its type.
        return error_answer(
            {"detail": f"internal error ({type(e).__name__}); see the server's log"},
            500,
        )

    @app.exception_handler(SchemaError)
    async def _schema(_: Request, e: SchemaError) -> JSONResponse:
        # The document breaks the state's model: name the field, not the schema.
        field = "/".join(str(p) for p in e.absolute_path)
        where = field or "the document"
        return error_answer(
            {"detail": f"{where}: {e.message[:500]}", "field": field}, 422
        )

    @app.exception_handler(ValidationError)
    async def _model(_: Request, e: ValidationError) -> JSONResponse:
        err = e.errors(include_url=False)[0]
        field = "/".join(str(p) for p in err["loc"])
        return error_answer(
            {"detail": f"{field or 'the document'}: {err['msg']}", "field": field},
            422,
        )

    @app.exception_handler(ValueError)
    async def _invalid(_: Request, e: Exception) -> JSONResponse:
        return error_answer({"detail": str(e)[:2000]}, 422)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, e: RequestValidationError) -> JSONResponse:
        return error_answer(
            {"detail": json.loads(json.dumps(e.errors(), default=str))}, 422
        )
