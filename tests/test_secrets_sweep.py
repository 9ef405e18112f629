"""Secrets never land (invariant 7), artifacts included: the sweep of issue 14.

One secret, handed to a session only as an environment variable (the way the
docs say to), reaches tools, the sandbox, the model, approvals and memory by
every route we know. Then every byte under the workspace (SQLite files with
their WAL, artifacts, LanceDB, task folders, the index) is scanned for the
secret and for its first 12 characters: zero hits. Routes that cannot be masked
(binary data, names and ids that are keys) are refused, with errors naming them.
"""

from __future__ import annotations

import logging
import sys
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import argus_lab as al
from argus_lab.errors import PlanError
from argus_lab.llm.base import ModelRequest
from argus_lab.llm.testing import FunctionModel
from argus_lab.store.memory_tools import MEMORY_TOOLS
from argus_lab.tools.builtin import builtin_tools
from argus_lab.tools.sandbox import Limits, make_python_tool

SECRET = "sweep-" + uuid.uuid4().hex  # the first 12 characters are random too
ENV = "ARGUS_SWEEP_TOKEN"  # named like a secret: the redactor knows its value
REF = "${env." + ENV + "}"


@al.tool
def raw_bytes() -> bytes:
    """A text result as raw bytes."""
    return f"token {SECRET} end".encode()


@al.tool
def binary_bytes() -> bytes:
    """Binary data with the secret inside: cannot be masked."""
    return b"\x89PNG\r\n\x1a\n\xff\xfe" + SECRET.encode() + b"\x00\xff"


@al.tool
def frame() -> pd.DataFrame:
    """The secret in a cell, a column name and the index."""
    return pd.DataFrame({"a": [SECRET, "x"], SECRET: [1, 2]}, index=[SECRET, "i"])


@al.tool
def echo(value: str) -> dict[str, str]:
    """Returns its argument (here, the secret from the environment)."""
    return {"value": value}


@al.tool
def big(value: str) -> dict[str, str]:
    """A result too large to sit inline: it becomes an artifact."""
    return {"blob": "x" * 100_000 + value}


@al.tool
def boom(value: str) -> None:
    """Fails with the secret in its message (and so in its traceback)."""
    raise RuntimeError(f"failed with {value}")


@al.tool
def file_result(value: str, *, ctx: al.ToolContext) -> Path:
    """Writes a file in the session folder and returns it (an artifact)."""
    p = Path(ctx.workdir) / "written-by-tool.txt"
    p.write_text(f"key: {value}\n")
    return p


def answer(req: ModelRequest) -> str:
    """The model sees the secret in its prompt and repeats it."""
    prompt = str([m.content for m in req.messages])
    assert SECRET in prompt  # the request really carried it
    return f"The answer mentions {SECRET}"


PY_FILE = (
    f"open('secret.txt', 'w').write('{REF}')\n"
    f"open('out.csv', 'w').write('name,value\\nk,{REF}\\n')\n"
    f"print('printed {REF}')\n"
)
PY_BINARY = f"open('blob.bin', 'wb').write(b'\\x00\\xff' + '{REF}'.encode())\n"
PY_RAISE = f"print('about to fail {REF}')\nraise ValueError('bad {REF}')\n"

TASKS: list[dict[str, Any]] = [
    {"id": "raw_bytes", "tool": "raw_bytes"},
    {"id": "binary_bytes", "tool": "binary_bytes"},
    {"id": "frame", "tool": "frame"},
    {"id": "echo", "tool": "echo", "args": {"value": REF}},
    {"id": "big", "tool": "big", "args": {"value": REF}},
    {"id": "boom", "tool": "boom", "args": {"value": REF}},
    {"id": "file_result", "tool": "file_result", "args": {"value": REF}},
    {"id": "py_file", "tool": "python", "args": {"code": PY_FILE}},
    {"id": "py_binary", "tool": "python", "args": {"code": PY_BINARY}},
    {"id": "py_raise", "tool": "python", "args": {"code": PY_RAISE}},
    {"id": "py_observe", "tool": "python", "args": {"code": PY_RAISE, "check": False}},
    {"id": "write", "tool": "write_file", "args": {"path": "w.txt", "content": REF}},
    {"id": "edited", "tool": "write_file", "args": {"path": "e.txt", "content": "x"}},
    {"id": "rejected", "tool": "write_file", "args": {"path": "r.txt", "content": REF}},
    {"id": "remember", "tool": "memory_add", "args": {"text": f"lesson: {REF}"}},
    {
        "id": "ask",
        "kind": "llm",
        "description": "Say something about the topic.",
        "args": {"topic": REF},
    },
]


