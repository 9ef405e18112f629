"""Bad workspace paths a new user passes: each gets a clear error, nothing is made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import argus_lab as al


@pytest.mark.parametrize("path", ["", "   "])
def test_an_empty_path_is_refused_not_taken_for_the_current_folder(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Path("") is ".": an unset variable (os.environ.get("X", "")) would turn
    # the folder the user stands in into a workspace.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="workspace path is empty") as info:
        al.Workspace(path)
    assert "None for the default" in str(info.value)
    assert os.listdir(tmp_path) == []
