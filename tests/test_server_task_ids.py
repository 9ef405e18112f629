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


def test_an_error_answer_is_no_oracle_for_the_servers_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 404 masked the name a client sent when it equalled a server secret:
    "no session 'x[REDACTED]'" said yes to a guess (a six-digit password found
    in ~500 requests). The client's own text is echoed as sent, right guess
    or wrong; a name in a POST body is not echoed at all."""
    from fastapi.testclient import TestClient

    from argus_lab.server import create_app

    monkeypatch.setenv("ARGUS_TEST_DB_PASSWORD", "481516")
    ws = al.Workspace(tmp_path)
    app = create_app(ws, "t" * 32, tools=[echo])
    auth = {"Authorization": "Bearer " + "t" * 32}
    with TestClient(app, base_url="http://127.0.0.1", headers=auth) as http:
        answers = {}
        for guess in ("481515", "481516"):
            r = http.get(f"/sessions/x{guess}")
            assert r.status_code == 404, r.text
            answers[guess] = r.json()["detail"].replace(guess, "GUESS")
        assert answers["481515"] == answers["481516"]
        assert "[REDACTED]" not in answers["481516"]
        r = http.post("/sessions/x481516/retry", json={"task_id": "481516"})
        assert r.status_code == 404 and "481516" not in r.text
