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


_PLAIN = ["", "a", "é", 'x\ny"\\', "日本", "\x00\x1f", "😀", 0, -1, 10**30, 1.5]
_PLAIN += [-0.0, 1e300, 1e-7, True, False, None]
_OTHER = [float("nan"), float("inf"), [1], {"a": 1}, (1,), 1 + 2j, b"x"]
_TYPES = (str, int, float, bool, type(None))


def test_the_input_hash_of_flat_arguments_is_the_json_encoders_text() -> None:
    """Stored records carry input hashes (staleness, replays): the text a flat
    dict is hashed from must be the encoder's to the byte, or every stored
    task would look stale after an upgrade."""
    import hashlib
    import random

    from argus_lab.runtime.options import _HASH_JSON, _flat_json, input_hash

    rng = random.Random(18)
    keys = ["a", "b", "é", "Z", "", 'k"', "1", "10", "2"]
    written = 0
    for _ in range(3000):
        args = {rng.choice(keys): rng.choice(_PLAIN + _OTHER) for _ in range(4)}
        name = rng.choice(["noop", "é", 'x"y'])
        want = _HASH_JSON.encode([name, args])
        text = _flat_json(name, args)
        if any(
            type(v) not in (str, int, float, bool, type(None)) for v in args.values()
        ):
            continue
        if any(v != v or v in (float("inf"), float("-inf")) for v in args.values()):
            assert text is None  # NaN and infinities: left to the encoder
            continue
        assert text == want
        written += 1
        digest = hashlib.sha256(want.encode()).hexdigest()[:16]
        assert input_hash(name, args) == digest
    assert written > 500
    assert _flat_json("t", {"a": [1]}) is None and _flat_json("t", {1: 2}) is None
    assert (
        input_hash("t", {"a": [1], "b": {"c": None}})
        == hashlib.sha256(b'["t", {"a": [1], "b": {"c": null}}]').hexdigest()[:16]
    )
