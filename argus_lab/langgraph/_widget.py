"""A LangGraph thread in the GraphWidget: ``GraphWidget(saver.thread(tid, graph=app))``.

The widget reads a Session's surface (plan, records, summary, approvals,
subscribe) and calls its actions. :class:`ThreadSession` is that surface for a
thread, built on :class:`~argus_lab.langgraph._view.ThreadView`: the plan is the
compiled graph's topology (one task per node), a node's record comes from its
latest execution in the checkpoint stream, ``subscribe`` polls the saver's
commits (so a run in another thread or process shows live), Approve answers the
``interrupt()`` with ``Command(resume=...)`` and Fork here copies the thread at
the checkpoint that scheduled the node. What a LangGraph thread cannot do
(Step, Run, Retry, Skip, Reject, breakpoints) is refused with a message saying
what to do instead.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from argus_lab.langgraph._secrets import viewing
from argus_lab.model import STATUSES, SessionInfo, TaskRecord

if TYPE_CHECKING:
    from argus_lab.langgraph._view import ThreadView
    from argus_lab.workspace import Workspace

__all__ = ["UNSUPPORTED", "ThreadEvent", "ThreadSession"]

UNSUPPORTED: dict[str, str] = {
    "step": "a LangGraph thread runs through its compiled graph: call "
    "app.invoke(None, view.config) to go on",
    "run": "a LangGraph thread runs through its compiled graph: call "
    "app.invoke(None, view.config) to go on",
    "retry": "LangGraph retries a failed node on the next app.invoke(None, config)",
    "retry_failed": "LangGraph retries a failed node on the next "
    "app.invoke(None, config)",
    "skip": "a LangGraph node cannot be skipped from the widget",
    "reject": "answer the interrupt with Approve (its value goes to "
    "Command(resume=...)); a refusal is a value your node interprets",
    "rerun_stale": "a LangGraph thread has no stale nodes",
    "toggle_breakpoint": "set LangGraph breakpoints with "
    "compile(interrupt_before=[...])",
    "pause": "a LangGraph run cannot be paused from the widget",
}
"""Widget actions a LangGraph thread does not support -> what to do instead."""

_MAP = {"ready": "pending"}  # the graph's "ready" is a pending node next in line


@dataclass(frozen=True)
class ThreadEvent:
    """What ``subscribe`` hands the widget: a node whose status may have changed."""

    task_id: str | None
    kind: str = "checkpoint_saved"


@dataclass(frozen=True)
class _Node:
    """A graph node as the widget's plan task (layout and detail panel)."""

    id: str
    deps: list[str] = field(default_factory=list)
    title: str | None = None
    parent: str | None = None
    kind: str = "langgraph"
    tool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    description: str = ""


class _Plan:
    def __init__(self, goal: str, tasks: list[_Node]) -> None:
        self.goal = goal
        self.tasks = tasks
        self._by_id = {t.id: t for t in tasks}

    def task(self, task_id: str) -> _Node:
        return self._by_id[task_id]


def _plan_of(view: ThreadView) -> _Plan:
    """The topology as a DAG: edges that close a cycle (a tool loop going back)
    are left out, since the layout draws left to right."""
    g = view.graph
    order: list[str] = []
    seen: set[str] = set()
    back: set[tuple[str, str]] = set()
    on_path: set[str] = set()

    def visit(n: str) -> None:  # depth-first; graphs here are small
        seen.add(n)
        on_path.add(n)
        for m in g.successors(n):
            if m in on_path:
                back.add((n, m))
            elif m not in seen:
                visit(m)
        on_path.discard(n)
        order.append(n)

    for n in ["__start__", *g.nodes]:
        if n in g and n not in seen:
            visit(n)
    tasks = [
        _Node(
            id=n,
            deps=[p for p in g.predecessors(n) if (p, n) not in back],
            tool=n,
            description=f"LangGraph node {n!r}",
        )
        for n in reversed(order)
    ]
    return _Plan(f"LangGraph thread {view.thread_id!r}", tasks)


def _asked(value: Any) -> dict[str, Any]:
    """An interrupt as an approval the widget shows (what was asked)."""
    return {"state": "asked", "args": value, "policy": "LangGraph interrupt()"}


def _result(node: str, row: dict[str, Any]) -> dict[str, Any]:
    return {"node": node, "step": row.get("step"), "writes": row.get("writes")}


