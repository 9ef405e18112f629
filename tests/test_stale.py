"""Invariant 8: stale is visible; rerun_stale reruns exactly what changed."""

from __future__ import annotations

import pytest

import argus_lab as al

CELL_V1 = "def scale(x: int) -> int:\n    return x * 2\n"
CELL_V2 = "def scale(x: int) -> int:\n    return x * 3\n"
CALLS: list[str] = []


@al.tool
def plus(x: int, y: int = 0) -> int:
    """Adds."""
    CALLS.append(f"plus({x},{y})")
    return x + y


PLAN = {
    "goal": "g",
    "tasks": [
        {"id": "base", "tool": "plus", "args": {"x": 1}},
        {"id": "scaled", "tool": "scale", "args": {"x": "${base.result}"}},
        {"id": "after", "tool": "plus", "args": {"x": "${scaled.result}", "y": 1}},
        {"id": "final", "tool": "plus", "args": {"x": "${after.result}"}},
        {"id": "other", "tool": "plus", "args": {"x": 10}},
    ],
}


def test_redefining_a_tool_makes_it_and_its_descendants_stale(
    ws: al.Workspace,
) -> None:
    v1 = al.tool(compile_cell(CELL_V1), name="scale")
    s = ws.new_session(plan=PLAN, tools=[plus, v1], name="st")
    assert s.run().status == "succeeded"
    assert s.result("final") == 3 and s.stale() == []

    v2 = al.tool(compile_cell(CELL_V2), name="scale")
    assert v2.code_hash != v1.code_hash
    s.update_tools(v2)
    assert s.stale() == ["scaled", "after", "final"]

    CALLS.clear()
    res = s.rerun_stale()
    assert res.status == "succeeded"
    assert s.result("final") == 4
    # Only the stale tasks ran again: not "base", not "other".
    assert CALLS == ["plus(3,1)", "plus(4,0)"]
    assert s.stale() == []
    assert s.record("base").attempts == 1 and s.record("other").attempts == 1
    assert s.record("scaled").generation == 1


def test_stale_after_reopening_with_a_new_version(ws: al.Workspace) -> None:
    s = ws.new_session(
        plan=PLAN, tools=[plus, al.tool(compile_cell(CELL_V1), name="scale")], name="re"
    )
    s.run()
    s.close()
    with ws.open("re", tools=[plus, al.tool(compile_cell(CELL_V2), name="scale")]) as o:
        assert o.stale() == ["scaled", "after", "final"]
    with ws.open("re", tools=[plus, al.tool(compile_cell(CELL_V1), name="scale")]) as o:
        assert o.stale() == []


def compile_cell(src: str) -> object:
    ns: dict[str, object] = {}
    exec(compile(src, "<ipython-input-7>", "exec"), ns)
    return ns["scale"]


ADDR = "alice.smith-7@example.org"


@al.tool
def signer() -> str:
    """Returns text holding a value a later process knows as a secret."""
    return f"signed by {ADDR}"


@al.tool
def send(to: str) -> str:
    """Sends (a side effect a needless rerun would repeat)."""
    CALLS.append(f"send({to})")
    return "sent"


def ran_in_clear(ws: al.Workspace, name: str) -> None:
    """A run whose "b" hashed ADDR in clear: no secret was known then."""
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "signer"},
            {"id": "b", "tool": "send", "args": {"to": "${a.result}"}},
        ],
    }
    s = ws.new_session(plan=plan, tools=[signer, send], name=name)
    assert s.run().status == "succeeded"
    s.close()


def test_a_secret_known_only_after_the_run_makes_nothing_stale(
    ws: al.Workspace,
) -> None:
    # input_hash masks secrets in resolved arguments with the session's
    # redactor, which differs between processes (secrets=[...], secret-named
    # env vars such as GIT_AUTHOR_EMAIL): the same call must not turn stale.
    ran_in_clear(ws, "later")
    with ws.open("later", tools=[signer, send], secrets=[ADDR]) as o:
        assert o.stale() == []
        CALLS.clear()
        assert o.rerun_stale().status == "succeeded"
        assert CALLS == []


def test_a_fork_knowing_more_secrets_replays_instead_of_sending_again(
    ws: al.Workspace,
) -> None:
    # Invariant 9: a fork re-running "b" is served the parent's recorded
    # result, found by the parent's input_hash, which was taken in clear.
    ran_in_clear(ws, "parent")
    with ws.open("parent", tools=[signer, send], secrets=[ADDR]) as o:
        CALLS.clear()
        f = o.fork(at="b")
        assert f.run().status == "succeeded"
        assert CALLS == [] and f.result("b") == "sent"
        f.close()


@al.tool(side_effect="write")
def deliver(to: str) -> str:
    """Sends, once a person approved it."""
    CALLS.append(f"deliver({to})")
    return "sent"


@al.tool
def login(token: str) -> str:
    """Reads a value through ${env.NAME}: the run masks it from then on."""
    return "ok" if token else "no"


ENV_TOOLS = [signer, deliver, login]


def ran_with_env_read_late(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A run whose "b" hashed a's result with ADDR masked: "e" had read ADDR
    through ${env.NAME} before "b" ran (b waited for approval), though "b"
    comes before "e" in dependency order (they are unordered)."""
    monkeypatch.setenv("SIGNER_ADDR", ADDR)
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "signer"},
            {"id": "b", "tool": "deliver", "args": {"to": "${a.result}"}},
            # After "a": a's result is stored in clear (ADDR no secret yet).
            {
                "id": "e",
                "tool": "login",
                "deps": ["a"],
                "args": {"token": "${env.SIGNER_ADDR}"},
            },
        ],
    }
    with ws.new_session(plan=plan, tools=ENV_TOOLS, name=name) as s:
        assert s.run().status == "paused"
        assert s.record("e").status == "succeeded"
        assert ADDR in s.result("a")
        s.approve("b", by="me")
        assert s.run().status == "succeeded"
        assert s.stale() == []


def test_a_task_checked_before_the_one_whose_env_secret_it_hashed_is_not_stale(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # stale() after a reopen walks dependencies first, "b" before "e": ADDR
    # must be known by then.
    ran_with_env_read_late(ws, monkeypatch, "envlate")
    with ws.open("envlate", tools=ENV_TOOLS) as o:
        assert o.stale() == []
        CALLS.clear()
        assert o.rerun_stale().status == "succeeded"
        assert CALLS == []


def test_a_fork_of_it_replays_the_write_instead_of_sending_again(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fork reruns "b" first: its recorded result is found by the hash
    # taken with ADDR masked, which "e" (kept, not rerun) made a secret.
    ran_with_env_read_late(ws, monkeypatch, "envfork")
    with ws.open("envfork", tools=ENV_TOOLS) as o:
        CALLS.clear()
        f = o.fork(at="b")
        try:
            assert f.run().status == "succeeded"
            assert CALLS == [] and f.result("b") == "sent"
        finally:
            f.close()
