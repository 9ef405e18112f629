"""Runners that tests/test_faults_resume.py kills at moments no other test tried.

``python tests/attack_worker.py remember WS``: runs session "mem" (two tasks
whose results are remembered, ``remember=True``) to its end while the memory
writer thread is held before its first LanceDB write; prints the run's status,
then SIGKILLs itself: every step is committed, no memory was written.

``python tests/attack_worker.py paid WS``: runs session "llm" (one LLM task,
a FunctionModel) and is held right after the model's reply was recorded in the
replay cache, before the step that counts its tokens commits (touches
``inside`` beside WS, waits to be killed).

``python tests/attack_worker.py llm-write WS``: runs session "send", whose LLM
task has its model call ``send`` (a write that is not idempotent); ``send``
appends to ``sent.log`` beside WS, touches ``inside`` and waits to be killed.

``python tests/attack_worker.py replan WS``: runs session "rp", whose task "b"
fails for good and is replanned by an LLMPlanner; held once the planner's
model answered, before the patch commits (touches ``inside``).

``python tests/attack_worker.py fsize WS``: runs session "big" under a file
size limit (RLIMIT_FSIZE, SIGXFSZ ignored) that the session's small files fit
in but not the artifact of ``bulk`` (a write that is not idempotent; it logs
each call to ``bulk.log`` beside WS); prints the error ``run()`` raised as
``<type>: <message>`` and exits 0.

``python tests/attack_worker.py pay WS [idempotent]``: runs session "pay", a
chain p0 -> p1 -> p2 of ``pay`` (a write, not idempotent; or ``stamp``, an
idempotent one); each call appends its task and key to ``pay.log`` beside WS,
and p1's call then touches ``inside`` and waits to be killed.

The tests import this module for the same tools and plans.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import argus_lab as al


@al.tool
def survey(city: str) -> dict[str, Any]:
    """Surveys venues in a city (no side effect)."""
    return {"city": city, "best_venue": f"Fabrica {city}", "capacity": 300}


MEM_TOOLS = [survey]
MEM_PLAN = {
    "goal": "find a venue",
    "tasks": [
        {"id": "lisbon", "tool": "survey", "args": {"city": "Lisbon"}},
        {"id": "porto", "tool": "survey", "args": {"city": "Porto"}},
    ],
}


def remember(ws: Path) -> None:
    """Runs "mem" to its end with the memory writer held, then dies."""
    from argus_lab.store import memory

    def held(*args: Any, **kwargs: Any) -> None:
        threading.Event().wait()  # until SIGKILL

    memory.remember_result = held  # type: ignore[assignment]
    s = al.Workspace(ws).new_session(
        plan=MEM_PLAN, tools=MEM_TOOLS, name="mem", remember=True
    )
    print(s.run().status, flush=True)


LLM_PLAN = {
    "goal": "explain",
    "tasks": [{"id": "explain", "kind": "llm", "description": "Explain Argus."}],
}


def llm_model() -> Any:
    """A model that answers at once (its tokens estimated from the text)."""
    from argus_lab.llm.testing import FunctionModel

    return FunctionModel(lambda req: "A hundred-eyed giant.", name="giant")


def paid(ws: Path) -> None:
    """Runs "llm" and stops between recording the reply and counting it."""
    from argus_lab.store.checkpoints import SessionStore

    put = SessionStore.put_replay

    def held(self: SessionStore, key: str, data: dict[str, Any]) -> None:
        put(self, key, data)
        if key.startswith("model:"):
            (ws.parent / "inside").touch()
            threading.Event().wait()  # until SIGKILL

    SessionStore.put_replay = held  # type: ignore[method-assign]
    s = al.Workspace(ws).new_session(plan=LLM_PLAN, name="llm", models=llm_model())
    s.run()


SEND_PLAN = {
    "goal": "tell everyone",
    "tasks": [
        {
            "id": "think",
            "kind": "llm",
            "description": "Send the news, then say done.",
            "llm_tools": ["send"],
        }
    ],
}


def send_model() -> Any:
    """Calls ``send`` once, then answers."""
    from argus_lab.llm.testing import FunctionModel, tool_call

    def answer(req: Any) -> Any:
        if not any(m.role == "assistant" for m in req.messages):
            return tool_call("send", {"to": "all"}, id="toolu_send")
        return "done"

    return FunctionModel(answer, name="sender")


def sent_log(ws: Path) -> Path:
    return ws.parent / "sent.log"


@al.tool(side_effect="write", idempotent=False)
def send(to: str, *, ctx: al.ToolContext) -> str:
    """Sends the news (not idempotent), then is held until killed."""
    from tests.crash_worker import append_line

    append_line(sent_log(ctx.workspace), f"{to} {ctx.idempotency_key}")
    (ctx.workspace.parent / "inside").touch()
    threading.Event().wait()  # until SIGKILL
    return "sent"


RP_PLAN = {
    "goal": "g",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1}},
        {
            "id": "b",
            "tool": "boom",
            "args": {"message": "venue closed"},
            "deps": ["a"],
            "on_failure": "replan",
        },
        {"id": "c", "tool": "echo", "args": {"value": "${b.result}"}},
    ],
}


def replacement(req: Any) -> Any:
    """The replanner's answer: b2 and c2 instead of b and c."""
    from argus_lab.llm.testing import tool_call

    return tool_call(
        "submit_plan",
        {
            "goal": "ignored",
            "tasks": [
                {"id": "b2", "tool": "add", "args": {"a": "${a.result.sum}", "b": 9}},
                {"id": "c2", "tool": "echo", "args": {"value": "${b2.result.sum}"}},
            ],
        },
    )


