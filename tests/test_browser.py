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

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

SETUP = """%load_ext argus_lab
import time
import argus_lab as al

%config ArgusMagics.session_options = {"concurrency": 1}


@al.tool
def tick(i: int) -> int:
    \"\"\"A task that takes a while (its work is this sleep).\"\"\"
    time.sleep(0.4)
    return i


@al.tool(side_effect="write")
def publish(text: str) -> str:
    \"\"\"A write: asks for approval.\"\"\"
    return "published " + text"""


def _chains(goal: str, n_chains: int, length: int) -> str:
    lines = [f"goal: {goal}", "tasks:"]
    for c in range(n_chains):
        for i in range(length):
            lines.append(f"  - id: c{c}_t{i}")
            lines.append("    tool: tick")
            lines.append(f"    args: {{i: {i}}}")
            if i:
                lines.append(f"    deps: [c{c}_t{i - 1}]")
    return "\n".join(lines)


PUB_PLAN = """goal: publish after a check
tasks:
  - id: check
    tool: tick
    args: {i: 1}
  - id: post
    tool: publish
    args: {text: draft}
    deps: [check]
  - id: after
    tool: tick
    args: {i: 2}
    deps: [post]"""

NOTEBOOKS = {
    "live.ipynb": [
        SETUP,
        "%%argus live -o s --run\n" + _chains("a long chain", 1, 40),
        "%%argus pub -o r --run\n" + PUB_PLAN,
        "%%argus keys -o k\n" + _chains("three steps", 1, 3),
        "%%argus blocking -o bl\n" + _chains("a blocking run", 1, 8),
        "result = bl.run()",
    ],
    "big.ipynb": [SETUP, "%%argus big -o b\n" + _chains("300 tasks", 30, 10)],
    "restart.ipynb": [
        # No grace at exit: the restart cuts the task in flight (its intent).
        SETUP.replace('{"concurrency": 1}', '{"concurrency": 1, "shutdown_grace": 0}'),
        "%%argus gone -o g --run\n" + _chains("cut short", 1, 40),
        "n_done = g.counts()['succeeded']",
        "%argus open gone",
    ],
    "tabs.ipynb": [
        SETUP,
        "%%argus tabs -o t --run\n" + _chains("seen from two tabs", 1, 40),
        "t.close()",
    ],
}
"""Notebooks the tests below run (setup cell first)."""


def _write_notebook(path: Path, cells: list[str]) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, str(path))


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
    for name, cells in NOTEBOOKS.items():
        _write_notebook(root / name, cells)
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


KERNEL_READY = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session &&
            w.sessionContext.session.kernel;
  return k && k.connectionStatus === "connected" && k.status === "idle";
}"""


def _open(browser: Any, jupyter: str, name: str) -> tuple[Any, list[str]]:
    SHOTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"{e}\n{e.stack}"))
    page.set_default_timeout(WAIT_MS)
    # ?reset: a clean workspace, so no notebook of an earlier test is restored
    # (and made current) beside this one.
    page.goto(f"{jupyter}/lab/tree/{name}?reset")
    page.wait_for_function(
        """(name) => {
          const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
          return w && w.context && w.context.path === name;
        }""",
        arg=name,
    )
    page.wait_for_function(KERNEL_READY)
    return page, errors


def _start_cell(page: Any, index: int) -> None:
    """Starts running one cell (the command's promise ends with the cell, so it
    is not awaited here)."""
    page.evaluate(
        """(i) => {
          const panel = window.jupyterapp.shell.currentWidget;
          panel.content.activeCellIndex = i;
          window.jupyterapp.commands.execute("notebook:run-cell");
        }""",
        index,
    )


def _run_cell(page: Any, index: int) -> None:
    """Runs one cell and waits until it has finished (its execution count)."""
    _start_cell(page, index)
    _wait_cell(page, index)


def _wait_cell(page: Any, index: int) -> None:
    page.wait_for_function(
        """(i) => {
          const cell = window.jupyterapp.shell.currentWidget.content.widgets[i];
          return cell.model.executionCount !== null &&
                 cell.model.sharedModel.execution_state !== "running" &&
                 !cell.node.querySelector(".jp-InputArea-prompt")
                   .textContent.includes("*");
        }""",
        arg=index,
    )
    errs = page.evaluate(
        """(i) => window.jupyterapp.shell.currentWidget.content.widgets[i]
            .model.outputs.toJSON().filter((o) => o.output_type === "error")
            .map((o) => o.ename + ": " + o.evalue)""",
        index,
    )
    assert errs == [], errs


def test_live_run_pause_approve_and_keyboard(jupyter: str, browser: Any) -> None:
    page, errors = _open(browser, jupyter, "live.ipynb")
    _run_cell(page, 0)
    _run_cell(page, 1)  # %%argus --run returns at once; the run goes on
    live = page.locator(".argus-graph").nth(0)
    live.locator('g.argus-node[data-status="succeeded"]').first.wait_for()
    assert _kernel(page, "import json; print(json.dumps(s.running))") is True
    pause = live.locator('button[data-action="pause"]')
    assert pause.is_enabled()
    assert live.locator('button[data-action="step"]').is_disabled()
    run_btn = live.locator('button[data-action="run"]')
    assert run_btn.inner_text() == "Running…"
    where = pause.bounding_box()
    clicked = page.evaluate("Date.now() / 1000")
    pause.click()
    live.locator(".argus-chip.argus-session-paused").wait_for()
    # The toolbar did not move when "Running…" went back to "Run".
    after = pause.bounding_box()
    assert run_btn.inner_text() == "Run"
    assert (after["x"], after["width"]) == (where["x"], where["width"])
    assert pause.is_disabled()  # nothing left to pause
    state = _kernel(
        page,
        """import json
