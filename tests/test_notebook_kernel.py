"""The notebook experience in a real Jupyter kernel, through jupyter_client.

What lives in the kernel is tested here with the messages a front end sees:
the widget's comm state updates on IOPub, button clicks sent as real comm
messages on the shell channel, Ctrl-C as the kernel's interrupt, a restart as
the kernel manager's. Tools wait on gate files the test creates, so every
wait is on a condition (a file, a comm state) with a deadline, never a sleep.
Issues 4, 13 and 15: Pause/Ctrl-C during a cell's blocking ``s.run()``, a
click queued behind it, two views of one session, a restart mid
``%%argus --run`` and the notebook run again from the top, and secrets in
every message the kernel sends.
"""

from __future__ import annotations

import json
import os
import queue
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import DEADLINE

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
SECRET = "sk-ant-kernelattack0123456789abcdefgh"

SETUP = """
import os, pathlib, time
import argus_lab as al
from argus_lab.jupyter import GraphWidget
ROOT = pathlib.Path(os.getcwd())
GATES = ROOT / "gates"
GATES.mkdir(exist_ok=True)

@al.tool(side_effect="write", idempotent=True)
def work(i: int, *, ctx: al.ToolContext) -> dict:
    \"\"\"Says it started, waits for its gate file, writes its ledger line.\"\"\"
    (GATES / f"started-{i}").touch()
    end = time.monotonic() + 60
    while not (GATES / f"go-{i}").exists() and time.monotonic() < end:
        time.sleep(0.01)  # the tool's own wait for the test's go-ahead
    with open(ROOT / "ledger.txt", "a") as f:
        f.write(f"{i} {ctx.idempotency_key}\\n")
    return {"i": i}

def chain(n, first=0):
    return {"tasks": [
        {"id": f"t{i}", "tool": "work", "args": {"i": i},
         **({"deps": [f"t{i - 1}"]} if i > first else {})}
        for i in range(first, first + n)]}

ws = al.Workspace(ROOT / "ws")
%load_ext argus_lab
%config ArgusMagics.workspace = str(ROOT / "ws")
%config ArgusMagics.session_options = {"approvals": ()}
"""

CTRL_C_SEEN = """
import signal
def _seen(sig, frame):
    (GATES / f"sigint-{len(list(GATES.glob('sigint-*')))}").touch()
    raise KeyboardInterrupt
signal.signal(signal.SIGINT, _seen)
"""

ARGUS_CELL = "%%argus chain --run -o s\ntasks:\n" + "".join(
    f"  - id: t{i}\n    tool: work\n    args: {{i: {i}}}\n"
    + (f"    deps: [t{i - 1}]\n" if i else "")
    for i in range(4)
)