def replan(ws: Path) -> None:
    """Runs "rp" and stops between the replanner's answer and its patch."""
    from argus_lab.llm.testing import FunctionModel
    from argus_lab.runtime.supervisor import Supervisor
    from tests.conftest import BASIC_TOOLS

    def held(self: Supervisor, *args: Any, **kwargs: Any) -> None:
        (ws.parent / "inside").touch()
        threading.Event().wait()  # until SIGKILL

    Supervisor._apply_patch = held  # type: ignore[method-assign]
    planner = al.LLMPlanner(FunctionModel(replacement))
    s = al.Workspace(ws).new_session(
        plan=RP_PLAN, tools=BASIC_TOOLS, name="rp", planner=planner
    )
    s.run()


@al.tool(side_effect="write", idempotent=False)
def bulk(n: int, *, ctx: al.ToolContext) -> bytes:
    """Makes a big file elsewhere (logged), and returns its bytes."""
    from tests.crash_worker import append_line

    append_line(ctx.workspace.parent / "bulk.log", f"{ctx.idempotency_key} {n}")
    return b"%d" % n * 300_000


BIG_PLAN = {
    "goal": "g",
    "tasks": [{"id": f"b{i}", "tool": "bulk", "args": {"n": i}} for i in range(2)],
}


def fsize(ws: Path) -> None:
    """Runs "big" until its artifact exceeds the file size limit."""
    import resource

    s = al.Workspace(ws).new_session(
        plan=BIG_PLAN, tools=[bulk], name="big", approvals=(), concurrency=1
    )
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
    try:
        s.run()
    except Exception as e:
        print(f"{type(e).__name__}: {e}", flush=True)
    s.close()
    sys.exit(0)


def pay_log(ws: Path) -> Path:
    """Where ``pay`` and ``stamp`` log their calls (beside the workspace)."""
    return ws.parent / "pay.log"


def _paid(task: str, ctx: al.ToolContext) -> str:
    from tests.crash_worker import append_line

    append_line(pay_log(ctx.workspace), f"{task} {ctx.idempotency_key}")
    if task == "p1" and os.environ.get("ARGUS_HOLD_P1"):
        (ctx.workspace.parent / "inside").touch()
        threading.Event().wait()  # until SIGKILL
    return f"paid {task}"


@al.tool(side_effect="write", idempotent=False)
def pay(task: str, *, ctx: al.ToolContext) -> str:
    """Pays for a task (logged; not idempotent)."""
    return _paid(task, ctx)


@al.tool(side_effect="write", idempotent=True)
def stamp(task: str, *, ctx: al.ToolContext) -> str:
    """Stamps a task (logged; idempotent by its key)."""
    return _paid(task, ctx)


def pay_plan(tool: str) -> dict[str, Any]:
    """The chain p0 -> p1 -> p2 of ``tool``."""
    return {
        "goal": "pay",
        "tasks": [
            {"id": f"p{i}", "tool": tool, "args": {"task": f"p{i}"}}
            | ({"deps": [f"p{i - 1}"]} if i else {})
            for i in range(3)
        ],
    }


def main() -> None:
    what, ws = sys.argv[1], Path(sys.argv[2])
    if what == "remember":
        remember(ws)
    elif what == "paid":
        paid(ws)
    elif what == "fsize":
        fsize(ws)
    elif what == "replan":
        replan(ws)
    elif what == "pay":
        os.environ["ARGUS_HOLD_P1"] = "1"
        tool = stamp if sys.argv[3:] == ["idempotent"] else pay
        s = al.Workspace(ws).new_session(
            plan=pay_plan(tool.name), tools=[tool], name="pay", approvals=()
        )
        s.run()
    elif what == "llm-write":
        s = al.Workspace(ws).new_session(
            plan=SEND_PLAN,
            tools=[send],
            name="send",
            models=send_model(),
            approvals=(),
        )
        s.run()
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
