"""HTN domains for tests.

- ``simple_travel``, ``blocks`` and ``backtracking``: ports of GTPyhop's
  simple_htn, blocks_htn and backtracking_htn examples (Clear BSD, github
  dananau/GTPyhop), planning over a state, so plans can be compared with the
  recorded GTPyhop plans in /work/shared/peer/gtpyhop/.
- ``trip``: an Argus-shaped domain (partial order, sibling results, a lazy
  compound, alternatives to backtrack to), with real tools in ``TRIP_TOOLS``.
"""

from __future__ import annotations

from typing import Any

import argus_lab as al
from argus_lab.plan.domain import HTNContext, HTNDomain, Subtask

State = dict[str, Any]

# -- GTPyhop simple_htn: travel by foot or taxi ------------------------------

_TYPES = {
    "person": {"alice", "bob"},
    "location": {"home_a", "home_b", "park", "station"},
    "taxi": {"taxi1", "taxi2"},
}
_DIST = {
    ("home_a", "park"): 8,
    ("home_b", "park"): 2,
    ("station", "home_a"): 1,
    ("station", "home_b"): 7,
    ("home_a", "home_b"): 7,
    ("station", "park"): 9,
}


def _is_a(x: object, kind: str) -> bool:
    return x in _TYPES[kind]


def _distance(x: str, y: str) -> int | None:
    return _DIST.get((x, y)) or _DIST.get((y, x))


def taxi_rate(dist: float) -> float:
    """GTPyhop's fare: 1.5 plus 0.5 a unit of distance."""
    return 1.5 + 0.5 * dist


def _walk(state: State, p: str, x: str, y: str) -> State | None:
    places = _is_a(x, "location") and _is_a(y, "location")
    if _is_a(p, "person") and places and x != y and state["loc"][p] == x:
        state["loc"][p] = y
        return state
    return None


def _call_taxi(state: State, p: str, x: str) -> State | None:
    if _is_a(p, "person") and _is_a(x, "location"):
        state["loc"]["taxi1"] = x
        state["loc"][p] = "taxi1"
        return state
    return None


def _ride_taxi(state: State, p: str, y: str) -> State | None:
    if _is_a(p, "person") and _is_a(state["loc"][p], "taxi") and _is_a(y, "location"):
        taxi = state["loc"][p]
        x = state["loc"][taxi]
        if _is_a(x, "location") and x != y:
            state["loc"][taxi] = y
            state["owe"][p] = taxi_rate(_distance(x, y) or 0)
            return state
    return None


def _pay_driver(state: State, p: str, y: str) -> State | None:
    if _is_a(p, "person") and state["cash"][p] >= state["owe"][p]:
        state["cash"][p] -= state["owe"][p]
        state["owe"][p] = 0
        state["loc"][p] = y
        return state
    return None


simple_travel = HTNDomain("simple_travel")
simple_travel.operator("walk", params=["who", "frm", "to"], effect=_walk)
simple_travel.operator("call_taxi", params=["who", "at"], effect=_call_taxi)
simple_travel.operator("ride_taxi", params=["who", "to"], effect=_ride_taxi)
simple_travel.operator("pay_driver", params=["who", "at"], effect=_pay_driver)


@simple_travel.method("travel")
def do_nothing(ctx: HTNContext, p: str, y: str) -> list[Any] | None:
    if _is_a(p, "person") and _is_a(y, "location") and ctx.state["loc"][p] == y:
        return []
    return None


@simple_travel.method("travel")
def travel_by_foot(ctx: HTNContext, p: str, y: str) -> list[Any] | None:
    if _is_a(p, "person") and _is_a(y, "location"):
        x = ctx.state["loc"][p]
        if x != y and (_distance(x, y) or 99) <= 2:
            return [("walk", p, x, y)]
    return None


@simple_travel.method("travel")
def travel_by_taxi(ctx: HTNContext, p: str, y: str) -> list[Any] | None:
    if _is_a(p, "person") and _is_a(y, "location"):
        x = ctx.state["loc"][p]
        if x != y and ctx.state["cash"][p] >= taxi_rate(_distance(x, y) or 0):
            return [("call_taxi", p, x), ("ride_taxi", p, y), ("pay_driver", p, y)]
    return None


# -- GTPyhop blocks_htn -------------------------------------------------------


def _pickup(state: State, x: Any) -> State | None:
    if state["pos"][x] == "table" and state["clear"][x] and state["holding"] is False:
        state["pos"][x] = "hand"
        state["clear"][x] = False
        state["holding"] = x
        return state
    return None


