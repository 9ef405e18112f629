"""Trajectories as pandas DataFrames, post-mortem helpers, plots and reports.

Frames (each takes a Session, a Workspace or a list of Sessions)::

    sessions_df  one row per session          tasks_df       one row per task
    events_df    one row per event            attempts_df    one row per attempt
    llm_calls_df one row per model call       tool_calls_df  one row per tool call
    approvals_df one row per approval request

They link by ids: ``session_id``; ``task_id``; ``(session_id, task_id, attempt)``;
``(session_id, seq)`` for anything read from one event. Columns come from
declarative specs (:class:`Columns` of :class:`Column`) that compose with ``+``;
``schema()`` lists every column with its dtype and meaning. Timestamps are
tz-aware UTC, durations ``float64`` seconds, statuses and kinds categoricals, token
counts nullable ``Int64``, costs ``float64``; nested values (an event's
``details``, results, args) are JSON text. One missing-value marker per dtype:
NaN in float columns (durations, costs), NaT in timestamps, ``pd.NA`` in the
nullable string, Int64 and boolean columns. ``dtype_backend="pyarrow"`` gives
Arrow-backed frames. A Workspace is read strictly (a damaged session raises);
``strict=False`` skips it and lists it in ``df.attrs["skipped"]``.

Post-mortem (each takes a Session or :class:`Frames` of one session):
``critical_path``, ``failure_chains``, ``retries_summary``, ``cost_by``,
``slowest``, ``decisions``, ``plan_diff``, ``compare(parent, fork)``.
Plots return matplotlib Figures: ``timeline``, ``cost_over_time``,
``cost_per_task``. ``report(session)`` is a readable post-mortem that renders in
Jupyter and saves as markdown or HTML. ``export(src, folder)`` writes every frame
as parquet and ``load(folder)`` reads them back as :class:`Frames`.

Importing ``argus_lab`` does not import this module (nor pandas); it loads on
first use of ``al.analysis``.
"""

from __future__ import annotations

from argus_lab.analysis._changes import compare, decisions, plan_diff
from argus_lab.analysis._columns import Column, Columns, DtypeBackend, DtypeSpec
from argus_lab.analysis._frames import (
    FRAME_NAMES,
    Frames,
    approvals_df,
    attempts_df,
    events_df,
    frames,
    llm_calls_df,
    schema,
    sessions_df,
    tasks_df,
    tool_calls_df,
)
from argus_lab.analysis._io import export, load
from argus_lab.analysis._plots import cost_over_time, cost_per_task, timeline
from argus_lab.analysis._postmortem import (
    cost_by,
    critical_path,
    failure_chains,
    retries_summary,
    slowest,
)
from argus_lab.analysis._report import Report, report
from argus_lab.analysis._schema import (
    APPROVAL_COLUMNS,
    ATTEMPT_COLUMNS,
    EVENT_COLUMNS,
    EVENT_ID_COLUMNS,
    LLM_CALL_COLUMNS,
    SESSION_COLUMNS,
    TASK_COLUMNS,
    TOOL_CALL_COLUMNS,
    USAGE_COLUMNS,
)

__all__ = [
    "APPROVAL_COLUMNS",
    "ATTEMPT_COLUMNS",
    "EVENT_COLUMNS",
    "EVENT_ID_COLUMNS",
    "FRAME_NAMES",
    "LLM_CALL_COLUMNS",
    "SESSION_COLUMNS",
    "TASK_COLUMNS",
    "TOOL_CALL_COLUMNS",
    "USAGE_COLUMNS",
    "Column",
    "Columns",
    "DtypeBackend",
    "DtypeSpec",
    "Frames",
    "Report",
    "approvals_df",
    "attempts_df",
    "compare",
    "cost_by",
    "cost_over_time",
    "cost_per_task",
    "critical_path",
    "decisions",
    "events_df",
    "export",
    "failure_chains",
    "frames",
    "llm_calls_df",
    "load",
    "plan_diff",
    "report",
    "retries_summary",
    "schema",
    "sessions_df",
    "slowest",
    "tasks_df",
    "timeline",
    "tool_calls_df",
]
