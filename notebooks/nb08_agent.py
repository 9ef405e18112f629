"""A small LangGraph research agent for notebooks/08_langgraph.ipynb (offline).

The agent is LangGraph's usual loop: a model node that asks for tool calls, a
``ToolNode`` that runs them, and (this is new) a review node that stops on
``interrupt()`` until a person approves the answer. The "model" is scripted, so
the notebook runs offline and gives the same output every time: it searches two
topics in a small built-in corpus, then drafts an answer from what it found.

Run as ``python nb08_agent.py WORKSPACE THREAD [--stall-at N]``: it runs the agent
on ``ArgusSaver(Workspace(WORKSPACE))``; with ``--stall-at N`` the N-th search
writes ``stalled`` into the workspace and waits there to be killed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

CORPUS = {
    "checkpointing": "LangGraph saves a checkpoint after every super-step; a "
    "checkpointer decides where and how durably.",
    "durability": "Argus commits each step in one SQLite transaction, fsynced with "
    "durability='full', and stores JSON only: no pickle.",
}
TOPICS = list(CORPUS)
STALL = {"at": 0, "workspace": ""}
_calls = {"n": 0}


@tool
def search(query: str) -> str:
    """Looks a topic up in the built-in corpus."""
    _calls["n"] += 1
    if _calls["n"] == STALL["at"]:
        Path(STALL["workspace"], "stalled").write_text(query)
        threading.Event().wait()  # until the notebook kills this process
    return CORPUS.get(query, "nothing found")


class Research(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    answer: str
    published: bool


def agent(state: Research) -> dict[str, Any]:
    """The scripted model: one search per topic, then a draft from the results."""
    found = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    if len(found) < len(TOPICS):
        topic = TOPICS[len(found)]
        call = {"name": "search", "args": {"query": topic}, "id": f"call-{topic}"}
        return {"messages": [AIMessage("", tool_calls=[call], id=f"ai-{topic}")]}
    draft = " ".join(str(m.content) for m in found)
    return {"messages": [AIMessage(draft, id="ai-draft")], "answer": draft}


def review(state: Research) -> dict[str, Any]:
    """Stops the run until a person decides; ``Command(resume=...)`` answers."""
    decision = interrupt(
        {"question": "Publish this answer?", "answer": state["answer"]}
    )
    return {"published": decision == "approve"}


def build() -> Any:
    g = StateGraph(Research)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([search]))
    g.add_node("review", review)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: "review"})
    g.add_edge("tools", "agent")
    g.add_edge("review", END)
    return g


def question(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text, id="q")], "answer": "", "published": False}


def start_worker(workspace: str, thread: str, stall_at: int) -> subprocess.Popen[bytes]:
    """Runs the agent in another process (it stalls at its ``stall_at``-th search)."""
    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), *sys.path])}
    return subprocess.Popen(
        [
            sys.executable,
            str(here / "nb08_agent.py"),
            workspace,
            thread,
            "--stall-at",
            str(stall_at),
        ],
        env=env,
    )


def wait_for(path: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Waits until ``path`` exists (the worker stalled), or fails if it exits."""
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited with {proc.returncode}")
        if time.monotonic() > end:
            raise TimeoutError(f"{path} did not appear in {timeout}s")
        time.sleep(0.01)  # polling a file another process writes


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("workspace")
    p.add_argument("thread")
    p.add_argument("--stall-at", type=int, default=0)
    a = p.parse_args()
    import argus_lab as al
    from argus_lab.langgraph import ArgusSaver

    STALL.update(at=a.stall_at, workspace=a.workspace)
    app = build().compile(checkpointer=ArgusSaver(al.Workspace(a.workspace)))
    # durability="sync": each step is committed before the next one starts (the
    # default, "async", writes checkpoints in the background and may lag behind).
    app.invoke(
        question("How does Argus keep a LangGraph run?"),
        {"configurable": {"thread_id": a.thread}},
        durability="sync",
    )


if __name__ == "__main__":
    main()
