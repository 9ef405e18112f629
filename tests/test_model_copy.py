"""``updated`` and ``blank_record`` (argus_lab/model.py): the step's cheap copies
of a TaskRecord are exactly what pydantic's own copy and constructor make."""

from __future__ import annotations

from typing import Any

import pytest

from argus_lab.model import TaskRecord, blank_record, updated

BASE = TaskRecord(task_id="t1", attempts=2, result={"a": [1, 2]}, error="e")


@pytest.mark.parametrize(
    "upd",
    [
        {},
        {"status": "running", "attempts": 3, "started": 5.0, "ended": None},
        {"status": "succeeded", "result": "x" * 300, "error": None, "tool_hash": "h"},
        {"approval": {"state": "approved", "by": "me"}, "unsafe_intent": True},
    ],
)
def test_updated_is_model_copy_with_update(upd: dict[str, Any]) -> None:
    fast, slow = updated(BASE, upd), BASE.model_copy(update=upd)
    assert type(fast) is TaskRecord
    assert fast == slow and fast.__dict__ == slow.__dict__
    assert list(fast.__dict__) == list(slow.__dict__)  # dump order
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.__pydantic_extra__ is None and fast.__pydantic_private__ is None
    assert fast.model_dump_json() == slow.model_dump_json()
    assert fast.model_dump_json(exclude_unset=True) == slow.model_dump_json(
        exclude_unset=True
    )
    # A copy of its own: the original's fields set and values are untouched.
    fast.error = "changed"
    assert BASE.error == "e" and "error" in BASE.model_fields_set
    assert fast.model_fields_set is not BASE.model_fields_set


def test_blank_record_is_the_validated_constructor() -> None:
    fast, slow = blank_record("t9"), TaskRecord(task_id="t9")
    assert fast == slow and fast.model_fields_set == slow.model_fields_set == {
        "task_id"
    }
    assert fast.model_dump_json(exclude_defaults=True) == '{"task_id":"t9"}'
