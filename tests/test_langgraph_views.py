"""LangGraph threads read like Argus sessions: the analysis frames, the thread view
(topology with statuses, interrupts awaiting approval, resume, fork)."""

from __future__ import annotations

import json
import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import argus_lab as al
from argus_lab.langgraph import ArgusSaver


class S(TypedDict):
    log: Annotated[list[str], operator.add]


def _a(s: S) -> dict[str, Any]:
    return {"log": ["a"]}


def _ask(s: S) -> dict[str, Any]:
    answer = interrupt({"question": "publish?"})
    return {"log": [f"ask:{answer}"]}


def _b(s: S) -> dict[str, Any]:
    if "ask:boom" in s["log"]:
        raise RuntimeError("b refused")
    return {"log": ["b"]}


def build() -> StateGraph[S]:
    g = StateGraph(S)
    g.add_node("a", _a)
    g.add_node("ask", _ask)
    g.add_node("b", _b)
    g.add_edge(START, "a")
    g.add_edge("a", "ask")
    g.add_edge("ask", "b")
    g.add_edge("b", END)
    return g


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


@pytest.fixture
def saver(ws: al.Workspace) -> ArgusSaver:
    return ArgusSaver(ws)


def test_paused_thread_in_the_analysis_frames(
    ws: al.Workspace, saver: ArgusSaver
) -> None:
    app = build().compile(checkpointer=saver)
    app.invoke({"log": []}, cfg("t1"))
    tasks = al.analysis.tasks_df(ws)
    sid = saver.thread("t1").id
    assert list(tasks["session_id"].unique()) == [sid]
    assert list(tasks["title"]) == ["__start__", "a", "ask"]
    assert list(tasks["task_id"]) == ["s0.__start__", "s1.a", "s2.ask"]
    assert list(tasks["status"]) == ["succeeded", "succeeded", "awaiting_approval"]
    assert list(tasks["deps"]) == ["[]", '["s0.__start__"]', '["s1.a"]']
    assert tasks.loc[2, "approval"] == "asked"
    assert "publish?" in tasks.loc[2, "reason"]
    res = json.loads(tasks.loc[1, "result"])
    assert res == {"node": "a", "step": 1, "writes": ["log", "branch:to:ask"]}
    assert tasks.loc[1, "duration"] >= 0  # float seconds

    ev = al.analysis.events_df(ws)
    kinds = list(ev["kind"])
    assert kinds.count("checkpoint_saved") == 3  # input, after start, after a
    assert list(ev["seq"]) == list(range(1, len(ev) + 1))
    asked = ev[ev["kind"] == "approval_requested"]
    assert list(asked["task_id"]) == ["s2.ask"]
    assert json.loads(asked.iloc[0]["details"])["args"] == {"question": "publish?"}
    assert "paused" in kinds and "approval_granted" not in kinds
    appr = al.analysis.approvals_df(ws)
    assert list(appr["decision"]) == ["pending"]
    sess = al.analysis.sessions_df(ws)
    assert sess.loc[0, "status"] == "paused"
    assert sess.loc[0, "n_awaiting_approval"] == 1


def test_view_status_graph_resume(ws: al.Workspace, saver: ArgusSaver) -> None:
    app = build().compile(checkpointer=saver)
    view = saver.thread("t2", graph=app)
    assert view.status == "created"
    app.invoke({"log": []}, cfg("t2"))
    assert view.status == "paused"
    [waiting] = view.pending_approvals()
    assert waiting["node"] == "ask" and waiting["value"] == {"question": "publish?"}
    g = view.graph
    assert set(g.nodes) == {"__start__", "a", "ask", "b", "__end__"}
    assert set(g.edges) == {
        ("__start__", "a"),
        ("a", "ask"),
        ("ask", "b"),
        ("b", "__end__"),
    }
    st = {n: g.nodes[n]["status"] for n in g}
    assert st["a"] == "succeeded" and st["ask"] == "awaiting_approval"
    assert st["b"] == "pending" and st["__end__"] == "pending"

    with pytest.raises(ValueError, match="not waiting"):
        view.resume("yes", interrupt_id="nope")
    out = view.resume("yes")
    assert out["log"] == ["a", "ask:yes", "b"]
    assert view.status == "succeeded"
    assert view.pending_approvals() == []
    st = {n: view.graph.nodes[n]["status"] for n in view.graph}
    assert st["ask"] == "succeeded" and st["b"] == "succeeded"
    assert st["__end__"] == "succeeded"
    with pytest.raises(ValueError, match="no interrupt waiting"):
        view.resume("again")

    ev = view.events_df()
    kinds = list(ev["kind"])
    assert kinds.index("approval_requested") < kinds.index("approval_granted")
    assert kinds.count("task_succeeded") == 4
    tdf = view.tasks_df()
    assert list(tdf["node"]) == ["__start__", "a", "ask", "b"]
    assert list(tdf["step"]) == [0, 1, 2, 3]
    # The analysis frames agree once the thread ends.
    tasks = al.analysis.tasks_df(ws)
    assert list(tasks["status"]) == ["succeeded"] * 4
    assert tasks.loc[2, "approval"] == "approved"


