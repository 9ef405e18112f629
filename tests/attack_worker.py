"""Runners that tests/test_faults_resume.py kills at moments no other test tried.

``python tests/attack_worker.py remember WS``: runs session "mem" (two tasks
whose results are remembered, ``remember=True``) to its end while the memory
writer thread is held before its first LanceDB write; prints the run's status,
then SIGKILLs itself: every step is committed, no memory was written.

The tests import this module for the same tools and plans.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import argus_lab as al


@al.tool
def survey(city: str) -> dict[str, Any]:
    """Surveys venues in a city (no side effect)."""
    return {"city": city, "best_venue": f"Fabrica {city}", "capacity": 300}


MEM_TOOLS = [survey]
MEM_PLAN = {
    "goal": "find a venue",
    "tasks": [
        {"id": "lisbon", "tool": "survey", "args": {"city": "Lisbon"}},
        {"id": "porto", "tool": "survey", "args": {"city": "Porto"}},
    ],
}


def remember(ws: Path) -> None:
    """Runs "mem" to its end with the memory writer held, then dies."""
    from argus_lab.store import memory

    def held(*args: Any, **kwargs: Any) -> None:
        threading.Event().wait()  # until SIGKILL

    memory.remember_result = held  # type: ignore[assignment]
    s = al.Workspace(ws).new_session(
        plan=MEM_PLAN, tools=MEM_TOOLS, name="mem", remember=True
    )
    print(s.run().status, flush=True)


def main() -> None:
    what, ws = sys.argv[1], Path(sys.argv[2])
    if what == "remember":
        remember(ws)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
