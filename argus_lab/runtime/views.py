"""Views of a session that live in higher layers, reached from the outside in.

DataFrames (``analysis``) and the static HTML and SVG (``jupyter.display``)
sit above the runtime, which must not import them (DESIGN.md section 3). The
root package ``argus_lab`` registers them here when it is imported; they read
the Session's public trajectory API (records, events, plan, info), never its
parts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["VIEWS", "Views"]


class Views:
    """Named functions ``fn(session, **options)`` that render a session."""

    def __init__(self) -> None:
        self._fns: dict[str, Callable[..., Any]] = {}

    def register(self, **fns: Callable[..., Any]) -> None:
        """Adds or replaces views by name (e.g. ``tasks_df=...``)."""
        self._fns.update(fns)

    def get(self, name: str) -> Callable[..., Any]:
        """The view called ``name``; a clear error when nothing registered it."""
        try:
            return self._fns[name]
        except KeyError:
            raise RuntimeError(
                f"no {name!r} view is registered: import argus_lab (the package "
                "registers its views on import) before calling it"
            ) from None


VIEWS = Views()
"""The registry the root package fills."""
