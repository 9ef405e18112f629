"""The value of a secret env var never lands in a LangGraph thread's files: it is
stored as ``${env.NAME}`` and put back from the environment for the graph
(langgraph/_secrets.py), while the analysis frames show the reference."""

from __future__ import annotations

import contextlib
import enum
import operator
import os
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import argus_lab as al
from argus_lab.langgraph import ArgusSaver, SecretUnsetError
from tests.conftest import files_holding

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
    sock = tmp_path / "ssh-agent.123"
    sock.touch()
    env.setenv("ARGUS_LG_AUTH_SOCK", str(sock))  # a path that exists: no secret
    g = StateGraph(S)
    g.add_node("n", lambda s: {"log": ["abcd", "${env.HOME}", str(sock)]})
    g.add_edge(START, "n")
    g.add_edge("n", END)
    saver = ArgusSaver(ws)
    app = g.compile(checkpointer=saver)
    out = app.invoke({"log": []}, CFG)["log"]
    assert out == ["abcd", "${env.HOME}", str(sock)]
    saver.close()
    assert files_holding(tmp_path / "ws", '"$":"secret"') == []
    assert files_holding(tmp_path / "ws", f'"abcd","${{env.HOME}}","{sock}"') != []


class V(TypedDict, total=False):
    v: Any


def one_node(fn: Any, name: str = "n") -> Any:
    g = StateGraph(V)
    g.add_node(name, fn)
    g.add_edge(START, name)
    g.add_edge(name, END)
    return g


def stored(ws: al.Workspace, g: Any, tmp_path: Path, *texts: str) -> Any:
    """Runs ``g`` once; the state the graph reads back, after checking that no
    file and no frame holds any of ``texts``."""
    saver = ArgusSaver(ws)
    app = g.compile(checkpointer=saver)
    # (A node that fails on purpose: its error is stored.)
    with contextlib.suppress(Exception):
        app.invoke({"v": None}, CFG)
    values = app.get_state(CFG).values
    saver.close()
    assert files_holding(tmp_path / "ws", *texts) == []
    for frame in (
        al.analysis.tasks_df(ws),
        al.analysis.events_df(ws),
        al.analysis.sessions_df(ws),
    ):
        assert not any(t in frame.to_csv() for t in texts)
    return values


@pytest.mark.parametrize(
    "secret, text",
    [
        ("sk-dollar-5d2a", "price: ${}"),  # a "$" right before the value
        ("$ecretPass-77", "pw=${}"),  # a value that starts with "$"
        ('{"k":"v-1234"}', "creds=${}"),  # ... or with "{" after a "$"
        ('tok-in-\\-"q"', "escaped: {}"),  # what JSON escapes
    ],
)
def test_dollars_and_braces_around_a_secret_read_back_exactly(
    ws: al.Workspace, env: pytest.MonkeyPatch, tmp_path: Path, secret: str, text: str
) -> None:
    env.setenv("ARGUS_LG_ODD_KEY", secret)
    want = text.replace("{}", secret)
    values = stored(ws, one_node(lambda s: {"v": want}), tmp_path, secret)
    assert values["v"] == want