def _unstack(state: State, b: Any, c: Any) -> State | None:
    if (
        state["pos"][b] == c
        and c != "table"
        and state["clear"][b]
        and state["holding"] is False
    ):
        state["pos"][b] = "hand"
        state["clear"][b] = False
        state["holding"] = b
        state["clear"][c] = True
        return state
    return None


def _putdown(state: State, b: Any) -> State | None:
    if state["pos"][b] == "hand":
        state["pos"][b] = "table"
        state["clear"][b] = True
        state["holding"] = False
        return state
    return None


def _stack(state: State, b: Any, c: Any) -> State | None:
    if state["pos"][b] == "hand" and state["clear"][c]:
        state["pos"][b] = c
        state["clear"][b] = True
        state["holding"] = False
        state["clear"][c] = False
        return state
    return None


blocks = HTNDomain("blocks")
blocks.operator("pickup", params=["block"], effect=_pickup)
blocks.operator("unstack", params=["block", "below"], effect=_unstack)
blocks.operator("putdown", params=["block"], effect=_putdown)
blocks.operator("stack", params=["block", "onto"], effect=_stack)


def _is_done(b: Any, state: State, goal: dict[Any, Any]) -> bool:
    while True:
        if b == "table":
            return True
        if b in goal and goal[b] != state["pos"][b]:
            return False
        if state["pos"][b] == "table":
            return True
        b = state["pos"][b]


def _status(b: Any, state: State, goal: dict[Any, Any]) -> str:
    if _is_done(b, state, goal):
        return "done"
    if not state["clear"][b]:
        return "inaccessible"
    if b not in goal or goal[b] == "table":
        return "move-to-table"
    if _is_done(goal[b], state, goal) and state["clear"][goal[b]]:
        return "move-to-block"
    return "waiting"


@blocks.method("achieve")
def m_moveblocks(ctx: HTNContext, goal: dict[Any, Any]) -> list[Any]:
    """Moves one block where it can go for good, then achieves the rest."""
    state = ctx.state
    for b in state["clear"]:
        s = _status(b, state, goal)
        if s == "move-to-table":
            return [("move_one", b, "table"), ("achieve", goal)]
        if s == "move-to-block":
            return [("move_one", b, goal[b]), ("achieve", goal)]
    for b in state["clear"]:
        if _status(b, state, goal) == "waiting":
            return [("move_one", b, "table"), ("achieve", goal)]
    return []


@blocks.method("move_one")
def m_move1(ctx: HTNContext, b: Any, dest: Any) -> list[Any]:
    return [("take", b), ("put", b, dest)]


@blocks.method("take")
def m_take(ctx: HTNContext, b: Any) -> list[Any] | None:
    state = ctx.state
    if not state["clear"][b]:
        ctx.reject(f"block {b!r} is not clear")
    if state["pos"][b] == "table":
        return [("pickup", b)]
    return [("unstack", b, state["pos"][b])]


@blocks.method("put")
def m_put(ctx: HTNContext, b: Any, dest: Any) -> list[Any] | None:
    if ctx.state["holding"] != b:
        return None
    return [("putdown", b)] if dest == "table" else [("stack", b, dest)]


# -- GTPyhop backtracking_htn -------------------------------------------------


def _putv(state: State, flag: int) -> State:
    state["flag"] = flag
    return state


def _getv(state: State, flag: int) -> State | None:
    return state if state["flag"] == flag else None


backtracking = HTNDomain("backtracking")
backtracking.operator("putv", params=["flag"], effect=_putv)
backtracking.operator("getv", params=["flag"], effect=_getv)


@backtracking.method("put_it")
def m_err(ctx: HTNContext) -> list[Any]:
    return [("putv", 0), ("getv", 1)]


@backtracking.method("put_it")
def m0(ctx: HTNContext) -> list[Any]:
    return [("putv", 0), ("getv", 0)]


@backtracking.method("put_it")
def m1(ctx: HTNContext) -> list[Any]:
    return [("putv", 1), ("getv", 1)]


def m_need0(ctx: HTNContext) -> list[Any]:
    return [("getv", 0)]


def m_need1(ctx: HTNContext) -> list[Any]:
    return [("getv", 1)]


for _task, _methods in {
    "need0": [m_need0],
    "need1": [m_need1],
    "need01": [m_need0, m_need1],
    "need10": [m_need1, m_need0],
}.items():
    for _m in _methods:
        backtracking.method(_task)(_m)