class Kernel:
    """A real IPython kernel and every IOPub message it sent."""

    def __init__(self, cwd: Path, env: dict[str, str] | None = None) -> None:
        from jupyter_client.manager import KernelManager

        self.cwd = cwd
        self.km = KernelManager(kernel_name="python3")
        self._env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.km.start_kernel(cwd=str(cwd), env=self._env)
        self.msgs: list[dict[str, Any]] = []
        self._connect()

    def _connect(self) -> None:
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=DEADLINE)

    def restart(self) -> None:
        """Kernel > Restart: a shutdown request to the old kernel, a new one."""
        self.kc.stop_channels()
        self.km.restart_kernel()
        # The new client's message ids may repeat the old kernel's: forget
        # the old messages, or a new cell would match an old reply.
        self.msgs.clear()
        self._connect()

    def pump(self, limit: float = 0.2) -> None:
        """Reads what IOPub holds now (for at most ``limit`` seconds)."""
        end = time.monotonic() + limit
        while time.monotonic() < end:
            try:
                self.msgs.append(self.kc.get_iopub_msg(timeout=0.02))
            except queue.Empty:
                return

    def wait(self, cond: Callable[[], bool], what: str) -> None:
        end = time.monotonic() + DEADLINE
        while not cond():
            if not self.km.is_alive():
                pytest.fail(f"the kernel died while waiting for {what}")
            if time.monotonic() > end:
                pytest.fail(f"timed out after {DEADLINE}s waiting for {what}")
            self.pump()

    def submit(self, code: str) -> str:
        msg_id: str = self.kc.execute(code)
        return msg_id

    def reply(self, msg_id: str) -> dict[str, Any]:
        """Waits for the execute reply of ``msg_id`` (reading IOPub meanwhile)."""
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            try:
                r: dict[str, Any] = self.kc.get_shell_msg(timeout=0.02)
            except queue.Empty:
                self.pump()
                continue
            if r["parent_header"].get("msg_id") == msg_id:
                # IOPub's idle status comes after the cell's last output.
                self.wait(lambda: self._idle(msg_id), "the cell's idle status")
                return r
        pytest.fail(f"no reply to {msg_id} within {DEADLINE}s")

    def _idle(self, msg_id: str) -> bool:
        return any(
            m["msg_type"] == "status"
            and m["parent_header"].get("msg_id") == msg_id
            and m["content"]["execution_state"] == "idle"
            for m in self.msgs
        )

    def run(self, code: str) -> str:
        """Runs a cell that must succeed; returns its text output."""
        msg_id = self.submit(code)
        r = self.reply(msg_id)
        text = self.output(msg_id)
        assert r["content"]["status"] == "ok", text
        return text

    def output(self, msg_id: str) -> str:
        out = []
        for m in self.msgs:
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            c = m["content"]
            if m["msg_type"] == "stream":
                out.append(c["text"])
            elif m["msg_type"] == "error":
                out.append("\n".join(c["traceback"]))
        return "".join(out)

    def widgets(self) -> list[str]:
        """Comm ids of the GraphWidgets opened, oldest first."""
        return [
            m["content"]["comm_id"]
            for m in self.msgs
            if m["msg_type"] == "comm_open"
            and "session_name" in m["content"].get("data", {}).get("state", {})
        ]

    def state(self, comm_id: str) -> dict[str, Any]:
        """The widget's state as a front end has it: every update applied."""
        st: dict[str, Any] = {}
        for m in self.msgs:
            c = m["content"]
            if m["msg_type"] in ("comm_open", "comm_msg") and c.get("comm_id") == (
                comm_id
            ):
                st.update(c.get("data", {}).get("state", {}))
        return st

    def click(self, comm_id: str, **content: Any) -> None:
        """What a button does: a custom comm message to the widget."""
        data = {"method": "custom", "content": content}
        self._comm(comm_id, data)

    def set_trait(self, comm_id: str, **state: Any) -> None:
        """What ``model.set(...); save_changes()`` does in the front end."""
        self._comm(comm_id, {"method": "update", "state": state, "buffer_paths": []})

    def _comm(self, comm_id: str, data: dict[str, Any]) -> None:
        msg = self.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        self.kc.shell_channel.send(msg)

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    k = Kernel(tmp_path, env={"NBATTACK_API_KEY": SECRET})
    try:
        k.run(SETUP)
        yield k
    finally:
        # Open every gate so no tool in the kernel waits out its minute.
        (tmp_path / "gates").mkdir(exist_ok=True)
        for i in range(40):
            (tmp_path / "gates" / f"go-{i}").touch()
        k.close()


def gate(k: Kernel, i: int) -> None:
    (k.cwd / "gates" / f"go-{i}").touch()


def started(k: Kernel, i: int) -> Callable[[], bool]:
    return lambda: (k.cwd / "gates" / f"started-{i}").exists()


def ledger(k: Kernel) -> Counter[str]:
    path = k.cwd / "ledger.txt"
    lines = path.read_text().split() if path.exists() else []
    return Counter(lines[0::2])


def summary(k: Kernel, comm_id: str) -> dict[str, Any]:
    s: dict[str, Any] = k.state(comm_id).get("summary", {})
    return s


def ended(k: Kernel, comm_id: str, status: str) -> Callable[[], bool]:
    def check() -> bool:
        m = summary(k, comm_id)
        return m.get("status") == status and not m.get("live")

    return check


