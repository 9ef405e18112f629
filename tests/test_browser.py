"""The widget in a real browser: JupyterLab + Debian's Chromium, driven by Playwright.

Starts JupyterLab on 127.0.0.1 (a free port, a throwaway root folder holding a
copy of notebooks/01_quickstart.ipynb, isolated settings), opens the notebook in
headless Chromium, runs every cell, and checks the widgets against the kernel's
own sessions: node count and node colours per status, Step changes a node's
status, and clicking a node opens its detail panel. Screenshots go to
tests/browser/.

Needs /usr/bin/chromium and the ``playwright`` Python package (no browser
download): ``bash scripts/browser-deps.sh`` installs both. Without them the test
fails, on purpose: CI must run it. Waits are Playwright waits on DOM conditions
with timeouts, never sleeps.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from argus_lab.jupyter.display import STATUS_COLORS

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "01_quickstart.ipynb"
SHOTS = Path(__file__).resolve().parent / "browser"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--headless=new",
    "--disable-gpu",
    "--disable-background-networking",  # no network here: stop trying
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START_TIMEOUT = 60.0
"""Seconds JupyterLab may take to answer /api/status on a loaded CI box."""
WAIT_MS = 45_000
"""Longest single browser wait (kernel start plus running every cell)."""
DEPS = "run `bash scripts/browser-deps.sh` (apt-get chromium, pip playwright)"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _settings(folder: Path) -> None:
    """Isolated JupyterLab user settings: every cell rendered (no windowing, so
    outputs below the fold exist in the DOM) and no news or update checks."""
    tracker = folder / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text(
        json.dumps({"windowingMode": "none"})
    )
    notes = folder / "@jupyterlab" / "apputils-extension"
    notes.mkdir(parents=True)
    (notes / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read() or b"null")


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A JupyterLab server on 127.0.0.1 serving a copy of the quickstart."""
    base = tmp_path_factory.mktemp("lab")
    root = base / "root"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    _settings(base / "settings")
    port = _free_port()
    env = {
        **os.environ,
        "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "IPYTHONDIR": str(base / "ipython"),
        "ARGUS_HOME": str(base / "argus-home"),
    }
    log = (base / "lab.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--allow-root",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            "--ServerApp.disable_check_xsrf=True",
            "--LabApp.expose_app_in_browser=True",
            f"--ServerApp.root_dir={root}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            pytest.fail(
                f"JupyterLab exited with {proc.returncode}:\n"
                + (base / "lab.log").read_text()[-3000:]
            )
        try:
            _get(url + "/api/status")
            break
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"JupyterLab did not answer within {START_TIMEOUT} s")
            # Poll interval of a readiness probe, not a synchronisation guess.
            time.sleep(0.1)
    try:
        yield url
    finally:
        try:  # shut kernels down cleanly so none outlives the test
            for k in _get(url + "/api/kernels"):
                req = urllib.request.Request(
                    f"{url}/api/kernels/{k['id']}", method="DELETE"
                )
                urllib.request.urlopen(req, timeout=10).close()
        except (urllib.error.URLError, OSError):
            pass
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium through Playwright (never a downloaded browser).

    Module-scoped on purpose: while Playwright's sync API is open, the main
    thread counts as running an event loop, so ``asyncio.run`` in later test
    modules would fail."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: {DEPS}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(f"the playwright package is missing: {DEPS}")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


RUN_IN_KERNEL = """async (code) => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const future = kernel.requestExecute({ code, store_history: false });
  let out = "";
  let err = "";
  future.onIOPub = (msg) => {
    if (msg.header.msg_type === "stream") out += msg.content.text;
    if (msg.header.msg_type === "error") err += msg.content.evalue;
  };
  await future.done;
  return { out, err };
}"""

STATUSES_CODE = """import json
print(json.dumps({
    "first": {t: r.status for t, r in s.records.items()},
    "fork": {t: r.status for t, r in f.records.items()},
    "fork_name": f.name,
}))"""


