"""argus_lab.events: one typed model per kind, and old sessions migrated to them.

tests/fixtures/v1_session is a real run written by argus-lab before the fields were
typed (checkpoint schema_version 1, kind-specific fields in a ``payload`` dict);
make_v1_fixture.py says how it was made.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import argus_lab as al
import argus_lab.analysis as an
from argus_lab import events
from argus_lab.events import (
    COMMON_FIELDS,
    EVENT_KINDS,
    ApprovalGranted,
    HtnDecision,
    LlmCall,
    RetryScheduled,
    TaskFailed,
    TaskSkipped,
    event_class,
    make_event,
    payload_to_fields,
)

V1 = Path(__file__).parent / "fixtures" / "v1_session" / "ws"


def _camel(kind: str) -> str:
    return "".join(w.capitalize() for w in kind.split("_"))


def test_each_kind_has_its_own_class_named_after_it() -> None:
    classes = {event_class(kind) for kind in EVENT_KINDS}
    assert len(classes) == len(EVENT_KINDS) == 27
    for kind in EVENT_KINDS:
        cls = event_class(kind)
        assert cls.model_fields["kind"].default == kind
        assert cls.__name__ == _camel(kind)
        assert getattr(events, cls.__name__) is cls  # exported under that name
        # The analysis fast path relies on the EventBase fields coming first.
        assert tuple(cls.model_fields)[: len(COMMON_FIELDS)] == COMMON_FIELDS


def test_payload_to_fields_maps_the_old_payload_keys() -> None:
    fields = payload_to_fields("task_skipped", {"reason": "r", "from": "failed"})
    ev = make_event("task_skipped", session_id="s", ts=1, **fields)
    assert isinstance(ev, TaskSkipped) and ev.previous == "failed"
    assert ev.own_fields() == {"reason": "r", "previous": "failed"}
    # Set later (the runtime writes masked values back), and kept extras.
    ev.reason = "masked"
    migrated = TaskSkipped.model_validate(
        {"session_id": "s", "ts": 1, "reason": "r", "old_key": 3}
    )
    assert ev.own_fields() == {"reason": "masked", "previous": "failed"}
    assert migrated.own_fields() == {"reason": "r", "old_key": 3}
    ev2 = make_event("llm_call", duration=2.0, session_id="s", ts=1)
    assert ev2.duration == 2.0 and "duration" not in ev2.details()
    assert not hasattr(ev, "payload")  # the untyped view is gone: read fields
    with pytest.raises(TypeError, match="payload"):
        make_event("paused", payload={"reason": "r"}, session_id="s", ts=1)


def test_make_event_refuses_fields_a_kind_does_not_declare() -> None:
    with pytest.raises(
        TypeError, match=r"'paused' \(Paused\) has no field\(s\) \['typo'\]"
    ):
        make_event("paused", typo=1, session_id="s", ts=1)
    with pytest.raises(TypeError, match="tool"):
        make_event("task_started", session_id="s", ts=1, tool="t", tol="t")
    with pytest.raises(KeyError, match="unknown event kind"):
        make_event("nope", session_id="s", ts=1)


@pytest.fixture
def v1_ws(tmp_path: Path) -> al.Workspace:
    shutil.copytree(V1, tmp_path / "ws")
    return al.Workspace(tmp_path / "ws")


def test_a_v1_session_loads_with_typed_events(v1_ws: al.Workspace) -> None:
    with v1_ws.open("v1-run", remember=False) as s:  # no LanceDB import
        events = s.events()
        assert s.info.status == "failed"
    kinds = {e.kind for e in events}
    assert {"retry_scheduled", "approval_granted", "llm_call", "task_failed"} <= kinds
    retry = next(e for e in events if isinstance(e, RetryScheduled))
    assert retry.task_id == "flaky" and retry.error == "server answered 503"
    assert retry.error_type == "TransientError" and retry.delay > 0
    granted = next(e for e in events if isinstance(e, ApprovalGranted))
    assert (granted.by, granted.edited_args) == ("ann", {"text": "hello, world"})
    calls = [e for e in events if isinstance(e, LlmCall)]
    assert len(calls) == 2 and all(c.input_tokens == 1000 for c in calls)
    assert calls[0].cost_usd == pytest.approx(0.006) and calls[0].model == "scripted"
    failed = [e for e in events if isinstance(e, TaskFailed)]
    assert {(f.task_id, f.error_type) for f in failed} == {
        ("broken", "ValueError"),
        ("spam", "Rejected"),
    }
    skip = next(e for e in events if isinstance(e, TaskSkipped))
    assert (skip.previous, skip.reason) == ("blocked", "not needed")  # was "from"
    assert not any(e.model_extra for e in events)  # every old key has a field


def test_a_v1_session_frames_have_the_typed_columns(v1_ws: al.Workspace) -> None:
    e = an.events_df(v1_ws)
    assert "payload" not in e.columns and "details" in e.columns
    for kind, text in zip(e["kind"], e["details"], strict=True):
        own = json.loads(text)
        cls = event_class(str(kind))
        assert set(own) == set(cls.model_fields) - set(COMMON_FIELDS), kind
    c = an.llm_calls_df(v1_ws)
    assert list(c["input_tokens"]) == [1000, 1000]
    assert str(c["input_tokens"].dtype) == "Int64" and c["cost_usd"].sum() > 0
    a = an.attempts_df(v1_ws).set_index(["task_id", "attempt"])
    assert a.loc[("flaky", 1), "outcome"] == "retried"
    assert a.loc[("flaky", 1), "error_type"] == "TransientError"
    assert a.loc[("broken", 2), "error"] == "cannot handle 3"
    ap = an.approvals_df(v1_ws).set_index("task_id")
    assert ap.loc["post", "decision"] == "granted" and ap.loc["post", "by"] == "ann"
    assert ap.loc["spam", "decision"] == "rejected"
    tc = an.tool_calls_df(v1_ws)
    assert list(tc[tc["source"] == "llm"]["tool"]) == ["lookup"]
    d = an.decisions(an.frames(v1_ws))
    assert "was failed" in set(d["detail"].dropna())  # task_retried's old "from"


def test_what_the_model_budget_plan_and_htn_layers_hand_in_fits_the_fields() -> None:
    """Every payload builder the runtime passes to make_event, with real objects:
    a key without a field would make the runtime's commit raise."""
    from argus_lab.llm.base import ModelResponse, TextBlock, Usage
    from argus_lab.plan.htn import HTNPlanner
    from argus_lab.plan.patch import PlanPatch
    from argus_lab.runtime.budget import BudgetHit
    from tests import htn_domains as d

    unpriced = ModelResponse(
        content=[TextBlock(text="hi")], usage=Usage(input_tokens=3), model="m"
    )
    call = make_event("llm_call", session_id="s", ts=1, **unpriced.event_payload("x"))
    assert isinstance(call, LlmCall) and call.cost_usd is None
    hit = BudgetHit("session", "max_steps", 3, 3, 1)
    assert make_event("budget_exceeded", session_id="s", ts=1, **hit.event_fields())
    patch = PlanPatch(removed=["a"], reason="r", compound="c", method="m")
    assert make_event("plan_patched", session_id="s", ts=1, **patch.summary())
    planner = HTNPlanner(d.trip)
    planner.plan("trip", "alice", "home", "paris", 2)
    assert planner.decisions
    for dec in planner.decisions:
        ev = HtnDecision(session_id="s", ts=1, **HtnDecision.fields_of(dec))
        assert ev.as_planner_decision() == {
            k: v for k, v in dec.items() if v is not None
        }


def test_every_event_the_package_builds_names_declared_fields() -> None:
    """Scans argus_lab for make_event / .event calls with a literal kind: each
    keyword is a field of that kind, and none passes a ``payload`` dict (a
    new key without a field would make the runtime's commit raise)."""
    import ast

    package = Path(events.__file__).parent.parent
    bad: list[tuple[str, int, str, list[str]]] = []
    for path in package.rglob("*.py"):
        if "events" in path.relative_to(package).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            first = node.args[0]
            if name not in ("make_event", "event", "_event") or not (
                isinstance(first, ast.Constant) and isinstance(first.value, str)
            ):
                continue
            cls = event_class(first.value)
            keys = [k.arg for k in node.keywords if k.arg is not None]
            unknown = [k for k in keys if k not in cls.model_fields]
            if unknown:
                bad.append((str(path), node.lineno, first.value, unknown))
    assert bad == []
