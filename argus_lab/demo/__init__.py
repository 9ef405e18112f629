"""The bundled offline demo: a real analysis of the Palmer Penguins table.

``argus demo`` runs :func:`plan_path` (a YAML plan of 35 tasks: load, validate, a fan
out of column profiles, group statistics, correlations, permutation tests with a Holm
correction, least-squares fits, a classifier, and a report that gathers them all)
with the tools in :data:`TOOLS`.

``import argus_lab.demo`` stays light: it touches neither pandas nor numpy nor the
tool registry. ``TOOLS`` is built on first access (PEP 562 module ``__getattr__``),
because building it imports :mod:`argus_lab.demo.tools` and through it the core.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argus_lab.tools.registry import Tool

__all__ = ["POLICIES", "TOOLS", "dataset_path", "plan_path"]

_HERE = Path(__file__).resolve().parent

# Installed from a wheel, pyproject force-includes datasets/penguins as
# argus_lab/_data/penguins; in a source checkout the file sits at the repo root.
_CANDIDATES = (
    _HERE.parent / "_data" / "penguins" / "penguins.csv",
    _HERE.parent.parent / "datasets" / "penguins" / "penguins.csv",
)


def dataset_path() -> Path:
    """Return the path of the bundled ``penguins.csv``.

    Returns:
        The installed copy (``argus_lab/_data/penguins/penguins.csv``) if there is
        one, else the repository copy (``datasets/penguins/penguins.csv``).

    Raises:
        FileNotFoundError: Neither copy exists (a broken install).
    """
    for candidate in _CANDIDATES:
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(c) for c in _CANDIDATES)
    raise FileNotFoundError(
        f"The demo dataset penguins.csv is missing (looked in: {looked}). "
        "Reinstall argus-lab, or run from a source checkout that has datasets/."
    )


def plan_path() -> Path:
    """Return the path of the demo's YAML plan."""
    return _HERE / "plan.yaml"


def __getattr__(name: str) -> Any:
    # Lazy so that importing the package (e.g. by the CLI to find plan_path) does not
    # pay for the tool registry; pandas/numpy are imported inside function bodies.
    if name == "TOOLS":
        from argus_lab.demo.tools import TOOLS

        return TOOLS
    if name == "POLICIES":
        from argus_lab.tools.approval import ApprovalPolicy

        # The clean CSV stays inside the session's own folder: no need to ask.
        # The report is what a person reads and shares: it waits for approval.
        return (
            ApprovalPolicy(
                "approve",
                tools="clean_dataset",
                reason="writes only inside the session",
            ),
            ApprovalPolicy("ask", side_effect="write", reason="writes the report"),
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    from argus_lab.tools.approval import ApprovalPolicy

    TOOLS: list[Tool]
    POLICIES: tuple[ApprovalPolicy, ...]