def _kernel(page: Any, code: str) -> Any:
    res = page.evaluate(RUN_IN_KERNEL, code)
    assert not res["err"], res["err"]
    return json.loads(res["out"])


def _rgb(hex_colour: str) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgb({r}, {g}, {b})"


def _nodes(widget: Any) -> dict[str, dict[str, str]]:
    """id -> status, fill attribute and computed fill of every drawn node."""
    got: dict[str, dict[str, str]] = widget.evaluate(
        """(el) => Object.fromEntries([...el.querySelectorAll("g.argus-node")].map(
            (g) => {
              const r = g.querySelector("rect");
              return [g.dataset.id, {status: g.dataset.status,
                fill: r.getAttribute("fill"), computed: getComputedStyle(r).fill}];
            }))"""
    )
    return got


def _check_colours(widget: Any, statuses: dict[str, str]) -> None:
    nodes = _nodes(widget)
    assert sorted(nodes) == sorted(statuses)
    for tid, status in statuses.items():
        n = nodes[tid]
        assert n["status"] == status, (tid, n)
        assert n["fill"].lower() == STATUS_COLORS[status], (tid, n)
        assert n["computed"] == _rgb(STATUS_COLORS[status]), (tid, n)


def test_quickstart_in_jupyterlab(jupyter: str, browser: Any) -> None:
    SHOTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"{e}\n{e.stack}"))
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{jupyter}/lab/tree/{NOTEBOOK.name}")
    page.wait_for_function(
        """() => {
          const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
          const k = w && w.sessionContext && w.sessionContext.session &&
                    w.sessionContext.session.kernel;
          return k && k.connectionStatus === "connected" && k.status === "idle";
        }"""
    )
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    # Done when the last cell has run and both widgets (the plan, the fork) drew.
    page.wait_for_function(
        """() => {
          const nb = window.jupyterapp.shell.currentWidget.content;
          const cells = nb.widgets.filter((c) => c.model.type === "code");
          const last = cells[cells.length - 1];
          return last.model.executionCount !== null &&
                 document.querySelectorAll(".argus-graph g.argus-node").length >= 10;
        }"""
    )
    failed = page.evaluate(
        """() => window.jupyterapp.shell.currentWidget.content.widgets
            .filter((c) => c.model.type === "code")
            .flatMap((c) => c.model.outputs.toJSON())
            .filter((o) => o.output_type === "error")
            .map((o) => o.ename + ": " + o.evalue)"""
    )
    assert failed == []
    widgets = page.locator(".argus-graph")
    assert widgets.count() == 2
    first, fork = widgets.nth(0), widgets.nth(1)

    state = _kernel(page, STATUSES_CODE)
    assert set(state["first"].values()) == {"succeeded"}
    assert state["fork"]["answer"] == "pending"
    _check_colours(first, state["first"])
    _check_colours(fork, state["fork"])
    assert fork.locator(".argus-summary").inner_text().startswith(state["fork_name"])
    # The HTN-style group box of the three per-species tasks is drawn.
    assert first.locator('g.argus-group[data-group="per_species"]').count() == 1
    first.screenshot(path=str(SHOTS / "quickstart-plan.png"))

    fork.locator('button[data-action="step"]').click()
    answer = fork.locator('g.argus-node[data-id="answer"]')
    answer.and_(fork.locator('[data-status="succeeded"]')).wait_for()
    state = _kernel(page, STATUSES_CODE)
    assert state["fork"]["answer"] == "succeeded"
    _check_colours(fork, state["fork"])

    answer.click()
    panel = fork.locator(".argus-detail")
    panel.locator("h4").filter(has_text="answer").wait_for()
    text = panel.inner_text()
    assert "succeeded" in text
    assert "compare" in text  # the tool
    assert "Gentoo leads on body_mass_g" in text  # the new tool's result preview
    assert fork.locator('g.argus-node.argus-selected[data-id="answer"]').count() == 1
    fork.screenshot(path=str(SHOTS / "quickstart-fork-detail.png"))
    page.screenshot(path=str(SHOTS / "quickstart-page.png"), full_page=True)
    assert errors == [], "\n".join(errors)
    page.close()
