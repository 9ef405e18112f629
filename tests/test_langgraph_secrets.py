"""The value of a secret env var never lands in a LangGraph thread's files: it is
stored as ``${env.NAME}`` and put back from the environment for the graph
(langgraph/_secrets.py), while the analysis frames show the reference."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import argus_lab as al
from argus_lab.langgraph import ArgusSaver, SecretUnsetError

KEY = "ARGUS_LG_TEST_API_KEY"
LATE = "ARGUS_LG_LATE_TOKEN"
SECRET = "sk-lg-7d1f0c9a2be44e61"
LATE_SECRET = "tok-late-93c1e0aa5b77"


class S(TypedDict, total=False):
    key: str
    log: Annotated[list[str], operator.add]
    by_key: dict[str, int]
    pair: tuple[str, int]


def _read_key(s: S) -> dict[str, Any]:
    secret = __import__("os").environ[KEY]
    return {
        "key": secret,
        "log": [f"Authorization: Bearer {secret}", "literal ${env.HOME} and $${x}"],
        "by_key": {secret: 1, "plain": 2},
        "pair": (secret, 3),
    }


def _login(s: S) -> dict[str, Any]:
    __import__("os").environ[LATE] = LATE_SECRET  # set mid-run (a login)
    return {"log": [f"logged in with {LATE_SECRET}"]}


def _ask(s: S) -> dict[str, Any]:
    answer = interrupt("go on?")
    return {"log": [f"answer:{answer}"]}


def _use(s: S) -> dict[str, Any]:
    os = __import__("os")
    ok = s["key"] == os.environ[KEY] and s["pair"] == (os.environ[KEY], 3)
    return {"log": [f"resumed with the key: {ok}"]}


def build() -> Any:
    g = StateGraph(S)
    for name, fn in [("read", _read_key), ("login", _login), ("ask", _ask)]:
        g.add_node(name, fn)
    g.add_node("use", _use)
    g.add_edge(START, "read")
    g.add_edge("read", "login")
    g.add_edge("login", "ask")
    g.add_edge("ask", "use")
    g.add_edge("use", END)
    return g


CFG: Any = {"configurable": {"thread_id": "t1"}}


def files_holding(root: Path, *texts: str) -> list[str]:
    """Every file under ``root`` whose bytes hold one of ``texts``."""
    found = []
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            found += [f"{p.name}: {t}" for t in texts if t.encode() in data]
    return found


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv(KEY, SECRET)
    monkeypatch.delenv(LATE, raising=False)
    return monkeypatch


def test_a_secret_env_value_is_stored_as_a_reference_and_read_back(
    ws: al.Workspace, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    saver = ArgusSaver(ws)
    app = build().compile(checkpointer=saver)
    app.invoke({"log": []}, CFG)
    env.setenv(LATE, LATE_SECRET)  # (monkeypatch restores it after the test)
    values = app.get_state(CFG).values  # read for the graph: put back
    assert values["key"] == SECRET
    assert values["log"] == [
        f"Authorization: Bearer {SECRET}",
        "literal ${env.HOME} and $${x}",  # a literal "${" is kept as it was
        f"logged in with {LATE_SECRET}",
    ]
    assert values["by_key"] == {SECRET: 1, "plain": 2}
    assert values["pair"] == (SECRET, 3)

    out = app.invoke(Command(resume="yes"), CFG)
    assert out["log"][-2:] == ["answer:yes", "resumed with the key: True"]
    saver.close()

    # Nothing of either value in any file: checkpoints, writes, the WAL, the
    # journal, the thread's session records.
    assert files_holding(tmp_path / "ws", SECRET, LATE_SECRET) == []
    # The frames show the references, never the values.
    for frame in (al.analysis.tasks_df(ws), al.analysis.events_df(ws)):
        text = frame.to_csv()
        assert SECRET not in text and LATE_SECRET not in text


def test_a_graph_whose_secret_is_unset_is_told_which_to_set(
    ws: al.Workspace, env: pytest.MonkeyPatch
) -> None:
    saver = ArgusSaver(ws)
    app = build().compile(checkpointer=saver)
    app.invoke({"log": []}, CFG)
    saver.close()
    env.delenv(KEY)
    saver = ArgusSaver(ws)
    app = build().compile(checkpointer=saver)
    with pytest.raises(SecretUnsetError, match=f"{KEY}.*not set"):
        app.get_state(CFG)
    with pytest.raises(SecretUnsetError, match=KEY):
        app.invoke(Command(resume="yes"), CFG)
    env.setenv(KEY, SECRET)
    out = app.invoke(Command(resume="yes"), CFG)
    assert out["log"][-1] == "resumed with the key: True"
    saver.close()


def test_text_without_a_secret_value_is_stored_as_it_was(
    ws: al.Workspace, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Only strings holding a value are rewritten; a secret-named variable
    too short to be a secret (under 6 characters), or holding a path, is no
    secret here either."""
    env.setenv("ARGUS_LG_SHORT_KEY", "abcd")
    env.setenv("ARGUS_LG_AUTH_SOCK", "/tmp/ssh-agent.123")  # a path, no secret
    g = StateGraph(S)
    g.add_node("n", lambda s: {"log": ["abcd", "${env.HOME}", "/tmp/ssh-agent.123"]})
    g.add_edge(START, "n")
    g.add_edge("n", END)
    saver = ArgusSaver(ws)
    app = g.compile(checkpointer=saver)
    out = app.invoke({"log": []}, CFG)["log"]
    assert out == ["abcd", "${env.HOME}", "/tmp/ssh-agent.123"]
    saver.close()
    assert files_holding(tmp_path / "ws", '"$":"secret"') == []
    stored = '"abcd","${env.HOME}","/tmp/ssh-agent.123"'
    assert files_holding(tmp_path / "ws", stored) != []
