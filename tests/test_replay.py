"""Invariant 9: a cached fork serves recorded results instead of paying again."""

from __future__ import annotations

import argus_lab as al

CALLS: list[str] = []


@al.tool
def fetch(q: str) -> dict[str, str]:
    """Pretend to pay for a search."""
    CALLS.append(f"fetch:{q}")
    return {"hits": q.upper()}


@al.tool
def summarize(text: str) -> str:
    """Pretend to pay for a summary."""
    CALLS.append(f"summarize:{text}")
    return f"summary of {text}"


PLAN = {
    "goal": "g",
    "tasks": [
        {"id": "a", "tool": "fetch", "args": {"q": "agents"}},
        {"id": "b", "tool": "summarize", "args": {"text": "${a.result.hits}"}},
        {"id": "c", "tool": "fetch", "args": {"q": "${b.result}"}},
    ],
}


def test_cached_fork_replays_unchanged_work_and_reruns_changed_code(
    ws: al.Workspace,
) -> None:
    s = ws.new_session(plan=PLAN, tools=[fetch, summarize], name="p")
    s.run()
    CALLS.clear()
    f = s.fork(at="b")
    assert f.run().status == "succeeded"
    assert CALLS == []  # b and c were served from the parent's recordings
    assert f.result("c") == s.result("c")
    replayed = [e for e in f.events() if e.kind == "task_succeeded"]
    assert {e.task_id for e in replayed} == {"b", "c"}
    assert all(getattr(e, "cached", None) for e in replayed)

    # A redefined tool changes the key: it really runs, and so does what follows.
    @al.tool(name="summarize")
    def summarize_v2(text: str) -> str:
        CALLS.append(f"summarize2:{text}")
        return f"short: {text}"

    g = s.fork(at="b")
    g.update_tools(summarize_v2)
    g.run()
    assert CALLS == ["summarize2:AGENTS", "fetch:short: AGENTS"]


def test_reuse_none_pays_again(ws: al.Workspace) -> None:
    s = ws.new_session(plan=PLAN, tools=[fetch, summarize], name="q")
    s.run()
    CALLS.clear()
    f = s.fork(at="b", reuse="none")
    f.run()
    assert CALLS == ["fetch:agents", "summarize:AGENTS", "fetch:summary of AGENTS"]
