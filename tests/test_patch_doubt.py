"""Plan patches never touch a task in doubt, nor reuse a retired task's keys.

A backtrack (HTN) or a replan (LLM) that happens while a write is in doubt
could remove the task the person is asked about (their answer then raised
KeyError) and put in a new call repeating its effect (a second charge). It
waits instead: the failed task fails saying so, the run pauses with the
question, and once the person has answered, retrying the failed task lets the
remedy go ahead. Every payment goes to a ledger file outside the workspace.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.events import EventBase
from argus_lab.llm import ModelRequest
from argus_lab.llm.testing import FunctionModel, tool_call
from argus_lab.plan import Plan
from argus_lab.plan.domain import HTNContext, HTNDomain, Subtask
from argus_lab.plan.htn import HTNPlanner
from argus_lab.plan.patch import PlanPatch
from argus_lab.runtime import abandoned
from argus_lab.tools.registry import Tool

DEADLINE = 30.0
"""Seconds a test waits for another thread before it fails."""


def _ledger(path: Path) -> list[list[str]]:
    """The payments made: one ``key item amount`` line each."""
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines()]


def _advised(reason: str) -> list[tuple[str, str]]:
    """The ``s.retry('id')`` / ``s.skip('id')`` calls a reason advises."""
    return re.findall(r"s\.(retry|skip)\('([^']+)'\)", reason)


def _on(kind: str) -> tuple[threading.Event, Callable[[EventBase], None]]:
    """An event set when an event of ``kind`` is committed (a subscriber)."""
    seen = threading.Event()

    def cb(ev: EventBase) -> None:
        if ev.kind == kind:
            seen.set()

    return seen, cb


def _shop(second_charges: bool) -> HTNDomain:
    """checkout: charge beside reserve from stock; else a backorder (charging
    again in it when ``second_charges``)."""
    shop = HTNDomain("shop")
    shop.operator("charge", params=["item", "amount"])
    shop.operator("reserve", params=["item"])
    shop.operator("reserve_backorder", params=["item"])

    @shop.method("checkout")
    def from_stock(ctx: HTNContext, item: str, amount: int) -> list[Any]:
        return [
            Subtask("charge", item, amount, id="charge"),
            Subtask("reserve", item, id="reserve", deps=[]),  # beside the charge
        ]

    @shop.method("checkout")
    def backorder(ctx: HTNContext, item: str, amount: int) -> list[Any]:
        if second_charges:
            return [("reserve_backorder", item), ("charge", item, amount)]
        return [("reserve_backorder", item)]

    return shop


def _shop_tools(
    ledger: Path, doubted: threading.Event, *, lands: bool, timeout: float | None
) -> tuple[list[Tool], threading.Event]:
    """charge (not idempotent): its first call fails in doubt, having charged
    (``lands``) or not; with ``timeout`` it instead hangs past it until the
    returned event is set. reserve fails for good (out of stock), the first
    time only once the charge is in doubt."""
    release = threading.Event()
    reserves: list[str] = []
    charges: list[int] = []

    @al.tool(side_effect="write", timeout=timeout)
    def charge(item: str, amount: int, *, ctx: al.ToolContext) -> dict[str, int]:
        first = not charges
        charges.append(ctx.attempt)
        if first and timeout is not None:
            release.wait(DEADLINE)  # a slow gateway, past the timeout
        if not first or lands or timeout is not None:
            with ledger.open("a") as f:
                f.write(f"{ctx.idempotency_key} {item} {amount}\n")
        if first and timeout is None:
            raise ConnectionResetError("connection reset after the request went out")
        return {"charged": amount}

    @al.tool(inline=False)  # waits on its thread, not on the session's loop
    def reserve(item: str) -> dict[str, str]:
        if not reserves:
            assert doubted.wait(DEADLINE), "the charge never went in doubt"
        reserves.append(item)
        raise al.ToolError("out of stock")

    @al.tool
    def reserve_backorder(item: str) -> dict[str, str]:
        return {"backorder": item}

    return [charge, reserve, reserve_backorder], release


def _htn_session(
    ws: al.Workspace,
    ledger: Path,
    *,
    second_charges: bool = False,
    lands: bool = True,
    timeout: float | None = None,
) -> tuple[al.Session, threading.Event]:
    planner = HTNPlanner(_shop(second_charges))
    doubted, on_doubt = _on("in_doubt")
    tools, release = _shop_tools(ledger, doubted, lands=lands, timeout=timeout)
    s = ws.new_session(
        plan=planner.plan("checkout", "laptop", 1200),
        tools=tools,
        name="shop",
        planner=planner,
        approvals=[],
        concurrency=2,
    )
    s.subscribe(on_doubt)
    return s, release


def _advice_works(s: al.Session) -> None:
    """Every task the pause reason tells the person to retry or skip is in
    the plan (answering raised KeyError when a patch had removed it)."""
    reason = s.info.reason or ""
    advised = _advised(reason)
    assert advised, reason
    ids = {t.id for t in s.plan.tasks}
    assert {tid for _, tid in advised} <= ids, reason


def test_a_backtrack_waits_while_a_charge_beside_it_is_in_doubt(
    ws: al.Workspace, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    s, _ = _htn_session(ws, ledger, lands=False)
    res = s.run()
    assert res.status == "paused", res
    # The charge is still there, in doubt; the failed reserve did not backtrack.
    assert s.record("checkout/charge").status == "in_doubt"
    reserve = s.record("checkout/reserve")
    assert reserve.status == "failed"
    assert "backtracking waits" in (reserve.error or "")
    assert "s.retry('checkout/reserve')" in (reserve.error or "")
    assert s.info.plan_version == 1  # no patch
    assert [e for e in s.events() if e.kind == "plan_patched"] == []
    failed = next(e for e in s.events() if e.kind == "task_failed")
    assert failed.policy == "waiting"  # type: ignore[attr-defined]
    reason = s.info.reason or ""
    # The question comes first, and what to do after it.
    assert reason.index("s.retry('checkout/charge')") < reason.index(
        "s.retry('checkout/reserve')"
    )
    _advice_works(s)
    assert _ledger(ledger) == []
    assert s.run().status == "paused"  # nothing runs while it is in doubt
    assert _ledger(ledger) == []

    # The person checks the ledger: the charge did not land. They retry it
    # (same idempotency key), then the reserve, which fails again and now
    # backtracks to the backorder.
    key = s.record("checkout/charge").idempotency_key
    s.retry("checkout/charge")
    res = s.run()
    assert res.status == "failed", res  # the reserve still failed
    assert s.record("checkout/charge").status == "succeeded"
    assert _ledger(ledger) == [[key, "laptop", "1200"]]  # type: ignore[list-item]
    s.retry("checkout/reserve")
    res = s.run()
    assert res.status == "succeeded", res
    ids = [t.id for t in s.plan.tasks]
    assert "checkout/reserve" not in ids and "checkout/charge" in ids
    back = next(t for t in s.plan.tasks if t.tool == "reserve_backorder")
    assert s.record(back.id).status == "succeeded"
    patch = next(e for e in s.events() if e.kind == "plan_patched")
    assert patch.compound == "checkout"  # type: ignore[attr-defined]
    assert patch.removed == ["checkout/reserve"]  # type: ignore[attr-defined]
    assert len(_ledger(ledger)) == 1  # exactly one charge
    s.close()


def test_a_method_that_charges_again_waits_for_the_answer(
    ws: al.Workspace, tmp_path: Path
) -> None:
    # hunt13 find_01: the backtrack removed the in-doubt charge and its next
    # method charged again on the next run, under another key.
    ledger = tmp_path / "ledger.txt"
    s, _ = _htn_session(ws, ledger, second_charges=True, lands=True)
    assert s.run().status == "paused"
    assert s.record("checkout/charge").status == "in_doubt"
    _advice_works(s)
    assert s.run().status == "paused"
    assert len(_ledger(ledger)) == 1
    assert [t.tool for t in s.plan.tasks].count("charge") == 1
    # The charge landed: the person says so. Nothing is charged again
    # while the reserve stays failed.
    s.skip("checkout/charge", "charged: it is in the ledger")
    res = s.run()
    assert res.status == "failed", res
    assert "checkout/reserve" in res.failed
    assert len(_ledger(ledger)) == 1
    s.close()


def test_a_backtrack_waits_while_a_timed_out_charge_still_runs(
    ws: al.Workspace, tmp_path: Path
) -> None:
    # hunt13 find_01b: the backtrack removed a charge still running on its
    # thread past its timeout; the next run charged beside it.
    ledger = tmp_path / "ledger.txt"
    s, release = _htn_session(ws, ledger, timeout=0.05)
    try:
        assert s.run().status == "paused"
        charge = s.record("checkout/charge")
        assert charge.status == "in_doubt"
        assert s.record("checkout/reserve").status == "failed"
        assert "still runs" in (s.record("checkout/reserve").error or "")
        _advice_works(s)
        assert s.run().status == "paused"
        assert [t.tool for t in s.plan.tasks].count("charge") == 1
        with pytest.raises(al.ArgusError, match="still running in this process"):
            s.retry("checkout/charge")
        assert _ledger(ledger) == []  # the first call has not landed yet
        release.set()
        assert abandoned.wait(s.id, "checkout/charge", DEADLINE)
        assert len(_ledger(ledger)) == 1  # it landed
        s.skip("checkout/charge", "it went through")
        s.retry("checkout/reserve")
        res = s.run()
        assert res.status == "succeeded", res
        assert any(t.tool == "reserve_backorder" for t in s.plan.tasks)
        assert len(_ledger(ledger)) == 1
    finally:
        release.set()
        s.close()


def test_a_replan_waits_while_a_charge_is_in_doubt(
    ws: al.Workspace, tmp_path: Path
) -> None:
    # A model replacing the failed reserve may put in a charge of its own:
    # it is not even asked while the first charge is in doubt.
    ledger = tmp_path / "ledger.txt"
    doubted, on_doubt = _on("in_doubt")
    tools, _ = _shop_tools(ledger, doubted, lands=True, timeout=None)

    def replan(req: ModelRequest) -> object:
        return tool_call(
            "submit_plan",
            {
                "goal": "x",
                "tasks": [
                    {"id": "back", "tool": "reserve_backorder", "args": {"item": "pc"}},
                    {
                        "id": "charge2",
                        "tool": "charge",
                        "args": {"item": "pc", "amount": 5},
                        "deps": ["back"],
                    },
                ],
            },
        )

    model = FunctionModel(replan)
    plan = {
        "goal": "sell a pc",
        "tasks": [
            {"id": "charge", "tool": "charge", "args": {"item": "pc", "amount": 5}},
            {
                "id": "reserve",
                "tool": "reserve",
                "args": {"item": "pc"},
                "on_failure": "replan",
            },
        ],
    }
    s = ws.new_session(
        plan=plan,
        tools=tools,
        name="llm-shop",
        planner=al.LLMPlanner(model),
        approvals=[],
        concurrency=2,
    )
    s.subscribe(on_doubt)
    assert s.run().status == "paused"
    assert model.requests == []  # not asked while in doubt
    assert s.record("charge").status == "in_doubt"
    assert "replan waits" in (s.record("reserve").error or "")
    _advice_works(s)
    assert s.run().status == "paused"
    assert len(_ledger(ledger)) == 1
    s.skip("charge", "it is in the ledger")
    s.retry("reserve")
    res = s.run()
    assert res.status == "succeeded", res
    assert len(model.requests) == 1
    assert [t.id for t in s.plan.tasks] == ["charge", "back", "charge2"]
    # The replacement's charge is the plan the model made, asked once the
    # question was answered; the first charge was never repeated.
    keys = [row[0] for row in _ledger(ledger)]
    assert len(keys) == 2 and len(set(keys)) == 2
    s.close()


# -- a retired id is never reused with its old keys -----------------------------


class _Remote:
    """A Stripe-like remote: the same idempotency key replays the reply."""

    def __init__(self) -> None:
        self.replies: dict[str, dict[str, Any]] = {}
        self.booked: list[str] = []

    def book(self, venue: str, key: str) -> dict[str, Any]:
        if key not in self.replies:
            ok = venue != "hall"
            if ok:
                self.booked.append(venue)
            self.replies[key] = {"ok": ok, "why": "" if ok else "hall closed"}
        return self.replies[key]


def _venue_tools(remote: _Remote, keys: dict[str, list[str]]) -> list[Tool]:
    @al.tool
    def add(a: int, b: int = 0) -> dict[str, int]:
        return {"sum": a + b}

    @al.tool(side_effect="write", idempotent=True)
    def book(venue: str, *, ctx: al.ToolContext) -> dict[str, str]:
        keys.setdefault(venue, []).append(ctx.idempotency_key)
        reply = remote.book(venue, ctx.idempotency_key)
        if not reply["ok"]:
            raise al.ToolError(reply["why"])
        return {"booked": venue}

    return [add, book]


VENUE_PLAN = {
    "goal": "book a venue",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1}},
        {
            "id": "book_a",
            "tool": "book",
            "args": {"venue": "hall"},
            "deps": ["a"],
            "on_failure": "replan",
        },
    ],
}


def test_the_replanner_is_told_retired_ids_are_taken(ws: al.Workspace) -> None:
    # hunt13 find_04: a second replan re-added the retired id book_a; the new
    # call got the old call's key and the remote replayed "hall closed".
    remote, keys = _Remote(), {}
    asked: list[str] = []

    def replanner(req: ModelRequest) -> object:
        text = req.model_dump_json()
        asked.append(req.messages[0].text)
        if len(asked) == 1:
            t = {"id": "book_b", "tool": "book", "args": {"venue": "hall"}}
            t |= {"deps": ["a"], "on_failure": "replan"}
        elif "these ids are taken: book_a" not in text:
            t = {"id": "book_a", "tool": "book", "args": {"venue": "garden"}}
        else:  # told the id is taken, it picks another
            t = {"id": "book_c", "tool": "book", "args": {"venue": "garden"}}
        return tool_call("submit_plan", {"goal": "x", "tasks": [t | {"deps": ["a"]}]})

    s = ws.new_session(
        plan=VENUE_PLAN,
        tools=_venue_tools(remote, keys),
        name="venue",
        approvals=[],
        planner=al.LLMPlanner(FunctionModel(replanner)),
    )
    res = s.run()
    assert res.status == "succeeded", res
    second = next(a for a in asked if "'book_b' failed" in a)
    assert "book_a" in second.rpartition("must not be any of:")[2]
    assert [t.id for t in s.plan.tasks] == ["a", "book_c"]
    assert remote.booked == ["garden"]
    assert len({k for ks in keys.values() for k in ks}) == 3
    s.close()


class _StubbornReplanner:
    """A replanner of one's own that ignores ``reserved``: its second patch
    re-adds the retired id ``book_a``, calling book(garden)."""

    def __init__(self) -> None:
        self.rounds: list[dict[str, Any]] = []
        self.n = 0

    def replan(
        self, plan: Plan, failed_task_id: str, **kw: Any
    ) -> PlanPatch:  # the Replanning protocol
        self.n += 1
        tid, venue = ("book_b", "hall") if self.n == 1 else ("book_a", "garden")
        task = al.Task(
            id=tid,
            tool="book",
            args={"venue": venue},
            deps=["a"],
            on_failure="replan" if self.n == 1 else "fail",
        )
        return PlanPatch(added=[task], removed=[failed_task_id], reason="again")


def test_a_re_added_id_starts_a_new_generation_with_new_keys(
    ws: al.Workspace,
) -> None:
    # Defensive (any planner): a re-added id gets the generation after its
    # retired record, so its key differs; its record is written with the
    # patch, so a reopen finds it pending, not the retired failure (find_04b).
    remote, keys = _Remote(), {}
    tools = _venue_tools(remote, keys)
    s = ws.new_session(
        plan=VENUE_PLAN,
        tools=tools,
        name="venue",
        approvals=[],
        planner=_StubbornReplanner(),
    )
    for _ in range(3):  # a, then book_a fails (-> book_b), book_b fails
        s.step()
    assert [t.id for t in s.plan.tasks] == ["a", "book_a"]
    rec = s.record("book_a")
    assert (rec.status, rec.generation, rec.error) == ("pending", 1, None)
    s.close()
    with ws.open("venue", tools=tools, planner=_StubbornReplanner()) as again:
        rec = again.record("book_a")
        assert (rec.status, rec.generation) == ("pending", 1)
        assert again.plan.task("book_a").args == {"venue": "garden"}
        res = again.run()
        assert res.status == "succeeded", res
    assert remote.booked == ["garden"]
    assert keys["garden"][0] not in keys["hall"]


# -- s.step() when the task it ran was patched out -----------------------------


def test_step_returns_the_record_of_a_task_a_patch_took_out(
    ws: al.Workspace,
) -> None:
    # hunt13 find_05: step() raised a bare KeyError for the backtracked task.
    shop = HTNDomain("shop")
    shop.operator("reserve", params=["item", "where"])

    @shop.method("checkout")
    def from_stock(ctx: HTNContext, item: str) -> list[Any]:
        return [("reserve", item, "stock")]

    @shop.method("checkout")
    def backorder(ctx: HTNContext, item: str) -> list[Any]:
        return [("reserve", item, "backorder")]

    @al.tool
    def reserve(item: str, where: str) -> dict[str, str]:
        if where == "stock":
            raise al.ToolError("out of stock")
        return {"reserved": where}

    planner = HTNPlanner(shop)
    s = ws.new_session(
        plan=planner.plan("checkout", "laptop"),
        tools=[reserve],
        name="htn",
        planner=planner,
    )
    [rec] = s.step()
    assert (rec.task_id, rec.status) == ("checkout/reserve", "failed")
    assert (rec.reason or "").startswith("backtracked")
    assert s.run().status == "succeeded"

    def replan(req: ModelRequest) -> object:
        return tool_call(
            "submit_plan",
            {
                "goal": "x",
                "tasks": [
                    {
                        "id": "b2",
                        "tool": "reserve",
                        "args": {"item": "pc", "where": "x"},
                    }
                ],
            },
        )

    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": "b",
                "tool": "reserve",
                "args": {"item": "pc", "where": "stock"},
                "on_failure": "replan",
            }
        ],
    }
    s2 = ws.new_session(
        plan=plan,
        tools=[reserve],
        name="llm",
        planner=al.LLMPlanner(FunctionModel(replan)),
    )
    [rec] = s2.step()
    assert (rec.task_id, rec.status, rec.reason) == ("b", "failed", "replanned")
    assert s2.run().status == "succeeded"
    s.close()
    s2.close()
