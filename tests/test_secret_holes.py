"""Secrets by the routes the sweeps of issue 14 and the sixth session left out.

Each test hands a secret to Argus the way a user would (the environment, a
session's ``secrets=``, a document to ingest) by a route nobody had tried,
then scans every byte (and every path) under the workspace: no copy lands,
and what was stored still opens.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

import argus_lab as al
from argus_lab.store.memory import Memory

SECRET = "hole-" + uuid.uuid4().hex  # random from its 6th character
ENV = "ARGUS_HOLES_TOKEN"  # named like a secret: the redactor knows its value
ANTHROPIC = "sk-ant-api03-" + uuid.uuid4().hex + uuid.uuid4().hex[:8]


def scan(root: Path, *needles: str) -> list[str]:
    """``needle: path`` for every file under ``root`` whose bytes or whose
    path (below ``root``) hold one of ``needles`` (by its first 12 characters)."""
    hits = []
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        hits += [f"{n[:12]}: {rel} (its path)" for n in needles if n[:12] in rel]
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            hits += [f"{n[:12]}: {rel}" for n in needles if n[:12].encode() in data]
    return hits


def test_memory_added_or_ingested_directly_holds_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The memory tool masked what a task remembered; memory.add and
    # memory.ingest, the user's own calls into the same LanceDB, did not.
    monkeypatch.setenv(ENV, SECRET)
    mem = Memory(tmp_path / "memory", embedder=None)
    mem.add(f"the deploy token is {SECRET}", metadata={"key": ANTHROPIC, "n": 3})
    notes = tmp_path / "notes.md"
    notes.write_text(f"# Setup\n\nexport ANTHROPIC_API_KEY={ANTHROPIC}\n\nThen run.\n")
    mem.ingest(notes)
    texts = sorted(r.text for r in mem.search("deploy token setup", k=5))
    assert texts == [
        "# Setup\n\nexport ANTHROPIC_API_KEY=[REDACTED]\n\nThen run.",
        "the deploy token is [REDACTED]",
    ], texts
    hit = mem.search("deploy", k=1)[0]
    assert hit.metadata == {"key": "[REDACTED]", "n": 3}
    assert list((tmp_path / "memory").rglob("*.lance"))  # the scan reads LanceDB
    assert scan(tmp_path / "memory", SECRET, ANTHROPIC) == []


@al.tool
def read_late_env() -> dict[str, str]:
    """Returns an env var set after the session was opened."""
    return {"v": "the key is " + os.environ["ARGUS_LATE_API_KEY"]}


def test_an_env_secret_set_after_the_session_opened_never_lands(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A notebook opens the session in one cell and runs `%env KEY=...` in the
    # next: the redactor read the environment once, when the session opened.
    plan = {"goal": "g", "tasks": [{"id": "a", "tool": "read_late_env"}]}
    s = ws.new_session(plan=plan, tools=[read_late_env])
    monkeypatch.setenv("ARGUS_LATE_API_KEY", SECRET)
    s.run()
    assert s.result("a") == {"v": "the key is [REDACTED]"}
    s.tasks_df()
    s.close()
    assert scan(ws.path, SECRET) == []
