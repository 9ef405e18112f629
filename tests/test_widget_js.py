"""The widget's pure functions (widgets/graph.js), run by Node.js: what a
collapsed group of tasks is drawn as."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

GRAPH_JS = Path(__file__).resolve().parents[1] / "widgets" / "graph.js"


def _js(expr: str) -> object:
    node = shutil.which("node")
    assert node, "Node.js is installed by scripts/browser-deps.sh (CI runs it)"
    code = (
        f"import({json.dumps(GRAPH_JS.as_uri())}).then((m) => "
        f"console.log(JSON.stringify({expr})))"
    )
    out = subprocess.run(
        [node, "--input-type=module", "-e", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout)


def test_a_collapsed_group_with_an_interrupted_member_is_drawn_interrupted() -> None:
    """A member stored as running while nobody runs the session is drawn
    interrupted; its collapsed group said "running" (a run nobody runs)."""
    got = _js(
        "(() => { const cut = new Set(['trip/b']);"
        " const st = {'trip/a': 'succeeded', 'trip/b': 'running', 'trip/c': 'pending'};"
        " const list = Object.entries(st).map(([t, s]) => m.memberStatus(s, t, cut));"
        " return [list, m.groupStatus(list),"
        "  m.groupStatus(['succeeded', 'running', 'interrupted']),"
        "  m.groupStatus(['interrupted', 'failed']),"
        "  m.groupStatus(['blocked', 'interrupted']),"
        "  m.memberStatus('running', 'x', cut),"
        "  m.memberStatus('failed', 'trip/b', cut)]; })()"
    )
    assert got == [
        ["succeeded", "interrupted", "pending"],
        "interrupted",
        "running",  # something really runs: the group runs
        "failed",
        "interrupted",
        "running",
        "failed",
    ]
