"""Task ids hold "/" (HTN subtasks, groups): the HTTP API serves their results."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

import argus_lab as al

pytest.importorskip("fastapi")


@al.tool
def echo(v: str) -> dict[str, str]:
    return {"v": v}


def test_a_result_whose_task_id_holds_slashes(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from argus_lab.server import create_app

    ws = al.Workspace(tmp_path)
    tasks = [
        {"id": "trip/book", "tool": "echo", "args": {"v": "one"}},
        {"id": "trip/a:b.c-d", "tool": "echo", "args": {"v": "two"}},
    ]
    with ws.new_session(
        plan={"goal": "g", "tasks": tasks}, tools=[echo], name="s"
    ) as s:
        assert s.run().status == "succeeded"
    app = create_app(ws, "t" * 32, tools=[echo])
    auth = {"Authorization": "Bearer " + "t" * 32}
    # The server answers to its own names only (not TestClient's "testserver").
    with TestClient(app, base_url="http://127.0.0.1", headers=auth) as http:
        for tid, v in (("trip/book", "one"), ("trip/a:b.c-d", "two")):
            r = http.get(f"/sessions/s/tasks/{quote(tid, safe='')}/result")
            assert (r.status_code, r.json()) == (200, {"v": v}), r.text
        r = http.get("/sessions/s/tasks/trip%2Fnope/result")
        assert r.status_code == 404 and "trip/nope" in r.text