def scan(root: Path) -> list[str]:
    """Every file under ``root`` holding the secret or its first 12 characters."""
    needles = (SECRET.encode(), SECRET[:12].encode())
    hits = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            hits += [f"{p.relative_to(root)}: {n!r}" for n in needles if n in data]
    return hits


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sandbox: Linux")
def test_no_byte_of_the_secret_lands_anywhere(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ENV, SECRET)
    caplog.set_level(logging.DEBUG)
    tools = [
        raw_bytes,
        binary_bytes,
        frame,
        echo,
        big,
        boom,
        file_result,
        make_python_tool(Limits(wall_time=20)),
        *builtin_tools("write_file"),
        *MEMORY_TOOLS,
    ]
    plan = {"goal": f"sweep for {REF}", "tasks": TASKS}
    opts: dict[str, Any] = {
        "models": FunctionModel(answer, name="scripted"),
        "remember": True,
        "max_consecutive_failures": None,
    }
    s = ws.new_session(goal=f"a goal naming {SECRET}", plan=plan, tools=tools, **opts)

    # Names and ids are keys: refused, never masked.
    with pytest.raises(ValueError, match="session name holds a secret"):
        ws.new_session(plan={"goal": "g", "tasks": TASKS[:1]}, tools=tools, name=SECRET)
    with pytest.raises(PlanError, match="a task id holds a secret"):
        bad = {"goal": "g", "tasks": [{"id": SECRET, "tool": "frame"}]}
        ws.new_session(plan=bad, tools=tools)

    s.run()
    assert set(s.pending_approvals()) == {"write", "edited", "rejected"}
    s.approve("write")
    # Edits are stored with the approval: a literal secret is refused (it
    # would reach the tool masked), ${env.NAME} is read when the task runs.
    with pytest.raises(PlanError, match="holds a secret"):
        s.approve("edited", {"path": "e.txt", "content": f"edited {SECRET}"})
    s.approve("edited", {"path": "e.txt", "content": f"edited {REF}"})
    s.reject("rejected", f"no, not with {SECRET}")
    s.run()
    with pytest.raises(ValueError, match="session name holds a secret"):
        s.fork(name=SECRET)

    status = {tid: s.record(tid).status for tid in (t["id"] for t in TASKS)}
    failed = {"binary_bytes", "boom", "py_binary", "py_raise", "rejected"}
    assert {t for t, st in status.items() if st == "failed"} == failed, status
    assert all(status[t] == "succeeded" for t in status if t not in failed), status
    # What was masked still reads; what was refused names the task.
    assert s.result("raw_bytes") == b"token [REDACTED] end"
    df = s.result("frame")
    assert list(df.columns) == ["a", "[REDACTED]"] and df["a"].iloc[0] == "[REDACTED]"
    assert list(df.index) == ["[REDACTED]", "i"]
    assert "task 'binary_bytes'" in (s.record("binary_bytes").error or "")
    assert "task 'py_binary'" in (s.record("py_binary").error or "")
    assert "blob.bin" in (s.record("py_binary").error or "")
    assert "ValueError: bad [REDACTED]" in (s.record("py_raise").error or "")
    observed = s.result("py_observe")
    assert observed["exit_code"] == 1 and "[REDACTED]" in observed["stderr"]
    produced = s.result("py_file")["files"]
    assert {Path(k).name for k in produced} == {"secret.txt", "out.csv"}
    assert all(p.read_text().count("[REDACTED]") == 1 for p in produced.values())
    assert s.result("ask") == "The answer mentions [REDACTED]"
    assert (Path(ws.path) / "files" / s.id / "e.txt").read_text() == "edited [REDACTED]"
    assert s.record("rejected").error is not None
    s.tasks_df()
    s.events_df()  # the frames read what was stored: masked too
    s.close()
    ws.close()

    # The scan covers every kind of storage, and finds a planted copy.
    parts = {p.relative_to(ws.path).parts[0] for p in ws.path.rglob("*") if p.is_file()}
    assert {"sessions", "index", "artifacts", "files", "memory"} <= parts, parts
    assert list((ws.path / "files" / s.id / "tasks").rglob("secret.txt"))
    assert any(p.suffix == ".lance" for p in (ws.path / "memory").rglob("*"))
    assert scan(ws.path) == []
    assert SECRET[:12] not in caplog.text
    planted = ws.path / "memory" / "planted.bin"
    planted.write_bytes(b"\x00" + SECRET[:12].encode() + b"\x00")
    assert scan(ws.path) == [f"memory/planted.bin: {SECRET[:12].encode()!r}"]


def test_masking_bytes_frames_and_files(tmp_path: Path) -> None:
    from argus_lab.redact import Redactor

    red = Redactor([SECRET], environ={})
    assert red.mask_bytes(f"a {SECRET} b".encode()) == b"a [REDACTED] b"
    assert red.mask_bytes(b"\xff\x00plain") == b"\xff\x00plain"  # nothing to mask
    assert red.mask_bytes(b"\xff\x00" + SECRET.encode()) is None  # binary: refuse
    df = pd.DataFrame({"k": [1]})
    assert red.frame(df) is df  # nothing to mask: no copy
    text, blob = tmp_path / "t.txt", tmp_path / "b.bin"
    text.write_text(f"x={SECRET}\n")
    blob.write_bytes(b"\x00\xff" + SECRET.encode())
    assert red.scrub_file(text) == "masked" and SECRET not in text.read_text()
    assert red.scrub_file(text) == "clean"
    assert red.scrub_file(blob) == "removed" and not blob.exists()


def test_a_pickled_tool_context_carries_no_secret(tmp_path: Path) -> None:
    import pickle

    from argus_lab.redact import Redactor

    ctx = al.ToolContext(
        session_id="s",
        task_id="t",
        attempt=1,
        idempotency_key="k",
        workspace=tmp_path,
        workdir=tmp_path,
        redactor=Redactor([SECRET], environ={}),
    )
    data = pickle.dumps(ctx)  # e.g. shipped to a Dask worker with the call
    assert SECRET.encode() not in data
    assert pickle.loads(data).redactor is None
