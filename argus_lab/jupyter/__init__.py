"""Jupyter integration: the ``%%argus`` magic, the live graph widget, static views.

``import argus_lab`` never imports this package, and importing it pulls in
neither IPython nor anywidget: each name is loaded on first use.

- ``load_ipython_extension``: what ``%load_ext argus_lab`` calls.
- ``GraphWidget``: the live widget (anywidget) of a Session.
- ``session_html`` / ``plan_html``: static HTML (SVG plus a summary table).
- ``layout_plan``: the layered layout both of them draw (it lives in
  ``argus_lab.layout``; pure, no Jupyter).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argus_lab.jupyter.display import PlanView, plan_html, session_html
    from argus_lab.jupyter.magic import ArgusMagics
    from argus_lab.jupyter.widget import GraphWidget
    from argus_lab.layout import layout_plan

__all__ = [
    "ArgusMagics",
    "GraphWidget",
    "PlanView",
    "layout_plan",
    "load_ipython_extension",
    "plan_html",
    "session_html",
]

_WHERE = {
    "ArgusMagics": "argus_lab.jupyter.magic",
    "GraphWidget": "argus_lab.jupyter.widget",
    "PlanView": "argus_lab.jupyter.display",
    "layout_plan": "argus_lab.layout",
    "plan_html": "argus_lab.jupyter.display",
    "session_html": "argus_lab.jupyter.display",
}


def load_ipython_extension(ipython: Any) -> None:
    """Registers ``%%argus`` and ``%argus`` in an IPython shell."""
    from argus_lab.jupyter.magic import load_ipython_extension as load

    load(ipython)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        module = importlib.import_module(_WHERE[name])
        return getattr(module, name)
    raise AttributeError(f"module 'argus_lab.jupyter' has no attribute {name!r}")
