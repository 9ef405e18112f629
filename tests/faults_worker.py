"""Writers that die by SIGKILL with their last commits still in SQLite's WAL.

``python tests/faults_worker.py state WS N [NAME]``: N transactions on the typed
state NAME (default "tally"; each adds 1 to ``n`` and appends to ``seen``),
prints the last version, then SIGKILLs itself: nothing closed SQLite, so the
WAL still holds the commits and the tests can damage it as a bad copy or a bad
sector would.

``python tests/faults_worker.py create|fork WS``: creates a session ("made"), or
forks session "base" (made first), and is held inside the create's SQLite
transaction: it touches ``inside`` beside WS and waits to be killed.

``python tests/faults_worker.py unclaimed WS``: creates session "made" but finds
its name claimed by another process, and is held while removing the folder
it committed, once its cache.db files are gone (touches ``inside``).

``python tests/faults_worker.py session WS``: runs a session of PLAN to its end,
then SIGKILLs itself (its commits still in the WAL).

``python tests/faults_worker.py state-fork WS``: commits 5 transactions to the
state "tally", then forks it at version 3 as "copy" and is held inside the
fork's create transaction (touches ``inside``, waits to be killed).

``python tests/faults_worker.py delete WS``: runs the graph on thread "t1",
then deletes the thread and is held inside that delete after cache.db is gone
(touches ``inside`` beside WS, waits to be killed).

``python tests/faults_worker.py graph WS``: runs the LangGraph graph of
tests/langgraph_worker.py on ArgusSaver to its end (each node appends
``<node>`` to ``ran.log`` beside WS), prints ``done``, then SIGKILLs itself.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

import argus_lab as al


class Tally(BaseModel):
    n: int = 0
    seen: list[int] = Field(default_factory=list)


PLAN = {
    "goal": "g",
    "tasks": [{"id": f"a{i}", "tool": "add", "args": {"a": i}} for i in range(4)],
}


def hold_inside_create(ws: Path, what: str) -> None:
    """Creates (or forks) a session and stops inside its transaction."""
    from argus_lab.store.checkpoints import SessionStore
    from tests.conftest import BASIC_TOOLS

    w = al.Workspace(ws)
    if what == "fork":
        w.new_session(plan=PLAN, tools=BASIC_TOOLS, name="base").close()
    write = SessionStore._write

    def held(self: SessionStore, *args: object, **kwargs: object) -> None:
        write(self, *args, **kwargs)  # type: ignore[arg-type]
        (ws.parent / "inside").touch()
        threading.Event().wait()  # until SIGKILL

    SessionStore._write = held  # type: ignore[method-assign]
    if what == "fork":
        w.open("base", tools=BASIC_TOOLS).fork(name="base-fork")
    else:
        w.new_session(plan=PLAN, tools=BASIC_TOOLS, name="made")


def ran_log(ws: Path) -> Path:
    """The file each graph node appends its name to (its side effect)."""
    return ws.parent / "ran.log"


def graph_thread(ws: Path) -> tuple[object, object, dict[str, object]]:
    """(saver, compiled app, config) of the graph on thread "t1"."""
    sys.path.insert(0, str(Path(__file__).parent.parent))
    from argus_lab.langgraph import ArgusSaver
    from tests import langgraph_worker as lw

    def effect(name: str) -> None:
        fd = os.open(ran_log(ws), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{name}\n".encode())
        finally:
            os.close(fd)

    saver = ArgusSaver(al.Workspace(ws))
    app = lw.build(on_start=effect).compile(checkpointer=saver)
    return saver, app, {"configurable": {"thread_id": "t1"}}


def main() -> None:
    what, ws = sys.argv[1], Path(sys.argv[2])
    if what == "state":
        name = sys.argv[4] if len(sys.argv) > 4 else "tally"
        st = al.Workspace(ws).state(name, model=Tally)
        for i in range(int(sys.argv[3])):
            with st.transaction() as s:
                s.n += 1
                s.seen.append(i)
        print(st.version, flush=True)
    elif what in ("create", "fork"):
        hold_inside_create(ws, what)
    elif what == "state-fork":
        from argus_lab.store.state_log import StateLog

        st = al.Workspace(ws).state("tally", model=Tally)
        for i in range(5):
            st.update(lambda s, i=i: s.seen.append(i))
        write = StateLog._write

        def held_write(self: StateLog, *args: Any, **kwargs: Any) -> None:
            write(self, *args, **kwargs)
            if self.name == "copy":
                (ws.parent / "inside").touch()
                threading.Event().wait()  # until SIGKILL

        StateLog._write = held_write  # type: ignore[method-assign]
        st.fork(at=3, name="copy")
    elif what == "delete":
        saver, app, cfg = graph_thread(ws)
        app.invoke({"log": [], "total": 0}, cfg)  # type: ignore[attr-defined]
        real = shutil.rmtree

        def held(path: Any, *args: Any, **kwargs: Any) -> None:
            for p in Path(path).glob("cache.db*"):
                p.unlink()
            (ws.parent / "inside").touch()
            threading.Event().wait()  # until SIGKILL
            real(path, *args, **kwargs)

        shutil.rmtree = held  # type: ignore[assignment]
        saver.delete_thread("t1")  # type: ignore[attr-defined]
    elif what == "unclaimed":
        # A create whose name another process claimed first: its committed
        # folder is removed, and the removal is killed once cache.db is gone.
        from argus_lab.store.names import SessionNames
        from tests.conftest import BASIC_TOOLS

        real = shutil.rmtree

        def held_rm(path: Any, *args: Any, **kwargs: Any) -> None:
            found = list(Path(path).glob("cache.db*"))
            if not found:  # not the committed folder
                return real(path, *args, **kwargs)
            for p in found:
                p.unlink()
            (ws.parent / "inside").touch()
            threading.Event().wait()  # until SIGKILL
            real(path, *args, **kwargs)

        SessionNames.claim = lambda self, name, sid: False  # type: ignore[method-assign]
        shutil.rmtree = held_rm  # type: ignore[assignment]
        al.Workspace(ws).new_session(plan=PLAN, tools=BASIC_TOOLS, name="made")
    elif what == "session":
        from tests.conftest import BASIC_TOOLS

        s = al.Workspace(ws).new_session(plan=PLAN, tools=BASIC_TOOLS, name="s")
        print(s.run().status, flush=True)
    else:
        _, app, cfg = graph_thread(ws)
        app.invoke({"log": [], "total": 0}, cfg)  # type: ignore[attr-defined]
        print("done", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
