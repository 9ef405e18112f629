"""The wheel carries the widget's front end and the demo's data, and an installed
(non-editable) copy finds them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.mark.slow
def test_wheel_contents_and_an_installed_copy_find_them(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    wheel = next(out.glob("argus_lab-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for must in (
        "argus_lab/_widgets/graph.js",
        "argus_lab/_widgets/graph.css",
        "argus_lab/_data/penguins/penguins.csv",
        "argus_lab/_data/penguins/README.md",
        "argus_lab/__init__.py",
    ):
        assert must in names, must
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import argus_lab.jupyter.widget as w, argus_lab.demo as d, pathlib; "
        "js = pathlib.Path(w.asset_path('graph.js')); "
        "print(js.is_relative_to(pathlib.Path(w.__file__).parent.parent)); "
        "print(d.dataset_path().is_relative_to(pathlib.Path(d.__file__).parent.parent))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        check=True,
    )
    assert p.stdout.split() == ["True", "True"], p.stdout + p.stderr
