"""The notebooks run under nbval (pytest --nbval, see pyproject.toml): each cell is
a test item, and a notebook takes seconds, so all of them are marked ``slow``
(``pytest -m "not slow"`` skips them; scripts/test.sh runs everything)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.suffix == ".ipynb" and item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.slow)
