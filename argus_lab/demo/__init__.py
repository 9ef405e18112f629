"""The bundled offline demo: a research study of the Palmer Penguins table.

``argus demo`` plans the study with an HTN domain (:mod:`argus_lab.demo.domain`),
runs it as a durable session with the tools in :data:`TOOLS` and the approval
policies in :data:`POLICIES`, and publishes a markdown report with its figures.
:mod:`argus_lab.demo.runner` creates, reopens and re-runs demo sessions (the CLI
and the benchmark use it).

``import argus_lab.demo`` stays light: it touches neither pandas nor numpy nor
matplotlib nor the tool registry. ``TOOLS``, ``POLICIES`` and ``DOMAIN`` are built
on first access (PEP 562 module ``__getattr__``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argus_lab import ApprovalPolicy, HTNDomain, Tool

__all__ = ["DOMAIN", "POLICIES", "TOOLS", "dataset_path"]

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


def _policies() -> tuple[ApprovalPolicy, ...]:
    from argus_lab import ApprovalPolicy

    # Everything but publishing stays inside the session's own folder (its
    # sandbox) and runs at once; copying the report out to the user's files asks.
    return (
        ApprovalPolicy(
            "ask",
            tools="publish_report",
            reason="copies the report and its figures outside the session's folder",
        ),
        ApprovalPolicy(
            "ask", side_effect="write", reason="changes files outside the session"
        ),
    )


def __getattr__(name: str) -> Any:
    if name == "TOOLS":
        from argus_lab.demo.tools import TOOLS

        return TOOLS
    if name == "POLICIES":
        return _policies()
    if name == "DOMAIN":
        from argus_lab.demo.domain import DOMAIN

        return DOMAIN
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    TOOLS: list[Tool]
    POLICIES: tuple[ApprovalPolicy, ...]
    DOMAIN: HTNDomain
