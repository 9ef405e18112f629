"""Session options (argus_lab/runtime/options.py): the protocols the runtime
relies on instead of ``hasattr``, and the options' own checks."""

from __future__ import annotations

import pytest

import argus_lab as al
from argus_lab.llm.testing import FunctionModel
from argus_lab.runtime.options import HTNPlanning, Replanning, SessionOptions
from argus_lab.tools.approval import DEFAULT_POLICIES
from tests.htn_domains import trip


def test_the_planners_fit_the_protocols_the_runtime_checks() -> None:
    htn = al.HTNPlanner(trip)
    llm = al.LLMPlanner(FunctionModel(lambda req: "unused"))
    assert isinstance(htn, HTNPlanning) and not isinstance(htn, Replanning)
    assert isinstance(llm, Replanning) and not isinstance(llm, HTNPlanning)
    # The real classes fit the option types structurally (mypy on this file).
    opts = SessionOptions(planner=htn, models=FunctionModel(lambda req: "x"))
    assert opts.planner is htn


def test_default_approval_policies_apply_unless_given() -> None:
    assert SessionOptions().policies == DEFAULT_POLICIES
    assert SessionOptions(approvals=()).policies == ()


@pytest.mark.parametrize(
    ("kw", "msg"),
    [({"concurrency": 0}, "concurrency must be >= 1"), ({"lease_ttl": 0}, "lease_ttl")],
)
def test_bad_options_say_what_is_wrong(kw: dict[str, float], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        SessionOptions(**kw)  # type: ignore[arg-type]
