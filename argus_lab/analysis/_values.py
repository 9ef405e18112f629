"""Value conversions the frames and the post-mortem helpers share (one copy each).

Frames hold pandas values (tz-aware Timestamps, Timedeltas, NA); rows and reports
want plain floats and JSON text.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical", "epoch", "secs"]


def secs(v: Any) -> float | None:
    """Seconds of a Timedelta (None for None, NaT or NA)."""
    import pandas as pd

    return None if v is None or pd.isna(v) else float(v.total_seconds())


def epoch(ts: Any) -> float | None:
    """Epoch seconds of a Timestamp (None for None, NaT or NA)."""
    import pandas as pd

    return None if ts is None or pd.isna(ts) else float(ts.value) / 1e9


def canonical(value: Any) -> str:
    """JSON text with sorted keys, so equal values give equal text."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
