"""The README's Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).parent.parent / "README.md"


def test_the_python_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    assert "import argus_lab as al" in code
    monkeypatch.chdir(tmp_path)
    ns: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), ns)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("paused") and out[1].startswith("succeeded")
    s = ns["s3"]
    assert s.record("alice").status == "succeeded"  # type: ignore[attr-defined]
    for name in ("s", "s2", "s3"):
        ns[name].close()  # type: ignore[attr-defined]
