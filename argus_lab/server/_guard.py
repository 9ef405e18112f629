"""The server's outer layer: bearer token, body size limit, request log.

A plain ASGI middleware (no per-route dependency to forget): every request but
``GET /health`` needs ``Authorization: Bearer <token>``; a body larger than the
limit is refused with 413 before it is read; each request is logged as method,
path, status and milliseconds, never headers, query strings or bodies (which
may carry the token or state values).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Any

__all__ = ["MAX_BODY", "Guard", "load_token"]

MAX_BODY = 1 << 20
"""Bytes a request body may have (a JSON Patch or a control call is small)."""

log = logging.getLogger("argus_lab.server")

Scope = dict[str, Any]
Receive = Any
Send = Any


def load_token(path: Path) -> tuple[str, bool]:
    """The server's token from ``path``, generated (and stored 0600) the first
    time. Returns (token, created)."""
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token, False
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created 0600 from the start: never world-readable, not even briefly.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return token, True


class Guard:
    """ASGI middleware: authentication, size limit and logging."""

    def __init__(self, app: Any, *, token: str, max_body: int = MAX_BODY) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        st: dict[str, Any] = {"code": 0, "too_big": False}

        async def send_logged(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                st["code"] = message["status"]
            await send(message)

        async def send_app(message: dict[str, Any]) -> None:
            if not st["too_big"]:  # once the body is refused, the app is muted
                await send_logged(message)

        seen = 0

        async def receive_limited() -> dict[str, Any]:
            nonlocal seen
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:  # chunked upload with no Content-Length
                    st["too_big"] = True
                    return {"type": "http.disconnect"}
            return message

        try:
            refusal = self._refuse(scope)
            if refusal is not None:
                await _reply(send_logged, *refusal)
                return
            try:
                await self.app(scope, receive_limited, send_app)
            except Exception:
                if not st["too_big"]:
                    raise
            if st["too_big"] and st["code"] == 0:
                msg = f"the request body exceeds {self.max_body} bytes"
                await _reply(send_logged, 413, msg, {})
        finally:
            log.info(
                "%s %s %d %.1fms",
                scope["method"],
                scope["path"],
                st["code"],
                (time.perf_counter() - t0) * 1000,
            )

    def _refuse(self, scope: Scope) -> tuple[int, str, dict[str, str]] | None:
        headers = dict(scope["headers"])
        if not (scope["method"] == "GET" and scope["path"] == "/health"):
            got = headers.get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected):
                return (
                    401,
                    "a bearer token is required: send 'Authorization: Bearer "
                    "<token>' (printed by `argus serve` on first start, stored "
                    "in <workspace>/server-token)",
                    {"www-authenticate": "Bearer"},
                )
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return 413, f"the request body exceeds {self.max_body} bytes", {}
        return None


async def _reply(send: Send, status: int, detail: str, headers: dict[str, str]) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json")]
    raw += [(k.encode(), v.encode()) for k, v in headers.items()]
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
