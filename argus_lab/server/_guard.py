"""The server's outer layer: Host check, bearer token, size limits, request log.

A plain ASGI middleware (no per-route dependency to forget), in this order:

1. ``Host`` must name this server (its bound address, or a loopback name):
   a page on another site whose name was rebound to 127.0.0.1 (DNS
   rebinding) is refused with 421 before anything else.
2. A path over ``MAX_PATH`` or a query string over ``MAX_QUERY`` bytes: 414.
3. Every request but ``GET /health`` needs ``Authorization: Bearer <token>``
   (compared in constant time); without it 401, whether or not the route or
   name exists, so nothing about the workspace leaks to a caller without it.
4. A body larger than the limit is refused with 413 before it is read.

Each request is logged as method, path (escaped: no forged lines), status and
milliseconds, never headers, query strings or bodies (which may carry the
token or state values). No CORS headers are ever sent.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import stat
import time
from pathlib import Path
from typing import Any

from argus_lab.errors import ArgusError

__all__ = ["LOOPBACK", "MAX_BODY", "MAX_PATH", "MAX_QUERY", "Guard", "load_token"]

MAX_BODY = 1 << 20
"""Bytes a request body may have (a JSON Patch or a control call is small)."""
MAX_PATH = 1024
"""Bytes a URL path may have (names are at most 64 characters)."""
MAX_QUERY = 4096
"""Bytes a query string may have (every parameter is a number or a flag)."""
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
"""Host names a server on this machine answers to, whatever it is bound to."""

log = logging.getLogger("argus_lab.server")

Scope = dict[str, Any]
Receive = Any
Send = Any


def load_token(path: Path) -> tuple[str, bool]:
    """The server's token from ``path``, generated (and stored 0600) the first
    time. Returns (token, created).

    Refuses (ArgusError) a token file that others could have read (group or
    world permissions), a symbolic link (a token planted elsewhere), and a
    folder others may write to without the sticky bit (they could swap it).
    """
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    mode = folder.stat().st_mode
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise ArgusError(
            f"{folder} is writable by others, who could replace the server "
            f"token in it; run `chmod o-w {folder}` (or serve another workspace)"
        )
    if path.is_symlink():
        raise ArgusError(
            f"{path} is a symbolic link; the server token must be a plain file "
            "of its own: delete the link and start `argus serve` again for a new one"
        )
    if path.exists():
        mode = path.stat().st_mode
        if mode & 0o077:
            raise ArgusError(
                f"the server token in {path} is readable by others (mode "
                f"{stat.S_IMODE(mode):o}); treat it as leaked: delete it for a "
                f"new one, or `chmod 600 {path}` if nobody else can log in here"
            )
        if path.stat().st_uid != os.getuid():
            raise ArgusError(f"{path} belongs to another user; delete it")
        token = path.read_text().strip()
        if token:
            return token, False
        path.unlink()
    token = secrets.token_urlsafe(32)
    # Created 0600 from the start (never world-readable, not even briefly),
    # exclusively and never through a link planted meanwhile.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token, True


class Guard:
    """ASGI middleware: authentication, size limit and logging."""

    def __init__(
        self,
        app: Any,
        *,
        token: str,
        max_body: int = MAX_BODY,
        hosts: frozenset[str] | None = LOOPBACK,
    ) -> None:
        self.app = app
        self.expected = token.encode()
        self.max_body = max_body
        self.hosts = hosts  # None: any (bound to every interface on purpose)

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
                if st["too_big"]:
                    pass
                elif st["code"] == 0:  # JSON, and nothing of the error's text
                    log.exception("%s %s failed", scope["method"], _safe(scope))
                    await _reply(
                        send_logged,
                        500,
                        "internal error; the server's log has the details",
                        {},
                    )
                else:
                    raise
            if st["too_big"] and st["code"] == 0:
                msg = f"the request body exceeds {self.max_body} bytes"
                await _reply(send_logged, 413, msg, {})
        finally:
            log.info(
                "%s %s %d %.1fms",
                scope["method"],
                _safe(scope),
                st["code"],
                (time.perf_counter() - t0) * 1000,
            )

    def _refuse(self, scope: Scope) -> tuple[int, str, dict[str, str]] | None:
        headers = dict(scope["headers"])
        host = _hostname(headers.get(b"host", b"").decode("latin-1"))
        if self.hosts is not None and host not in self.hosts:
            return (
                421,
                f"this server does not answer to the host name {host[:100]!r}; use "
                f"{' or '.join(sorted(self.hosts))} (other names are refused "
                "against DNS rebinding)",
                {},
            )
        raw_path = scope.get("raw_path") or scope["path"].encode()
        if len(raw_path) > MAX_PATH or len(scope.get("query_string", b"")) > MAX_QUERY:
            return (
                414,
                f"the URL is too long (path at most {MAX_PATH} bytes, query "
                f"string at most {MAX_QUERY})",
                {},
            )
        if not (scope["method"] == "GET" and scope["path"] == "/health"):
            scheme, _, got = headers.get(b"authorization", b"").partition(b" ")
            ok = hmac.compare_digest(got.strip(), self.expected)
            if not ok or scheme.lower() != b"bearer":
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


def _hostname(host: str) -> str:
    """The name in a Host header, without its port (``[::1]:80`` -> ``::1``)."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _safe(scope: Scope) -> str:
    """The path for the log: control characters escaped, so a request cannot
    write a line of its own, and secrets masked (a client may put a key where
    a name goes; the request is refused, but its log line is still written)."""
    from argus_lab.redact import Redactor, known_secrets

    path: str = scope["path"][:MAX_PATH]
    return json.dumps(Redactor(known_secrets()).text(path), ensure_ascii=False)[1:-1]


async def _reply(send: Send, status: int, detail: str, headers: dict[str, str]) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json")]
    raw += [(k.encode(), v.encode()) for k, v in headers.items()]
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
