"""An approval is for the call a person saw: the tool's code and its arguments.

Attacks on approvals through the public API only: the tool replaced after the
person was asked, and the arguments resolving differently (an upstream task
rerun) between the ask and the run. Both must ask again, never run a call
nobody approved; an approval for an unchanged call still holds, across a
restart too.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import argus_lab as al

sent: list[tuple[str, str]] = []


@al.tool(side_effect="write")
def send(to: str) -> str:
    """Sends a message (a write: the default policy asks first)."""
    sent.append(("v1", to))
    return "sent"


@al.tool(name="send", side_effect="write")
def send_changed(to: str) -> str:
    """The same name, other code: what a redefined notebook cell gives."""
    sent.append(("v2", to))
    return "sent differently"


@al.tool
def pick() -> str:
    """Chooses the recipient."""
    return "alice"


@al.tool(name="pick")
def pick_changed() -> str:
    """Chooses another recipient."""
    return "mallory"


PLAN: dict[str, Any] = {
    "goal": "send a message",
    "tasks": [
        {"id": "who", "tool": "pick"},
        {
            "id": "send",
            "tool": "send",
            "deps": ["who"],
            "args": {"to": "${who.result}"},
        },
    ],
}


@pytest.fixture(autouse=True)
def _clear() -> None:
    sent.clear()


def asked(s: al.Session) -> list[dict[str, Any]]:
    return [
        e.model_dump(mode="json")
        for e in s.events()
        if e.kind == "approval_requested" and e.task_id == "send"
    ]


def test_a_tool_replaced_after_the_ask_is_asked_again(ws: al.Workspace) -> None:
    s = ws.new_session(
        plan=PLAN, tools=[pick, send], name=f"swap-{uuid.uuid4().hex[:6]}"
    )
    s.run()
    assert s.pending_approvals()["send"]["args"] == {"to": "alice"}
    s.update_tools(send_changed)
    s.approve("send")  # approving what was shown: v1's call
    s.run()
    assert sent == []  # v2 did not run on v1's approval
    assert s.record("send").status == "awaiting_approval"
    again = asked(s)
    assert len(again) == 2 and "changed since it was approved" in again[-1]["reason"]
    s.approve("send")  # now the person has seen the call that will run
    s.run()
    assert sent == [("v2", "alice")]
    s.close()


def test_arguments_resolving_differently_after_the_ask_are_asked_again(
    ws: al.Workspace,
) -> None:
    s = ws.new_session(
        plan=PLAN, tools=[pick, send], name=f"args-{uuid.uuid4().hex[:6]}"
    )
    s.run()
    assert s.pending_approvals()["send"]["args"] == {"to": "alice"}
    s.update_tools(pick_changed)
    assert s.stale() == ["who"]
    s.rerun_stale()  # "who" now says mallory; "send" still waits
    assert s.pending_approvals()["send"]["args"] == {"to": "alice"}
    s.approve("send")  # the person approved sending to alice
    s.run()
    assert sent == []  # never to mallory on alice's approval
    assert s.pending_approvals()["send"]["args"] == {"to": "mallory"}
    s.approve("send")
    s.run()
    assert sent == [("v1", "mallory")]
    s.close()


def test_an_approval_for_the_same_call_holds_across_a_restart(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "tok-" + uuid.uuid4().hex
    monkeypatch.setenv("ARGUS_APPROVAL_TOKEN", token)
    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": "send",
                "tool": "send",
                "args": {"to": "${env.ARGUS_APPROVAL_TOKEN}"},
            }
        ],
    }
    name = f"restart-{uuid.uuid4().hex[:6]}"
    s = ws.new_session(plan=plan, tools=[send], name=name)
    s.run()
    s.approve("send")
    s.close()  # approved, not run yet
    assert sent == []
    s = ws.open(name, tools=[send])
    s.run()
    assert s.record("send").status == "succeeded"
    assert sent == [("v1", token)]  # the secret's value, not its stored mask
    assert len(asked(s)) == 1  # asked once: the restart kept the approval
    s.close()
