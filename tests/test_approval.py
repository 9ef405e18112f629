"""Approval policies: ask, approve (with edited args), reject, and restarts."""

from __future__ import annotations

import threading

import pytest

import argus_lab as al
from tests.conftest import BASIC_TOOLS

SENT: list[dict[str, object]] = []


@al.tool(side_effect="write", idempotent=True)
def send(to: str, amount: int = 1) -> dict[str, object]:
    """Sends money (a write: asks by default)."""
    SENT.append({"to": to, "amount": amount})
    return {"to": to, "amount": amount}


PLAN = {
    "goal": "pay",
    "tasks": [
        {"id": "pay", "tool": "send", "args": {"to": "alice", "amount": 5}},
        {"id": "receipt", "tool": "echo", "args": {"value": "${pay.result.amount}"}},
        {"id": "side", "tool": "add", "args": {"a": 1}},
        {"id": "side2", "tool": "add", "args": {"a": "${side.result.sum}"}},
    ],
}
TOOLS = [send, *BASIC_TOOLS]


@pytest.fixture(autouse=True)
def _clear() -> None:
    SENT.clear()


def test_write_waits_while_independent_branch_finishes(ws: al.Workspace) -> None:
    s = ws.new_session(plan=PLAN, tools=TOOLS, name="a")
    res = s.run()
    assert res.status == "paused"
    assert "waiting for approval: task 'pay' (tool 'send')" in (res.reason or "")
    assert s.record("side2").status == "succeeded"  # the rest of the DAG went on
    assert s.record("pay").status == "awaiting_approval" and SENT == []
    asked = s.pending_approvals()["pay"]
    assert asked["args"] == {"to": "alice", "amount": 5}
    assert asked["tool"] == "send" and "side_effect=write" in asked["policy"]
    ev = next(e for e in s.events() if e.kind == "approval_requested")
    assert ev.task_id == "pay" and ev.args == {"to": "alice", "amount": 5}


def test_approve_with_edited_args_runs_with_them(ws: al.Workspace) -> None:
    s = ws.new_session(plan=PLAN, tools=TOOLS, name="b")
    s.run()
    with pytest.raises(al.ArgusError, match="amount"):
        s.approve("pay", {"to": "alice", "amount": "lots"})  # checked now
    assert s.record("pay").status == "awaiting_approval"
    s.approve("pay", {"to": "bob", "amount": 3}, by="carol")
    assert s.run().status == "succeeded"
    assert SENT == [{"to": "bob", "amount": 3}]
    assert s.result("receipt") == 3
    ev = next(e for e in s.events() if e.kind == "approval_granted")
    assert ev.details() == {
        "by": "carol",
        "args": {"to": "alice", "amount": 5},
        "edited_args": {"to": "bob", "amount": 3},
    }
    rec = s.record("pay")
    assert rec.approval is not None and rec.approval["state"] == "approved"
    assert rec.approval["by"] == "carol" and rec.approval["at"] > 0


def test_reject_fails_the_task_and_blocks_descendants(ws: al.Workspace) -> None:
    s = ws.new_session(plan=PLAN, tools=TOOLS, name="c")
    s.run()
    s.reject("pay", "not this month", by="dave")
    assert s.record("pay").status == "failed"
    assert s.record("pay").error == "rejected by dave: not this month"
    assert s.record("receipt").status == "blocked"
    res = s.run()
    assert res.status == "failed" and SENT == []
    kinds = [e.kind for e in s.events()]
    assert kinds.index("approval_rejected") < kinds.index("task_failed")
    with pytest.raises(al.ArgusError, match="not waiting for approval"):
        s.approve("pay")


def test_pending_approval_survives_a_restart(ws: al.Workspace) -> None:
    s = ws.new_session(plan=PLAN, tools=TOOLS, name="d")
    s.run()
    s.close()
    with ws.open("d", tools=TOOLS) as again:
        assert again.record("pay").status == "awaiting_approval"
        assert again.run().status == "paused"  # still asks, nothing sent
        again.approve("pay")
    with ws.open("d", tools=TOOLS) as third:
        assert third.record("pay").approval["state"] == "approved"  # type: ignore[index]
        assert third.run().status == "succeeded"
    assert SENT == [{"to": "alice", "amount": 5}]


def test_policies_by_glob_and_argument_predicate(ws: al.Workspace) -> None:
    policies = [
        al.ApprovalPolicy(
            "reject",
            tools="send",
            when=lambda a: a["amount"] > 100,
            reason="over the limit",
        ),
        al.ApprovalPolicy("approve", tools="se*"),
    ]
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "small", "tool": "send", "args": {"to": "x", "amount": 5}},
            {"id": "big", "tool": "send", "args": {"to": "y", "amount": 500}},
        ],
    }
    s = ws.new_session(plan=plan, tools=TOOLS, name="e", approvals=policies)
    res = s.run()
    assert res.status == "failed"
    assert s.record("small").status == "succeeded"
    assert "over the limit" in (s.record("big").error or "")
    assert SENT == [{"to": "x", "amount": 5}]
    assert s.record("big").approval["by"] == "policy"  # type: ignore[index]


def test_a_broken_predicate_asks_instead_of_approving(ws: al.Workspace) -> None:
    def broken(args: dict[str, object]) -> bool:
        raise KeyError("oops")

    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "p", "tool": "send", "args": {"to": "x"}}]},
        tools=TOOLS,
        name="f",
        approvals=[al.ApprovalPolicy("approve", when=broken)],
    )
    assert s.run().status == "paused" and SENT == []


def test_approve_during_a_background_run(ws: al.Workspace) -> None:
    gate = threading.Event()

    @al.tool
    def slow() -> int:
        assert gate.wait(30)
        return 1

    plan = {
        "goal": "g",
        "tasks": [
            {"id": "pay", "tool": "send", "args": {"to": "z"}},
            {"id": "slow", "tool": "slow"},
        ],
    }
    s = ws.new_session(plan=plan, tools=[send, slow], name="g")
    fut = s.start()
    seen = threading.Event()
    s.subscribe(lambda e: seen.set() if e.kind == "approval_requested" else None)
    if s.record("pay").status != "awaiting_approval":
        assert seen.wait(30)
    s.approve("pay")  # while the run is still going
    gate.set()
    assert fut.result(30).status == "succeeded"
    assert SENT == [{"to": "z", "amount": 1}]


WHO = "alice.smith-7@example.org"


def test_an_approval_holds_when_a_reopen_knows_more_secrets(ws: al.Workspace) -> None:
    # The approval is bound to the call's input_hash, masked by the session's
    # redactor; reopened with secrets=[...] holding a value the call's
    # arguments carry in clear, the same call must not be asked about again.
    plan = {
        "goal": "pay",
        "tasks": [
            {"id": "who", "tool": "echo", "args": {"value": WHO}},
            {"id": "pay", "tool": "send", "args": {"to": "${who.result}"}},
        ],
    }
    s = ws.new_session(plan=plan, tools=TOOLS, name="more")
    assert s.run().status == "paused"
    s.close()
    with ws.open("more", tools=TOOLS, secrets=[WHO]) as again:
        again.approve("pay")
        assert again.run().status == "succeeded"
    assert len(SENT) == 1