def test_failed_node_is_a_failed_task_and_event(
    ws: al.Workspace, saver: ArgusSaver
) -> None:
    app = build().compile(checkpointer=saver)
    app.invoke({"log": []}, cfg("t3"))
    view = saver.thread("t3", graph=app)
    with pytest.raises(RuntimeError, match="b refused"):
        view.resume("boom")
    assert view.status == "failed"
    assert view.graph.nodes["b"]["status"] == "failed"
    tasks = al.analysis.tasks_df(ws)
    row = tasks[tasks["title"] == "b"].iloc[0]
    assert row["status"] == "failed" and row["error_type"] == "RuntimeError"
    assert "b refused" in row["error"]
    ev = view.events_df()
    failed = ev[ev["kind"] == "task_failed"]
    assert len(failed) == 1 and "b refused" in failed.iloc[0]["details"]


def test_fork_at_a_checkpoint(ws: al.Workspace, saver: ArgusSaver) -> None:
    app = build().compile(checkpointer=saver)
    app.invoke({"log": []}, cfg("t4"))
    view = saver.thread("t4", graph=app)
    view.resume("no")
    # The checkpoint the interrupt paused at: before "ask" ran.
    at = next(
        s.config["configurable"]["checkpoint_id"]
        for s in app.get_state_history(cfg("t4"))
        if s.next == ("ask",)
    )
    fork = view.fork("t4-fork", at=at)
    # The copy goes on from before "ask": it is next, and asks again.
    assert fork.graph.nodes["ask"]["status"] == "ready"
    assert fork.pending_approvals() == []
    app.invoke(None, fork.config)
    assert fork.status == "paused"
    assert fork.pending_approvals()[0]["node"] == "ask"
    out = fork.resume("yes")
    assert out["log"] == ["a", "ask:yes", "b"]
    assert app.get_state(cfg("t4")).values["log"] == ["a", "ask:no", "b"]
    with pytest.raises(ValueError, match="already exists"):
        view.fork("t4-fork")
    with pytest.raises(ValueError, match="no checkpoint"):
        view.fork("t4-other", at="1f000000-0000-6000-8000-000000000000")
    ids = set(al.analysis.sessions_df(ws)["session_id"])
    assert ids == {view.id, fork.id}


def test_view_without_graph_explains(saver: ArgusSaver) -> None:
    view = saver.thread("none")
    with pytest.raises(ValueError, match="compiled graph"):
        _ = view.graph
    with pytest.raises(ValueError, match="compiled graph"):
        view.resume(1)
    assert view.pending_approvals() == []
    assert len(view.events_df()) == 0


def test_node_errors_are_stored_without_pickle() -> None:
    from argus_lab.langgraph._codec import StoredError, decode, encode

    class Mine(Exception):
        pass

    got = decode(encode(KeyError("k"), "__error__"))
    assert type(got) is KeyError and got.args == ("k",)
    assert str(decode(encode(OSError(2, "gone"), "__error__"))) == "[Errno 2] gone"
    # A class that is not a builtin is never constructed on load.
    back = decode(encode(Mine("mine"), "__error__"))
    assert isinstance(back, StoredError) and not isinstance(back, Mine)
    assert back.type_name.endswith("Mine") and back.message == "mine"
    again, first = encode(back, "__error__"), encode(Mine("mine"), "__error__")
    assert (again["cls"], again["v"]) == (first["cls"], first["v"])  # stable


def test_subgraph_nodes_are_tasks_of_their_namespace(
    ws: al.Workspace, saver: ArgusSaver
) -> None:
    sub = StateGraph(S)
    sub.add_node("x", lambda s: {"log": ["x"]})
    sub.add_edge(START, "x")
    sub.add_edge("x", END)
    g = StateGraph(S)
    g.add_node("a", _a)
    g.add_node("child", sub.compile())
    g.add_edge(START, "a")
    g.add_edge("a", "child")
    g.add_edge("child", END)
    app = g.compile(checkpointer=saver)
    app.invoke({"log": []}, cfg("sub"))
    tasks = al.analysis.tasks_df(ws)
    inner = tasks[tasks["task_id"].str.startswith("child:")]
    assert list(inner["title"]) == ["__start__", "x"]
    assert inner["task_id"].iloc[1].endswith("/s1.x")
    assert json.loads(inner["deps"].iloc[1]) == [inner["task_id"].iloc[0]]
    view = saver.thread("sub", graph=app)
    assert view.status == "succeeded"
    assert {view.graph.nodes[n]["status"] for n in ("a", "child")} == {"succeeded"}
