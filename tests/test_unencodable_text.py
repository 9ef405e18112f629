"""Text that is not valid Unicode from a tool: a name read from a Linux file
system that is not UTF-8 (``os.listdir``, an OSError's message) holds lone
surrogates (``surrogateescape``), which pydantic-core refuses to write as JSON.
The run raised PydanticSerializationError at the commit and stopped, the task
left running; now such text is stored with the surrogates as ``\\udcff``
escapes, the run goes on, and the session opens again."""

from __future__ import annotations

import argus_lab as al

NAME = b"caf\xff".decode("utf-8", "surrogateescape")  # "caf\udcff"


@al.tool
def fails_naming_it() -> str:
    """Fails with the name in its message (and so its traceback)."""
    raise FileNotFoundError(f"no such file: {NAME}")


@al.tool
def returns_it() -> str:
    """Returns the name."""
    return f"found {NAME}"


@al.tool
def lists_it() -> dict[str, list[str]]:
    """Returns the name nested."""
    return {"files": [NAME, "plain"]}


@al.tool
def keys_by_it() -> dict[str, int]:
    """Returns the name as a key (pydantic-core's conversion refuses it)."""
    return {NAME: 3}


def test_a_tool_quoting_a_name_that_is_not_utf8_does_not_stop_the_run(
    ws: al.Workspace,
) -> None:
    tasks = [
        {"id": "fail", "tool": "fails_naming_it"},
        {"id": "found", "tool": "returns_it"},
        {"id": "list", "tool": "lists_it"},
        {"id": "keys", "tool": "keys_by_it"},
    ]
    tools = [fails_naming_it, returns_it, lists_it, keys_by_it]
    s = ws.new_session(
        plan={"goal": "g", "tasks": tasks},
        tools=tools,
        max_consecutive_failures=None,
    )
    res = s.run()
    assert res.status == "failed"
    assert s.record("fail").status == "failed"
    assert s.record("fail").error == "no such file: caf\\udcff"
    assert "caf\\udcff" in (s.record("fail").traceback or "")
    assert s.result("found") == "found caf\\udcff"
    assert s.result("list") == {"files": ["caf\\udcff", "plain"]}
    # A result that is not JSON fails its task with a clear error, as before.
    assert s.record("keys").status == "failed"
    assert "can't encode character '\\udcff'" in (s.record("keys").error or "")
    sid = s.id
    s.close()
    again = ws.open(sid, tools=tools)
    try:
        assert again.result("found") == "found caf\\udcff"
        assert again.result("list") == {"files": ["caf\\udcff", "plain"]}
        errors = {
            e.task_id: getattr(e, "error", None)
            for e in again.events()
            if e.kind == "task_failed"
        }
        assert errors["fail"] == "no such file: caf\\udcff"
    finally:
        again.close()