def session_state(k: Kernel, var: str) -> dict[str, Any]:
    code = (
        "import json; print(json.dumps({'status': V.status, 'reason': V.reason, "
        "'running': V.running, 'tasks': {t: r.status for t, r in V.records.items()}}))"
    )
    out = k.run(code.replace("V", var))
    got: dict[str, Any] = json.loads(out)
    return got


# -- Ctrl-C and clicks while a cell blocks on s.run() ----------------------------------


def test_ctrl_c_during_a_blocking_run_pauses_it_and_the_widget_follows(
    kernel: Kernel,
) -> None:
    k = kernel
    k.run("s = ws.new_session(plan=chain(4), tools=[work], name='chain', "
          "approvals=())\ndisplay(GraphWidget(s))")  # fmt: skip
    (w,) = k.widgets()
    gate(k, 0)
    cell = k.submit("s.run()")
    k.wait(started(k, 1), "t1 to start")
    k.wait(lambda: k.state(w).get("cell_running") is True, "the cell-running banner")
    k.km.interrupt_kernel()
    gate(k, 1)  # the attempt in flight finishes and commits; no new one starts
    r = k.reply(cell)
    assert r["content"]["status"] == "error"
    assert r["content"]["ename"] == "KeyboardInterrupt"
    k.wait(ended(k, w, "paused"), "the widget to show the pause")
    assert k.state(w)["cell_running"] is False
    assert summary(k, w)["reason"] == "interrupted by the user"
    got = session_state(k, "s")
    assert got["tasks"] == {
        "t0": "succeeded",
        "t1": "succeeded",
        "t2": "pending",
        "t3": "pending",
    }
    assert not started(k, 2)()
    gate(k, 2)
    gate(k, 3)
    k.run("s.run()")
    k.wait(ended(k, w, "succeeded"), "the widget to show the end")
    assert ledger(k) == dict.fromkeys(["0", "1", "2", "3"], 1)


def test_a_second_ctrl_c_leaves_a_hung_task_and_no_stale_running(
    kernel: Kernel,
) -> None:
    """The first Ctrl-C waits for the attempt in flight; a second one frees
    the cell at once. The widget then shows the run live until that attempt
    ends, and paused after: never 'running' for good."""
    k = kernel
    k.run("h = ws.new_session(plan=chain(2, first=9), tools=[work], name='hang', "
          "approvals=())\ndisplay(GraphWidget(h))")  # fmt: skip
    (w,) = k.widgets()
    # The cell marks each Ctrl-C it receives, so the second is sent only after
    # the first became a pause request (two quick SIGINTs would merge).
    cell = k.submit(CTRL_C_SEEN + "h.run()")
    k.wait(started(k, 9), "t9 to start")
    k.km.interrupt_kernel()
    k.wait(lambda: (k.cwd / "gates" / "sigint-0").exists(), "the first Ctrl-C")
    k.km.interrupt_kernel()
    assert k.reply(cell)["content"]["ename"] == "KeyboardInterrupt"
    assert session_state(k, "h")["running"] is True  # t9 still runs
    gate(k, 9)
    k.wait(ended(k, w, "paused"), "the widget to leave 'running'")
    got = session_state(k, "h")
    assert got["tasks"] == {"t9": "succeeded", "t10": "pending"}
    assert got["running"] is False and not started(k, 10)()


def test_a_pause_click_queued_behind_a_blocking_run_is_answered_honestly(
    kernel: Kernel,
) -> None:
    """A Pause sent (another tab, a keyboard shortcut) while the cell blocks
    on s.run() can only be read when the cell ends: both views showed the
    banner meanwhile, and the answer is 'nothing to pause', not a false
    'pausing' for a finished run."""
    k = kernel
    k.run("s = ws.new_session(plan=chain(3), tools=[work], name='q', "
          "approvals=())\nw1 = GraphWidget(s)\ndisplay(w1)\ndisplay(w1)\n"
          "display(GraphWidget(s))")  # fmt: skip
    w1, w2 = k.widgets()
    gate(k, 0)
    cell = k.submit("s.run()")
    k.wait(started(k, 1), "t1 to start")
    for w in (w1, w2):
        k.wait(lambda w=w: k.state(w).get("cell_running") is True, "both banners")
    k.click(w1, action="pause")
    gate(k, 1)
    gate(k, 2)
    assert k.reply(cell)["content"]["status"] == "ok"
    k.wait(
        lambda: (
            k.state(w1).get("message", {}).get("text")
            == "nothing to pause: no run is going on"
        ),
        "the answer to the queued click",
    )
    for w in (w1, w2):
        k.wait(ended(k, w, "succeeded"), "both views to show the end")
        assert k.state(w)["cell_running"] is False
    assert ledger(k) == dict.fromkeys(["0", "1", "2"], 1)


