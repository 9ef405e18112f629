"""argus_lab.analysis: attempts, tool calls, LLM calls and approvals, on real runs.

The frames read the events' typed fields; kinds nothing emits yet (``llm_call``,
``tool_call``) are committed through the session by ``emit``.
"""

from __future__ import annotations

import json

import pandas as pd

import argus_lab as al
from argus_lab import analysis as an
from tests.conftest import BASIC_TOOLS, FAST
from tests.test_analysis import CHAIN
from tests.test_analysis_postmortem import emit


def test_attempts_and_tool_calls_pair_starts_with_outcomes(ws: al.Workspace) -> None:
    calls = {"n": 0}

    @al.tool(retries=2)
    def flaky() -> str:
        calls["n"] += 1
        if calls["n"] < 3:
            raise al.TransientError(f"try {calls['n']} failed")
        return "ok"

    plan = {"tasks": [{"id": "f", "tool": "flaky"}]}
    with ws.new_session(plan=plan, tools=[flaky], name="flaky", **FAST) as s:
        assert s.run().status == "succeeded"
        a = an.attempts_df(s)
        tc = an.tool_calls_df(s)
    assert list(a["attempt"]) == [1, 2, 3]
    assert list(a["outcome"]) == ["retried", "retried", "succeeded"]
    assert list(a["error"].fillna("")) == ["try 1 failed", "try 2 failed", ""]
    assert a["retry_delay"].iloc[:2].notna().all() and pd.isna(a["retry_delay"].iloc[2])
    assert (a["ended"] >= a["started"]).all()
    assert list(tc["source"]) == ["task"] * 3 and list(tc["ok"]) == [False, False, True]
    assert list(tc["seq"]) == list(a["seq"])


def test_llm_and_tool_call_payloads_become_typed_columns(ws: al.Workspace) -> None:
    with ws.new_session(plan=CHAIN, tools=BASIC_TOOLS, name="llm", **FAST) as s:
        emit(
            s,
            "llm_call",
            "a",
            model="m1",
            input_tokens=10,
            output_tokens=5,
            cost_usd=0.5,
            cached=True,
            stop_reason="end_turn",
            round=2,
        )
        emit(s, "llm_call", None, model="m2", purpose="planning")
        emit(s, "tool_call", "a", tool="search", args={"q": "x"}, ok=False,
             error="404", error_type="ToolError")  # fmt: skip
        c = an.llm_calls_df(s)
        tc = an.tool_calls_df(s)
        spec = an.LLM_CALL_COLUMNS + an.Columns(an.Column("round", "Int64"))
        custom = an.llm_calls_df(s, columns=spec)
        t = an.tasks_df(s).set_index("task_id")
    assert list(c["model"]) == ["m1", "m2"] and list(c["task_id"].isna()) == [
        False,
        True,
    ]
    # Typed fields: a call that reported no usage has the model's defaults.
    assert list(c["input_tokens"]) == [10, 0] and c["cost_usd"].iloc[0] == 0.5
    assert pd.isna(c["cost_usd"].iloc[1])  # no price known: unknown, not free
    assert list(c["cached"]) == [True, False]
    assert c["purpose"].iloc[1] == "planning" and pd.isna(c["purpose"].iloc[0])
    assert list(custom["round"].fillna(-1)) == [2, -1]
    row = tc.iloc[0]
    assert (row["source"], row["tool"], row["ok"], row["error"]) == (
        "llm", "search", False, "404"
    )  # fmt: skip
    assert json.loads(row["args"]) == {"q": "x"}
    assert (t.loc["a", "cost_usd"], t.loc["a", "input_tokens"]) == (0.5, 10)
    assert t.loc["a", "n_llm_calls"] == 1 and t.loc["b", "n_llm_calls"] == 0


def test_approvals_pair_requests_with_decisions(ws: al.Workspace) -> None:
    @al.tool(side_effect="write")
    def send(to: str) -> str:
        return to

    plan = {
        "tasks": [
            {"id": "yes", "tool": "send", "args": {"to": "a"}},
            {"id": "no", "tool": "send", "args": {"to": "b"}},
        ]
    }
    with ws.new_session(plan=plan, tools=[send], name="appr", **FAST) as s:
        assert s.run().status == "paused"
        s.approve("yes", {"to": "c"}, by="ann")
        s.reject("no", "not today", by="bob")
        s.run()
        ap = an.approvals_df(s).set_index("task_id")
        t = an.tasks_df(s).set_index("task_id")
    assert list(ap.index) == ["yes", "no"]
    assert list(ap["decision"]) == ["granted", "rejected"]
    assert list(ap["by"]) == ["ann", "bob"]
    assert json.loads(ap.loc["yes", "args"]) == {"to": "a"}
    assert json.loads(ap.loc["yes", "edited_args"]) == {"to": "c"}
    assert ap.loc["no", "decision_reason"] == "not today"
    assert (ap["wait"] >= 0).all() and str(ap["wait"].dtype) == "float64"
    wait = ap.loc["yes", "decided"] - ap.loc["yes", "requested"]
    assert ap.loc["yes", "wait"] == wait.total_seconds()
    assert "side_effect=write" in ap.loc["yes", "policy"]
    assert list(t["approval"]) == ["approved", "rejected"]


def test_policy_refusal_is_an_approval_row_without_request(ws: al.Workspace) -> None:
    @al.tool(side_effect="write")
    def wipe() -> None:
        return None

    plan = {"tasks": [{"id": "w", "tool": "wipe"}]}
    deny = (al.ApprovalPolicy("reject", tools="wipe", reason="never"),)
    with ws.new_session(plan=plan, tools=[wipe], name="deny", approvals=deny) as s:
        s.run()
        ap = an.approvals_df(s)
    assert len(ap) == 1 and ap["decision"].iloc[0] == "rejected"
    assert ap["by"].iloc[0] == "policy" and pd.isna(ap["requested"].iloc[0])
    assert ap["decision_reason"].iloc[0] == "never"
