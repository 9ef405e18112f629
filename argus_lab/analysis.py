"""Trajectories as pandas DataFrames, built from declarative column specs.

A ``Columns`` spec lists (name, dtype, getter); specs compose with ``+`` so later
frames (LLM calls, tool calls, approvals) reuse the shared ones. Frames are built
column by column from plain lists, never one pydantic object per row.

Dtypes: timestamps are tz-aware UTC (``datetime64[ns, UTC]``), durations
``timedelta64[ns]``, statuses and kinds ``category``, counts nullable ``Int64``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from argus_lab.model import STATUSES

if TYPE_CHECKING:
    import pandas as pd

    from argus_lab.runtime.session import Session
    from argus_lab.workspace import Workspace

__all__ = [
    "EVENT_COLUMNS",
    "TASK_COLUMNS",
    "Column",
    "Columns",
    "events_df",
    "tasks_df",
]

Row = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """One DataFrame column: its name, pandas dtype and how to read it from a row."""

    name: str
    dtype: str
    get: Callable[[Row], Any]


@dataclass(frozen=True)
class Columns:
    """An ordered column spec; ``a + b`` concatenates specs."""

    columns: tuple[Column, ...]

    def __add__(self, other: Columns) -> Columns:
        return Columns(self.columns + other.columns)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def frame(self, rows: Sequence[Row]) -> pd.DataFrame:
        """Builds the DataFrame, one column at a time, with the declared dtypes."""
        import pandas as pd

        data: dict[str, Any] = {}
        for c in self.columns:
            values = [c.get(r) for r in rows]
            data[c.name] = _series(values, c.dtype)
        return pd.DataFrame(data, columns=self.names)


def _series(values: list[Any], dtype: str) -> Any:
    import pandas as pd

    if dtype == "datetime64[ns, UTC]":
        return pd.to_datetime(pd.Series(values, dtype="float64"), unit="s", utc=True)
    if dtype == "timedelta64[ns]":
        return pd.to_timedelta(pd.Series(values, dtype="float64"), unit="s")
    if dtype.startswith("category:"):
        cats = dtype.split(":", 1)[1].split(",")
        return pd.Categorical(values, categories=cats)
    if dtype == "category":
        return pd.Series(values, dtype="category")
    return pd.Series(values, dtype=dtype)


def _key(name: str) -> Callable[[Row], Any]:
    return lambda r: r.get(name)


def _dur(r: Row) -> float | None:
    s, e = r.get("started"), r.get("ended")
    return e - s if s is not None and e is not None else None


SESSION_ID = Columns((Column("session_id", "string", _key("session_id")),))

TASK_COLUMNS = SESSION_ID + Columns(
    (
        Column("task_id", "string", _key("task_id")),
        Column("title", "string", _key("title")),
        Column("tool", "string", _key("tool")),
        Column("status", "category:" + ",".join(STATUSES), _key("status")),
        Column("attempts", "Int64", _key("attempts")),
        Column("n_deps", "Int64", _key("n_deps")),
        Column("started", "datetime64[ns, UTC]", _key("started")),
        Column("ended", "datetime64[ns, UTC]", _key("ended")),
        Column("duration", "timedelta64[ns]", _dur),
        Column("error", "string", _key("error")),
        Column("error_type", "string", _key("error_type")),
        Column("idempotency_key", "string", _key("idempotency_key")),
        Column("input_hash", "string", _key("input_hash")),
        Column("result_ref", "string", _key("result_ref")),
        Column("result", "object", _key("result")),
    )
)
"""Columns of ``tasks_df``: one row per task, in plan order."""

EVENT_COLUMNS = SESSION_ID + Columns(
    (
        Column("seq", "Int64", _key("seq")),
        Column("ts", "datetime64[ns, UTC]", _key("ts")),
        Column("kind", "category", _key("kind")),
        Column("task_id", "string", _key("task_id")),
        Column("attempt", "Int64", _key("attempt")),
        Column("duration", "timedelta64[ns]", _key("duration")),
        Column("payload", "object", _key("payload")),
    )
)
"""Columns of ``events_df``: one row per committed event, in seq order."""


def _sessions(src: Session | Workspace | Iterable[Session]) -> list[Session]:
    from argus_lab.runtime.session import Session
    from argus_lab.workspace import Workspace

    if isinstance(src, Session):
        return [src]
    if isinstance(src, Workspace):
        return [src.open(i.id) for i in src.sessions()]
    return list(src)


def _task_rows(s: Session) -> list[Row]:
    rows = []
    for t in s.plan.tasks:
        r = s.record(t.id).model_dump()
        r.update(
            session_id=s.id, title=t.title or t.id, tool=t.tool, n_deps=len(t.deps)
        )
        rows.append(r)
    return rows


def tasks_df(src: Session | Workspace | Iterable[Session]) -> pd.DataFrame:
    """One row per task of a session, a list of sessions, or a whole workspace."""
    rows = [r for s in _sessions(src) for r in _task_rows(s)]
    return TASK_COLUMNS.frame(rows)


def events_df(src: Session | Workspace | Iterable[Session]) -> pd.DataFrame:
    """One row per committed event of a session, sessions, or a workspace."""
    rows: list[Row] = []
    for s in _sessions(src):
        rows.extend(json.loads(b) for b in s._store.iter_event_json())
    return EVENT_COLUMNS.frame(rows)
