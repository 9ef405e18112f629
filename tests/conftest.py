"""Shared fixtures. Every test gets its own workspace; nothing touches ./.argus."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

import argus_lab as al

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

# In CI, property tests draw the same examples every run: a rare example found
# by chance must not fail an unrelated submission (locally they explore freely,
# and what they find is pinned as a plain test).
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A test that forgets to pass a workspace must not write into the checkout.
    monkeypatch.setenv("ARGUS_HOME", str(tmp_path / "argus-home"))


@pytest.fixture(autouse=True)
def _no_model_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any real HTTP request, or a connection beyond this machine, is an error
    (pydantic-ai's ALLOW_MODEL_REQUESTS = False, for the whole suite). Loopback
    stays open: the browser test drives a JupyterLab on 127.0.0.1."""

    def refuse(*args: object, **kwargs: object) -> object:
        raise RuntimeError("a test tried to make a real network request")

    for mod in ("httpx2", "httpx"):
        lib = pytest.importorskip(mod) if mod == "httpx2" else __import__(mod)
        monkeypatch.setattr(lib.HTTPTransport, "handle_request", refuse)
        monkeypatch.setattr(lib.AsyncHTTPTransport, "handle_async_request", refuse)
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: object) -> None:
        host = address[0] if isinstance(address, tuple) else None
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in (
            "127.0.0.1",
            "::1",
            "localhost",
        ):
            refuse()
        real_connect(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", connect)
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def ws(tmp_path: Path) -> al.Workspace:
    w = al.Workspace(tmp_path / "ws")
    yield w
    w.close()


@pytest.fixture
def ctx(tmp_path: Path) -> al.ToolContext:
    """A ToolContext for calling a tool directly, its folders under tmp_path."""
    ws = tmp_path / "ws"
    workdir = ws / "files" / "s"
    workdir.mkdir(parents=True)
    return al.ToolContext(
        session_id="s",
        task_id="t",
        attempt=1,
        idempotency_key="k",
        workspace=ws,
        workdir=workdir,
    )


FAST = {"backoff": (0.001, 0.01)}
"""Session options that keep retry delays negligible in tests."""


@al.tool
def add(a: int, b: int = 1) -> dict[str, int]:
    """Adds two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return {"sum": a + b}


@al.tool
def echo(value: object = None) -> object:
    """Returns its input."""
    return value


@al.tool
def boom(message: str = "boom") -> None:
    """Always fails permanently."""
    raise ValueError(message)


BASIC_TOOLS = [add, echo, boom]


def chain_plan(
    n: int, tool: str, *, prefix: str = "t", goal: str = "chain"
) -> dict[str, object]:
    """A chain of n tasks of one tool, each after the one before, with
    ``args={"i": i}``: ids ``<prefix>0`` .. ``<prefix>{n-1}``."""
    return {
        "goal": goal,
        "tasks": [
            {
                "id": f"{prefix}{i}",
                "tool": tool,
                "args": {"i": i},
                **({"deps": [f"{prefix}{i - 1}"]} if i else {}),
            }
            for i in range(n)
        ],
    }


def crashed_demo(ws: Path, pub: Path, at: int) -> subprocess.CompletedProcess[str]:
    """``argus -w WS demo --name c --crash-at AT --out PUB`` in a process of
    its own, which kills itself (SIGKILL) once AT tasks have succeeded."""
    argv = ["-w", ws, "demo", "--name", "c", "--crash-at", at, "--out", pub]
    p = subprocess.run(
        [sys.executable, "-m", "argus_lab.cli", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == -signal.SIGKILL, p.stderr
    return p


@pytest.fixture(scope="module")
def shell() -> Iterator[InteractiveShell]:
    """A real IPython shell with the argus extension loaded (the magics' tests).

    The shell makes its namespace the process's __main__ (one without
    __spec__ after a reset): the real one is put back, or a later test that
    starts a process with multiprocessing's spawn fails to prepare it.
    """
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    main = sys.modules["__main__"]
    cfg = Config()
    cfg.HistoryManager.hist_file = ":memory:"
    ip = InteractiveShell.instance(config=cfg)
    ip.extension_manager.load_extension("argus_lab.jupyter")
    yield ip
    sys.modules["__main__"] = main


def fresh_shell(shell: InteractiveShell, ws_dir: Path) -> None:
    """``shell`` with a fresh namespace, the workspace ``ws_dir`` and the
    magics' defaults (each magics test module then defines its tools)."""
    shell.reset(new_session=False)
    shell.user_ns["ws_dir"] = str(ws_dir)
    shell.run_line_magic("config", "ArgusMagics.workspace = ws_dir")
    shell.run_line_magic("config", "ArgusMagics.session_options = {}")
    shell.run_line_magic("config", "ArgusMagics.tools = ''")
    shell.run_line_magic("config", "ArgusMagics.mode = 'show'")


def files_holding(root: Path, *texts: str) -> list[str]:
    """Every file under ``root`` whose bytes hold one of ``texts``, as it is
    or as JSON writes it (the secret tests: LangGraph threads, typed states)."""
    found = []
    forms = {t: {t.encode(), json.dumps(t)[1:-1].encode()} for t in texts}
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            found += [
                f"{p.name}: {t}" for t in texts if any(f in data for f in forms[t])
            ]
    return found


def cli_run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """``argus ARGV`` in this process: (exit code, stdout, stderr)."""
    from argus_lab.cli import main

    code = main([str(a) for a in argv])
    got = capsys.readouterr()
    return code, got.out, got.err


def cli_files(
    tmp_path: Path, tools_file: str, tools: str, plan: str
) -> tuple[Path, Path, Path]:
    """(workspace, plan file, tools file) under ``tmp_path`` for CLI tests."""
    (tmp_path / tools_file).write_text(tools)
    (tmp_path / "plan.yaml").write_text(plan)
    return tmp_path / "ws", tmp_path / "plan.yaml", tmp_path / tools_file
