"""Value conversions the frames and the post-mortem helpers share (one copy each).

Frames hold pandas values (tz-aware Timestamps, durations as float seconds, NA);
rows and reports want plain floats and JSON text.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical", "epoch", "secs"]


def secs(v: Any) -> float | None:
    """Seconds of a duration: a number of seconds (the frames' float64 durations)
    or a Timedelta; None for None, NaN, NaT or NA."""
    import pandas as pd

    if v is None or pd.isna(v):
        return None
    return float(v.total_seconds()) if hasattr(v, "total_seconds") else float(v)


def epoch(ts: Any) -> float | None:
    """Epoch seconds of a Timestamp (None for None, NaT or NA)."""
    import pandas as pd

    return None if ts is None or pd.isna(ts) else float(ts.value) / 1e9


# One encoder for every call: json.dumps with options builds a new JSONEncoder
# each time, which was most of tasks_df's cost (10,000 results: 0.17 s of 0.4 s).
_ENCODE = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str).encode


_STR = json.encoder.encode_basestring  # what _ENCODE writes for a str


def canonical(value: Any) -> str:
    """JSON text with sorted keys, so equal values give equal text."""
    # The common shapes (a text result, a list of task ids) without the encoder's
    # per-call setup; the text is the same as _ENCODE's (tests compare them).
    if type(value) is str:
        return _STR(value)
    if type(value) is list and all(type(v) is str for v in value):
        return "[" + ", ".join(map(_STR, value)) + "]"
    return _ENCODE(value)
