"""A mixed session that tests/test_chaos.py SIGKILLs again and again.

Run as ``python tests/chaos_worker.py WORKSPACE``: opens (or creates) session
"chaos" and drives it to its end the way a person would: a write waiting for
approval is approved; a task in doubt is skipped if ``effects.log`` shows its
effect happened, else retried. Exit 0 when the session succeeded, 1 when it
stopped otherwise (its status printed). The test imports this module for the
same tools and plan.

Every side effect is a line of ``effects.log`` (beside WORKSPACE's sessions),
``<kind> <idempotency key> <task>``, written with one fsynced write:

- ``stamp`` / ``astamp`` (sync / async idempotent writes): once per key.
- ``pay`` (sync, needs approval) / ``apay`` (async): writes that are *not*
  idempotent, a line per call.
- ``think*``: LLM tasks (a FunctionModel) whose model calls ``apay`` once.
- ``flaky`` (no side effect): a transient error on its first two calls per key
  (retried), counted in ``flaky.log``.

``remember=True``: every result is remembered (runtime/remember.py).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path
from typing import Any

import argus_lab as al
from argus_lab.llm import ModelRequest
from argus_lab.llm.testing import FunctionModel, tool_call

try:  # imported as tests.<worker>, or run as a script with tests/ on sys.path
    from tests.crash_worker import append_line, read_lines
except ImportError:
    from crash_worker import append_line, read_lines  # type: ignore[no-redef]

_lock = threading.Lock()


def effects(ws: Path) -> Path:
    return ws / "effects.log"


def _once(kind: str, task: str, ctx: al.ToolContext) -> dict[str, Any]:
    log = effects(ctx.workspace)
    with _lock:
        keys = {ln.split(" ")[1] for ln in read_lines(log)}
        if ctx.idempotency_key not in keys:
            append_line(log, f"{kind} {ctx.idempotency_key} {task}")
    return {"task": task, "key": ctx.idempotency_key}


@al.tool(side_effect="write", idempotent=True)
def stamp(task: str, *, ctx: al.ToolContext) -> dict[str, Any]:
    """An idempotent write (sync)."""
    return _once("stamp", task, ctx)


@al.tool(side_effect="write", idempotent=True)
async def astamp(task: str, *, ctx: al.ToolContext) -> dict[str, Any]:
    """An idempotent write (async)."""
    await asyncio.sleep(0.002)
    return _once("astamp", task, ctx)


HOLD_PAY = False
"""``--hold-pay``: ``pay`` stops after its effect, for the test to kill the
worker there (the write is then in doubt for certain)."""


@al.tool(side_effect="write", idempotent=False)
def pay(task: str, *, ctx: al.ToolContext) -> dict[str, Any]:
    """A write that is not idempotent (sync; needs approval)."""
    append_line(effects(ctx.workspace), f"pay {ctx.idempotency_key} {task}")
    if HOLD_PAY:
        threading.Event().wait()  # until the test's SIGKILL
    return {"paid": task}


@al.tool(side_effect="write", idempotent=False)
async def apay(task: str, *, ctx: al.ToolContext) -> dict[str, Any]:
    """A write that is not idempotent (async)."""
    await asyncio.sleep(0.002)
    append_line(effects(ctx.workspace), f"apay {ctx.idempotency_key} {task}")
    return {"paid": task}


@al.tool(retries=3)
def flaky(task: str, *, ctx: al.ToolContext) -> str:
    """Fails twice per key with a transient error, then answers."""
    log = ctx.workspace / "flaky.log"
    append_line(log, f"{ctx.idempotency_key} {task}")
    if read_lines(log).count(f"{ctx.idempotency_key} {task}") <= 2:
        raise al.TransientError(f"{task} is busy")
    return f"{task} done"


TOOLS = [stamp, astamp, pay, apay, flaky]
N = 5


def chaos_plan() -> dict[str, Any]:
    tasks: list[dict[str, Any]] = []
    for i in range(N):
        tasks.append({"id": f"s{i}", "tool": "stamp", "args": {"task": f"s{i}"}})
        tasks.append({"id": f"as{i}", "tool": "astamp", "args": {"task": f"as{i}"}})
        tasks.append(
            {"id": f"f{i}", "tool": "flaky", "args": {"task": f"f{i}"}, "retries": 3}
        )
        tasks.append(
            {"id": f"p{i}", "tool": "pay", "args": {"task": f"p{i}"}, "deps": [f"s{i}"]}
        )
        tasks.append(
            {
                "id": f"ap{i}",
                "tool": "apay",
                "args": {"task": f"ap{i}"},
                "deps": [f"as{i}", f"f{i}"],
            }
        )
        tasks.append(
            {
                "id": f"think{i}",
                "kind": "llm",
                "description": f"Pay for think{i}, then say done.",
                "llm_tools": ["apay"],
                "deps": [f"s{i}"],
            }
        )
        tasks.append(
            {
                "id": f"t{i}",
                "tool": "stamp",
                "args": {"task": f"t{i}"},
                "deps": [f"p{i}", f"ap{i}", f"think{i}"],
            }
        )
    return {"goal": "chaos", "tasks": tasks}


def answer(req: ModelRequest) -> Any:
    """Calls apay once (the task named in the prompt), then answers."""
    if not any(m.role == "assistant" for m in req.messages):
        tid = next(f"think{i}" for i in range(N) if f"think{i}" in req.messages[0].text)
        return tool_call("apay", {"task": tid}, id=f"toolu_{tid}")
    return "done"


OPTIONS: dict[str, Any] = {
    "approvals": [al.ApprovalPolicy("ask", tools="pay")],
    "remember": True,
    "backoff": (0.001, 0.005),
    "concurrency": 4,
}


def model() -> FunctionModel:
    return FunctionModel(answer, name="chaos")


def open_or_create(ws: al.Workspace) -> al.Session:
    try:
        return ws.open("chaos", tools=TOOLS, models=model(), **OPTIONS)
    except KeyError:
        return ws.new_session(
            plan=chaos_plan(), tools=TOOLS, name="chaos", models=model(), **OPTIONS
        )


def took_effect(ws: Path, key: str) -> bool:
    """Whether effects.log has a call made with ``key`` (an LLM task's calls
    carry ``<key>:<tool_use id>``)."""
    return any(
        k == key or k.startswith(key + ":")
        for k in (ln.split(" ")[1] for ln in read_lines(effects(ws)))
    )


def drive(s: al.Session, ws: Path) -> al.RunResult:
    """Runs to the end, deciding approvals and doubts as a person would."""
    while True:
        res = s.run()
        if res.status == "succeeded":
            return res
        moved = False
        for tid, rec in s.records.items():
            if rec.status == "awaiting_approval":
                s.approve(tid)
                moved = True
            elif rec.status == "in_doubt":
                key = rec.idempotency_key or ""
                if took_effect(ws, key):
                    s.skip(tid, "it took effect")
                else:
                    s.retry(tid)
                moved = True
        if not moved:
            return res


def main() -> int:
    global HOLD_PAY
    ws = Path(sys.argv[1])
    HOLD_PAY = "--hold-pay" in sys.argv[2:]
    s = open_or_create(al.Workspace(ws))
    append_line(ws / "opened.log", str(os.getpid()))
    try:
        res = drive(s, ws)
    finally:
        s.close()
    print(res, flush=True)
    return 0 if res.status == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
