"""The import-linter contracts of pyproject.toml (DESIGN.md section 3) hold, and
they would catch a backward import.

scripts/test.sh runs ``lint-imports`` on the tree; these tests run it too, and on
a copy of the package with one import pointing the wrong way.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")


def lint(where: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache", "--config", str(where / "pyproject.toml")],
        cwd=where,
        env={"PYTHONPATH": str(where), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def copy(tmp_path: Path) -> Path:
    shutil.copytree(
        ROOT / "argus_lab",
        tmp_path / "argus_lab",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_contracts_hold_on_the_tree() -> None:
    out = lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Contracts: 2 kept, 0 broken." in out.stdout


@pytest.mark.parametrize(
    ("module", "line", "edge"),
    [
        # A record module reaching up to the workspace (L0 -> L4), even lazily.
        (
            "model.py",
            "def _up() -> object:\n    from argus_lab.workspace import Workspace\n"
            "    return Workspace\n",
            "argus_lab.model -> argus_lab.workspace",
        ),
        # The store reaching the runtime (L2 -> L3).
        (
            "store/artifacts.py",
            "import argus_lab.runtime.scheduler\n",
            "argus_lab.store.artifacts -> argus_lab.runtime.scheduler",
        ),
        # The runtime importing pandas.
        (
            "runtime/scheduler.py",
            "import pandas\n",
            "argus_lab.runtime.scheduler -> pandas",
        ),
    ],
)
@pytest.mark.slow
def test_a_backward_import_breaks_a_contract(
    tmp_path: Path, module: str, line: str, edge: str
) -> None:
    where = copy(tmp_path)
    path = where / "argus_lab" / module
    path.write_text(path.read_text() + "\n\n" + line)
    out = lint(where)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 broken" in out.stdout and edge in out.stdout


@pytest.mark.slow
def test_imports_under_type_checking_do_not_count(tmp_path: Path) -> None:
    where = copy(tmp_path)
    path = where / "argus_lab" / "model.py"
    text = path.read_text()
    path.write_text(
        text + "\n\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        "    from argus_lab.workspace import Workspace\n"
    )
    out = lint(where)
    assert out.returncode == 0, out.stdout + out.stderr
