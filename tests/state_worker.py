"""A writer process for the state tests (run as a script; tests kill it).

``python tests/state_worker.py count WS N opt|lock ID``: N transactions, each
adding 1 to ``total`` and to ``per[ID]`` of the state "counters".

``python tests/state_worker.py crash WS opt|lock``: commits forever to the state
"ledger", each transaction appending an entry and changing many fields at once
(so a half-applied patch would break the ``consistent`` invariant), printing
each committed version on its own line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, Field

import argus_lab as al
from argus_lab.store.state import State


class Counters(BaseModel):
    total: int = 0
    per: dict[str, int] = Field(default_factory=dict)


class Ledger(BaseModel):
    n: int = 0
    total: int = 0
    entries: list[int] = Field(default_factory=list)
    by_key: dict[str, int] = Field(default_factory=dict)


def consistent(s: Ledger) -> bool:
    """Every field moved together, or the version is torn."""
    return (
        s.n == len(s.entries)
        and s.total == sum(s.entries)
        and sum(s.by_key.values()) == s.total
    )


def open_ledger(ws: al.Workspace) -> State[Ledger]:
    st = ws.state("ledger", model=Ledger, snapshot_every=7)
    st.invariant(consistent)
    return st


def count(ws: al.Workspace, n: int, mode: str, me: str) -> None:
    st = ws.state("counters", model=Counters)

    def bump(s: Counters) -> None:
        s.total += 1
        s.per[me] = s.per.get(me, 0) + 1

    for _ in range(n):
        st.update(bump, retries=10_000, lock=mode == "lock", timeout=120)


def crash(ws: al.Workspace, lock: bool) -> None:
    st = open_ledger(ws)
    while True:
        with st.transaction(lock=lock) as s:
            k = s.n + 1
            s.n = k
            s.entries.append(k)
            s.total += k
            s.by_key[f"k{k % 13}"] = s.by_key.get(f"k{k % 13}", 0) + k
        print(st.version, flush=True)


if __name__ == "__main__":
    what, root = sys.argv[1], Path(sys.argv[2])
    w = al.Workspace(root)
    if what == "count":
        count(w, int(sys.argv[3]), sys.argv[4], sys.argv[5])
    else:
        crash(w, sys.argv[3] == "lock")
