"""Widget front end benchmark: layout time and first paint for 1,000 and 3,000 nodes.

A script, not a test. For each size it lays out a layered random DAG in Python
(``layout_plan``, as the widget does), then loads ``widgets/graph.js`` into a
blank page of headless Debian Chromium (Playwright, no browser download) with a
minimal stand-in for the anywidget model (get/set/on/off/send, the traits the
kernel would send), and times ``render()`` until the next animation frame has
painted. It also reports the smallest label size on screen at the default zoom
(labels are either >= 11 px or hidden in favour of summaries).

    .venv/bin/python benchmarks/bench_widget_paint.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PAGE = """async ({ js, css, state }) => {
  const style = document.createElement("style");
  style.textContent = css;
  document.head.append(style);
  const url = URL.createObjectURL(new Blob([js], { type: "text/javascript" }));
  const mod = await import(url);
  const handlers = {};
  const model = {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; },
    save_changes: () => {},
    send: () => {},
    on: (ev, fn) => { handlers[ev] = fn; },
    off: () => {},
  };
  const el = document.createElement("div");
  el.style.width = "1100px";
  document.body.replaceChildren(el);
  const t0 = performance.now();
  mod.default.render({ model, el });
  const rendered = performance.now() - t0;
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const painted = performance.now() - t0;
  const sizes = [...el.querySelectorAll("text.argus-node-label")]
    .filter((t) => getComputedStyle(t).display !== "none")
    .map((t) => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a);
  return { rendered, painted, labels: sizes.length,
           min_px: sizes.length ? Math.min(...sizes) : null };
}"""


def _state(n: int) -> tuple[dict[str, Any], float]:
    from argus_lab.jupyter.display import STATUS_CODES, STATUS_COLORS
    from argus_lab.layout import layout_graph
    from benchmarks.bench_widget import random_dag

    specs = random_dag(n, groups=False)
    t0 = time.perf_counter()
    lay = layout_graph(specs)
    ms = (time.perf_counter() - t0) * 1000
    state = {
        "graph": dict(lay),
        "tasks": [t.id for t in specs],
        "status_codes": "p" * n,
        "codes": {c: s for s, c in STATUS_CODES.items()},
        "palette": dict(STATUS_COLORS),
        "stale": [], "breakpoints": [], "selected": "", "detail": {},
        "summary": {"name": "bench", "status": "created", "total": n, "done": 0,
                    "running": 0, "failed": 0, "counts": {"pending": n}},
        "approvals": {}, "busy": "", "message": {}, "height": 440,
        "collapsed": [], "cell_running": False, "hint_var": "", "family": {},
        "differs": [], "marks": {}, "fallback_key": "", "session_name": "bench",
    }  # fmt: skip
    return state, ms


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args(argv)
    from playwright.sync_api import sync_playwright

    js = (ROOT / "widgets" / "graph.js").read_text()
    css = (ROOT / "widgets" / "graph.css").read_text()
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--no-sandbox", "--headless=new", "--disable-gpu",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"],
        )  # fmt: skip
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto("about:blank")
        for n in (1000, 3000):
            layouts, paints, results = [], [], []
            for _ in range(a.repeats):
                state, ms = _state(n)
                layouts.append(ms)
                r = page.evaluate(PAGE, {"js": js, "css": css, "state": state})
                paints.append(r["painted"])
                results.append(r)
            rows.append(
                {
                    "nodes": n,
                    "layout_ms": statistics.median(layouts),
                    "layout_range": (min(layouts), max(layouts)),
                    "paint_ms": statistics.median(paints),
                    "paint_range": (min(paints), max(paints)),
                    "labels": results[-1]["labels"],
                    "min_px": results[-1]["min_px"],
                }
            )
        browser.close()
    print("| nodes | layout ms (median, min-max) | first paint ms (median, min-max) "
          "| labels drawn at default zoom | smallest label px |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        lo, hi = r["layout_range"]
        plo, phi = r["paint_range"]
        px = "—" if r["min_px"] is None else f"{r['min_px']:.1f}"
        print(
            f"| {r['nodes']:,} | {r['layout_ms']:.0f} ({lo:.0f}-{hi:.0f}) | "
            f"{r['paint_ms']:.0f} ({plo:.0f}-{phi:.0f}) | {r['labels']:,} | {px} |"
        )
    print(json.dumps(rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
