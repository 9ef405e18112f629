"""A LangGraph thread seen as an Argus session: ``saver.thread(thread_id, graph=app)``.

Read-only but for ``resume``, which answers an ``interrupt()`` through the compiled
graph (``Command(resume=...)``), the way LangGraph itself resumes. Everything else
is read from what the saver stored, again on every call, so a view follows a
thread another process or thread is running.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from argus_lab.langgraph._analysis import node_executions, open_thread, parts_of
from argus_lab.langgraph._record import thread_session_id
from argus_lab.langgraph._secrets import viewing

if TYPE_CHECKING:
    import networkx as nx
    import pandas as pd

    from argus_lab.langgraph._widget import ThreadSession
    from argus_lab.langgraph.saver import ArgusSaver

__all__ = ["ThreadView"]

_START, _END = "__start__", "__end__"


F = TypeVar("F", bound=Callable[..., Any])


def _viewed(fn: F) -> F:
    """``fn`` reads as a view (``_secrets.viewing``): secret env values stay
    references, and a process without them can still look at the thread."""

    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> Any:
        with viewing():
            return fn(*args, **kwargs)

    return inner  # type: ignore[return-value]


class ThreadView:
    """One LangGraph thread, read like an Argus session.

    Args:
        saver: The saver whose workspace holds the thread.
        thread_id: The LangGraph thread id.
        graph: The compiled graph (``builder.compile(checkpointer=saver)``):
            needed for ``graph`` (its topology) and ``resume``.
    """

    def __init__(self, saver: ArgusSaver, thread_id: str, graph: Any = None) -> None:
        self.saver = saver
        self.thread_id = thread_id
        self.compiled = graph
        self.id = thread_session_id(thread_id)
        """The thread's session id in the workspace (``ws.session_ids()``)."""
        self._dir = Path(saver.ws.path) / "sessions" / self.id

    def __repr__(self) -> str:
        return f"ThreadView({self.thread_id!r}, status={self.status!r})"

    @property
    def config(self) -> dict[str, Any]:
        """The RunnableConfig that names the thread."""
        return {"configurable": {"thread_id": self.thread_id}}

    def _rows(self) -> list[dict[str, Any]]:
        st = open_thread(self._dir)
        if st is None:
            return []
        try:
            return node_executions(st)
        finally:
            st.close()

    @_viewed
    def branch_rows(self) -> list[dict[str, Any]]:
        """The node executions on the branch the thread stands on: those
        scheduled by its latest checkpoint or one of its ancestors (after a fork
        at a checkpoint, the copied history past it is another branch)."""
        tup = self.saver.get_tuple(self.config)  # type: ignore[arg-type]
        if tup is None:
            return []
        parents = {
            t.checkpoint["id"]: (t.parent_config or {}).get("configurable", {})
            for t in self.saver.list(self.config)  # type: ignore[arg-type]
        }
        on: set[str] = set()
        cid: str | None = tup.checkpoint["id"]
        while cid is not None and cid not in on:
            on.add(cid)
            cid = parents.get(cid, {}).get("checkpoint_id")
        return [r for r in self._rows() if r["checkpoint_id"] in on]

    # -- status --------------------------------------------------------------

    @property
    def info(self) -> Any:
        """The thread's SessionInfo (id, goal, status, reason, ...).

        Raises:
            KeyError: the thread has no checkpoint in this workspace yet.
        """
        if not (self._dir / "cache.db").exists():
            raise KeyError(
                f"no LangGraph thread {self.thread_id!r} in {self.saver.ws.path}"
            )
        with self.saver.ws.store(self.id) as store:
            return store.read_meta()

    @property
    def status(self) -> str:
        """ "created" (nothing stored yet), "running", "paused" (an interrupt
        waits for an answer), "succeeded" or "failed"."""
        if not (self._dir / "cache.db").exists():
            return "created"
        if self.pending_approvals():
            return "paused"
        return str(self.info.status)

    @_viewed
    def pending_approvals(self) -> list[dict[str, Any]]:
        """The ``interrupt()`` calls waiting for an answer, from the latest
        checkpoint: dicts with node, task_id, interrupt_id, value, checkpoint_id."""
        tup = self.saver.get_tuple(self.config)  # type: ignore[arg-type]
        if tup is None:
            return []
        cid = tup.checkpoint["id"]
        return [
            {
                "node": r["node"],
                "task_id": r["task_id"],
                "interrupt_id": r["interrupt_id"],
                "value": r["interrupt"],
                "checkpoint_id": cid,
            }
            for r in self._rows()
            if r["status"] == "awaiting_approval"
            and r["checkpoint_id"] == cid
            and not r["checkpoint_ns"]
        ]

    # -- frames ----------------------------------------------------------------

    def tasks_df(self) -> pd.DataFrame:
        """One row per node execution (``ArgusSaver.tasks_df``)."""
        return self.saver.tasks_df(self.thread_id)

    def events_df(self) -> pd.DataFrame:
        """The thread's events as ``al.analysis.events_df`` shows them:
        checkpoints, node starts and ends, interrupts and their answers."""
        from argus_lab.analysis import EVENT_COLUMNS

        st = open_thread(self._dir)
        if st is None:
            return EVENT_COLUMNS.frame([])
        try:
            _, _, _, rows = parts_of(st, self.info)
        finally:
            st.close()
        return EVENT_COLUMNS.frame(rows)

    # -- topology --------------------------------------------------------------

    @property
    @_viewed
    def graph(self) -> nx.DiGraph:
        """The compiled graph's nodes and edges as a networkx DiGraph.

        Node attributes: ``status`` (of the node's latest execution:
        "succeeded", "failed", "awaiting_approval"; "ready" for a node the
        latest checkpoint will run next; "pending" for one not run yet),
        ``runs`` (executions so far) and ``last_step``. Edge attribute
        ``conditional``.

        Raises:
            ValueError: the view was made without the compiled graph.
        """
        import networkx as nx

        if self.compiled is None:
            raise ValueError(
                "this thread view has no compiled graph: open it with "
                "saver.thread(thread_id, graph=builder.compile(checkpointer=saver))"
            )
        # The latest checkpoint and status first, the rows after: a run going
        # on meanwhile only adds rows, so the rows cover what the status says
        # (read the other way round, "__end__" could show succeeded beside a
        # node still pending).
        tup = self.saver.get_tuple(self.config)  # type: ignore[arg-type]
        nxt = self.compiled.get_state(self.config).next if tup is not None else ()
        done = tup is not None and self.info.status == "succeeded"
        drawn = self.compiled.get_graph()
        g: nx.DiGraph = nx.DiGraph(thread_id=self.thread_id, session_id=self.id)
        for name in drawn.nodes:
            g.add_node(name, status="pending", runs=0, last_step=None)
        for e in drawn.edges:
            g.add_edge(e.source, e.target, conditional=bool(e.conditional))
        for r in self.branch_rows():
            if r["checkpoint_ns"] or r["node"] not in g:
                continue
            a = g.nodes[r["node"]]
            a["runs"] += 1
            if a["last_step"] is None or (r["step"] or 0) >= a["last_step"]:
                a["status"], a["last_step"] = r["status"], r["step"]
        if tup is not None:
            for name in nxt:
                # A failed node runs again on the next invoke, but it failed.
                waits = ("awaiting_approval", "failed")
                if name in g and g.nodes[name]["status"] not in waits:
                    g.nodes[name]["status"] = "ready"
            if not nxt and _END in g and done:
                g.nodes[_END]["status"] = "succeeded"
        return g

    # -- acting ----------------------------------------------------------------

    def resume(self, value: Any, *, interrupt_id: str | None = None) -> Any:
        """Answers the pending ``interrupt()`` and runs the graph on from it.

        Sends ``Command(resume=value)`` (or ``{interrupt_id: value}`` when one of
        several interrupts is named) through the compiled graph, in this process.

        Returns:
            What ``graph.invoke`` returns.

        Raises:
            ValueError: no compiled graph, or no interrupt is waiting, or
                ``interrupt_id`` names none of the waiting ones.
        """
        from langgraph.types import Command

        if self.compiled is None:
            raise ValueError(
                "resume needs the compiled graph: "
                "saver.thread(thread_id, graph=builder.compile(checkpointer=saver))"
            )
        waiting = self.pending_approvals()
        if not waiting:
            raise ValueError(
                f"LangGraph thread {self.thread_id!r} has no interrupt waiting "
                f"(status {self.status!r}); nothing to resume"
            )
        if interrupt_id is None:
            resume: Any = value
        else:
            ids = [w["interrupt_id"] for w in waiting]
            if interrupt_id not in ids:
                raise ValueError(
                    f"interrupt {interrupt_id!r} is not waiting on thread "
                    f"{self.thread_id!r}; waiting: {ids}"
                )
            resume = {interrupt_id: value}
        return self.compiled.invoke(Command(resume=resume), self.config)

    def fork(self, new_thread_id: str, *, at: str | None = None) -> ThreadView:
        """Copies the thread (``copy_thread``) and, with ``at``, branches the
        copy at that checkpoint: the copy's next run goes on from there, as
        LangGraph's time travel does (``update_state`` on that checkpoint).
        The original is not changed.

        Raises:
            ValueError: ``at`` is given without the compiled graph, or names no
                checkpoint of this thread; or ``new_thread_id`` already exists.
        """
        if (
            Path(self.saver.ws.path) / "sessions" / thread_session_id(new_thread_id)
        ).exists():
            raise ValueError(
                f"LangGraph thread {new_thread_id!r} already exists; pick a new id"
            )
        if at is not None:
            if self.compiled is None:
                raise ValueError(
                    "forking at a checkpoint needs the compiled graph: "
                    "saver.thread(thread_id, graph=...)"
                )
            conf = {"configurable": {"thread_id": self.thread_id, "checkpoint_id": at}}
            with viewing():  # (only whether it is there)
                missing = self.saver.get_tuple(conf) is None  # type: ignore[arg-type]
            if missing:
                raise ValueError(
                    f"no checkpoint {at!r} in LangGraph thread {self.thread_id!r}"
                )
        self.saver.copy_thread(self.thread_id, new_thread_id)
        fork = ThreadView(self.saver, new_thread_id, self.compiled)
        if at is not None:
            conf = {"configurable": {"thread_id": new_thread_id, "checkpoint_id": at}}
            self.compiled.update_state(conf, None)
        return fork

    def widget_session(self) -> ThreadSession:
        """What ``GraphWidget(view)`` shows and drives (see ``_widget``)."""
        from argus_lab.langgraph._widget import ThreadSession

        return ThreadSession(self)
