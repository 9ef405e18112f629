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


keyed: list[str] = []


@al.tool(side_effect="write")
def call_service(to: str, key: str, retries: int = 1) -> str:
    """Calls a service with a key (a write: the default policy asks)."""
    keyed.append(key)
    return f"called {to}"


def keyed_session(ws: al.Workspace) -> al.Session:
    keyed.clear()
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "c", "tool": "call_service", "args": {"to": "a", "key": "none"}}
        ],
    }
    s = ws.new_session(
        plan=plan, tools=[call_service], name=f"k-{uuid.uuid4().hex[:6]}"
    )
    s.run()
    assert s.record("c").status == "awaiting_approval"
    return s


def test_edited_args_holding_a_literal_secret_are_refused_not_corrupted(
    ws: al.Workspace,
) -> None:
    """Edited arguments are stored with the approval, masked: a literal key in
    them reached the tool as "[REDACTED]". Refused instead, like in a plan."""
    from argus_lab.errors import PlanError

    s = keyed_session(ws)
    key = "sk-ant-api03-" + uuid.uuid4().hex
    with pytest.raises(PlanError, match=r"holds a secret.*\$\{env\.NAME\}") as e:
        s.approve("c", {"to": "a", "key": key})
    assert key not in str(e.value)
    assert s.record("c").status == "awaiting_approval" and keyed == []
    s.close()


def test_edited_args_read_env_references_when_the_task_runs(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The widget shows ${env.NAME} as written and sends it back with the
    person's edits: the tool must get the value, never the reference's text,
    and no byte of the value is stored."""
    value = "tokval-" + uuid.uuid4().hex
    monkeypatch.setenv("SERVICE_KEY_X", value)
    s = keyed_session(ws)
    with pytest.raises(al.ToolArgumentsError) as e:  # checked now, value unsaid
        s.approve("c", {"to": "b", "key": "k", "retries": "${env.SERVICE_KEY_X}"})
    assert value not in str(e.value)
    s.approve("c", {"to": "b", "key": "${env.SERVICE_KEY_X}"})
    s.run()
    assert s.record("c").status == "succeeded" and keyed == [value]
    s.close()
    ws.close()
    data = b"".join(p.read_bytes() for p in ws.path.rglob("*") if p.is_file())
    assert value.encode() not in data


def test_edited_args_naming_an_unset_variable_are_refused_at_once(
    ws: al.Workspace,
) -> None:
    from argus_lab.errors import UnresolvedReferenceError

    s = keyed_session(ws)
    with pytest.raises(UnresolvedReferenceError, match="ARGUS_NOT_SET_ANYWHERE"):
        s.approve("c", {"to": "b", "key": "${env.ARGUS_NOT_SET_ANYWHERE}"})
    assert s.record("c").status == "awaiting_approval" and keyed == []
    s.close()
