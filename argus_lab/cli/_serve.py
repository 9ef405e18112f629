"""``argus serve``: the workspace over HTTP (needs the ``serve`` extra)."""

from __future__ import annotations

import argparse

from argus_lab.cli._common import (
    EXIT_OK,
    CliError,
    Out,
    UsageError,
    workspace,
)
from argus_lab.cli._tools import load_tools

__all__ = ["add_serve", "cmd_serve"]


def _port(text: str) -> int:
    """An argparse type: a TCP port number."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return port


def add_serve(sp: argparse.ArgumentParser) -> None:
    """The options of ``argus serve``."""
    sp.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1: this machine only)",
    )
    sp.add_argument("--port", type=_port, default=8765, help="port (default 8765)")
    sp.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another host name clients may use for this server (repeat); "
        "requests naming any other Host are refused against DNS rebinding",
    )
    sp.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE_OR_FILE",
        help="module or .py file with the tools sessions run here need (repeat)",
    )


def cmd_serve(args: argparse.Namespace, out: Out) -> int:
    """Serves the workspace until Ctrl-C."""
    from argus_lab.errors import MissingDependency
    from argus_lab.server import serve

    _can_listen(args.host, args.port)
    ws = workspace(args, create=True)
    tools = load_tools(args.tools) if args.tools else []
    try:
        serve(
            ws,
            host=args.host,
            port=args.port,
            tools=tools,
            allow_hosts=args.allow_host,
        )
    except MissingDependency as e:
        # A setup problem the user fixes with pip: bad input (2), like a missing
        # file; main() puts "argus serve:" before the message, so not twice.
        raise UsageError(e.message.removeprefix("argus serve ")) from None
    except SystemExit as e:  # uvicorn's own exit (3: startup failed) is no verdict
        raise CliError(
            f"the server stopped at start-up (uvicorn exit {e.code}); see above"
        ) from None
    finally:
        ws.close()
    return EXIT_OK


def _can_listen(host: str, port: int) -> None:
    # Checked before uvicorn starts: its failure would be a log line and exit
    # 3, which here means "paused".
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, addr = infos[0]
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(addr)
    except OSError as e:
        why = getattr(e, "strerror", None) or str(e)
        raise UsageError(
            f"cannot listen on {host}:{port}: {why}; choose another --port (or --host)"
        ) from None