def test_approve_clicked_twice_and_after_the_end(kernel: Kernel) -> None:
    k = kernel
    k.run(
        "p = ws.new_session(plan=chain(2, first=5), tools=[work], name='ask')\n"
        "display(GraphWidget(p))"
    )  # fmt: skip  (writes ask for approval)
    (w,) = k.widgets()
    k.click(w, action="run")
    k.wait(lambda: "t5" in k.state(w).get("approvals", {}), "t5 to ask")
    gate(k, 5)
    gate(k, 6)
    k.click(w, action="approve", task="t5")
    k.click(w, action="approve", task="t5")
    k.wait(lambda: "t6" in k.state(w).get("approvals", {}), "t6 to ask")
    k.click(w, action="approve", task="t6")
    k.wait(ended(k, w, "succeeded"), "the run to end")
    k.click(w, action="approve", task="t6")
    k.wait(
        lambda: (
            "is succeeded, not waiting for approval"
            in k.state(w).get("message", {}).get("text", "")
        ),
        "the late approval's error",
    )
    assert k.state(w)["message"]["level"] == "error"
    assert ledger(k) == {"5": 1, "6": 1}


# -- a restart mid-run, then the notebook again from the top ---------------------------


def test_restart_mid_argus_run_then_rerun_the_notebook(kernel: Kernel) -> None:
    k = kernel
    gate(k, 0)
    k.run(ARGUS_CELL)
    k.wait(started(k, 1), "t1 to start")
    k.restart()
    assert ledger(k) == {"0": 1}  # t1 was cut short by the restart
    for i in (1, 2, 3):
        gate(k, i)
    k.run(SETUP)
    k.run(ARGUS_CELL)  # the same named cell: the same session, resumed
    (w,) = k.widgets()
    k.wait(ended(k, w, "succeeded"), "the resumed run to end in the widget")
    assert summary(k, w)["done"] == 4
    assert session_state(k, "s")["status"] == "succeeded"
    assert ledger(k) == dict.fromkeys(["0", "1", "2", "3"], 1)


def test_restart_mid_run_of_an_unnamed_cell_then_rerun_resumes_it(
    kernel: Kernel,
) -> None:
    """A cell without a NAME made a new session on each run: after a restart,
    running the notebook again repeated every side effect of the first run."""
    k = kernel
    unnamed = ARGUS_CELL.replace("%%argus chain --run", "%%argus --run")
    gate(k, 0)
    k.run(unnamed)
    k.wait(started(k, 1), "t1 to start")
    k.restart()
    for i in (1, 2, 3):
        gate(k, i)
    k.run(SETUP)
    k.run(unnamed)  # the same cell: the newest session with its plan, resumed
    (w,) = k.widgets()
    k.wait(ended(k, w, "succeeded"), "the resumed run to end in the widget")
    assert ledger(k) == dict.fromkeys(["0", "1", "2", "3"], 1)
    assert k.run("print(len(ws.sessions()))").strip() == "1"
    # --new asks for another run of the same plan: a second session.
    k.run(unnamed.replace("--run -o s", "--new -o s2"))
    assert k.run("print(len(ws.sessions()), s2.id != s.id)").split() == ["2", "True"]


