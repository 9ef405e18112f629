"""How a Session's parts are made and wired (drawn in runtime/__init__.py).

Each part gets, in its constructor, the parts it calls; this is the one place
that knows them all, so session.py stays a facade and a test can assemble the
same parts around a real store without a Session.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from argus_lab.runtime import abandoned
from argus_lab.runtime.abandoned import AbandonedCall
from argus_lab.runtime.actions import Actions
from argus_lab.runtime.attempt import AttemptRunner
from argus_lab.runtime.budget import BudgetChecker
from argus_lab.runtime.driver import RunDriver
from argus_lab.runtime.engine import RunLoop
from argus_lab.runtime.lease import Lease
from argus_lab.runtime.llm_task import LlmTaskRunner
from argus_lab.runtime.loop import LoopThread
from argus_lab.runtime.options import SessionOptions
from argus_lab.runtime.policy import FailurePolicy
from argus_lab.runtime.remember import MemoryFeed, Rememberer
from argus_lab.runtime.settle import Settler
from argus_lab.runtime.shutdown import Closer, track
from argus_lab.runtime.signals import Signals
from argus_lab.runtime.state import SessionState
from argus_lab.runtime.supervisor import Supervisor
from argus_lab.store.checkpoints import Loaded, SessionStore
from argus_lab.tools.registry import Tool

if TYPE_CHECKING:
    from argus_lab.workspace import Workspace

__all__ = ["Parts", "assemble"]


@dataclass(frozen=True)
class Parts:
    """The parts a Session calls directly."""

    state: SessionState
    """What the session knows; the store's only writer."""
    signals: Signals
    """Pause requests and the run loop's wake-up."""
    driver: RunDriver
    """Carries calls to the loop thread; the run loop's step, run and start."""
    attempts: AttemptRunner
    """One attempt of a task."""
    actions: Actions
    """A person's decisions."""
    memories: Rememberer
    """The memory writer thread (flushed when the session closes)."""
    closer: Closer
    """Closes it all (on ``close()`` and when the process shuts down)."""


def assemble(
    workspace: Workspace,
    store: SessionStore,
    loaded: Loaded,
    tools: dict[str, Tool],
    options: SessionOptions,
) -> Parts:
    """Makes a session's parts over ``store``, wired to one another."""
    import time

    state = SessionState(
        store,
        loaded,
        tools=tools,
        options=options,
        lease=Lease(options.lease_ttl, store.origin.where),
        artifacts=workspace.artifacts,
        clock=options.clock or time.time,
    )
    signals = Signals()
    sid = state.info.id
    sessions = workspace.path / "sessions"  # as the tools' ctx.workspace

    def abandoned_call(tid: str) -> AbandonedCall | None:
        rec = state.records.get(tid)  # its key's session: where its lock is
        key_of = rec.key_of if rec is not None else None
        return abandoned.lookup_anywhere(sessions, sid, tid, key_of)

    policy = FailurePolicy(options.backoff, abandoned_call)
    budget = BudgetChecker(state)
    memories = Rememberer(lambda: workspace.memory)
    memory = MemoryFeed(state, memories, options.remember)
    supervisor = Supervisor(state, options.planner)
    settler = Settler(state, policy, supervisor, signals, memory, options)
    llm = LlmTaskRunner(state, budget, options, workspace)
    attempts = AttemptRunner(
        state, settler, signals, budget, llm, options, workspace.path
    )
    runner = RunLoop(state, signals, attempts, supervisor, settler, policy, options)
    actions = Actions(state, settler, signals)
    memory.prepare()
    memory.recover()  # what a crash kept from being remembered
    loop = LoopThread(f"argus-{loaded.meta.name}")
    weak_actions = weakref.ref(actions)

    def call_ended(call: AbandonedCall) -> None:
        # On the thread the call ended on: the session changes on its loop.
        acts = weak_actions()
        if acts is not None and loop.started:
            # RuntimeError: the loop closed meanwhile, nothing to tell
            with contextlib.suppress(RuntimeError):
                loop.call_soon(partial(acts.call_ended, call))

    abandoned.watch(sid, call_ended, owner=actions)

    def close_parts() -> None:
        abandoned.unwatch(sid, call_ended)
        # diskcache keeps one SQLite connection per thread: close the loop
        # thread's own, so SQLite can checkpoint and drop its WAL file.
        loop.stop(state.close)
        attempts.close()
        memories.close()  # the queued memories are written before we go
        state.close()

    closer = Closer(loop, runner, signals, options.shutdown_grace, close_parts)
    track(closer)  # weakly: closed at interpreter exit or SIGTERM
    # The session's writes happen on its loop thread: it takes over the
    # connection this thread made the session with, rather than opening one.
    store.cache.hand_over()  # OneCommitOpenCache (store/_rows.py)
    return Parts(
        state=state,
        signals=signals,
        driver=RunDriver(loop, runner, signals, actions, closer),
        attempts=attempts,
        actions=actions,
        memories=memories,
        closer=closer,
    )
