"""Value conversions the frames and the post-mortem helpers share (one copy each).

Frames hold pandas values (tz-aware Timestamps, durations as float seconds, NA);
rows and reports want plain floats and JSON text.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical", "epoch", "fmt_duration", "secs"]


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


def fmt_duration(seconds: float | None) -> str:
    """Seconds as a person reads them: "5 ms", "0.44 s", "12.3 s", "2 min 3 s",
    "1 h 5 min"; an em dash for none (None or NaN)."""
    if seconds is None or seconds != seconds:
        return "—"
    if seconds < 0.01:
        ms = seconds * 1000
        return f"{ms:.0f} ms" if ms >= 1 or ms == 0 else f"{ms:.2f} ms"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"
