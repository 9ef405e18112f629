"""How the GraphWidget appears in a notebook's outputs, live view or not.

- :func:`asset_path` finds the front-end files (``graph.js``, ``graph.css``) in
  the wheel or the checkout.
- The **static fallback**: JupyterLab never falls back from a widget output
  whose model is gone (kernel restart, page reload) to its text/html, so the
  widget shows the session's static SVG and table as an output of its own,
  right before the live view (:func:`show_with_fallback`), which hides it while
  it runs; :func:`update_fallback` keeps it current when
  :func:`fallback_state` changes.
- :func:`after_each_cell` is the IPython ``post_run_cell`` hook through which
  the widget catches up, after each cell, with what no event announces.
"""

from __future__ import annotations

import html
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from argus_lab.jupyter.display import session_html

if TYPE_CHECKING:
    from argus_lab.runtime.session import Session

__all__ = [
    "after_each_cell",
    "asset_path",
    "fallback_html",
    "fallback_state",
    "show_with_fallback",
    "sync_fallback",
    "update_fallback",
]

W = TypeVar("W")

_FALLBACK_NOTE = (
    '<p class="argus-fallback-note" style="color:#57606a;font-size:12px">'
    "Static view as of {when} (the live widget is not connected). Reopen the "
    "live one, with what was committed since, with "
    "<code>%argus open {name}</code>.</p>"
)


def asset_path(name: str) -> Path:
    """Finds a front-end file: in the wheel (``argus_lab/_widgets``) or the checkout.

    Raises:
        FileNotFoundError: naming both places looked in.
    """
    pkg = Path(__file__).resolve().parent.parent
    places = (pkg / "_widgets" / name, pkg.parent / "widgets" / name)
    for p in places:
        if p.is_file():
            return p
    raise FileNotFoundError(
        f"the widget's front-end file {name!r} is missing (looked in "
        f"{places[0]} and {places[1]}); reinstall argus-lab"
    )


def fallback_html(session: Session, key: str) -> str:
    """The static view of ``session`` with how to reopen the live one.

    Args:
        session: The session shown.
        key: The widget's ``fallback_key``: the live view hides the output
            marked with it.
    """
    note = _FALLBACK_NOTE.format(
        name=html.escape(session.name), when=time.strftime("%Y-%m-%d %H:%M:%S")
    )
    cls = f"argus-fb-{key}"
    # In JupyterLab, the widget output right after this one says "Error
    # displaying widget: model not found" once its model is gone; this view
    # says what to do instead, so that message is hidden (only there).
    hide = (
        f"<style>.jp-OutputArea-child:has(.{cls}) + .jp-OutputArea-child "
        ".jp-OutputArea-output.jupyter-widgets{display:none}</style>"
    )
    return (
        f'<div class="argus-fallback {cls}">{hide}{note}{session_html(session)}</div>'
    )


def fallback_state(summary: Mapping[str, Any]) -> tuple[str, int, int]:
    """What the static fallback shows of a widget's ``summary`` (status, done,
    failed): when it changes, the fallback is brought up to date."""
    return (
        str(summary.get("status")),
        summary.get("done", 0),
        summary.get("failed", 0),
    )


def show_with_fallback(
    fallback: str, key: str, data: dict[str, Any], meta: dict[str, Any]
) -> None:
    """Displays two outputs: the static ``fallback`` (display id ``key``), then
    the live view's mime bundle ``data`` / ``meta``."""
    from IPython.display import display

    show: Any = display  # IPython's display is untyped
    show({"text/html": fallback}, raw=True, display_id=key)
    show(data, raw=True, metadata=meta)


def update_fallback(fallback: str, key: str) -> None:
    """Replaces the static output shown with display id ``key``."""
    from IPython.display import update_display

    update: Any = update_display  # untyped
    update({"text/html": fallback}, raw=True, display_id=key)


def after_each_cell(owner: W, fn: Callable[[W], None]) -> Callable[[], None] | None:
    """Calls ``fn(owner)`` after each notebook cell (IPython's ``post_run_cell``).

    Holds ``owner`` weakly: a dropped widget is not kept alive by the hook.

    Returns:
        A function that removes the hook, or None outside IPython.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    ip = get_ipython()
    if ip is None:
        return None
    ref = weakref.ref(owner)

    def after_cell(*_: Any) -> None:
        o = ref()
        if o is not None:
            fn(o)

    ip.events.register("post_run_cell", after_cell)

    def remove() -> None:
        try:
            from IPython import get_ipython

            now = get_ipython()
            if now is not None:
                now.events.unregister("post_run_cell", after_cell)
        except (ImportError, ValueError):
            pass

    return remove


def sync_fallback(widget: Any) -> None:
    """Brings a GraphWidget's static fallback output up to date (after a cell,
    on the kernel's main thread, so the front end and the saved notebook get
    it): only when what it shows (:func:`fallback_state`) changed."""
    now = fallback_state(widget.summary)
    if widget._fallback_seen is None or now == widget._fallback_seen:
        return
    widget._fallback_seen = now
    update_fallback(widget.fallback_html(), widget.fallback_key)
