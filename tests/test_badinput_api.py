"""Wrong types a new user hands the session API: each gets a clear error naming
the argument and what it takes (not an AttributeError or a raw pydantic
report from deep inside), and nothing is committed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import argus_lab as al


@al.tool(side_effect="write")
def send(email: str, n: int) -> dict[str, Any]:
    return {"email": email, "n": n}


PLAN = {"tasks": [{"id": "a", "tool": "send", "args": {"email": "x@y", "n": 1}}]}


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"name": 123}, "name must be a str, got 123 (int)"),
        ({"budget": 5}, "budget must be al.Budget(...) or a dict of its limits"),
        ({"concurrency": "4"}, "concurrency must be an int, got '4' (str)"),
        ({"concurrency": True}, "concurrency must be an int, got True (bool)"),
        ({"lease_ttl": "30"}, "lease_ttl must be a number, got '30' (str)"),
    ],
)
def test_new_session_names_a_wrong_type(
    tmp_path: Path, kwargs: dict[str, Any], words: str
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    with pytest.raises(TypeError) as e:
        ws.new_session(plan=PLAN, tools=[send], **kwargs)
    assert words in str(e.value)
    assert ws.sessions() == []


def test_approve_and_reject_name_a_wrong_type(tmp_path: Path) -> None:
    ws = al.Workspace(tmp_path / "ws")
    with ws.new_session(plan=PLAN, tools=[send], name="ap") as s:
        assert s.run().status == "paused"  # a write asks first
        before = len(s.events())
        with pytest.raises(TypeError, match=r"args must be a dict .* replace them"):
            s.approve("a", args=[1])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="by must be a str"):
            s.approve("a", by=123)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="reason must be a str"):
            s.reject("a", reason=7)  # type: ignore[arg-type]
        assert len(s.events()) == before and s.record("a").status == (
            "awaiting_approval"
        )


def test_an_unknown_session_is_an_argus_error_and_still_a_key_error(
    tmp_path: Path,
) -> None:
    ws = al.Workspace(tmp_path / "ws")
    for call in (ws.open, ws.resolve, ws.progress):
        with pytest.raises(al.SessionNotFoundError) as e:
            call("nosuch")
        assert isinstance(e.value, KeyError) and isinstance(e.value, al.ArgusError)
        assert str(e.value).startswith("no session 'nosuch' in ")  # no extra quotes


def test_a_key_error_in_a_tool_names_its_type(tmp_path: Path) -> None:
    """str(KeyError('missing')) is "'missing'": the task's error said only that."""

    @al.tool
    def lookup(k: str) -> int:
        return {"a": 1}[k]

    ws = al.Workspace(tmp_path / "ws")
    plan = {"tasks": [{"id": "t", "tool": "lookup", "args": {"k": "missing"}}]}
    with ws.new_session(plan=plan, tools=[lookup], name="k") as s:
        res = s.run()
        assert s.record("t").error == "KeyError: 'missing'"
        assert "KeyError: 'missing'" in (res.reason or "")
        assert s.tasks_df()["error_type"].iloc[0] == "KeyError"


def test_a_nan_result_says_what_to_return_instead(tmp_path: Path) -> None:
    @al.tool
    def mean() -> dict[str, float]:
        return {"mean": float("nan")}

    ws = al.Workspace(tmp_path / "ws")
    with ws.new_session(
        plan={"tasks": [{"id": "m", "tool": "mean"}]}, tools=[mean]
    ) as s:
        s.run()
        err = s.record("m").error or ""
        assert "is not JSON" in err and "return None for a missing number" in err


def test_numpy_numbers_are_good_options(tmp_path: Path) -> None:
    import numpy as np  # (pandas's, so always installed)

    ws = al.Workspace(tmp_path / "ws")
    with ws.new_session(
        plan=PLAN, tools=[send], concurrency=np.int64(2), lease_ttl=np.float32(30)
    ) as s:
        assert s.options.concurrency == 2
    with pytest.raises(TypeError) as e:
        ws.new_session(plan=PLAN, tools=[send], concurrency=2.5)
    assert "session options are" not in str(e.value)  # (that is for unknown keys)
