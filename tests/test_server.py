"""`argus serve` as a real process on 127.0.0.1, driven by a real HTTP client
(httpx), and ``al.connect`` against it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import argus_lab as al

sys.path.insert(0, str(Path(__file__).parent))
import server_tools
from waiting import wait_until

REAL_SEND = httpx.HTTPTransport.handle_request
PATCH = "application/json-patch+json"


@pytest.fixture(autouse=True)
def _loopback_http(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite refuses every HTTP request; these tests talk to a server
    on 127.0.0.1 and nowhere else."""

    def loopback_only(self: httpx.HTTPTransport, request: httpx.Request) -> Any:
        assert request.url.host == "127.0.0.1", request.url
        return REAL_SEND(self, request)

    monkeypatch.setattr(httpx.HTTPTransport, "handle_request", loopback_only)


class Server:
    def __init__(self, root: Path) -> None:
        self.root = root
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "server.log"
        self.out = open(self.log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "argus_lab.cli",
                "-w",
                str(root),
                "serve",
                "--port",
                str(self.port),
                "--tools",
                str(Path(server_tools.__file__)),
            ],
            stdout=self.out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        wait_until(self._up, "the server to answer /health", gone=self._gone)
        self.token = (root / "server-token").read_text().strip()
        self.http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )

    def _up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                pass
        except OSError:
            return False
        return httpx.get(self.url + "/health").status_code == 200

    def _gone(self) -> str | None:
        code = self.proc.poll()
        return None if code is None else f"the server exited ({code}): {self.text()}"

    def text(self) -> str:
        self.out.flush()
        return self.log.read_text()

    def stop(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.out.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("served")
    ws = al.Workspace(root)
    for name, plan in (
        ("approve", server_tools.APPROVE),
        ("fail", server_tools.FAILING),
    ):
        ws.new_session(plan=plan, tools=server_tools.TOOLS, name=name).close()
    ws.close()
    srv = Server(root)
    yield srv
    srv.stop()


def _session(server: Server, name: str) -> dict[str, Any]:
    r = server.http.get(f"/sessions/{name}")
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.slow
def test_token_is_generated_printed_and_private(server: Server) -> None:
    mode = stat.S_IMODE((server.root / "server-token").stat().st_mode)
    assert mode == 0o600
    assert server.token in server.text()  # printed once, on first start
    assert httpx.get(server.url + "/sessions").status_code == 401
    bad = {"Authorization": "Bearer nope"}
    assert httpx.get(server.url + "/states", headers=bad).status_code == 401
    r = httpx.get(server.url + "/openapi.json")
    assert r.status_code == 401
    doc = server.http.get("/openapi.json").json()
    for path in (
        "/sessions/{name}/approve",
        "/states/{name}",
        "/sessions/{name}/events/stream",
    ):
        assert path in doc["paths"]
    assert PATCH in json.dumps(doc["paths"]["/states/{name}"]["patch"])


@pytest.mark.slow
def test_sessions_read_and_control(server: Server) -> None:
    names = [d["name"] for d in server.http.get("/sessions").json()["items"]]
    assert {"approve", "fail"} <= set(names)
    assert server.http.get("/sessions", params={"limit": 1}).json()["total"] >= 2
    assert server.http.get("/sessions/nope").status_code == 404
    r = server.http.get("/sessions/approve/events", params={"sinse": 3})
    assert r.status_code == 422 and "sinse" in r.text  # unknown parameters too

    assert server.http.post("/sessions/approve/run").status_code == 202
    wait_until(
        lambda: "two" in _session(server, "approve")["pending_approvals"],
        "the approval request",
    )
    tasks = server.http.get("/sessions/approve/tasks").json()
    assert {t["task_id"]: t["status"] for t in tasks["items"]} == {
        "one": "succeeded",
        "two": "awaiting_approval",
    }
    # Unknown fields and missing ones are refused; nothing is decided.
    r = server.http.post("/sessions/approve/approve", json={"task": "two"})
    assert r.status_code == 422
    r = server.http.post("/sessions/approve/approve", json={"task_id": "two", "x": 1})
    assert r.status_code == 422
    r = server.http.post(
        "/sessions/approve/approve",
        content=b'{"task_id": "two",',
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 422
    # An edit may not add an env reference: it would send the server's secret
    # to the tool (os.environ holds ARGUS_SERVER_TEST_TOKEN or the like).
    leak = {"task_id": "two", "args": {"x": "${env.HOME}"}}
    r = server.http.post("/sessions/approve/approve", json=leak)
    assert r.status_code == 400 and "${env.HOME}" in r.text, r.text
    assert "two" in _session(server, "approve")["pending_approvals"]
    r = server.http.post(
        "/sessions/approve/approve", json={"task_id": "two", "args": {"x": 42}}
    )
    assert r.status_code == 200, r.text
    assert server.http.post("/sessions/approve/run").status_code == 202
    wait_until(lambda: _session(server, "approve")["status"] == "succeeded", "the run")
    tasks = server.http.get("/sessions/approve/tasks", params={"offset": 1}).json()
    assert tasks["items"][0]["result"] == {"sent": 42} and tasks["total"] == 2

    page = server.http.get("/sessions/approve/events", params={"limit": 2}).json()
    assert [e["seq"] for e in page["items"]] == [1, 2] and page["more"]
    rest = server.http.get("/sessions/approve/events", params={"since": page["next"]})
    kinds = [e["kind"] for e in rest.json()["items"]]
    assert "approval_granted" in kinds and "task_succeeded" in kinds

    r = server.http.post("/sessions/approve/fork", json={"at": "two", "name": "again"})
    assert r.status_code == 201 and r.json()["forked_at"] == "two"
    assert _session(server, "again")["counts"]["pending"] == 1


@pytest.mark.slow
def test_retry_skip_reject(server: Server) -> None:
    server.http.post("/sessions/fail/run")
    wait_until(lambda: _session(server, "fail")["counts"]["failed"] == 1, "the failure")
    assert (
        server.http.post("/sessions/fail/retry", json={"task_id": "bad"}).status_code
        == 200
    )
    assert _session(server, "fail")["counts"]["failed"] == 0
    r = server.http.post(
        "/sessions/fail/skip", json={"task_id": "bad", "reason": "meh"}
    )
    assert r.status_code == 200, r.text
    server.http.post("/sessions/fail/run")
    wait_until(lambda: _session(server, "fail")["status"] == "succeeded", "the rest")
    r = server.http.post("/sessions/fail/reject", json={"task_id": "after"})
    assert r.status_code == 400 and "after" in r.json()["detail"]  # not waiting
    r = server.http.post("/sessions/fail/pause", json={})
    assert r.status_code == 200
    # A refusal of a task that waits for a decision.
    ws = al.Workspace(server.root)  # another process's view of the same folder
    ws.new_session(
        plan=server_tools.APPROVE, tools=server_tools.TOOLS, name="refused"
    ).close()
    ws.close()
    assert server.http.post("/sessions/refused/run").status_code == 202
    wait_until(
        lambda: "two" in _session(server, "refused")["pending_approvals"],
        "the approval request",
    )
    r = server.http.post(
        "/sessions/refused/reject", json={"task_id": "two", "reason": "not now"}
    )
    assert r.status_code == 200, r.text
    wait_until(
        lambda: _session(server, "refused")["counts"].get("failed") == 1, "the refusal"
    )


@pytest.mark.slow
def test_event_stream(server: Server) -> None:
    got: list[dict[str, Any]] = []
    # Needs the events of test_sessions_read_and_control; a read timeout under
    # the 15 s ping turns a missing event into a failure, not a hang.
    with server.http.stream(
        "GET", "/sessions/approve/events/stream", timeout=httpx.Timeout(30, read=10)
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data:"):
                got.append(json.loads(line[5:]))
                if len(got) == 4:
                    break
    assert got[0] == {}  # stream_started, its id the seq it starts after
    got = got[1:]
    assert [e["seq"] for e in got] == [1, 2, 3]
    assert got[0]["kind"] == "session_created"


@pytest.mark.slow
def test_state_over_http(server: Server) -> None:
    r = server.http.post("/states/bot", json={"count": 0, "notes": []})
    assert r.status_code == 201 and r.headers["etag"] == '"1"'
    assert server.http.post("/states/bot", json={}).status_code == 409
    r = server.http.get("/states/bot")
    assert r.json() == {"count": 0, "notes": []} and r.headers["etag"] == '"1"'

    ops = [{"op": "replace", "path": "/count", "value": 1}]
    hdr = {"Content-Type": PATCH, "If-Match": '"1"'}
    r = server.http.patch("/states/bot", content=json.dumps(ops), headers=hdr)
    assert (
        r.status_code == 200 and r.json()["count"] == 1 and r.headers["etag"] == '"2"'
    )
    # Stale: someone committed version 2 since we read version 1.
    r = server.http.patch("/states/bot", content=json.dumps(ops), headers=hdr)
    assert r.status_code == 412 and r.headers["etag"] == '"2"'
    no_match = {"Content-Type": PATCH}
    r = server.http.patch("/states/bot", content=json.dumps(ops), headers=no_match)
    assert r.status_code == 428
    r = server.http.patch(
        "/states/bot", content=json.dumps(ops), headers={"If-Match": '"2"'}
    )
    assert r.status_code == 415
    hdr2 = {"Content-Type": PATCH, "If-Match": '"2"'}
    r = server.http.patch("/states/bot", content=b'[{"op": "replace",', headers=hdr2)
    assert r.status_code == 422 and "malformed JSON" in r.text
    bad = [{"op": "replace", "path": "/count", "value": 2, "extra": True}]
    r = server.http.patch("/states/bot", content=json.dumps(bad), headers=hdr2)
    assert r.status_code == 422
    wrong = [{"op": "remove", "path": "/missing"}]
    r = server.http.patch("/states/bot", content=json.dumps(wrong), headers=hdr2)
    assert r.status_code == 422
    big = [{"op": "add", "path": "/notes/-", "value": "x" * (2 << 20)}]
    r = server.http.patch("/states/bot", content=json.dumps(big), headers=hdr2)
    assert r.status_code == 413

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it comes
        yield b"["
        for _ in range(40):
            yield b" " * 60_000

    r = server.http.patch("/states/bot", content=chunked(), headers=hdr2)
    assert r.status_code == 413
    r = server.http.post(
        "/sessions/fail/pause",
        content=chunked(),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert server.http.get("/states/bot").headers["etag"] == '"2"'  # all refused

    assert server.http.get("/states/bot", params={"version": 1}).json()["count"] == 0
    hist = server.http.get("/states/bot/history").json()["items"]
    assert [h["version"] for h in hist] == [1, 2] and hist[1]["changed"] == ["count"]
    assert hist[1]["caller"] == "http 127.0.0.1"
    r = server.http.post("/states/bot/fork", json={"at": 1, "name": "bot-b"})
    assert r.status_code == 201 and r.json()["count"] == 0
    names = [s["name"] for s in server.http.get("/states").json()["items"]]
    assert {"bot", "bot-b"} <= set(names)
    assert server.http.get("/states/none").status_code == 404
    empty = {"items": [], "next": 0, "more": False}
    assert server.http.get("/states/bot/events").json() == empty
    # The token is printed once, at first start; the request log never has it.
    assert server.text().count(server.token) == 1
    assert "GET /states/bot 200" in server.text()  # ...but every request


@pytest.mark.slow
def test_connect_reads_and_steers(server: Server) -> None:
    with pytest.raises(al.ArgusError, match="the token is wrong"):
        al.connect(server.url, "wrong")
    remote = al.connect(server.url, server.token)
    assert "approve" in [i.name for i in remote.sessions()]
    s = remote.open("approve")
    assert s.status == "succeeded" and s.records["two"].result == {"sent": 42}
    evs = s.events()
    assert evs[0].kind == "session_created" and [e.seq for e in evs] == list(
        range(1, len(evs) + 1)
    )
    with contextlib.closing(s.stream(since=len(evs) - 1)) as live:
        assert next(live).seq == len(evs)
    with pytest.raises(al.SessionNotFoundError):  # as ws.open raises it
        remote.open("nope")

    st = remote.state("remote-counter")
    assert st.create({"n": 0}) == 1
    for _ in range(3):
        st.update(lambda d: d.update(n=d["n"] + 1))
    assert st.get() == {"n": 3} and st.version == 4 and st.at(2) == {"n": 1}
    with pytest.raises(al.ConflictError):
        st.patch([{"op": "replace", "path": "/n", "value": 0}], expected=2)
    assert list(st.history()["version"]) == [1, 2, 3, 4]
    f = st.fork(at=2)
    assert f.name != st.name and f.get() == {"n": 1}
    remote.close()


@pytest.mark.slow
def test_the_readme_curl_example_commits_state(server: Server) -> None:
    import re
    import shutil

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    script = next(
        c for c in re.findall(r"```sh\n(.*?)```", readme, re.S) if "curl" in c
    )
    lines = script.splitlines()
    assert lines[0].startswith("TOKEN=")
    # Our server's token and port; the endless event stream is left out.
    body = "\n".join(ln for ln in lines[1:] if "curl -N" not in ln)
    curl = shutil.which("curl")
    assert curl, "curl is needed (apt-get install curl)"
    r = subprocess.run(
        ["bash", "-euc", body],
        env={**os.environ, "TOKEN": server.token, "API": server.url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    got = server.http.get("/states/chatbot")
    assert got.json() == {"count": 1, "seen": ["msg-17"]}
    assert got.headers["etag"] == '"2"'


@pytest.mark.slow
def test_a_widget_follows_a_session_running_in_the_server(server: Server) -> None:
    from argus_lab.jupyter.widget import GraphWidget

    ws = al.Workspace(server.root)  # another process's view of the same folder
    ws.new_session(
        plan=server_tools.APPROVE, tools=server_tools.TOOLS, name="watched"
    ).close()
    ws.close()
    remote = al.connect(server.url, server.token)
    rs = remote.open("watched")
    w = GraphWidget(rs, update_interval=0.05)
    try:
        assert w.statuses == {"one": "pending", "two": "pending"}
        rs.start()  # runs in the server; the widget hears of it over SSE
        wait_until(
            lambda: (
                w.statuses == {"one": "succeeded", "two": "awaiting_approval"}
                and "two" in w.approvals
            ),
            "the widget to show the approval request",
        )
        rs.approve("two", {"x": 7})
        rs.start()
        wait_until(lambda: w.statuses["two"] == "succeeded", "the widget to catch up")
        assert rs.result("two") == {"sent": 7} and rs.status == "succeeded"
        assert rs.step() == []  # nothing left to run
        rs.set_breakpoint("one")
        assert rs.breakpoints == ["one"]
    finally:
        w.close()
        # A last coalesced refresh (a timer thread) may be under way: let it
        # end before its connections close.
        for t in threading.enumerate():
            if isinstance(t, threading.Timer):
                t.join(timeout=60)
        remote.close()


# -- hardening (issue 17, second pass) ---------------------------------------------


@pytest.mark.slow
def test_other_host_names_are_refused_before_anything_else(server: Server) -> None:
    # DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends its
    # own name as Host; only this server's own names are answered.
    for host in ("evil.example", "evil.example:80", f"127.0.0.1.evil:{server.port}"):
        r = server.http.get("/states", headers={"Host": host})
        assert r.status_code == 421, (host, r.text)
        assert host.split(":")[0] in r.json()["detail"]
        assert (
            httpx.get(server.url + "/health", headers={"Host": host}).status_code == 421
        )
    for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", "localhost"):
        assert server.http.get("/states", headers={"Host": host}).status_code == 200
    # No CORS: a browser page elsewhere gets no permission to read answers.
    r = server.http.options(
        "/states",
        headers={
            "Origin": "http://evil.example",
            "Access-Control-Request-Method": "GET",
        },
    )
    assert "access-control-allow-origin" not in r.headers


@pytest.mark.slow
def test_long_urls_are_refused_on_every_route(server: Server) -> None:
    for path in (
        "/sessions/approve/events/stream?since=" + "1" * 9000,
        "/states?" + "a=1&" * 3000,
        "/sessions/" + "x" * 5000,
        "/states/" + "y" * 5000 + "/history",
    ):
        r = server.http.get(path)
        assert r.status_code == 414, (path[:40], r.status_code)
        assert "too long" in r.json()["detail"]
        assert len(r.content) < 500  # the input is not echoed back
    # Names that cannot exist are a plain 404 (never a 500 from the file system).
    for name in ("x" * 300, "a%00b", "%2e%2e", "..%2f..%2fetc"):
        assert server.http.get(f"/sessions/{name}").status_code == 404, name
        assert server.http.get(f"/states/{name}").status_code == 404, name
        r = server.http.post(f"/sessions/{name}/step")
        assert r.status_code == 404, name
        assert r.headers["content-type"] == "application/json"


@pytest.mark.slow
def test_the_bearer_scheme_is_case_insensitive_and_unknown_routes_need_it(
    server: Server,
) -> None:
    for scheme in ("bearer", "BEARER", "Bearer"):
        hdr = {"Authorization": f"{scheme} {server.token}"}
        assert httpx.get(server.url + "/states", headers=hdr).status_code == 200
    # Without the token nothing says whether a name or route exists.
    for path in ("/sessions/approve", "/sessions/nope", "/nowhere", "/states/nope"):
        r = httpx.get(server.url + path)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["detail"].startswith("a bearer token is required")
    r = httpx.get(server.url + "/states", headers={"Authorization": server.token})
    assert r.status_code == 401  # the scheme is needed
    assert server.text().count(server.token) == 1


@pytest.mark.slow
def test_the_request_log_cannot_be_forged(server: Server) -> None:
    server.http.get("/states/a%0aGET%20/admin%20200")
    wait_until(lambda: "GET /states/a\\nGET /admin 200 404" in server.text(), "the log")
    assert "\nGET /admin 200" not in server.text()


@pytest.mark.slow
def test_a_secret_in_a_request_path_is_masked_in_the_log(server: Server) -> None:
    # A client that puts a key where a name goes (a state named by its token):
    # the request is refused, and the log line that every request gets must
    # not keep the key.
    key = "sk-ant-api03-" + os.urandom(16).hex()
    r = server.http.get(f"/states/{key}/history")
    assert r.status_code in (404, 422)
    server.http.get("/states/after-the-key")
    wait_until(lambda: "GET /states/after-the-key" in server.text(), "the log")
    assert key not in server.text() and key[13:29] not in server.text()
    assert "GET /states/[REDACTED]/history" in server.text()


@pytest.mark.slow
def test_a_damaged_state_is_a_json_500_naming_the_version(server: Server) -> None:
    ws = al.Workspace(server.root)
    st = ws.state("damaged")
    st.update(lambda d: d.update(n=1))
    raw = st._log.cache.get("v:000000000002")
    st._log.cache.set("v:000000000002", raw.replace('"n"', '"m"'))
    st.close()
    ws.close()
    r = server.http.get("/states/damaged")
    assert r.status_code == 500 and r.headers["content-type"] == "application/json"
    assert r.json()["detail"].startswith("state damaged: version 2 ")
    assert server.http.get("/states/damaged", params={"version": 1}).json() == {}


@pytest.mark.slow
def test_a_state_that_lost_commits_is_a_json_500_saying_what_to_do(
    server: Server,
) -> None:
    from tests import faults_worker as fw

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    p = subprocess.run(
        [sys.executable, fw.__file__, "state", str(server.root), "20", "lost"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == -9, p.stderr  # killed with its versions in the WAL
    os.unlink(server.root / "states" / "lost" / "cache.db-wal")
    r = server.http.get("/states/lost")
    # The server's data, not the client's request: never a 400.
    assert r.status_code == 500 and r.headers["content-type"] == "application/json"
    detail = r.json()["detail"]
    assert detail.startswith("state 'lost': 21 committed version(s) were lost")
    assert "accept_lost_commits=True" in detail
    # Refusing wrote nothing: the same answer again, no state made anew.
    assert server.http.get("/states/lost").status_code == 500
    # The other states still list; this one is listed with its error.
    try:
        r = server.http.get("/states")
        assert r.status_code == 200
        (item,) = [i for i in r.json()["items"] if i["name"] == "lost"]
        assert item["version"] is None and "accept_lost_commits" in item["error"]
    finally:
        shutil.rmtree(server.root / "states" / "lost")  # other tests list states


def _patch(
    server: Server, name: str, ops: Any, tag: str | None = None
) -> httpx.Response:
    if tag is None:
        tag = server.http.get(f"/states/{name}").headers["etag"]
    return server.http.patch(
        f"/states/{name}",
        content=json.dumps(ops),
        headers={"Content-Type": PATCH, "If-Match": tag},
    )


@pytest.mark.slow
def test_if_match_is_strong_quoted_listed_or_star(server: Server) -> None:
    assert server.http.post("/states/etag", json={"n": 0}).status_code == 201

    def set_n(tag: str, n: int) -> httpx.Response:
        return _patch(
            server, "etag", [{"op": "replace", "path": "/n", "value": n}], tag
        )

    r = set_n('W/"1"', 1)  # a weak tag never matches for If-Match (RFC 9110)
    assert r.status_code == 412 and "weak" in r.json()["detail"]
    r = set_n("1", 1)
    assert r.status_code == 400 and '"1"' in r.json()["detail"]  # must be quoted
    assert set_n('"7", "1"', 1).status_code == 200  # any tag of a list
    r = set_n('"x"', 2)
    assert r.status_code == 412 and r.headers["etag"] == '"2"'
    assert '"2"' in r.json()["detail"]  # says which version is current
    r = set_n("*", 2)  # any version: applied to the latest, never 412
    assert r.status_code == 200 and r.headers["etag"] == '"3"'
    assert set_n('"2"', 9).status_code == 412
    r = server.http.get("/states/etag")
    assert r.json() == {"n": 2}
    again = server.http.get(
        "/states/etag", headers={"If-None-Match": r.headers["etag"]}
    )
    assert again.status_code == 304 and again.content == b""
    assert _patch(server, "nope", [], "*").status_code == 404


@pytest.mark.slow
def test_json_patch_edge_cases(server: Server) -> None:
    doc = {"a~b": 1, "c/d": 2, "l": [1, 2], "o": {"k": 1}}
    assert server.http.post("/states/ops", json=doc).status_code == 201
    r = _patch(
        server,
        "ops",
        [
            {"op": "test", "path": "/l/0", "value": 1},
            {"op": "replace", "path": "/a~0b", "value": 10},
            {"op": "add", "path": "/c~1d", "value": 20},
            {"op": "add", "path": "/l/-", "value": 3},
            {"op": "move", "from": "/o/k", "path": "/o/j"},
            {"op": "copy", "from": "/l", "path": "/m"},
            {"op": "add", "path": "/z", "value": None},
        ],
    )
    assert r.status_code == 200, r.text
    want = {"a~b": 10, "c/d": 20, "l": [1, 2, 3], "o": {"j": 1}, "m": [1, 2, 3]}
    assert r.json() == want | {"z": None}
    # A failed test refuses the whole patch (409), even ops before it.
    r = _patch(
        server,
        "ops",
        [
            {"op": "replace", "path": "/a~0b", "value": 0},
            {"op": "test", "path": "/l/0", "value": 99},
        ],
    )
    assert r.status_code == 409 and "/l/0" in r.json()["detail"]
    for ops, why in (
        ([{"op": "replace", "path": "", "value": 5}], "JSON object"),
        ([{"op": "remove", "path": ""}], "remove the whole document"),
        ([{"op": "copy", "path": "/x"}], "from"),
        ([{"op": "move", "from": "/l", "path": "/l/0"}], "own children"),
        ([{"op": "add", "path": "l", "value": 1}], "start with /"),
        ([{"op": "add", "path": "/l/-"}], "value"),
        ({"op": "add"}, "a list of operations"),
        ([1], "operation 0"),
    ):
        r = _patch(server, "ops", ops)
        assert r.status_code == 422 and why in str(r.json()["detail"]), (ops, r.text)
    # Copies that double the document on each op are stopped before memory is.
    big = [{"op": "add", "path": "/big", "value": ["x" * 1000] * 500}]
    assert _patch(server, "ops", big).status_code == 200
    bomb = [{"op": "copy", "from": "/big", "path": "/big/-"}] * 40
    r = _patch(server, "ops", bomb)
    assert r.status_code == 413 and "copies" in r.json()["detail"]
    assert server.http.get("/states/ops").headers["etag"] == '"3"'  # all refused


@pytest.mark.slow
def test_a_patch_that_breaks_a_typed_state_names_the_field(server: Server) -> None:
    from pydantic import BaseModel

    class Wallet(BaseModel):
        cash: float = 10.0
        owner: str = "ada"

    ws = al.Workspace(server.root)
    ws.state("wallet", model=Wallet).close()
    ws.close()
    r = _patch(server, "wallet", [{"op": "replace", "path": "/cash", "value": "x"}])
    assert r.status_code == 422 and r.json()["field"] == "cash"
    assert r.json()["detail"].startswith("cash: 'x' is not of type 'number'")
    r = _patch(server, "wallet", [{"op": "add", "path": "/bogus", "value": 1}])
    assert r.status_code == 422 and "bogus" in r.json()["detail"]  # unknown field
    r = _patch(server, "wallet", [{"op": "remove", "path": "/owner"}])
    assert r.status_code == 200  # a field with a default may go: it comes back
    assert server.http.get("/states/wallet").json() == {"cash": 10.0}


@pytest.mark.slow
def test_every_list_is_paged_and_a_huge_limit_is_refused(server: Server) -> None:
    server.http.post("/states/paged", json={"n": 0})
    for n in range(1, 6):
        r = _patch(server, "paged", [{"op": "replace", "path": "/n", "value": n}])
        assert r.status_code == 200
    for path in (
        "/sessions",
        "/sessions/approve/tasks",
        "/sessions/approve/events",
        "/states/paged/history",
        "/states/paged/events",
    ):
        r = server.http.get(path, params={"limit": 10**9})
        assert r.status_code == 422 and "limit" in r.text, path
        assert server.http.get(path, params={"limit": 0}).status_code == 422, path
    page = server.http.get("/states/paged/history", params={"limit": 2}).json()
    assert [h["version"] for h in page["items"]] == [1, 2] and page["more"]
    rest = server.http.get("/states/paged/history", params={"since": page["next"]})
    assert [h["version"] for h in rest.json()["items"]] == [3, 4, 5, 6]
    assert not rest.json()["more"]
    remote = al.connect(server.url, server.token)
    assert list(remote.state("paged").history()["version"]) == [1, 2, 3, 4, 5, 6]
    remote.close()


def test_the_token_file_must_be_private(tmp_path: Path) -> None:
    from argus_lab.server._guard import load_token

    path = tmp_path / "ws" / "server-token"
    token, created = load_token(path)
    assert created and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_token(path) == (token, False)
    path.chmod(0o644)  # e.g. copied with cp: others may have read it
    with pytest.raises(al.ArgusError, match="readable by others") as info:
        load_token(path)
    assert token not in info.value.message and "chmod 600" in info.value.message
    path.chmod(0o600)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("planted\n")
    elsewhere.chmod(0o600)
    link = tmp_path / "linked" / "server-token"
    link.parent.mkdir()
    link.symlink_to(elsewhere)  # a token planted through a link is not used
    with pytest.raises(al.ArgusError, match="symbolic link"):
        load_token(link)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone could swap the token file
    with pytest.raises(al.ArgusError, match="writable by others"):
        load_token(shared / "server-token")
    assert not (shared / "server-token").exists()


def test_the_client_says_where_it_could_not_connect(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(ConnectionError, match=f"{url}.*argus serve") as info:
        al.connect(url, "secret-token-123", timeout=2)
    assert "secret-token-123" not in str(info.value)


def test_the_client_times_out_with_the_url(tmp_path: Path) -> None:
    with socket.socket() as s:  # accepts, never answers
        s.bind(("127.0.0.1", 0))
        s.listen()
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(TimeoutError, match=f"{url}.*0.3 s"):
            al.connect(url, "t", timeout=0.3)


@pytest.mark.slow
def test_the_client_keeps_the_token_out_of_sight(server: Server) -> None:
    with pytest.raises(al.ArgusError) as info:
        al.connect(server.url, "wrong-token")
    msg = info.value.message
    assert "token is wrong" in msg and "server-token" in msg
    assert "wrong-token" not in msg
    remote = al.connect(server.url, server.token)
    st = remote.state("bot")
    s = remote.open("approve")
    for obj in (remote, st, s, remote._http):
        assert server.token not in repr(obj) and server.token not in str(obj)
    # Names are one path segment: no way to reach another route through them.
    with pytest.raises(KeyError):
        remote.state("../sessions/approve").get()
    with pytest.raises(KeyError):
        remote.open("..%2fstates")
    remote.close()


@pytest.mark.slow
def test_slow_and_silent_clients_do_not_block_others(server: Server) -> None:
    from argus_lab.server._app import MAX_STREAMS

    hello = (
        f"GET /sessions/approve/events/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {server.token}\r\n"
    ).encode()
    socks: list[socket.socket] = []
    try:
        for _ in range(30):  # slow loris: headers that never end
            c = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            c.sendall(hello)
            socks.append(c)
        opened = 0
        for _ in range(MAX_STREAMS + 1):  # streams whose events nobody reads
            c = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            c.sendall(hello + b"\r\n")
            socks.append(c)
            if not c.recv(12).startswith(b"HTTP/1.1 200"):
                break
            opened += 1
        # (An earlier test's stream may still be closing: it counts too.)
        assert MAX_STREAMS - 2 <= opened <= MAX_STREAMS
        with httpx.Client(base_url=server.url, timeout=10) as quick:
            hdr = {"Authorization": f"Bearer {server.token}"}
            assert quick.get("/states", headers=hdr).status_code == 200
            r = quick.get("/sessions/approve/events/stream", headers=hdr)
            assert r.status_code == 503 and "streams" in r.json()["detail"]
            assert r.headers["retry-after"]
    finally:
        for c in socks:
            c.close()
    # Once they are gone, streams open again.
    wait_until(
        lambda: _stream_opens(server),
        "a stream to open after the others closed",
    )


def _stream_opens(server: Server) -> bool:
    with server.http.stream("GET", "/sessions/approve/events/stream") as r:
        return r.status_code == 200


# Keep this test last: it reads the log the tests above left.
@pytest.mark.slow
def test_every_route_is_documented_and_answered_in_these_tests(
    server: Server, request: pytest.FixtureRequest
) -> None:
    import re

    from fastapi.routing import APIRoute

    from argus_lab.server import create_app

    mine = {n for n in dir(request.module) if n.startswith("test_")}
    ran = {  # notebook cells collected beside it have no module
        getattr(i, "originalname", i.name)
        for i in request.session.items
        if getattr(i, "module", None) is request.module
    }
    if ran != mine:
        pytest.skip("needs the whole module: it checks what the other tests did")
    doc = server.http.get("/openapi.json").json()
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    ws = al.Workspace(server.root)
    app = create_app(ws, "t").app  # the routes, as built (inside the guard)
    ws.close()
    routes = {
        (m, re.sub(r":\w+\}", "}", r.path))  # {task_id:path}: {task_id}
        for r in app.routes
        if isinstance(r, APIRoute)
        for m in r.methods
        if m != "HEAD"
    }
    assert routes == documented
    log = server.text()
    missing = []
    for method, path in sorted(routes):
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^ ]+", re.escape(path))
        if not re.search(rf"{method} {pattern} [23]\d\d ", log):
            missing.append(f"{method} {path}")
    assert not missing, f"no test got an answer from: {missing}"


def test_a_server_bound_elsewhere_answers_to_its_names_only(ws: al.Workspace) -> None:
    from starlette.testclient import TestClient

    from argus_lab.server import create_app

    app = create_app(ws, "tok", host="192.168.7.7", allow_hosts=["box.lan"])
    auth = {"Authorization": "Bearer tok"}
    with TestClient(app) as c:
        for host, code in (
            ("box.lan", 200),
            ("box.lan:8765", 200),
            ("192.168.7.7:8765", 200),
            ("localhost", 200),
            ("evil.example", 421),
            ("box.lan.evil.example", 421),
        ):
            r = c.get("/states", headers={**auth, "Host": host})
            assert r.status_code == code, host
    everywhere = create_app(ws, "tok", host="0.0.0.0")
    with TestClient(everywhere) as c:  # bound to every interface: any name
        assert c.get("/states", headers={**auth, "Host": "box"}).status_code == 200


@pytest.mark.slow
def test_concurrent_creates_of_one_state_make_one_winner(server: Server) -> None:
    start = threading.Barrier(8)
    codes: list[int] = []

    def create(i: int) -> None:
        with httpx.Client(base_url=server.url, headers=server.http.headers) as c:
            start.wait(timeout=30)
            codes.append(c.post("/states/race", json={"by": i}).status_code)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(codes) == [201] + [409] * 7
    hist = server.http.get("/states/race/history").json()["items"]
    assert len(hist) == 1 and hist[0]["kind"] == "create"


@pytest.mark.slow
def test_forking_onto_an_existing_name_is_a_conflict(server: Server) -> None:
    server.http.post("/states/src", json={"n": 1})
    server.http.post("/states/taken", json={"n": 2})
    r = server.http.post("/states/src/fork", json={"name": "taken"})
    assert r.status_code == 409 and "already exists" in r.json()["detail"]
    assert server.http.get("/states/taken").json() == {"n": 2}


@pytest.mark.slow
def test_unsubscribing_ends_the_servers_stream_at_once(server: Server) -> None:
    import time

    ws = al.Workspace(server.root)
    ws.new_session(
        plan=server_tools.APPROVE, tools=server_tools.TOOLS, name="sub"
    ).close()
    ws.close()
    remote = al.connect(server.url, server.token)
    s = remote.open("sub")
    heard: list[str] = []
    unsubscribe = s.subscribe(lambda e: heard.append(e.kind))
    s.start()  # events flow: the subscriber's stream is surely open
    wait_until(lambda: "approval_requested" in heard, "the subscriber to hear")
    mark = f"nobody-{time.monotonic_ns()}"
    server.http.get(f"/states/{mark}")
    wait_until(lambda: mark in server.text(), "our marker in the log")
    t0 = time.monotonic()
    unsubscribe()
    # The guard logs a request when its response ends.
    line = "GET /sessions/sub/events/stream 200"
    wait_until(lambda: line in server.text().split(mark, 1)[1], "the stream's end")
    assert time.monotonic() - t0 < 5  # not at the next 15 s ping, nor never
    remote.close()