def test_typed_values_holding_a_secret_read_back_as_their_types(
    ws: al.Workspace, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env.setenv("ARGUS_LG_UUID_KEY", "12345678-90ab-cdef-1234-567890abcdef")
    value = {
        "id": uuid.UUID("12345678-90ab-cdef-1234-567890abcdef"),
        "path": Path("cache") / SECRET,
        "header": b"Authorization: Bearer " + SECRET.encode() + b"\xff",
        SECRET: "a key that is the secret",
    }
    values = stored(
        ws,
        one_node(lambda s: {"v": value}),
        tmp_path,
        SECRET,
        "12345678-90ab-cdef-1234-567890abcdef",
    )
    assert values["v"] == value


def test_a_secret_equal_to_a_node_name_leaves_the_graph_readable(
    ws: al.Workspace, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Only values are rewritten, never a record's structure (channel, node,
    task names): an env value that is also a node's name changes nothing."""
    env.setenv("ARGUS_LG_ROLE_TOKEN", "reviewer")
    env.setenv("GIT_AUTHOR_NAME", "Ada Lovelace")  # AUTHOR is no secret
    g = one_node(lambda s: {"v": "by Ada Lovelace"}, name="reviewer")
    saver = ArgusSaver(ws)
    app = g.compile(checkpointer=saver)
    assert app.invoke({"v": None}, CFG)["v"] == "by Ada Lovelace"
    assert app.get_state(CFG).values["v"] == "by Ada Lovelace"
    saver.close()
    assert files_holding(tmp_path / "ws", "${env.GIT_AUTHOR_NAME}") == []


def test_an_error_or_a_question_holding_a_secret_is_kept_as_a_reference(
    ws: al.Workspace, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A node's error and an interrupt's question end up in the thread's
    status too (``ws.sessions()``): there they read ${env.NAME}."""

    def fails(s: V) -> V:
        raise ValueError(f"401 for key {SECRET}")

    stored(ws, one_node(fails), tmp_path, SECRET)
    saver = ArgusSaver(ws)
    errors = [w for *_, w in saver.get_tuple(CFG).pending_writes if w]  # type: ignore[union-attr]
    assert [str(e) for e in errors if isinstance(e, ValueError)] == [
        f"401 for key {SECRET}"
    ]
    saver.close()
    (info,) = ws.sessions()
    assert f"${{env.{KEY}}}" in (info.reason or "")

    def asks(s: V) -> V:
        return {"v": interrupt({"q": "use this key?", "key": SECRET})}

    cfg2: Any = {"configurable": {"thread_id": "t2"}}
    saver = ArgusSaver(ws)
    one_node(asks).compile(checkpointer=saver).invoke({"v": None}, cfg2)
    saver.close()
    assert files_holding(tmp_path / "ws", SECRET) == []
    assert all(SECRET not in (i.reason or "") for i in ws.sessions())


def test_a_secret_set_in_place_of_another_is_hidden_too(
    ws: al.Workspace, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The environment's size unchanged: a variable unset, a secret set."""

    def swap(s: V) -> V:
        os.environ.pop("ARGUS_LG_PLAIN")
        os.environ[LATE] = LATE_SECRET
        return {"v": f"now {LATE_SECRET}"}

    env.setenv("ARGUS_LG_PLAIN", "1")  # (monkeypatch restores both after the test)
    values = stored(ws, one_node(swap), tmp_path, LATE_SECRET)
    assert values["v"] == f"now {LATE_SECRET}"


def test_the_thread_view_works_without_the_variables_and_shows_references(
    ws: al.Workspace, env: pytest.MonkeyPatch
) -> None:
    """A view (status, approvals, topology, the widget's polling) only looks:
    it works in a process that lacks the variables, and shows no value."""
    saver = ArgusSaver(ws)
    app = build().compile(checkpointer=saver)
    app.invoke({"log": []}, CFG)  # paused at "ask", the key in the state
    saver.close()
    env.delenv(KEY)
    env.delenv(LATE, raising=False)
    saver = ArgusSaver(ws)
    view = saver.thread("t1", graph=build().compile(checkpointer=saver))
    assert view.status == "paused"
    (asked,) = view.pending_approvals()
    shown = [asked, view.branch_rows(), dict(view.graph.nodes(data=True))]
    assert SECRET not in repr(shown)
    assert view.widget_session()._signature()[0] is not None
    with pytest.raises(SecretUnsetError, match=KEY):  # the graph itself needs it
        app.get_state(CFG)
    saver.close()


def test_a_key_that_starts_with_a_slash_is_no_path(
    ws: al.Workspace, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    key = "/wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"  # base64: 1 in 64 do
    env.setenv("ARGUS_LG_AWS_SECRET_ACCESS_KEY", key)
    values = stored(ws, one_node(lambda s: {"v": key}), tmp_path, key)
    assert values["v"] == key


def test_frames_show_a_typed_value_holding_a_secret_as_its_reference(
    ws: al.Workspace, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A view cannot rebuild ``UUID("${env.NAME}")``: it shows the text."""
    key = "12345678-90ab-cdef-1234-567890abcdef"
    env.setenv("ARGUS_LG_UUID_KEY", key)

    def asks(s: V) -> V:
        return {"v": interrupt({"id": uuid.UUID(key), "path": Path(key)})}

    saver = ArgusSaver(ws)
    app = one_node(asks).compile(checkpointer=saver)
    app.invoke({"v": None}, CFG)
    tasks = al.analysis.tasks_df(ws)
    assert "${env.ARGUS_LG_UUID_KEY}" in tasks.to_csv()
    assert key not in tasks.to_csv() + al.analysis.events_df(ws).to_csv()
    (asked,) = saver.thread("t1").pending_approvals()
    assert key not in repr(asked)
    saver.close()


class Level(enum.Enum):
    KEY = "sk-enum-0a1b2c3d4e"


def test_a_view_of_an_enum_holding_a_secret_shows_the_reference(
    ws: al.Workspace, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env.setenv("ARGUS_LG_ENUM_KEY", Level.KEY.value)
    saver = ArgusSaver(ws)
    app = one_node(lambda s: {"v": interrupt({"level": Level.KEY})}).compile(
        checkpointer=saver
    )
    app.invoke({"v": None}, CFG)
    assert app.get_state(CFG).tasks[0].interrupts[0].value == {"level": Level.KEY}
    shown = al.analysis.tasks_df(ws).to_csv()
    assert "${env.ARGUS_LG_ENUM_KEY}" in shown and Level.KEY.value not in shown
    (asked,) = saver.thread("t1").pending_approvals()
    assert Level.KEY.value not in repr(asked)
    saver.close()


def test_which_variables_count_as_secrets(
    ws: al.Workspace, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """HTTP_AUTHORIZATION is one (AUTHOR is not, AUTHORIZATION is); a
    secret-named variable holding a short word is not (AUTH_MODE=session)."""
    env.setenv("HTTP_AUTHORIZATION", "Bearer abc123def456")
    env.setenv("ARGUS_LG_AUTH_MODE", "session")
    values = stored(
        ws,
        one_node(lambda s: {"v": "Bearer abc123def456 for this session"}),
        tmp_path,
        "abc123def456",
    )
    assert values["v"] == "Bearer abc123def456 for this session"
    assert files_holding(tmp_path / "ws", "for this session") != []


def test_records_holding_a_reference_are_version_2_for_older_readers(
    ws: al.Workspace, env: pytest.MonkeyPatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An argus-lab that reads only version 1 refuses them by name
    (SchemaVersionError), and still reads a thread that holds none."""
    from argus_lab.langgraph import _record

    saver = ArgusSaver(ws)
    one_node(lambda s: {"v": f"key {SECRET}"}).compile(checkpointer=saver).invoke(
        {"v": None}, CFG
    )
    plain: Any = {"configurable": {"thread_id": "plain"}}
    one_node(lambda s: {"v": "nothing"}).compile(checkpointer=saver).invoke(
        {"v": None}, plain
    )
    saver.close()
    monkeypatch.setattr(_record, "LG_SCHEMA_VERSION", 1)
    saver = ArgusSaver(ws)
    assert saver.get_tuple(plain) is not None
    with pytest.raises(al.SchemaVersionError, match="newer than this argus-lab"):
        saver.get_tuple(CFG)
    saver.close()
