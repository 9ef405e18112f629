"""``argus serve``: the workspace over HTTP (needs the ``serve`` extra)."""

from __future__ import annotations

import argparse

from argus_lab.cli._common import EXIT_OK, Out, load_tools, workspace

__all__ = ["add_serve", "cmd_serve"]


def add_serve(sp: argparse.ArgumentParser) -> None:
    """The options of ``argus serve``."""
    sp.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1: this machine only)",
    )
    sp.add_argument("--port", type=int, default=8765, help="port (default 8765)")
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
    from argus_lab.server import serve

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
    finally:
        ws.close()
    return EXIT_OK
