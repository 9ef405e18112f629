"""Leaves a payment's call running in this process after its attempt was
abandoned, then stays alive; the test retries from another process.

Run as ``python tests/abandon_worker.py WORKSPACE MODE`` with
``ARGUS_TEST_LEDGER`` naming a file outside the workspace:

- ``timeout``: session "pay" runs task "o1", a ``charge`` (a write that is not
  idempotent) past its timeout: ``run()`` returns with the task in doubt.
- ``fork``: as ``timeout``, but in a fork of session "pay": the parent's
  first charge times out and ends (the task in doubt), the fork (its task
  carried under the parent's key) retries it, and that call runs on.
- ``close``: the charge has no timeout; the session is closed while it runs
  (``shutdown_grace=0``): the attempt is left as its intent (status running).

Either way the call appends a line to the ledger (the payment) and then
blocks reading a line from stdin. The worker closes its session (the lease
is released), prints one JSON line ``{"ready": ...}`` and waits; once the
test writes a line, the call returns, the worker prints ``{"ended": ...}``
and stays alive until its stdin closes. The tests import this module for the
tool and plan (in the test process the call does not block).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import argus_lab as al
from argus_lab.runtime import abandoned

PLAN = {"goal": "pay", "tasks": [{"id": "o1", "tool": "charge", "args": {"n": 7}}]}
TIMEOUT = 0.3
"""The charge's timeout (the worker's call outlives it)."""

_blocking = False
_entered = threading.Event()
_first = threading.Event()
"""Set: a first attempt (``fork`` mode: the parent's) returns."""


def ledger_lines() -> list[str]:
    """Every payment made so far: ``<task> <attempt> <pid>`` per line."""
    p = Path(os.environ["ARGUS_TEST_LEDGER"])
    return p.read_text().splitlines() if p.exists() else []


@al.tool(side_effect="write", timeout=TIMEOUT)
def charge(n: int, *, ctx: al.ToolContext) -> int:
    """Pays once per call (a repeat is a second payment); blocks in the worker."""
    fd = os.open(
        os.environ["ARGUS_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT
    )
    try:
        os.write(fd, f"{ctx.task_id} {ctx.attempt} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    if _blocking and ctx.attempt == 1 and not _first.is_set():
        _first.wait(60)  # fork mode: the parent's call, past its timeout
    elif _blocking:
        _entered.set()
        sys.stdin.readline()  # the gateway answers when the test says so
    return n


def _say(**data: object) -> None:
    print(json.dumps(data), flush=True)


def main() -> None:
    global _blocking
    root, mode = sys.argv[1], sys.argv[2]
    _blocking = True
    ws = al.Workspace(root)
    fork = None
    if mode == "timeout":
        _first.set()
        s = ws.new_session(plan=PLAN, tools=[charge], name="pay", approvals=[])
        s.run()
    elif mode == "fork":
        parent = ws.new_session(plan=PLAN, tools=[charge], name="pay", approvals=[])
        parent.run()  # in doubt: its call waits for _first
        _first.set()
        if not abandoned.wait(parent.id, "o1", 60):
            _say(ready=False, why="the parent's call never ended")
            return
        s = fork = parent.fork()
        s.retry("o1")
        s.run()  # in doubt again: this call runs on, under the parent's key
        parent.close()
    else:
        _first.set()
        charge.timeout = None  # nothing times out: close() abandons it
        s = ws.new_session(
            plan=PLAN, tools=[charge], name="pay", approvals=[], shutdown_grace=0.0
        )
        s.start()
        if not _entered.wait(60):
            _say(ready=False, why="the call never began")
            return
    sid, status = s.id, s.record("o1").status
    s.close()
    call = abandoned.running(sid, "o1")
    _say(
        ready=True,
        pid=os.getpid(),
        session=sid,
        parent=fork.info.parent if fork is not None else None,
        status=status,
        running=call is not None,
        locked=call is not None and call.locked,
        module=al.__file__,
    )
    ended = abandoned.wait(sid, "o1", 120)
    _say(ended=ended)
    sys.stdin.readline()  # alive until the test lets go


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # say so now: the blocked call would keep us alive
        _say(ready=False, why=f"{type(e).__name__}: {e}")
        os._exit(1)