# -- trip: an Argus-shaped domain with real tools -----------------------------

DISTANCE_KM = {("home", "airport"): 20, ("home", "bakery"): 1}

trip = HTNDomain("trip")
trip.operator("walk", params=["who", "to"])
trip.operator("call_taxi", params=["who", "at"])
trip.operator("ride_taxi", params=["who", "to"])
trip.operator("pay_driver", params=["who"])
trip.operator("buy_ticket", params=["who", "line"])
trip.operator("ride_train", params=["who", "to"])
trip.operator("book_flight", params=["city"])
trip.operator("board", params=["who"])
trip.operator("find_hotels", params=["city"])
trip.operator("book_hotel", params=["name", "nights"])


@trip.method("trip")
def fly_there(
    ctx: HTNContext, who: str, home: str, city: str, nights: int
) -> list[Any]:
    """Get to the airport while booking the flight; hotels only if staying."""
    steps: list[Any] = [
        Subtask("travel", who, home, "airport", id="to_airport"),
        Subtask("book_flight", city, id="flight", deps=[]),
        Subtask("board", who, flight="${flight.result.code}", deps=["to_airport"]),
    ]
    if nights:
        steps += [
            Subtask("find_hotels", city, id="hotels", deps=[]),
            Subtask("lodging", "${hotels.result}", nights),
        ]
    return steps


@trip.method("travel")
def by_foot(ctx: HTNContext, who: str, frm: str, to: str) -> list[Any]:
    km = DISTANCE_KM[(frm, to)]
    if km > 2:
        ctx.reject(f"{to} is {km} km away; walking needs <= 2 km")
    return [("walk", who, to)]


@trip.method("travel")
def by_taxi(ctx: HTNContext, who: str, frm: str, to: str) -> list[Any]:
    return [("call_taxi", who, frm), ("ride_taxi", who, to), ("pay_driver", who)]


@trip.method("travel")
def by_train(ctx: HTNContext, who: str, frm: str, to: str) -> list[Any]:
    return [("buy_ticket", who, "S1"), ("ride_train", who, to)]


@trip.method("lodging")
def cheapest_hotel(
    ctx: HTNContext, hotels: list[dict[str, Any]], nights: int
) -> list[Any]:
    """Books the cheapest hotel found: needs find_hotels' result, hence lazy."""
    if not hotels:
        ctx.reject("no hotels found")
    best = min(hotels, key=lambda h: h["price"])
    return [("book_hotel", best["name"], nights)]


def trip_tools(log: list[str], *, taxi_strike: bool = False) -> list[al.Tool]:
    """Real tools for ``trip``; each call is appended to ``log``."""

    @al.tool
    def walk(who: str, to: str) -> dict[str, str]:
        log.append("walk")
        return {"at": to}

    @al.tool
    def call_taxi(who: str, at: str) -> dict[str, str]:
        log.append("call_taxi")
        return {"taxi": "T1"}

    @al.tool
    def ride_taxi(who: str, to: str) -> dict[str, str]:
        log.append("ride_taxi")
        if taxi_strike:
            raise al.ToolError("taxi drivers are on strike today")
        return {"at": to}

    @al.tool
    def pay_driver(who: str) -> dict[str, float]:
        log.append("pay_driver")
        return {"paid": 11.5}

    @al.tool
    def buy_ticket(who: str, line: str) -> dict[str, str]:
        log.append("buy_ticket")
        return {"ticket": f"{line}-42"}

    @al.tool
    def ride_train(who: str, to: str) -> dict[str, str]:
        log.append("ride_train")
        return {"at": to}

    @al.tool
    def book_flight(city: str) -> dict[str, str]:
        log.append("book_flight")
        return {"code": "AF1234", "to": city}

    @al.tool
    def board(who: str, flight: str) -> dict[str, str]:
        log.append("board")
        return {"boarded": flight}

    @al.tool
    def find_hotels(city: str) -> list[dict[str, object]]:
        log.append("find_hotels")
        return [
            {"name": f"{city} Grand", "price": 180},
            {"name": f"{city} Inn", "price": 95},
        ]

    @al.tool
    def book_hotel(name: str, nights: int) -> dict[str, object]:
        log.append("book_hotel")
        return {"booked": name, "nights": nights}

    return [
        find_hotels,
        book_hotel,
        walk,
        call_taxi,
        ride_taxi,
        pay_driver,
        buy_ticket,
        ride_train,
        book_flight,
        board,
    ]
