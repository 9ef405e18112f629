"""Secrets in the forms the sweep of issue 14 did not try, through real sessions.

Each test hands a secret to a session the way a user would (a provider's key
in a tool's result, a value read through ``${env.NAME}``) in a form a library
produces on its own, then scans every byte under the workspace: no copy lands.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.redact import MASK, Redactor

# A GitHub fine-grained token ("github_pat_", 22 characters, "_", 59) and the
# access key id of AWS temporary credentials (STS: "ASIA", 16 more).
GH_PAT = "github_pat_11ABCDEFG0" + "aB3dE6gH9jK2mN5pQ8" + "_" + "x7Y" * 20
AWS_STS = "ASIA" + "Q7RT2XKZ9PLM4WNB"
# An AWS secret access key: 40 characters of base64, so "/" and "+" in it.
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCY" + uuid.uuid4().hex[:10]


def scan(root: Path, needles: dict[str, str]) -> list[str]:
    """``name: file`` for every file under ``root`` holding one of ``needles``."""
    hits = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            hits += [
                f"{name}: {p.relative_to(root)}"
                for name, n in needles.items()
                if n.encode() in data
            ]
    return hits


@pytest.mark.parametrize(
    ("name", "key"), [("github_pat", GH_PAT), ("aws_sts", AWS_STS)]
)
def test_every_provider_key_shape_is_masked(name: str, key: str) -> None:
    red = Redactor(environ={})
    out = red.text(f"{name} = {key} ;")
    assert key not in out and MASK in out, out
    assert key[4:16] not in out  # no recognisable piece either
    assert red.value({"creds": [key]}) == {"creds": [MASK]}


@al.tool
def provider_keys() -> dict[str, Any]:
    """A result holding keys of the shapes every provider hands out."""
    return {"github": f"token {GH_PAT} ok", "aws": {"id": AWS_STS}}


def test_provider_keys_in_a_result_never_land(ws: al.Workspace) -> None:
    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "k", "tool": "provider_keys"}]},
        tools=[provider_keys],
        name=f"shapes-{uuid.uuid4().hex[:6]}",
    )
    s.run()
    assert s.result("k") == {"github": f"token {MASK} ok", "aws": {"id": MASK}}
    s.tasks_df()
    s.events_df()
    s.close()
    ws.close()
    assert scan(ws.path, {"github_pat": GH_PAT, "aws_sts": AWS_STS}) == []