print(json.dumps({"status": s.status, "reason": s.reason, "running": s.running,
  "starts": [e.ts for e in s.events() if e.kind == "task_started"],
  "done": s.counts()["succeeded"]}))""",
    )
    assert state["status"] == "paused" and state["reason"] == "paused by the user"
    assert not state["running"]
    assert [ts for ts in state["starts"] if ts > clicked + 1.0] == []
    assert 0 < state["done"] < 40
    live.screenshot(path=str(SHOTS / "live-paused.png"))

    # A run that pauses only for an approval goes on when it is given here.
    _run_cell(page, 2)
    pub = page.locator(".argus-graph").nth(1)
    ask = pub.locator(".argus-approvals button")
    ask.wait_for()
    assert "r.approve('post')" in pub.locator(".argus-summary").inner_text()
    ask.click()
    panel = pub.locator(".argus-detail")
    panel.locator("h4").filter(has_text="post").wait_for()
    pub.screenshot(path=str(SHOTS / "approval-asked.png"))
    panel.locator("button.argus-approve").click()
    pub.locator('g.argus-node[data-id="after"][data-status="succeeded"]').wait_for()
    got = _kernel(
        page,
        "import json; "
        'print(json.dumps([r.status, r.record("post").approval["state"]]))',
    )
    assert got == ["succeeded", "approved"]

    # Keyboard only: Enter on Step, Tab to a node, "s" steps, Enter opens it.
    _run_cell(page, 3)
    keys = page.locator(".argus-graph").nth(2)
    keys.locator('button[data-action="step"]').focus()
    page.keyboard.press("Enter")
    keys.locator('g.argus-node[data-id="c0_t0"][data-status="succeeded"]').wait_for()
    for _ in range(30):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "() => document.activeElement.getAttribute('data-id') || ''"
        )
        if focused == "c0_t1":
            break
    assert focused == "c0_t1"
    page.keyboard.press("s")
    keys.locator('g.argus-node[data-id="c0_t1"][data-status="succeeded"]').wait_for()
    page.keyboard.press("ArrowRight")  # arrows move between nodes
    assert page.evaluate("() => document.activeElement.dataset.id") == "c0_t2"
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("Enter")
    keys.locator(".argus-detail h4").filter(has_text="c0_t1").wait_for()
    text = keys.locator(".argus-detail").inner_text()
    assert "args as run" in text and '"i": 1' in text
    keys.screenshot(path=str(SHOTS / "keyboard-step-select.png"))

    # A cell running a blocking bl.run(): the widget says so, controls are off.
    _run_cell(page, 4)
    blocking = page.locator(".argus-graph").nth(3)
    _start_cell(page, 5)
    banner = blocking.locator(".argus-cell-banner")
    banner.wait_for()
    assert banner.inner_text().startswith(
        "The cell is running bl.run(): controls act when it returns; use "
        "bl.start() or %%argus --run for a live run."
    )
    assert blocking.locator("button[data-action]:enabled").count() == 0
    blocking.screenshot(path=str(SHOTS / "cell-running-banner.png"))
    _wait_cell(page, 5)
    banner.wait_for(state="hidden")
    assert blocking.locator(".argus-chip.argus-session-succeeded").count() == 1
    assert errors == [], "\n".join(errors)
    page.close()


LABEL_SIZES = """(el) => [...el.querySelectorAll("g.argus-node text.argus-node-label")]
  .filter((t) => getComputedStyle(t).display !== "none")
  .map((t) => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a)"""


def test_big_plan_is_readable_and_the_dark_theme(jupyter: str, browser: Any) -> None:
    page, errors = _open(browser, jupyter, "big.ipynb")
    _run_cell(page, 0)
    _run_cell(page, 1)
    big = page.locator(".argus-graph").nth(0)
    big.locator("g.argus-node").nth(299).wait_for(state="attached")
    assert big.locator("g.argus-node").count() == 300
    sizes = big.evaluate(LABEL_SIZES)
    assert len(sizes) == 300  # labels are drawn at the default zoom ...
    assert min(sizes) >= 10.99, min(sizes)  # ... at 11 px or more on screen
    big.screenshot(path=str(SHOTS / "big-300-default.png"))
    # The minimap shows where the view is; a click there moves the view.
    minimap = big.locator("canvas.argus-minimap")
    assert minimap.is_visible()
    last = big.locator('g.argus-node[data-id="c29_t9"]')
    assert not _in_view(big, last)
    box = minimap.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] - 6, box["y"] + box["height"] - 6)
    assert _in_view(big, last)
    big.locator("button", has_text="Fit").click()
    big.locator('g.argus-node[data-id="c0_t1"]').click()
    big.locator(".argus-detail h4").filter(has_text="c0_t1").wait_for()
    # Fit shows the whole graph: labels give way to a summary, never shrink.
    big.locator("button", has_text="Fit").click()
    assert big.evaluate(LABEL_SIZES) == []
    assert big.locator(".argus-canvas-hint").is_visible()
    assert big.locator(".argus-layer").count() >= 5  # layer summaries instead
    assert "300 nodes" in (
        big.locator("svg.argus-svg").get_attribute("aria-label") or ""
    )
    big.screenshot(path=str(SHOTS / "big-300-fit.png"))
    # Selecting in the overview, then "Selected", shows that task readable.
    big.locator('g.argus-node[data-id="c12_t5"]').click()
    big.locator(".argus-detail h4").filter(has_text="c12_t5").wait_for()
    big.locator("button", has_text="Selected").click()
    sizes = big.evaluate(LABEL_SIZES)
    assert sizes and min(sizes) >= 10.99
    assert big.locator(
        'g.argus-node[data-id="c12_t5"] text.argus-node-label'
    ).is_visible()

    # The wheel scrolls the notebook unless Ctrl is held (or after a click in).
    svg = big.locator("svg.argus-svg")
    area = svg.bounding_box()
    assert area is not None
    page.mouse.move(5, 5)  # leave the canvas: a click's wheel-zoom ends
    page.mouse.move(area["x"] + 200, area["y"] + 100)
    before = svg.get_attribute("viewBox")
    page.mouse.wheel(0, 300)
    assert svg.get_attribute("viewBox") == before
    page.keyboard.down("Control")
    page.mouse.wheel(0, -300)
    page.keyboard.up("Control")
    assert svg.get_attribute("viewBox") != before
    # Zoom has limits: however far out, the whole graph stays a usable size.
    svg.focus()
    for _ in range(60):
        page.keyboard.press("-")
    width = float((svg.get_attribute("viewBox") or "0 0 0 0").split()[2])
    assert width <= area["width"] / 0.02 + 1
    assert not big.locator("canvas.argus-minimap").is_visible()  # all in view
    page.evaluate(
        "window.jupyterapp.commands.execute('apputils:change-theme', "
        "{theme: 'JupyterLab Dark'})"
    )
    page.wait_for_function(
        "() => document.body.dataset.jpThemeLight === 'false' && "
        "getComputedStyle(document.querySelector('.argus-graph')).backgroundColor"
        " !== 'rgb(255, 255, 255)'"
    )
    dark = big.evaluate(
        """(el) => {
          const node = el.querySelector('g.argus-node[data-id="c0_t0"]');
          const lum = (c) => { const [r, g, b] = c.match(/\\d+/g).map(Number);
                               return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
          return {
            bg: lum(getComputedStyle(el).backgroundColor),
            text: lum(getComputedStyle(node.querySelector("text")).fill),
            box: lum(getComputedStyle(node.querySelector("rect")).fill),
          };
        }"""
    )
    assert dark["bg"] < 80 and dark["box"] < 110 and dark["text"] > 180, dark
    big.locator("button", has_text="Selected").click()  # readable again
    big.screenshot(path=str(SHOTS / "big-300-dark.png"))
    page.evaluate(
        "window.jupyterapp.commands.execute('apputils:change-theme', "
        "{theme: 'JupyterLab Dark High Contrast'})"
    )
    page.wait_for_function(
        "() => document.body.dataset.jpThemeName === 'JupyterLab Dark High Contrast'"
    )
    big.screenshot(path=str(SHOTS / "big-300-high-contrast.png"))
    page.evaluate(
        "window.jupyterapp.commands.execute('apputils:change-theme', "
        "{theme: 'JupyterLab Light'})"
    )
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'true'")
    assert errors == [], "\n".join(errors)
    page.close()


def test_kernel_restart_then_reload(jupyter: str, browser: Any) -> None:
    page, errors = _open(browser, jupyter, "restart.ipynb")
    _run_cell(page, 0)
    _run_cell(page, 1)
    gone = page.locator(".argus-graph").nth(0)
    gone.locator('g.argus-node[data-status="succeeded"]').first.wait_for()
    # The static fallback output sits above the live view, hidden while it lives.
    assert page.locator(".argus-fallback").count() == 1
    assert not page.locator(".argus-fallback").is_visible()
    gone.locator('g.argus-node[data-id="c0_t2"][data-status="succeeded"]').wait_for()
    _run_cell(page, 2)  # after a cell, the static fallback catches up
    page.wait_for_function(
        """() => /gone \\(running\\)/.test(
             document.querySelector(".argus-fallback").textContent)"""
    )
    page.evaluate(
        "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()"
    )
    gone.locator(".argus-disconnected-banner").wait_for()
    banner = gone.locator(".argus-disconnected-banner").inner_text()
    assert "%argus open gone" in banner and "Last status seen here: running" in banner
    assert gone.locator("button[data-action]:enabled").count() == 0
    gone.screenshot(path=str(SHOTS / "restart-disconnected.png"))
    page.wait_for_function(KERNEL_READY)
    _run_cell(page, 0)
    _run_cell(page, 3)  # %argus open gone: exactly what was committed
    reopened = page.locator(".argus-graph").last
    reopened.locator(".argus-summary").wait_for()
    committed = _kernel(
        page,
        """import json
s2 = al.Workspace().open("gone")
print(json.dumps({t: r.status for t, r in s2.records.items()}))""",
    )
    _check_statuses(reopened, committed)
    assert "succeeded" in committed.values()  # what ran before the restart
    # A task in flight at the restart is stored as running, but nothing runs
    # it: drawn interrupted (its intent, decided by the next run), never running.
    assert reopened.locator("rect.argus-st-running").count() == 0
    for t in (t for t, st in committed.items() if st == "running"):
        box = reopened.locator(f'g.argus-node[data-id="{t}"] rect')
        assert box.get_attribute("class") == "argus-node-box argus-st-interrupted"
    reopened.screenshot(path=str(SHOTS / "restart-reopened.png"))

    # Save, restart the kernel (no models left), reload: the static view shows.
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty"
    )
    page.evaluate(
        "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()"
    )
    page.wait_for_function(KERNEL_READY)
    page.reload()
    page.wait_for_function(KERNEL_READY)
    fallback = page.locator(".argus-fallback").first
    fallback.wait_for()
    assert fallback.locator("svg g[data-id]").count() == 40
    assert "%argus open gone" in fallback.inner_text()
    assert "gone (running)" in fallback.inner_text()  # as last synced, not "created"
    # ipywidgets' "model not found" is hidden: the static view says what to do.
    page.locator(".jp-OutputArea-output.jupyter-widgets").first.wait_for(
        state="attached"
    )
    assert "model not found" not in page.locator(".jp-Notebook").inner_text()
    fallback.screenshot(path=str(SHOTS / "reload-static-fallback.png"))
    assert errors == [], "\n".join(errors)
    page.close()


def _in_view(widget: Any, node: Any) -> bool:
    """Whether a node's box lies inside the widget's canvas on screen."""
    canvas = widget.locator(".argus-canvas").bounding_box()
    box = node.bounding_box()
    return bool(
        canvas
        and box
        and box["x"] >= canvas["x"]
        and box["y"] >= canvas["y"]
        and box["x"] + box["width"] <= canvas["x"] + canvas["width"]
        and box["y"] + box["height"] <= canvas["y"] + canvas["height"]
    )


def _check_statuses(widget: Any, statuses: dict[str, str]) -> None:
    nodes = _nodes(widget)
    assert {t: n["status"] for t, n in nodes.items()} == statuses


def test_two_tabs_a_reload_and_a_closed_session(jupyter: str, browser: Any) -> None:
    """The notebook open in two tabs (the second loads the saved file and gets
    its widget's state from the running kernel): both show the live run, Pause
    in one stops it in both, a reload brings the live view back as it stands;
    closing the session in a cell shows a Closed banner with no enabled
    control in both."""
    page, errors = _open(browser, jupyter, "tabs.ipynb")
    _run_cell(page, 0)
    _run_cell(page, 1)
    a = page.locator(".argus-graph").first
    a.locator('g.argus-node[data-status="succeeded"]').first.wait_for()
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty"
    )
    other = browser.new_page(viewport={"width": 1400, "height": 1000})
    other_errors: list[str] = []
    other.on("pageerror", lambda e: other_errors.append(f"{e}\n{e.stack}"))
    other.set_default_timeout(WAIT_MS)
    other.goto(f"{jupyter}/lab/workspaces/second/tree/tabs.ipynb")
    other.wait_for_function(KERNEL_READY)
    b = other.locator(".argus-graph").first
    # Live in the second tab: state from the kernel, not the static fallback.
    b.locator('button[data-action="pause"]:enabled').wait_for()
    assert not other.locator(".argus-fallback").first.is_visible()
    assert "model not found" not in other.locator(".jp-Notebook").inner_text()
    done_b = b.locator('g.argus-node[data-status="succeeded"]').count()
    # It follows the run, not a snapshot: a later task succeeds here too.
    b.locator(
        f'g.argus-node[data-id="c0_t{done_b + 1}"][data-status="succeeded"]'
    ).wait_for()
    b.locator('button[data-action="pause"]').click()
    for view in (a, b):
        view.locator(".argus-chip.argus-session-paused").wait_for()
        assert view.locator('button[data-action="pause"]').is_disabled()
    state = _kernel(
        page,
        "import json; print(json.dumps([t.status, t.reason, t.running]))",
    )
    assert state == ["paused", "paused by the user", False]
    # A reload with the kernel alive: the live view comes back, as it stands.
    other.reload()
    other.wait_for_function(KERNEL_READY)
    b = other.locator(".argus-graph").first
    b.locator(".argus-chip.argus-session-paused").wait_for()
    assert b.locator('button[data-action="run"]').is_enabled()
    assert not other.locator(".argus-fallback").first.is_visible()

    _run_cell(page, 2)  # t.close(): the session object acts no more
    for view in (a, b):
        banner = view.locator(".argus-closed-banner")
        banner.wait_for()
        assert "%argus open tabs" in banner.inner_text()
        assert "Last committed status: paused" in banner.inner_text()
        assert view.locator("button[data-action]:enabled").count() == 0
    b.screenshot(path=str(SHOTS / "closed-second-tab.png"))
    assert errors == [] and other_errors == [], "\n".join(errors + other_errors)
    other.close()
    page.close()
