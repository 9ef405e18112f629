"""Crashes at moments earlier crash tests did not try, and what a resume owes:
memories, paid model replies, an LLM task's writes, a planner's answers, an
artifact that cannot be written.

A crash is ``tests/attack_worker.py`` in a real subprocess that dies by
SIGKILL (held at the moment with a file, never a sleep); the rest of the same
classes (a timeout, per-call keys, a decomposer) run in this process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.runtime import abandoned
from tests import attack_worker as aw
from tests.crash_worker import append_line, read_lines
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent


def killed(what: str, ws: Path, *args: str) -> str:
    """Runs the worker to its SIGKILL; its stdout."""
    p = subprocess.run(
        [sys.executable, aw.__file__, what, str(ws), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    return p.stdout


def held(what: str, ws: Path, *args: str) -> None:
    """Runs the worker until it touches ``inside`` beside ``ws``; SIGKILLs it."""
    p = subprocess.Popen(
        [sys.executable, aw.__file__, what, str(ws), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        wait_until(
            (ws.parent / "inside").exists,
            f"the {what} worker to be held",
            gone=lambda: None if p.poll() is None else f"exit {p.returncode}",
        )
    finally:
        p.kill()
        _, err = p.communicate(timeout=60)
    assert p.returncode == -9, err


@pytest.mark.slow
def test_memories_a_crash_kept_from_being_written_are_written_on_reopen(
    tmp_path: Path,
) -> None:
    # Memories are written by a background thread after the step commits: a
    # SIGKILL in between lost them for good, so the next session's LLM task
    # did not see what an uninterrupted run would have shown it.
    ws_dir = tmp_path / "ws"
    assert killed("remember", ws_dir).split() == ["succeeded"]
    ws = al.Workspace(ws_dir)
    (marker,) = (ws_dir / "sessions").glob("*/remembering.*")  # the dead one's
    with ws.open("mem", tools=aw.MEM_TOOLS, remember=True) as s:
        sid = s.id
        assert s.status == "succeeded"
    assert not list(marker.parent.glob("remembering.*"))  # owed, then written
    hits = ws.memory.search("Fabrica venue", k=5, mode="fts", kind="result")
    assert sorted(str(h.task_id) for h in hits if h.session_id == sid) == [
        "lisbon",
        "porto",
    ]
    # ... each once, leading back to the event that finished its task.
    with ws.open("mem", tools=aw.MEM_TOOLS, remember=True) as s:
        done = {e.seq: e.task_id for e in s.events() if e.kind == "task_succeeded"}
    assert {done[h.seq or 0] for h in hits} == {"lisbon", "porto"}
    assert len(ws.memory.search("Fabrica venue", k=10, mode="fts")) == 2


@pytest.mark.slow
def test_a_session_whose_memories_were_all_written_opens_without_checking(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check reads the memory's ids: only after a process that owed some
    # died, never on every open (argus serve opens a session per request).
    from argus_lab.store.memory import Memory

    s = ws.new_session(plan=aw.MEM_PLAN, tools=aw.MEM_TOOLS, name="m", remember=True)
    assert s.run().status == "succeeded"
    s.close()

    asked: list[str] = []
    monkeypatch.setattr(Memory, "_ids", lambda self, where: asked.append(where))
    for _ in range(2):
        with ws.open("m", tools=aw.MEM_TOOLS, remember=True) as again:
            assert again.status == "succeeded"
    assert asked == []
    assert not list((ws.path / "sessions").glob("*/remembering.*"))


@pytest.mark.slow
def test_a_model_reply_paid_before_a_crash_is_counted_once_on_resume(
    tmp_path: Path,
) -> None:
    # The reply is recorded (so a resume never pays for it twice) before the
    # step counting its tokens and cost commits: a SIGKILL in between made the
    # resume serve it from the cache at no cost, so usage and budgets never
    # saw a call that was paid for.
    ws_dir = tmp_path / "ws"
    held("paid", ws_dir)
    ws = al.Workspace(ws_dir)
    model = aw.llm_model()
    with ws.open("llm", models=model) as s:
        assert s.usage["tokens"] == 0  # nothing was committed
        assert s.run().status == "succeeded"
        assert model.requests == []  # not paid again
        tokens = s.usage["tokens"]
        assert tokens > 0
        assert s.record("explain").tokens == tokens
        (call,) = [e for e in s.events() if e.kind == "llm_call"]
        assert call.input_tokens + call.output_tokens == tokens
    with ws.open("llm", models=model) as s:  # counted once, for good
        assert s.usage["tokens"] == tokens
        f = s.fork(at="explain")
        assert f.run().status == "succeeded"
        assert f.usage["tokens"] == 0  # a replay in a fork costs nothing
        f.close()


@pytest.mark.slow
def test_an_llm_task_whose_write_tool_was_redefined_as_safe_is_still_in_doubt(
    tmp_path: Path,
) -> None:
    # Recovery judged an LLM task by the tools handed in after the crash: with
    # its model's non-idempotent write redefined as idempotent, the task was
    # rerun, the model's turn replayed, and the write made a second time.
    ws_dir = tmp_path / "ws"
    held("llm-write", ws_dir)
    assert len(read_lines(aw.sent_log(ws_dir))) == 1

    @al.tool(side_effect="write", idempotent=True)
    def send(to: str, *, ctx: al.ToolContext) -> str:
        """Sends the news (now said to be idempotent)."""
        append_line(aw.sent_log(ctx.workspace), f"{to} {ctx.idempotency_key}")
        return "sent"

    ws = al.Workspace(ws_dir)
    with ws.open("send", tools=[send], models=aw.send_model(), approvals=()) as s:
        res = s.run()
        assert s.record("think").status == "in_doubt", res
        assert "not idempotent when that attempt started" in (
            s.record("think").reason or ""
        )
    assert len(read_lines(aw.sent_log(ws_dir))) == 1  # sent once


@pytest.mark.slow
def test_a_replan_answered_before_a_crash_is_not_asked_again(tmp_path: Path) -> None:
    # The replanner's model calls went around the session's replay cache: a
    # crash before the patch committed asked (and paid) the model again on
    # resume, and a model that answers differently changed the plan.
    from argus_lab.llm.testing import FunctionModel
    from tests.conftest import BASIC_TOOLS

    ws_dir = tmp_path / "ws"
    held("replan", ws_dir)
    model = FunctionModel(aw.replacement)
    planner = al.LLMPlanner(model)
    ws = al.Workspace(ws_dir)
    with ws.open("rp", tools=BASIC_TOOLS, planner=planner) as s:
        assert s.run().status == "succeeded"
        assert [t.id for t in s.plan.tasks] == ["a", "b2", "c2"]
        assert s.result("c2") == 11
        assert model.requests == []  # served from what was recorded
        calls = [e for e in s.events() if e.kind == "llm_call"]
        # Paid before the crash: counted once, whether its count was committed
        # before the crash (then the resumed replan's reply is "cached") or
        # not (then counted on resume).
        assert {c.purpose for c in calls} == {"plan"}
        (paid,) = [c for c in calls if not c.cached]
        assert s.usage["tokens"] == paid.input_tokens + paid.output_tokens


def test_a_decomposer_inside_a_sessions_recording_is_asked_once() -> None:
    # The same rule for an HTN decomposer's model: the supervisor expands and
    # repairs inside recording(state), so a resumed or forked expansion is
    # answered from the session's cache.
    from typing import Any

    from argus_lab.llm.recording import COUNTED, recording
    from tests.test_hybrid import domain

    def reply(req: Any) -> Any:
        from argus_lab.llm.testing import tool_call

        return tool_call(
            "submit_subtasks", {"subtasks": [{"task": "search", "args": ["x"]}]}
        )

    class Store(dict[str, dict[str, Any]]):
        def get_replay(self, key: str) -> dict[str, Any] | None:
            return self.get(key)

        def put_replay(self, key: str, data: dict[str, Any]) -> None:
            self[key] = data

    dom, llm = domain(reply)
    model = llm.model
    store = Store()
    plans = []
    for _ in range(2):
        with recording(store) as paid:
            plans.append(al.HTNPlanner(dom).plan("study", "agents"))
        for key, _reply in paid:  # what the session does once it committed them
            store[COUNTED + key] = {}
    assert plans[0].to_dict() == plans[1].to_dict()
    assert len(model.requests) == 1  # type: ignore[attr-defined]
    assert [c["cached"] for c in llm.calls] == [False, True]
    al.HTNPlanner(dom).plan("study", "agents")  # outside: the model itself
    assert len(model.requests) == 2  # type: ignore[attr-defined]


@pytest.mark.slow
def test_an_artifact_that_cannot_be_written_stops_the_run_and_says_why(
    tmp_path: Path,
) -> None:
    # A file size limit (or a read-only folder, no permission) made the
    # artifact write raise a bare OSError out of run(); a StorageError raised
    # there was taken for the result's fault and failed the task for good
    # although its write had taken effect.
    ws_dir = tmp_path / "ws"
    p = subprocess.run(
        [sys.executable, aw.__file__, "fsize", str(ws_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    kind, _, message = p.stdout.strip().partition(": ")
    assert kind == "StorageError", p.stdout
    assert "could not write a 300,000-byte artifact for task 'b0'" in message
    assert "File too large" in message and "Nothing committed was lost" in message
    ws = al.Workspace(ws_dir)
    with ws.open("big", tools=[aw.bulk], approvals=()) as s:
        res = s.run()
        assert s.record("b0").status == "in_doubt", res  # it had run: a person checks
        s.skip("b0", "it took effect")
        assert s.run().status == "succeeded"
    assert len(read_lines(tmp_path / "bulk.log")) == 2  # each write once


def test_each_tool_call_of_an_llm_task_has_its_own_idempotency_key(
    tmp_path: Path,
) -> None:
    # Every call an LLM task's model made got the task's own key: a remote
    # that deduplicates by key (what the key is for) took the second, different
    # call for a repeat of the first and dropped it.
    from argus_lab.llm.testing import FunctionModel, tool_call

    log = tmp_path / "stamped.log"

    @al.tool(side_effect="write", idempotent=True)
    def stamp(to: str, *, ctx: al.ToolContext) -> str:
        """Takes effect once per idempotency key."""
        if ctx.idempotency_key not in {ln.split()[0] for ln in read_lines(log)}:
            append_line(log, f"{ctx.idempotency_key} {to}")
        return "stamped"

    def answer(req: Any) -> Any:
        if not any(m.role == "assistant" for m in req.messages):
            return [
                tool_call("stamp", {"to": "alice"}, id="toolu_a"),
                tool_call("stamp", {"to": "bob"}, id="toolu_b"),
            ]
        return "done"

    plan = {"tasks": [{"id": "t", "kind": "llm", "llm_tools": ["stamp"]}]}
    ws = al.Workspace(tmp_path / "ws")
    with ws.new_session(
        plan=plan, tools=[stamp], name="k", models=FunctionModel(answer), approvals=()
    ) as s:
        assert s.run().status == "succeeded"
        key = s.record("t").idempotency_key
    lines = [ln.split() for ln in read_lines(log)]
    assert [to for _, to in lines] == ["alice", "bob"]  # both took effect
    # stable across a replay of the model's turn: the task's key and the call's
    assert [k for k, _ in lines] == [f"{key}:toolu_a", f"{key}:toolu_b"]


def test_an_llm_task_timing_out_during_its_models_write_is_in_doubt(
    tmp_path: Path,
) -> None:
    # The task's timeout cancelled the model loop while a write that is not
    # idempotent ran; the LLM task (a tool without side effects) was retried,
    # its turn replayed, and the write made again: 4 times in all.
    import threading

    from argus_lab.llm.testing import FunctionModel, tool_call

    sent: list[str] = []
    release = threading.Event()

    @al.tool(side_effect="write", idempotent=False)
    def send(to: str) -> str:
        """Sends (not idempotent); slower than the task's timeout."""
        sent.append(to)
        release.wait(60)
        return "sent"

    def answer(req: Any) -> Any:
        if not any(m.role == "assistant" for m in req.messages):
            return tool_call("send", {"to": "all"}, id="toolu_1")
        return "done"

    plan = {"tasks": [{"id": "t", "kind": "llm", "llm_tools": ["send"]}]}
    plan["tasks"][0]["timeout"] = 0.2
    ws = al.Workspace(tmp_path / "ws")
    s = ws.new_session(
        plan=plan, tools=[send], name="tmo", models=FunctionModel(answer), approvals=()
    )
    try:
        res = s.run()
        assert s.record("t").status == "in_doubt", res
        assert "'send'" in (s.record("t").error or "")
        assert sent == ["all"]
        # The model's call still runs on its thread: a retry would send again
        # beside it (replayed turn, same tool_use), so it is refused until then.
        with pytest.raises(al.ArgusError, match="still running in this process"):
            s.retry("t")
        release.set()
        assert abandoned.wait(s.id, "t", 30)
        s.retry("t")  # the call ended: the person may retry
    finally:
        release.set()
        s.close()
    assert sent == ["all"]


def test_a_work_folder_that_cannot_be_made_stops_the_run_and_says_why(
    tmp_path: Path,
) -> None:
    # A file where the tools' work folder goes (or a folder this process may
    # not write) raised a raw NotADirectoryError / PermissionError out of
    # run(), and left the task marked running in the live session: after the
    # folder was fixed, run() found "nothing can run now" until a reopen.
    calls = tmp_path / "calls.log"

    @al.tool
    def uses_folder(*, ctx: al.ToolContext) -> str:
        append_line(calls, ctx.task_id)
        return ctx.workdir.name

    ws = al.Workspace(tmp_path / "ws")
    plan = al.Plan(goal="g", tasks=[al.Task(id="a", tool="uses_folder")])
    s = ws.new_session(plan=plan, tools=[uses_folder], name="folder")
    blocker = ws.path / "files"
    blocker.write_text("in the way")
    with pytest.raises(al.StorageError) as err:
        s.run()
    assert f"cannot make the tools' work folder {blocker}" in str(err.value)
    assert "nothing was started" in str(err.value)
    assert s.record("a").status == "pending" and not calls.exists()
    blocker.unlink()
    assert s.run().status == "succeeded"  # the same live session goes on
    assert read_lines(calls) == ["a"]
    s.close()
