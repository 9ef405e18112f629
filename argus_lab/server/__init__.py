"""``argus serve``: the Workspace over HTTP, for other processes and languages.

Needs the ``serve`` extra (``pip install 'argus-lab[serve]'``: FastAPI, uvicorn,
sse-starlette). Binds 127.0.0.1 unless told otherwise; every request but
``GET /health`` needs the bearer token, generated on first start and stored
(mode 0600) in ``<workspace>/server-token``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from argus_lab.errors import MissingDependency

__all__ = ["create_app", "serve", "token_path"]


def _need_extra() -> None:
    try:
        import fastapi  # noqa: F401
        import sse_starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise MissingDependency(
            f"argus serve needs the 'serve' extra ({e.name} is missing): "
            "pip install 'argus-lab[serve]'"
        ) from None


def token_path(workspace: Any) -> Path:
    """Where a workspace's server token is kept."""
    return Path(workspace.path) / "server-token"


def create_app(
    workspace: Any,
    token: str,
    *,
    tools: list[Any] | None = None,
    host: str = "127.0.0.1",
    allow_hosts: list[str] | tuple[str, ...] = (),
) -> Any:
    """The ASGI app over ``workspace`` (see ``argus_lab.server._app``); ``host``
    is the address it will be bound to: requests naming another Host than it,
    a loopback name or one of ``allow_hosts`` are refused (DNS rebinding)."""
    _need_extra()
    from argus_lab.server._app import create_app as make

    return make(workspace, token, tools=tools, host=host, allow_hosts=allow_hosts)


def serve(
    workspace: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    tools: list[Any] | None = None,
    allow_hosts: list[str] | tuple[str, ...] = (),
    announce: Any = print,
) -> None:
    """Serves the workspace until interrupted (blocks)."""
    _need_extra()
    import uvicorn

    from argus_lab.server._guard import load_token

    token, created = load_token(token_path(workspace))
    app = create_app(workspace, token, tools=tools, host=host, allow_hosts=allow_hosts)
    where = f"http://{host}:{port}"
    if created:
        announce(f"argus serve: new token (kept in {token_path(workspace)}): {token}")
    else:
        announce(f"argus serve: token in {token_path(workspace)}")
    announce(f"argus serve: {workspace.path} on {where} (OpenAPI: {where}/docs)")
    if host not in ("127.0.0.1", "localhost", "::1"):
        announce(
            f"argus serve: warning: bound to {host}, reachable from other machines; "
            "the token is all that protects the workspace and HTTP is unencrypted"
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    # Our guard logs each request without its query string or headers;
    # uvicorn's access log would print query strings, so it is off.
    uvicorn.run(app, host=host, port=port, access_log=False, log_level="warning")
