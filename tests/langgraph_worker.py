"""A LangGraph graph on ArgusSaver that the tests kill at seeded moments.

Run as ``python tests/langgraph_worker.py WORKSPACE THREAD [--block-at K]
[--hold] [--pause-at K] [--pause-before-close]``: it compiles the graph below
with ``ArgusSaver`` and invokes it on THREAD (starting it, or resuming it from
its latest checkpoint). Each node prints ``ran <node>`` as it starts;
``--block-at K`` makes the K-th node this process runs block forever after
printing (so the test kills it mid-node). ``--hold`` runs the first two nodes,
prints ``holding`` and blocks (the one-writer test). ``--pause-at K``: the K-th
node prints ``paused`` and waits until the file ``release`` appears in the
workspace (the copy test copies it meanwhile); the graph is run with
LangGraph's durability "sync" then, so every checkpoint before that node is
committed when it prints. ``--pause-before-close``: once the graph is done it
prints ``finished`` and waits for ``release`` the same way, then closes the
saver (which gives the thread's lease back). Exit codes: 0 the graph finished
(prints ``done``), 3 a ConcurrentSessionError (message on stderr).

The tests import this module to build the same graph in their own process.
"""

from __future__ import annotations

import argparse
import operator
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

ROUNDS = 12
"""Each round: node a<k>, then b<k> and c<k> in parallel (one superstep)."""
PAUSE_LIMIT = 120.0
"""Seconds ``--pause-at`` waits for ``release`` before giving up (orphan guard)."""


class State(TypedDict):
    log: Annotated[list[str], operator.add]
    total: Annotated[int, operator.add]


def build(on_start: Any = None) -> Any:
    """The graph: a0 -> (b0 | c0) -> a1 -> ... ; every node appends to ``log``."""
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(State)

    def node(name: str, k: int) -> Any:
        def run(state: State) -> dict[str, Any]:
            if on_start is not None:
                on_start(name)
            return {"log": [f"{name}:{len(state['log'])}"], "total": k + 1}

        return run

    prev = [START]
    for k in range(ROUNDS):
        g.add_node(f"a{k}", node(f"a{k}", k))
        for p in prev:
            g.add_edge(p, f"a{k}")
        g.add_node(f"b{k}", node(f"b{k}", k))
        g.add_node(f"c{k}", node(f"c{k}", k))
        g.add_edge(f"a{k}", f"b{k}")
        g.add_edge(f"a{k}", f"c{k}")
        prev = [f"b{k}", f"c{k}"]
    g.add_edge(prev, END)
    return g


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("workspace")
    p.add_argument("thread")
    p.add_argument("--block-at", type=int, default=0)
    p.add_argument("--hold", action="store_true")
    p.add_argument("--pause-at", type=int, default=0)
    p.add_argument("--pause-before-close", action="store_true")
    args = p.parse_args()

    import argus_lab as al
    from argus_lab.langgraph import ArgusSaver

    count = 0
    lock = threading.Lock()

    def on_start(name: str) -> None:
        nonlocal count
        with lock:
            count += 1
            n = count
        print(f"ran {name}", flush=True)
        if n == args.block_at or (args.hold and n == 3):
            if args.hold:
                print("holding", flush=True)
            threading.Event().wait()  # until the test kills this process
        if n == args.pause_at:
            pause("paused")

    def pause(word: str) -> None:
        print(word, flush=True)
        release = Path(args.workspace) / "release"
        end = time.monotonic() + PAUSE_LIMIT
        while not release.exists():
            if time.monotonic() > end:
                raise RuntimeError(f"{release} did not appear in time")
            time.sleep(0.005)

    saver = ArgusSaver(al.Workspace(Path(args.workspace)), durability="full")
    app = build(on_start).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": args.thread}}
    started = app.get_state(cfg).created_at is not None
    try:
        # --pause-at: every checkpoint is committed before the next step runs
        # (LangGraph's "sync"), so the files are still while a node waits.
        sync: Any = {"durability": "sync"} if args.pause_at else {}
        app.invoke(None if started else {"log": [], "total": 0}, cfg, **sync)
    except al.ConcurrentSessionError as e:
        print(e, file=sys.stderr)
        return 3
    if args.pause_before_close:
        pause("finished")
    saver.close()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