def test_restart_while_a_cell_blocks_on_s_run(kernel: Kernel) -> None:
    """Issue 13's kernel test drives s.start(); a cell blocked in s.run() is
    the other way a restart finds a run: nothing may fail either."""
    k = kernel
    gate(k, 0)
    k.run("s = ws.new_session(plan=chain(4), tools=[work], name='blk', "
          "approvals=())")  # fmt: skip
    k.submit("s.run()")
    k.wait(started(k, 1), "t1 to start")
    k.restart()
    k.run(SETUP + "\ns = ws.open('blk', tools=[work])")
    got = session_state(k, "s")
    # jupyter_client interrupts a busy kernel before its shutdown request: the
    # pause is the Ctrl-C's or the shutdown's, whichever the cell saw first.
    assert any(
        why in got["reason"]
        for why in ("the kernel was asked to shut down", "interrupted by the user")
    ), got
    assert got["status"] == "paused"
    assert got["tasks"]["t0"] == "succeeded"
    assert "failed" not in got["tasks"].values()
    for i in (1, 2, 3):
        gate(k, i)
    k.run("assert s.run().status == 'succeeded'")
    assert ledger(k) == dict.fromkeys(["0", "1", "2", "3"], 1)


# -- a session run by another kernel ---------------------------------------------------


def test_a_widget_of_a_session_another_kernel_runs_follows_its_commits(
    kernel: Kernel,
) -> None:
    """The session opened in a second notebook (kernel B) while kernel A runs
    it: B's widget must not claim 'running' for good, nor mix a stored status
    with the task counts of the moment it opened; it follows A's commits."""
    a = kernel
    b = Kernel(a.cwd)
    try:
        b.run(SETUP)
        gate(a, 0)
        a.run("s = ws.new_session(plan=chain(3), tools=[work], name='two', "
              "approvals=())\ns.start()")  # fmt: skip
        a.wait(started(a, 1), "t1 to start in kernel A")
        b.run("w = %argus open two\ndisplay(w)")
        (w,) = b.widgets()
        m = summary(b, w)
        assert (m["status"], m["done"], m["live"]) == ("running", 1, False)
        assert "being run by process" in m["reason"], m
        assert b.state(w)["status_codes"] == "srp"
        gate(a, 1)  # no cell runs in B: the widget sees A's commits by itself
        b.wait(
            lambda: b.state(w)["status_codes"] == "ssr" and summary(b, w)["done"] == 2,
            "B's widget to show t1 done",
        )
        gate(a, 2)
        a.run("assert s.wait(60).status == 'succeeded'")
        b.wait(ended(b, w, "succeeded"), "B's widget to show the end")
        assert summary(b, w)["done"] == 3 and b.state(w)["status_codes"] == "sss"
        assert "being run by" not in summary(b, w)["reason"]
    finally:
        b.close()


# -- secrets in what the kernel sends --------------------------------------------------


def test_no_secret_in_any_message_the_kernel_sends(kernel: Kernel) -> None:
    """A goal, an ${env.NAME} argument and a failing tool's error all touch
    the secret; no IOPub message (outputs, comm state, detail panel) holds it."""
    k = kernel
    k.run(
        "@al.tool\n"
        "def leak(token: str) -> str:\n"
        "    raise ValueError('bad token ' + token)\n"
        "@al.tool\n"
        "def echo(token: str) -> str:\n"
        "    return token\n"
    )
    body = (
        "%%argus sec --run -o z\n"
        f"goal: ship it with {SECRET}\n"
        "tasks:\n"
        "  - id: e\n    tool: echo\n    args: {token: '${env.NBATTACK_API_KEY}'}\n"
        "  - id: f\n    tool: leak\n    args: {token: '${env.NBATTACK_API_KEY}'}\n"
    )
    k.run(body)
    (w,) = k.widgets()
    k.wait(ended(k, w, "failed"), "the run to fail")
    for task in ("e", "f"):
        k.set_trait(w, selected=task)
        k.wait(lambda t=task: k.state(w).get("detail", {}).get("id") == t,
               f"the detail of {task}")  # fmt: skip
    k.run("z")  # the session's repr and HTML as a cell's result
    k.run("%argus df sec events")
    # The cell's own source (echoed as execute_input) is the user's text.
    sent = [m for m in k.msgs if m["msg_type"] != "execute_input"]
    blob = json.dumps(sent, default=str)
    assert "ship it with" in blob  # the goal did reach the messages...
    assert SECRET not in blob and SECRET[:14] not in blob  # ...but not the key
