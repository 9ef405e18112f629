"""Approval policies travel with the session: stored as data, restored on open."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import argus_lab as al
from argus_lab.tools.approval import PolicyNotRestoredWarning

CALLS: list[str] = []


@al.tool(side_effect="write")
def pay(amount: int) -> int:
    CALLS.append(f"pay {amount}")
    return amount


@al.tool(side_effect="write")
def wipe() -> str:
    CALLS.append("wipe")
    return "wiped"


TOOLS = [pay, wipe]
PLAN = {
    "goal": "pay and wipe",
    "tasks": [
        {"id": "small", "tool": "pay", "args": {"amount": 5}},
        {"id": "large", "tool": "pay", "args": {"amount": 500}},
        {"id": "wipe", "tool": "wipe"},
    ],
}


def small_amount(args: dict[str, Any]) -> bool:
    return bool(args["amount"] < 10)


@pytest.fixture(autouse=True)
def _calls() -> None:
    CALLS.clear()


def _statuses(s: al.Session) -> dict[str, str]:
    return {t: r.status for t, r in s.records.items()}


def test_data_policies_are_restored_on_open(ws: al.Workspace) -> None:
    policies = [
        al.ApprovalPolicy("approve", tools="pay", reason="payments are fine"),
        al.ApprovalPolicy("reject", tools="wipe", reason="never wipe"),
    ]
    ws.new_session(plan=PLAN, tools=TOOLS, name="p", approvals=policies).close()
    with ws.open("p", tools=TOOLS) as s:  # no approvals handed in
        assert s.info.approvals == [
            {"decision": "approve", "tools": "pay", "reason": "payments are fine"},
            {"decision": "reject", "tools": "wipe", "reason": "never wipe"},
        ]
        s.run()
        assert _statuses(s) == {
            "small": "succeeded",
            "large": "succeeded",
            "wipe": "failed",
        }
    assert CALLS == ["pay 5", "pay 500"]


def test_without_approvals_the_defaults_ask_before_writes(ws: al.Workspace) -> None:
    ws.new_session(plan=PLAN, tools=TOOLS, name="d").close()
    with ws.open("d", tools=TOOLS) as s:
        assert s.info.approvals is None
        s.run()
        assert set(_statuses(s).values()) == {"awaiting_approval"}
    assert CALLS == []


def test_a_predicate_policy_asks_until_handed_in_again(ws: al.Workspace) -> None:
    policies = [
        al.ApprovalPolicy("approve", tools="pay", when=small_amount),
        al.ApprovalPolicy("reject", tools="wipe", when=lambda a: True),
        al.ApprovalPolicy("approve", tools="pay", reason="rest of the payments"),
    ]
    ws.new_session(plan=PLAN, tools=TOOLS, name="w", approvals=policies).close()
    with pytest.warns(PolicyNotRestoredWarning) as caught:
        s = ws.open("w", tools=TOOLS)
    assert len(caught) == 1  # once, naming both
    assert str(caught[0].message) == (
        "session w: 2 approval policies have a Python predicate, which is code and "
        "not stored: approve (tools=pay, when=small_amount); reject (tools=wipe, "
        "when=test_a_predicate_policy_asks_until_handed_in_again.<locals>.<lambda>)."
        " Until handed in again they ask for every call they could match; hand them "
        "in with ws.open('w', approvals=[...])."
    )
    with s:
        s.run()
        # Never "approve" (small waits) and never a blanket "reject" (wipe waits).
        assert _statuses(s) == {
            "small": "awaiting_approval",
            "large": "awaiting_approval",
            "wipe": "awaiting_approval",
        }
        why = s.pending_approvals()["small"]
        assert "predicate small_amount was not handed in again" in str(why)
    assert CALLS == []
    ws.new_session(plan=PLAN, tools=TOOLS, name="w2", approvals=policies).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # handed in again: no warning
        with ws.open("w2", tools=TOOLS, approvals=policies) as s:
            s.run()
            assert _statuses(s) == {
                "small": "succeeded",
                "large": "succeeded",
                "wipe": "failed",
            }
    assert CALLS == ["pay 5", "pay 500"]


def test_open_with_approvals_replaces_them_for_good(ws: al.Workspace) -> None:
    ws.new_session(
        plan=PLAN, tools=TOOLS, name="r", approvals=[al.ApprovalPolicy("ask")]
    ).close()
    ws.open("r", tools=TOOLS, approvals=[al.ApprovalPolicy("approve")]).close()
    with ws.open("r", tools=TOOLS) as s:  # the replacement was stored
        assert s.info.approvals == [{"decision": "approve", "tools": "*"}]
        assert s.run().status == "succeeded"
    assert sorted(CALLS) == ["pay 5", "pay 500", "wipe"]
