"""Non-JSON results become content-addressed artifacts and load back as themselves."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pandas as pd
import pytest

import argus_lab as al

matplotlib.use("Agg")


@al.tool
def table() -> pd.DataFrame:
    """A DataFrame result."""
    return pd.DataFrame({"species": ["Adelie", "Gentoo"], "mass": [3700.5, 5076.0]})


@al.tool
def figure() -> object:
    """A matplotlib Figure result."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 1), dpi=100)
    fig.add_subplot().plot([0, 1], [1, 0])
    return fig


@al.tool
def blob() -> dict[str, object]:
    """Bytes inside a JSON result."""
    return {"magic": b"\x89PNG\r\n\x1a\n", "n": 8}


@al.tool
def produce(*, ctx: al.ToolContext) -> Path:
    """A file the tool produced."""
    p = ctx.workdir / "out.csv"
    p.write_text("a,b\n1,2\n")
    return p


@al.tool
def mean_mass(df: pd.DataFrame) -> float:
    """Consumes a DataFrame from upstream."""
    return float(df["mass"].mean())


PLAN = {
    "goal": "g",
    "tasks": [
        {"id": "t", "tool": "table"},
        {"id": "f", "tool": "figure"},
        {"id": "b", "tool": "blob"},
        {"id": "p", "tool": "produce"},
        {"id": "m", "tool": "mean_mass", "args": {"df": "${t.result}"}},
    ],
}


@pytest.mark.slow
def test_dataframe_figure_bytes_and_files_round_trip(ws: al.Workspace) -> None:
    s = ws.new_session(
        plan=PLAN, tools=[table, figure, blob, produce, mean_mass], name="art"
    )
    assert s.run().status == "succeeded"
    s.close()
    with ws.open("art") as o:
        df = o.result("t")
        assert isinstance(df, pd.DataFrame)
        pd.testing.assert_frame_equal(df, table())
        assert o.result("m") == (3700.5 + 5076.0) / 2  # passed downstream as a frame
        fig = o.result("f")
        from matplotlib.figure import Figure

        assert isinstance(fig, Figure)
        w, h = fig.get_size_inches() * fig.dpi
        assert (round(w), round(h)) == (200, 100)
        assert o.result("b") == {"magic": b"\x89PNG\r\n\x1a\n", "n": 8}
        path = o.result("p")
        assert isinstance(path, Path) and path.read_text() == "a,b\n1,2\n"
        stored = o.record("t").result
        assert (
            stored["$artifact"].startswith("sha256:") and stored["type"] == "dataframe"
        )
        assert ws.artifacts.path(stored["$artifact"]).exists()
