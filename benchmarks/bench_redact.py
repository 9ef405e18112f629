"""The secret-shape scan every stored row goes through, the old way and the new.

A script, not a test. ``Redactor.needed`` is asked of every row a commit
writes. Text that holds a trigger word ("token", "secret", ...) used to be
scanned by ``SHAPES.search``, whose case-insensitive alternatives the regex
engine tries at every position; ``has_shape`` gives the same answer from the
keywords' positions (``tests/test_redact_shapes.py`` checks they agree).
Both run here in one process on the same texts; medians of ``--repeats``.

Usage::

    .venv/bin/python benchmarks/bench_redact.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import timeit
from collections.abc import Callable

from argus_lab._redact_forms import SHAPES, has_shape, may_have_shape

META = (
    '{"id":"20261202-135341-1c7a8e2f","name":"bench","goal":"benchmark chain 3",'
    '"status":"created","reason":null,"created":1796219621.9857142,'
    '"updated":1796219621.9857142,"parent":null,"forked_at":null,"n_tasks":3,'
    '"breakpoints":[],"budgets":{},"plan_version":1,"counts":{},'
    '"approvals":null,"n_secrets":0}'
)
PROSE = (
    "The model used 1,234 input tokens and 567 output tokens; the answer cites "
    "three sources. "
) * 120
JSON_ROWS = json.dumps(
    {
        "usage": {"input_tokens": 1234, "output_tokens": 567},
        "rows": [{"id": i, "name": f"row {i}", "value": i * 1.5} for i in range(150)],
    }
)
TEXTS = {
    "a session's meta row (holds n_secrets)": META,
    "10 KB of prose that says tokens": PROSE[:10_000],
    "7 KB of JSON with token counts": JSON_ROWS,
    "256 characters, no trigger": "x" * 256,
}


def old(s: str) -> bool:
    """What ``Redactor.needed`` did before (values aside)."""
    return may_have_shape(s) and SHAPES.search(s) is not None


def per_call_us(fn: Callable[[str], bool], text: str, repeats: int) -> float:
    n = max(1, 20_000 // max(len(text), 1))
    times = timeit.repeat(lambda: fn(text), number=n, repeat=repeats)
    return statistics.median(times) / n * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=9)
    args = p.parse_args()
    print(
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; medians of "
        f"{args.repeats}\n"
    )
    print("| text | bytes | before (regex) us | has_shape us | ratio |")
    print("|---|--:|--:|--:|--:|")
    for name, text in TEXTS.items():
        assert old(text) == has_shape(text)
        a = per_call_us(old, text, args.repeats)
        b = per_call_us(has_shape, text, args.repeats)
        print(f"| {name} | {len(text):,} | {a:.1f} | {b:.1f} | {a / b:.1f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
