"""Start-up stays light: ``import argus_lab`` and ``argus --help`` load neither
pydantic nor the runtime (names load on first use). What is loaded is checked in
a fresh interpreter; how long it takes is benchmarks/bench_startup.py's job."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pydantic", "argus_lab.runtime.session", "argus_lab.model", "pandas")


def loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_import_argus_lab_loads_no_pydantic_or_runtime() -> None:
    mods = loaded_after("import argus_lab")
    assert [m for m in HEAVY if m in mods] == []


def test_argus_help_loads_no_pydantic_or_runtime() -> None:
    code = (
        "import contextlib, io\n"
        "from argus_lab.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as buf:\n"
        "    code = main(['--help'])\n"
        "assert code == 0 and 'commands' in buf.getvalue(), buf.getvalue()\n"
    )
    mods = loaded_after(code)
    assert [m for m in HEAVY if m in mods] == []


def test_a_public_name_loads_on_first_use() -> None:
    mods = loaded_after(
        "import argus_lab as al\n"
        "assert al.Workspace.__name__ == 'Workspace' and callable(al.tool)\n"
        "assert 'Session' in dir(al)"
    )
    assert "argus_lab.workspace" in mods and "pydantic" in mods