class ThreadSession:
    """The Session surface GraphWidget reads, for one LangGraph thread.

    Args:
        view: The thread (made with the compiled graph).
        parent: The thread this one was forked from in the widget, if any.
    """

    blocking_run = False
    breakpoints: list[str] = []  # read-only: never changed
    usage: dict[str, float] = {}  # no Argus budget on a thread
    unsupported_actions = UNSUPPORTED

    def __init__(
        self,
        view: ThreadView,
        parent: ThreadSession | None = None,
        *,
        poll: float = 0.1,
    ) -> None:
        if view.compiled is None:
            raise ValueError(
                "the widget needs the thread's compiled graph: "
                "GraphWidget(saver.thread(thread_id, graph=app))"
            )
        self.view = view
        self.poll = poll
        self._parent = parent
        self._forks = 0
        self._busy = threading.Lock()
        self.plan = _plan_of(view)
        self.id = view.id
        self.name = view.id
        self.goal = self.plan.goal

    # -- what the widget reads -------------------------------------------------

    @property
    def workspace(self) -> Workspace:
        return self.view.saver.ws

    @property
    def info(self) -> SessionInfo:
        try:
            info: SessionInfo = self.view.info
        except KeyError:  # nothing stored yet
            info = SessionInfo(id=self.id, name=self.name, goal=self.goal, created=0,
                               updated=0)  # fmt: skip
        if self._parent is not None:
            info = info.model_copy(update={"parent": self._parent.id})
        return info

    @property
    def running(self) -> bool:
        """Whether this object is resuming the thread (Approve) right now."""
        return self._busy.locked()

    @property
    def status(self) -> str:
        return self.view.status

    @property
    def reason(self) -> str | None:
        waiting = self.view.pending_approvals()
        if waiting:
            nodes = ", ".join(w["node"] for w in waiting)
            return f"waiting for approval: {nodes} (LangGraph interrupt)"
        try:
            reason: str | None = self.view.info.reason
        except KeyError:
            return None
        return reason

    @property
    def records(self) -> dict[str, TaskRecord]:
        """Node -> a record of its latest execution (status, times, error)."""
        g = self.view.graph
        last: dict[str, dict[str, Any]] = {}
        for r in self.view.branch_rows():
            if not r["checkpoint_ns"]:
                last[r["node"]] = r  # rows come in step order: the latest wins
        out: dict[str, TaskRecord] = {}
        for t in self.plan.tasks:
            a = g.nodes[t.id]
            r = last.get(t.id, {})
            status = _MAP.get(a["status"], a["status"])
            done, failed = status == "succeeded" and r, status == "failed"
            asked = _asked(r.get("interrupt")) if status == "awaiting_approval" else {}
            out[t.id] = TaskRecord(
                task_id=t.id,
                status=status,
                attempts=a["runs"],
                result=_result(t.id, r) if done else None,
                error=r.get("error") if failed else None,
                error_type=r.get("error_type") if failed else None,
                started=r.get("started"),
                ended=r.get("ended"),
                approval=asked or None,
                reason=f"interrupt: {r.get('interrupt')!r}" if asked else None,
            )
        return out

    def record(self, task_id: str) -> TaskRecord:
        return self.records[task_id]

    def result(self, task_id: str) -> Any:
        return self.record(task_id).result

    def counts(self) -> dict[str, int]:
        c = Counter(r.status for r in self.records.values())
        return {s: c.get(s, 0) for s in STATUSES}

    def stale(self) -> list[str]:
        return []

    def events(self) -> list[Any]:
        return []  # the detail panel's attempt log: none for a graph node

    def pending_approvals(self) -> dict[str, dict[str, Any]]:
        waiting = self.view.pending_approvals()
        return {w["node"]: {"tool": w["node"], **_asked(w["value"])} for w in waiting}

    def context_breakdown(self, task_id: str) -> None:
        return None

    # -- live updates ------------------------------------------------------------

    def _signature(self) -> tuple[Any, ...]:
        with viewing():
            tup = self.view.saver.get_tuple(self.view.config)  # type: ignore[arg-type]
        if tup is None:
            return (None, 0)
        # Writes land between checkpoints (a node's result, an interrupt).
        return (tup.checkpoint["id"], len(tup.pending_writes or ()))

    def subscribe(self, callback: Callable[[ThreadEvent], None]) -> Callable[[], None]:
        """Calls ``callback`` for every node once the thread's latest checkpoint or
        its pending writes change (polled every ``poll`` seconds, so a run in
        another thread or process shows too). Returns the unsubscribe function."""
        stop = threading.Event()

        def watch() -> None:
            seen = self._signature()
            while not stop.wait(self.poll):
                try:
                    now = self._signature()
                except Exception:  # a store mid-copy: look again next time
                    continue
                if now != seen:
                    seen = now
                    for t in self.plan.tasks:
                        callback(ThreadEvent(t.id))

        threading.Thread(target=watch, name="argus-lg-watch", daemon=True).start()
        return stop.set

    # -- actions -------------------------------------------------------------------

    def approve(self, task_id: str, args: Any = None) -> None:
        """Answers the node's interrupt: ``Command(resume=args)`` (``True`` when
        no value is given) and runs the graph on, here."""
        waiting = [w for w in self.view.pending_approvals() if w["node"] == task_id]
        if not waiting:
            raise ValueError(f"node {task_id!r} is not waiting for an answer")
        value = True if args is None else args
        with self._busy:
            self.view.resume(value, interrupt_id=waiting[0]["interrupt_id"])

    def fork(self, at: str | None = None) -> ThreadSession:
        """Copies the thread into a new one; ``at`` (a node, or a checkpoint id)
        branches the copy at the checkpoint that scheduled the node's latest run."""
        cid = at
        if at is not None and at in self.plan._by_id:
            runs = [r for r in self.view.branch_rows()
                    if r["node"] == at and not r["checkpoint_ns"]]  # fmt: skip
            if not runs:
                raise ValueError(f"node {at!r} has not run in this thread: no "
                                 "checkpoint to fork at")  # fmt: skip
            cid = runs[-1]["checkpoint_id"]
        while True:
            self._forks += 1
            new = f"{self.view.thread_id}-fork{self._forks}"
            try:
                fork = self.view.fork(new, at=cid)
            except ValueError as e:
                if "already exists" in str(e):
                    continue
                raise
            return ThreadSession(fork, parent=self, poll=self.poll)

    def _refuse(self, action: str) -> Any:
        raise ValueError(f"{action}: not on a LangGraph thread; {UNSUPPORTED[action]}")

    def start(self) -> Any:
        return self._refuse("run")

    def step(self) -> Any:
        return self._refuse("step")

    def retry(self, task_id: str) -> None:
        self._refuse("retry")

    def skip(self, task_id: str, reason: str = "") -> None:
        self._refuse("skip")

    def reject(self, task_id: str, reason: str = "") -> None:
        self._refuse("reject")

    def rerun_stale(self) -> Any:
        return self._refuse("rerun_stale")

    def set_breakpoint(self, task_id: str, on: bool = True) -> None:
        self._refuse("toggle_breakpoint")

    def pause(self) -> None:
        self._refuse("pause")
