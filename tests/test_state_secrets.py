"""The value of a secret env var never lands in a typed state's files: it is
stored as ``${env.NAME}`` and put back from the environment for the program
(store/state_secrets.py), while the views for people show the reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

import argus_lab as al
from argus_lab.store import state_records
from argus_lab.store.state import SecretInKeyError
from tests.conftest import files_holding

KEY = "ARGUS_ST_TEST_API_KEY"
LATE = "ARGUS_ST_LATE_TOKEN"
SECRET = "sk-st-5e0b7c1d9a3f4e21"
LATE_SECRET = "tok-late-0c4e91ab77d2"
REF = f"${{env.{KEY}}}"


class Agent(BaseModel):
    key: str = ""
    header: str = ""
    log: list[str] = Field(default_factory=list)
    nested: dict[str, list[dict[str, str]]] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)
    n: int = 0


def folder(ws: al.Workspace, name: str) -> Path:
    return ws.path / "states" / name


def scanned(ws: al.Workspace, name: str) -> list[str]:
    """The files of a state's folder, the WAL among them (so that a look at
    them is a look at what SQLite has not checkpointed yet)."""
    names = sorted(p.name for p in folder(ws, name).rglob("*") if p.is_file())
    assert "cache.db-wal" in names and "cache.db" in names
    return names


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv(KEY, SECRET)
    monkeypatch.delenv(LATE, raising=False)
    return monkeypatch


def fill(s: Agent) -> None:
    s.key = SECRET
    s.header = f"Authorization: Bearer {SECRET}"
    s.log += ["plain", f"used {SECRET} twice: {SECRET}"]
    s.nested["calls"] = [{"url": "https://x", "auth": SECRET}, {"ok": "yes"}]


def agent(ws: al.Workspace, name: str = "agent") -> Any:
    """The state ``name``, with ``fill`` committed as version 2."""
    st = ws.state(name, model=Agent)
    with st.transaction() as s:
        fill(s)
    return st


def test_a_secret_is_stored_as_a_reference_and_read_back(
    ws: al.Workspace, env: pytest.MonkeyPatch
) -> None:
    st = agent(ws)
    for _ in range(3):  # patches over a stored snapshot
        with st.transaction() as s:
            s.n += 1
    st.update(lambda s: s.log.append(f"again {SECRET}"))
    want = st.get()
    assert want.key == SECRET and want.nested["calls"][0]["auth"] == SECRET
    assert want.log[-1] == f"again {SECRET}" and want.n == 3
    assert st.at(2) == want.model_copy(update={"n": 0, "log": want.log[:-1]})

    scanned(ws, "agent")
    assert files_holding(folder(ws, "agent"), SECRET) == []
    assert files_holding(folder(ws, "agent"), REF) != []

    # Another opener (no cache): the same values, replayed from the files.
    other = al.Workspace(ws.path)
    assert other.state("agent", model=Agent).get() == want
    other.close()


def test_an_untyped_state_and_a_secret_among_other_text(
    ws: al.Workspace, env: pytest.MonkeyPatch
) -> None:
    st = ws.state("raw")
    with st.transaction() as s:
        s["token"] = SECRET
        s["deep"] = [[{"v": [f"x{SECRET}y", 1, None, 2.5]}]]
    assert st.get() == {
        "token": SECRET,
        "deep": [[{"v": [f"x{SECRET}y", 1, None, 2.5]}]],
    }
    assert files_holding(folder(ws, "raw"), SECRET) == []


LITERALS: dict[str, Any] = {
    "price": "$5, $$6 and ${env.HOME} ${env.ARGUS_ST_TEST_API_KEY}",
    "$": "a key that is a dollar",
    "$$x": {"$": "secret", "v": "${env.HOME}"},  # looks like a tag: is data
    "$secret": ["$", "$$", "${", "}"],
}


@pytest.mark.parametrize("with_secret", [False, True])
def test_literal_dollars_and_references_in_user_data_read_back_exactly(
    ws: al.Workspace, env: pytest.MonkeyPatch, with_secret: bool
) -> None:
    """Plain (no secret: stored as it is) or in stored form (keys starting
    with $ escaped, $ in a secret's string doubled), data reads back as it was
    written, every version of it."""
    st = ws.state("lit", model=Agent)
    versions: dict[int, Agent] = {1: st.get()}
    for i in range(6):
        with st.transaction() as s:
            s.extra = {**LITERALS, "i": i}
            s.nested = {"$k": [{"$": f"${i}"}]}
            if with_secret and i % 3 != 2:  # comes, goes, comes back
                s.key = f"${SECRET}$"
            else:
                s.key = "${env.ARGUS_ST_TEST_API_KEY}"
        versions[st.version] = st.get()
        assert st.get().extra == {**LITERALS, "i": i}
        assert st.get().key == (f"${SECRET}$" if with_secret and i % 3 != 2 else REF)
    fresh = al.Workspace(ws.path).state("lit", model=Agent)
    for v, want in versions.items():
        assert fresh.at(v) == want and st.at(v) == want
    assert fresh.get() == versions[st.version]
    fresh.close()
    assert files_holding(folder(ws, "lit"), SECRET) == []
    records = list(st._log.records())
    assert any(r.get("refs") for r in records) is with_secret


@pytest.mark.parametrize(
    "secret, text",
    [
        ("sk-dollar-5d2a", "price: ${}"),  # a "$" right before the value
        ("$ecretPass-77", "pw=${}"),  # a value that starts with "$"
        ('tok-in-\\-"q"', "escaped: {}"),  # what JSON escapes
    ],
)
def test_dollars_and_escapes_around_a_secret_read_back_exactly(
    ws: al.Workspace, env: pytest.MonkeyPatch, secret: str, text: str
) -> None:
    env.setenv("ARGUS_ST_ODD_KEY", secret)
    want = text.replace("{}", secret)
    st = ws.state("odd", model=Agent)
    with st.transaction() as s:
        s.header = want
    assert st.get().header == want
    assert al.Workspace(ws.path).state("odd", model=Agent).get().header == want
    assert files_holding(folder(ws, "odd"), secret) == []


def test_an_unset_variable_is_named_and_setting_it_again_reads(
    ws: al.Workspace, env: pytest.MonkeyPatch
) -> None:
    st = agent(ws)
    st.close()
    env.delenv(KEY)
    st = ws.state("agent", model=Agent)
    for read in (
        st.get,
        lambda: st.at(2),
        lambda: st.update(lambda s: None),
        lambda: st.fork(),
        st.compact,
    ):
        with pytest.raises(al.SecretUnsetError, match=f"{KEY} is not set"):
            read()
    with pytest.raises(al.SecretUnsetError, match=KEY), st.transaction():
        pass
    assert st.version == 2  # nothing was written
    env.setenv(KEY, SECRET)
    assert st.get().key == SECRET


def test_views_show_references_and_need_no_variable(
    ws: al.Workspace, env: pytest.MonkeyPatch
) -> None:
    st = agent(ws)
    with st.transaction() as s:
        s.extra = {"$": "$$"}
    with st.transaction() as s:
        s.n = 1
    env.delenv(KEY)
    version, doc = st.get_json()
    assert version == 4
    assert doc["key"] == REF and doc["header"] == f"Authorization: Bearer {REF}"
    assert doc["nested"]["calls"][0]["auth"] == REF
    assert doc["extra"] == {"$": "$$"}  # shown as it was written
    assert st.get_json(3) == (3, {**doc, "n": 0})
    history = st.history()
    assert list(history["changed"]) == [
        [],
        ["header", "key", "log", "nested"],
        ["extra"],
        ["n"],
    ]
    shown = repr([doc, history.to_csv(), st.events(), st, st.version])
    assert SECRET not in shown


def test_the_server_shows_references_and_patches_keep_the_secret(
    ws: al.Workspace, env: pytest.MonkeyPatch
) -> None:
    from starlette.testclient import TestClient

    from argus_lab.server import create_app

    agent(ws)
    auth = {"Authorization": "Bearer tok"}
    with TestClient(create_app(ws, "tok"), base_url="http://localhost") as c:
        r = c.get("/states/agent", headers=auth)
        assert r.status_code == 200 and r.json()["key"] == REF
        assert SECRET not in r.text
        r = c.get("/states/agent", params={"version": 2}, headers=auth)
        assert r.status_code == 200 and SECRET not in r.text
        ops = [{"op": "replace", "path": "/n", "value": 7}]
        r = c.patch(
            "/states/agent",
            content=json.dumps(ops),
            headers={
                **auth,
                "Content-Type": "application/json-patch+json",
                "If-Match": '"2"',
            },
        )
        assert r.status_code == 200, r.text
        assert r.json()["n"] == 7 and SECRET not in r.text
        assert SECRET not in c.get("/states/agent/history", headers=auth).text
    got = al.Workspace(ws.path).state("agent", model=Agent).get()
    assert got.key == SECRET and got.n == 7  # the program still has its key
    assert files_holding(folder(ws, "agent"), SECRET) == []


def test_a_patch_addresses_the_view_and_no_error_quotes_a_value(
    ws: al.Workspace, env: pytest.MonkeyPatch
) -> None:
    """A PATCH's test ops hold against the document as GET shows it (the
    reference), never against a guess of the value (no oracle), and no
    error quotes a value (the server masks every error's detail). The
    values a client sends are taken as written: ${env.NAME} in them is text,
    or a client could pull any of the server's secrets into the state."""
    from starlette.testclient import TestClient

    from argus_lab.server import create_app

    agent(ws)
    auth = {"Authorization": "Bearer tok"}
    hdr = {**auth, "Content-Type": "application/json-patch+json", "If-Match": "*"}

    def patch(c: TestClient, ops: list[dict[str, Any]]) -> Any:
        r = c.patch("/states/agent", content=json.dumps(ops), headers=hdr)
        assert SECRET not in r.text, r.text
        return r

    with TestClient(create_app(ws, "tok"), base_url="http://localhost") as c:
        guess = [{"op": "test", "path": "/key", "value": SECRET}]
        assert patch(c, guess).status_code == 409  # the value is never there
        whole = [{"op": "test", "path": "/nested", "value": {}}]
        r = patch(c, whole)
        assert r.status_code == 409 and REF in r.json()["detail"]
        missing = [{"op": "copy", "from": "/nested/nope", "path": "/n"}]
        assert patch(c, missing).status_code == 422
        wrong = [{"op": "copy", "from": "/key", "path": "/n"}]  # a str into an int
        assert patch(c, wrong).status_code == 422
        edit = [
            {"op": "test", "path": "/key", "value": REF},  # as GET showed it
            {"op": "replace", "path": "/header", "value": f"Bearer {REF} x"},
            {"op": "copy", "from": "/key", "path": "/extra/k"},  # the value moves
        ]
        assert patch(c, edit).status_code == 200
        assert c.get("/states/agent", headers=auth).json()["extra"]["k"] == REF
    got = al.Workspace(ws.path).state("agent", model=Agent).get()
    assert got.key == SECRET and got.extra["k"] == SECRET
    assert got.header == f"Bearer {REF} x"  # as written: never expanded
    assert files_holding(folder(ws, "agent"), SECRET) == []


def test_a_value_stored_before_its_variable_reads_as_a_reference_in_get_json(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY, raising=False)
    st = ws.state("early", model=Agent)
    st.update(lambda a: setattr(a, "key", SECRET))  # no secret yet: as it is
    monkeypatch.setenv(KEY, SECRET)
    assert st.get_json()[1]["key"] == REF  # the view shows no value
    st.patch([{"op": "test", "path": "/key", "value": REF}], expected=None, caller="t")


def test_a_key_holding_a_secret_is_refused(
    ws: al.Workspace, env: pytest.MonkeyPatch
) -> None:
    """Keys are the state's structure (patch paths, history's fields): one
    holding a secret is refused, and the error shows its reference only.
    As a value, the same secret is stored as a reference."""
    st = ws.state("agent", model=Agent)
    shown = r"\$\{env\.ARGUS_ST_TEST_API_KEY\}"
    with pytest.raises(SecretInKeyError, match=shown), st.transaction() as s:
        s.extra = {"keys": {SECRET: "the key as a key"}}
    assert isinstance(SecretInKeyError("x"), ValueError)
    with pytest.raises(ValueError) as e:
        st.update(lambda s: s.nested.update({f"by {SECRET}": []}))
    assert SECRET not in str(e.value)
    assert st.version == 1
    with st.transaction() as s:
        s.extra = {"keys": {"the key as a value": SECRET}}
    assert st.get().extra == {"keys": {"the key as a value": SECRET}}
    assert files_holding(folder(ws, "agent"), SECRET) == []


def test_a_variable_set_after_the_state_was_opened_counts(
    ws: al.Workspace, env: pytest.MonkeyPatch
) -> None:
    st = ws.state("agent", model=Agent)
    with st.transaction() as s:
        s.n = 1
    env.setenv(LATE, LATE_SECRET)  # a login, after the state was opened
    with st.transaction() as s:
        s.header = f"token {LATE_SECRET}"
    assert st.get().header == f"token {LATE_SECRET}"
    assert files_holding(folder(ws, "agent"), LATE_SECRET) == []
    assert st.get_json()[1]["header"] == f"token ${{env.{LATE}}}"


def test_fork_at_history_and_compact(ws: al.Workspace, env: pytest.MonkeyPatch) -> None:
    st = agent(ws)
    with st.transaction() as s:
        s.key = "rotated-away"
    assert st.at(2).key == SECRET and st.get().key == "rotated-away"
    branch = st.fork(at=2, name="branch")
    assert branch.get() == st.at(2)
    with branch.transaction() as s:
        s.n = 5
    assert branch.get().key == SECRET and branch.at(1).key == SECRET
    assert list(branch.history()["version"]) == [1, 2]
    st.compact(keep_history=False)
    assert st.get().header == f"Authorization: Bearer {SECRET}"
    scanned(ws, "branch")
    assert files_holding(ws.path / "states", SECRET) == []


def test_an_older_reader_refuses_references_and_reads_the_rest(
    ws: al.Workspace, env: pytest.MonkeyPatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records in stored form are envelope format 3: an argus-lab that reads
    only format 2 refuses them by name, and still reads a state with none."""
    plain = ws.state("plain", model=Agent)
    with plain.transaction() as s:
        s.header = "nothing secret"
    refs = agent(ws, "refs")
    raw = [plain._log.cache.get(f"v:{v:012d}") for v in (1, 2)]
    assert all(r.startswith("2|") and '"refs"' not in r for r in raw)
    assert refs._log.cache.get(f"v:{2:012d}").startswith("3|")
    plain.close()
    refs.close()
    monkeypatch.setattr(state_records, "STATE_FORMAT", 2)
    old = al.Workspace(ws.path)
    assert old.state("plain", model=Agent).get().header == "nothing secret"
    with pytest.raises(al.SchemaVersionError, match="newer than this argus-lab"):
        old.state("refs", model=Agent).get()
    old.close()


def test_a_value_stored_before_its_variable_was_a_secret_reads_as_it_was(
    ws: al.Workspace, env: pytest.MonkeyPatch
) -> None:
    """A state an older argus-lab wrote (or written before the variable was
    set) reads as it is; the next commit stores the value as a reference."""
    st = ws.state("agent", model=Agent)
    with st.transaction() as s:
        s.header = f"token {LATE_SECRET}"
    assert '"refs"' not in st._log.cache.get(f"v:{2:012d}")
    env.setenv(LATE, LATE_SECRET)
    st = al.Workspace(ws.path).state("agent", model=Agent)
    assert st.get().header == f"token {LATE_SECRET}"
    with st.transaction() as s:
        s.n = 1
    assert st.get_json()[1]["header"] == f"token ${{env.{LATE}}}"
    assert st.at(2).header == st.get().header
    # Version 2 still holds it, as it was written: only what comes after is
    # hidden.
    assert st._log.record(3)["changed"] == ["n"]


def test_what_is_no_secret_is_stored_as_it_was(
    ws: al.Workspace, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A short value, a word, a path that exists, an AUTHOR: no secret."""
    sock = tmp_path / "agent.sock"
    sock.touch()
    env.setenv("ARGUS_ST_SHORT_KEY", "abcd")
    env.setenv("ARGUS_ST_AUTH_MODE", "session")
    env.setenv("ARGUS_ST_AUTH_SOCK", str(sock))
    env.setenv("GIT_AUTHOR_NAME", "Ada Lovelace")
    st = ws.state("agent", model=Agent)
    text = f"abcd session {sock} Ada Lovelace"
    with st.transaction() as s:
        s.header = text
    assert st.get().header == text
    assert files_holding(folder(ws, "agent"), text) != []
    assert all(not r.get("refs") for r in st._log.records())


def test_a_model_default_holding_a_secret_stays_out_of_the_files(
    ws: al.Workspace, env: pytest.MonkeyPatch
) -> None:
    """The head keeps the model's JSON schema (for untyped readers and the
    server): a default read from the environment reads ${env.NAME} there."""

    class Cfg(BaseModel):
        api_key: str = SECRET
        n: int = 0

    st = ws.state("cfg", model=Cfg)
    st.update(lambda c: setattr(c, "n", 1))
    assert st.get().api_key == SECRET
    scanned(ws, "cfg")  # the WAL among them
    assert files_holding(folder(ws, "cfg"), SECRET) == []
    st.close()
    assert files_holding(folder(ws, "cfg"), SECRET) == []


def test_a_token_refreshed_inside_a_transaction_stays_hidden(
    ws: al.Workspace, env: pytest.MonkeyPatch
) -> None:
    """The block was given the old value; a tool refreshes the variable inside
    it. The old value is hidden too (as the reference, which reads the new
    one), and the field the block did not touch is not listed as changed."""
    agent(ws)
    st = ws.state("agent", model=Agent)
    with st.transaction() as s:
        assert s.key == SECRET
        env.setenv(KEY, "sk-st-refreshed-77aa0c1d")
        s.n += 1
    assert files_holding(folder(ws, "agent"), SECRET) == []
    assert list(st.history()["changed"])[-1] == ["n"]
    assert st.get().key == "sk-st-refreshed-77aa0c1d"  # the variable's value now
