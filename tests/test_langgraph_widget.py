"""GraphWidget on a LangGraph thread: the graph drawn with node statuses, an
interrupt awaiting approval, Approve resuming with Command(resume=...), Fork here
at a node's checkpoint, live statuses while another thread runs the graph.

Built without a front end (ipywidgets' dummy comm), as tests/test_widget.py;
waits are on trait changes with timeouts, never sleeps.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import argus_lab as al
from argus_lab.jupyter.widget import GraphWidget
from argus_lab.langgraph import ArgusSaver

WAIT = 30.0
GATE = threading.Event()


class S(TypedDict):
    log: Annotated[list[str], operator.add]


def _a(s: S) -> dict[str, Any]:
    return {"log": ["a"]}


def _ask(s: S) -> dict[str, Any]:
    answer = interrupt({"question": "publish?"})
    return {"log": [f"ask:{answer}"]}


def _gate(s: S) -> dict[str, Any]:
    if not GATE.wait(WAIT):
        raise RuntimeError("the test never opened the gate")
    return {"log": ["gate"]}


def _b(s: S) -> dict[str, Any]:
    return {"log": ["b"]}


def build(middle: Callable[[S], dict[str, Any]]) -> StateGraph[S]:
    g = StateGraph(S)
    g.add_node("a", _a)
    g.add_node("mid", middle)
    g.add_node("b", _b)
    g.add_edge(START, "a")
    g.add_edge("a", "mid")
    g.add_edge("mid", "b")
    g.add_edge("b", END)
    return g


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


@pytest.fixture
def saver(ws: al.Workspace) -> ArgusSaver:
    return ArgusSaver(ws)


@pytest.fixture
def widgets() -> Iterator[list[GraphWidget]]:
    made: list[GraphWidget] = []
    yield made
    GATE.set()
    for w in made:
        w.close()
    GATE.clear()


def wait_until(w: GraphWidget, pred: Callable[[GraphWidget], bool]) -> None:
    """Waits for a trait change after which ``pred(w)`` holds."""
    ok = threading.Event()

    def check(_change: Any = None) -> None:
        if pred(w):
            ok.set()

    w.observe(check, names=["status_codes", "summary"])
    try:
        check()
        assert ok.wait(WAIT), f"never true; statuses {w.statuses}"
    finally:
        w.unobserve(check, names=["status_codes", "summary"])


def test_interrupt_shows_as_awaiting_approval_and_approve_resumes(
    saver: ArgusSaver, widgets: list[GraphWidget]
) -> None:
    app = build(_ask).compile(checkpointer=saver)
    app.invoke({"log": []}, cfg("t1"))
    w = GraphWidget(saver.thread("t1", graph=app))
    widgets.append(w)
    assert w.tasks == ["__start__", "a", "mid", "b", "__end__"]
    assert {n["id"] for n in w.graph["nodes"]} == set(w.tasks)
    assert ["a", "mid"] in [list(e) for e in w.graph["edges"]]
    assert w.statuses == {
        "__start__": "succeeded",
        "a": "succeeded",
        "mid": "awaiting_approval",
        "b": "pending",
        "__end__": "pending",
    }
    assert list(w.approvals) == ["mid"]
    assert w.approvals["mid"]["args"] == {"question": "publish?"}
    assert w.summary["status"] == "paused"
    assert "waiting for approval" in w.summary["reason"]
    # The static view (nbconvert, GitHub, nbval) draws the same graph.
    data, _ = w._repr_mimebundle_()
    assert 'data-id="mid" data-status="awaiting_approval"' in data["text/html"]
    assert 'data-id="a" data-status="succeeded"' in data["text/html"]

    w.act("approve", task="mid", args={"ok": 1}).result(WAIT)
    assert w.message["text"] == (
        "approved mid with edited args; the thread ran on: succeeded"
    )
    assert w.statuses["mid"] == "succeeded" and w.statuses["b"] == "succeeded"
    assert w.statuses["__end__"] == "succeeded"
    assert w.approvals == {}
    assert w.summary["status"] == "succeeded"
    assert app.get_state(cfg("t1")).values["log"] == ["a", "ask:{'ok': 1}", "b"]

    # The detail panel of a node: its latest execution.
    w.act("select", task="b").result(WAIT)
    assert w.detail["status"] == "succeeded"
    assert w.detail["result"] is not None and '"b"' in w.detail["result"]


def test_fork_here_forks_at_the_nodes_checkpoint(
    saver: ArgusSaver, widgets: list[GraphWidget]
) -> None:
    app = build(_ask).compile(checkpointer=saver)
    app.invoke({"log": []}, cfg("t2"))
    view = saver.thread("t2", graph=app)
    view.resume("no")
    w = GraphWidget(view)
    widgets.append(w)
    parent = w.session_name
    fork = w.act("fork", at="mid").result(WAIT)
    assert w.session is fork and w.session_name != parent
    assert w.family["parent"] == parent
    # The copy goes on from before "mid": it is next in line, not run there yet.
    assert w.statuses["a"] == "succeeded" and w.statuses["mid"] == "pending"
    assert w.statuses["b"] == "pending"
    app.invoke(None, fork.view.config)  # the fork asks again
    w.refresh()
    assert w.statuses["mid"] == "awaiting_approval"
    w.act("approve", task="mid", args={"v": "yes"}).result(WAIT)
    assert app.get_state(fork.view.config).values["log"] == [
        "a",
        "ask:{'v': 'yes'}",
        "b",
    ]
    assert app.get_state(cfg("t2")).values["log"] == ["a", "ask:no", "b"]
    # Back to the parent through the breadcrumb: unchanged.
    w.act("open_family", name=parent).result(WAIT)
    assert w.session_name == parent and w.statuses["b"] == "succeeded"


def test_live_run_updates_statuses(
    saver: ArgusSaver, widgets: list[GraphWidget]
) -> None:
    app = build(_gate).compile(checkpointer=saver)
    w = GraphWidget(saver.thread("t3", graph=app), update_interval=0.05)
    widgets.append(w)
    assert set(w.statuses.values()) == {"pending"}
    out: list[Any] = []
    run = threading.Thread(
        target=lambda: out.append(app.invoke({"log": []}, cfg("t3")))
    )
    run.start()
    # The run waits in "mid": the widget saw "a" finish from the checkpoints.
    wait_until(w, lambda w: w.statuses["a"] == "succeeded")
    assert w.statuses["b"] == "pending"
    GATE.set()
    wait_until(w, lambda w: w.statuses["__end__"] == "succeeded")
    run.join(WAIT)
    assert out and out[0]["log"] == ["a", "gate", "b"]
    assert w.statuses["mid"] == "succeeded" and w.statuses["b"] == "succeeded"
    assert w.flushes >= 1  # the updates came from the live path, not a refresh


def test_unsupported_actions_say_what_to_do(
    saver: ArgusSaver, widgets: list[GraphWidget]
) -> None:
    app = build(_ask).compile(checkpointer=saver)
    app.invoke({"log": []}, cfg("t4"))
    w = GraphWidget(saver.thread("t4", graph=app))
    widgets.append(w)
    # The front end draws these disabled, their tooltip saying why.
    assert {"step", "run", "skip", "reject", "toggle_breakpoint"} <= set(w.unsupported)
    assert "unsupported" in w.keys  # a synced trait
    assert "approve" not in w.unsupported and "fork" not in w.unsupported
    for action, kw in [("step", {}), ("run", {}), ("skip", {"task": "b"}),
                       ("toggle_breakpoint", {"task": "b"})]:  # fmt: skip
        fut = w.act(action, **kw)
        with pytest.raises(ValueError, match=r"LangGraph|app\.invoke|interrupt_before"):
            fut.result(WAIT)
        assert w.message["level"] == "error"
    assert w.message["text"].startswith("toggle_breakpoint: ")
    assert w.statuses["mid"] == "awaiting_approval"  # nothing changed
    with pytest.raises(ValueError, match="not waiting"):
        w.session.approve("b")


def test_widget_needs_the_compiled_graph(saver: ArgusSaver) -> None:
    with pytest.raises(ValueError, match="compiled graph"):
        GraphWidget(saver.thread("none"))


def test_a_loop_is_drawn_left_to_right(
    saver: ArgusSaver, widgets: list[GraphWidget]
) -> None:
    """A tool loop (b goes back to a until done): the edge closing the cycle is
    left out of the drawing, every node is there."""
    g = StateGraph(S)
    g.add_node("a", _a)
    g.add_node("b", _b)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_conditional_edges("b", lambda s: "a" if len(s["log"]) < 4 else END)
    app = g.compile(checkpointer=saver)
    assert app.invoke({"log": []}, cfg("loop"))["log"] == ["a", "b", "a", "b"]
    w = GraphWidget(saver.thread("loop", graph=app))
    widgets.append(w)
    assert w.tasks == ["__start__", "a", "b", "__end__"]
    edges = [list(e) for e in w.graph["edges"]]
    assert ["a", "b"] in edges and ["b", "a"] not in edges
    assert w.statuses["b"] == "succeeded" and w.statuses["__end__"] == "succeeded"
    assert w.session.record("a").attempts == 2  # ran twice on this branch
