"""The plain event kinds' written schemas (events/_lane.py) validate, coerce,
refuse and dump exactly as the classes' own pydantic builds do, and a run
builds none of those classes."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import typing
from typing import Any

import pytest
from pydantic import ValidationError

from argus_lab.events import _CLASSES, dump_event, make_event
from argus_lab.events._lane import lane_of

LANED = [c for c in _CLASSES if lane_of(c) is not None]
"""Every event class whose fields are plain JSON."""

_SAMPLES: dict[Any, list[Any]] = {
    str: ["t1", "", 'é ☃ \u2028 "q" \\ /', 3, None, b"x", 1.5],
    int: [0, 7, -3, 2**70, "12", 1.0, 1.5, True, None, "x"],
    float: [0.0, 1.5, 1e-7, 1e16, float("nan"), float("inf"), 3, "2.5", None, "x"],
    bool: [True, False, 0, 1, "true", "no", 2, None],
}


def _samples(annotation: Any) -> list[Any]:
    if annotation in _SAMPLES:
        return _SAMPLES[annotation]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return [*args, "other", None]
    if origin is list:
        return [[], ["a", "b"], ["a", 1], ("a",), "ab", None]
    if origin is dict:
        return [{}, {"k": "v"}, {"k": None}, {1: "v"}, ["k"], None]
    out: list[Any] = []
    for a in args:
        out += [v for v in _samples(a) if v not in out or v is None]
    return out


def _inputs(cls: type) -> list[dict[str, Any]]:
    """Each field's samples one at a time over a valid base; the base with
    every optional field left out; an unknown key; a required one missing."""
    base = {"session_id": "s", "ts": 1764670000.123456}
    out = [dict(base), {**base, "extra_key": [1, {"a": 2}]}, {"ts": 1.0}]
    for name, info in cls.model_fields.items():  # type: ignore[attr-defined]
        for value in _samples(info.annotation):
            out.append({**base, name: value})
    return out


@pytest.mark.parametrize("cls", LANED, ids=lambda c: c.__name__)
def test_a_lane_makes_validates_coerces_refuses_and_dumps_as_the_class_build(
    cls: Any,
) -> None:
    lane, fresh = lane_of(cls), lane_of(cls)
    assert lane is not None and fresh is not None
    own = cls.__pydantic_validator__  # builds the class, as before the lane
    lane.compile()  # compiled: dumps with its serializer; fresh with to_json
    checked = built = 0
    for data in _inputs(cls):
        try:
            want = own.validate_python(data)
        except ValidationError as e:
            assert fresh.build(data) is None, data  # refused: the validator says why
            with pytest.raises(ValidationError) as got:
                lane.compile().validate_python(data)
            assert str(got.value) == str(e), data
            continue
        fresh.made = 0  # (never compiled here)
        made = fresh.build(data)
        for got_ev in (lane.compile().validate_python(data), made):
            if got_ev is None:  # a value validation would change: not made
                continue
            assert type(got_ev) is cls
            assert got_ev.__dict__ == want.__dict__ or repr(got_ev) == repr(want), data
            assert list(got_ev.__dict__) == list(want.__dict__)
            assert got_ev.model_fields_set == want.model_fields_set
            assert got_ev.__pydantic_extra__ == want.__pydantic_extra__
            assert got_ev.__pydantic_private__ == want.__pydantic_private__
            dumped = cls.__pydantic_serializer__.to_json(want)
            assert lane.serializer is not None
            compiled = lane.serializer.to_json(got_ev)
            assert compiled == fresh.dump(got_ev) == dumped, data
        if made is not None:
            # Made only from values validation returns unchanged (the same
            # objects, not equal ones: 1 for a float field would become 1.0).
            assert all(made.__dict__[k] is v for k, v in data.items()), data
            assert made == want or repr(made) == repr(want)
            built += 1
        checked += 1
    assert checked >= 5
    assert built >= 3  # the base, and each field's exact values


def test_a_made_event_is_a_whole_model() -> None:
    """An event made without validation behaves as a validated one: copies,
    dumps, equality, attribute writes (the runtime masks fields in place)."""
    fields = {"session_id": "s", "ts": 1.5, "task_id": "t", "attempt": 1}
    lane = lane_of(type(make_event("task_started", **fields)))
    assert lane is not None
    made = lane.build({**fields, "tool": "noop"})
    assert made is not None
    checked = make_event("task_started", **fields, tool="noop")
    assert made == checked
    assert made.model_dump() == checked.model_dump()
    assert made.model_copy(update={"seq": 3}).seq == 3
    made.tool = "***"  # type: ignore[attr-defined]
    assert json.loads(dump_event(made))["tool"] == "***"
    assert made.own_fields() == {"tool": "***"}


def test_lanes_compile_no_schema_for_exact_values() -> None:
    """A run's events hold exact values: no validator is compiled for them
    (~0.5 ms of a fresh process's run, BENCHMARKS.md, issue 18)."""
    code = textwrap.dedent(
        """
        from argus_lab.events import _LANES, make_event, dump_event
        ev = make_event("task_succeeded", session_id="s", ts=1.0, bytes=3)
        dump_event(ev)
        lane = _LANES[type(ev)]
        assert lane.checker is None, "compiled for exact values"
        make_event("task_succeeded", session_id="s", ts=1, bytes=3)  # an int ts
        assert lane.checker is not None

        from argus_lab.events._lane import EXACT_MAKES
        lane = _LANES[type(make_event("task_started", session_id="s", ts=1.0))]
        lane.made = 0
        made = [make_event("task_started", session_id="s", ts=1.0, seq=i)
                for i in range(EXACT_MAKES)]
        assert lane.checker is None and lane.made == EXACT_MAKES
        last = make_event("task_started", session_id="s", ts=1.0, seq=9)
        assert lane.checker is not None  # a long run: compiled now
        assert last == made[9] and dump_event(last) == dump_event(made[9])
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "ok"


def test_every_kind_a_run_writes_has_a_lane() -> None:
    hot = {"resumed", "task_started", "task_succeeded", "task_failed"}
    hot |= {"session_succeeded", "session_failed", "retry_scheduled", "in_doubt"}
    assert hot <= {c.model_fields["kind"].default for c in LANED}


def test_make_event_refuses_a_bad_value_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="attempt"):
        make_event("task_started", session_id="s", ts=1.0, attempt="first")
    ev = make_event("task_succeeded", session_id="s", ts=1, attempt="2", bytes=3)
    assert (ev.ts, ev.attempt) == (1.0, 2)
    assert dump_event(ev) == ev.model_dump_json().encode()


def test_a_run_builds_no_schema_of_the_events_it_writes(tmp_path: Any) -> None:
    """Each class built is ~0.4 ms of pydantic schema generation: four were
    ~1.6 ms of a fresh process's 100-step run (BENCHMARKS.md, issue 18)."""
    code = textwrap.dedent(
        f"""
        import json
        import argus_lab as al
        from argus_lab.events import _CLASSES

        @al.tool
        def add(a: int) -> int:
            return a + 1

        ws = al.Workspace({str(tmp_path / "ws")!r})
        plan = {{"goal": "g", "tasks": [
            {{"id": "a", "tool": "add", "args": {{"a": 1}}}},
            {{"id": "b", "tool": "add", "args": {{"a": "${{a.result}}"}}}},
        ]}}
        s = ws.new_session(plan=plan, tools=[add], name="n")
        assert s.run().status == "succeeded"
        built = [c.__name__ for c in _CLASSES if c.__pydantic_complete__]
        print(json.dumps(built))
        print(json.dumps(sorted(set(s.events_df()["kind"]))))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == "[]", out
    kinds = json.loads(out[1])
    assert {"task_started", "task_succeeded", "session_succeeded"} <= set(kinds)


def test_inputs_cover_each_laned_field() -> None:
    for cls in LANED:
        names = {k for d in _inputs(cls) for k in d}
        assert set(cls.model_fields) - {"kind"} <= names | {"kind"}
    assert len(list(itertools.chain(*(_inputs(c) for c in LANED)))) > 300


def test_a_kind_with_more_than_plain_fields_gets_no_lane() -> None:
    from pydantic import ConfigDict, Field, field_validator

    from argus_lab.events import EventBase

    class Checked(EventBase):
        n: int = 0

        @field_validator("n")
        @classmethod
        def positive(cls, v: int) -> int:
            return abs(v)

    class Bounded(EventBase):
        n: int = Field(0, ge=0)

    class Strict(EventBase):
        model_config = ConfigDict(strict=True)

    class PostInit(EventBase):
        n: int = 0

        def model_post_init(self, context: Any) -> None:
            self.n += 1

    class OwnInit(EventBase):
        n: int = 0

        def __init__(self, **data: Any) -> None:
            super().__init__(**data)

    class Plain(EventBase):
        n: int = 0

    kinds = (Checked, Bounded, Strict, PostInit, OwnInit, Plain)
    assert [lane_of(c) is None for c in kinds] == [True] * 5 + [False]
