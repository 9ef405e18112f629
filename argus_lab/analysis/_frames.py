"""The frame functions (``tasks_df``, ``events_df``, ...) and ``Frames``, all at once.

Every function takes a Session, a Workspace (all its sessions) or a list of
Sessions, and returns one DataFrame whose columns are the frame's default spec
(see ``_schema``) unless ``columns=`` gives another (a spec composed with ``+``
from the exported ones, or your own Columns reading the same rows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from argus_lab.analysis import _rows, _tasks
from argus_lab.analysis._columns import Columns, DtypeBackend, Row, Table
from argus_lab.analysis._read import Read, SessionData, Source, read_sessions
from argus_lab.analysis._schema import FRAME_COLUMNS
from argus_lab.store._bulk import paused_gc

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FRAME_NAMES",
    "Frames",
    "approvals_df",
    "attempts_df",
    "events_df",
    "frames",
    "llm_calls_df",
    "schema",
    "sessions_df",
    "tasks_df",
    "tool_calls_df",
]

RowsFn = Callable[[SessionData], "list[Row] | Table"]

_ROWS: dict[str, RowsFn] = {
    "sessions": _rows.session_rows,
    "tasks": _tasks.task_rows,
    "events": _rows.event_rows,
    "attempts": _rows.attempt_rows,
    "llm_calls": _rows.llm_call_rows,
    "tool_calls": _rows.tool_call_rows,
    "approvals": _rows.approval_rows,
}
_EVENTS_ONLY = frozenset({"events", "llm_calls"})
"""Frames built from events alone: reading a workspace for them skips the plans."""
FRAME_NAMES: tuple[str, ...] = tuple(_ROWS)
"""The frames, in the order Frames holds and ``export`` writes them."""


def _frame(
    name: str,
    src: Source,
    strict: bool,
    columns: Columns | None,
    dtype_backend: DtypeBackend,
) -> pd.DataFrame:
    """Reads ``src`` and builds frame ``name`` with the cyclic collector paused.

    A frame makes hundreds of thousands of rows, lists and strings and no
    cyclic garbage. Left on, the collector runs a full pass over the whole heap
    (the caller's data and every record included) once those allocations cross
    its threshold: 0.2 s of a 0.5 s ``events_df`` of 100,000 events, depending
    only on when the threshold happened to fall.

    What was read is freed before the collector is back on: the objects made
    while it was off count towards its next pass, which would otherwise walk
    every one still alive (~4 ms of a 10,000-task ``tasks_df``).
    """
    with paused_gc():
        data = read_sessions(src, strict=strict, plan=name not in _EVENTS_ONLY)
        df = _build(name, data, columns, dtype_backend)
        del data
    return df


def _build(
    name: str,
    data: Read,
    columns: Columns | None,
    dtype_backend: DtypeBackend,
) -> pd.DataFrame:
    fn = _ROWS[name]
    parts = [fn(d) for d in data.sessions]
    rows: list[Row] | Table
    if parts and all(isinstance(p, Table) for p in parts):
        tables = [p for p in parts if isinstance(p, Table)]
        rows = tables[0] if len(tables) == 1 else Table.concat(tables)
    else:
        rows = []
        for p in parts:
            rows.extend(p.rows() if isinstance(p, Table) else p)
    df = (columns or FRAME_COLUMNS[name]).frame(rows, dtype_backend)
    if data.skipped is not None:
        df.attrs["skipped"] = dict(data.skipped)
    return df


def sessions_df(
    src: Source,
    *,
    columns: Columns | None = None,
    dtype_backend: DtypeBackend = "numpy_nullable",
    strict: bool = True,
) -> pd.DataFrame:
    """One row per session: status, timing, task counts, attempts and model usage.

    Args:
        src: A Session, a Workspace (every session in it) or a list of Sessions.
        columns: The column spec; default ``SESSION_COLUMNS``.
        dtype_backend: "numpy_nullable" (default) or "pyarrow" (Arrow-backed).
        strict: For a Workspace: True (default) raises on a damaged session;
            False skips it and lists it in ``df.attrs["skipped"]`` (see ``frames``).
    """
    return _frame("sessions", src, strict, columns, dtype_backend)


def tasks_df(
    src: Source,
    *,
    columns: Columns | None = None,
    dtype_backend: DtypeBackend = "numpy_nullable",
    strict: bool = True,
) -> pd.DataFrame:
    """One row per task, in plan order: status, timing, errors, result and usage.

    Args:
        src: A Session, a Workspace (every session in it) or a list of Sessions.
        columns: The column spec; default ``TASK_COLUMNS``.
        dtype_backend: "numpy_nullable" (default) or "pyarrow" (Arrow-backed).
        strict: For a Workspace: True (default) raises on a damaged session;
            False skips it and lists it in ``df.attrs["skipped"]`` (see ``frames``).
    """
    return _frame("tasks", src, strict, columns, dtype_backend)


def events_df(
    src: Source,
    *,
    kinds: str | Iterable[str] | None = None,
    columns: Columns | None = None,
    dtype_backend: DtypeBackend = "numpy_nullable",
    strict: bool = True,
) -> pd.DataFrame:
    """One row per committed event, in seq order; ``details`` (the kind's own typed
    fields, see ``argus_lab.events``) is JSON text.

    Args:
        src: A Session, a Workspace (every session in it) or a list of Sessions.
        kinds: Only events of this kind or these kinds (``EVENT_KINDS``); a
            name that is no event kind raises ValueError (where
            ``df[df.kind == "task_faild"]`` would be silently empty).
        columns: The column spec; default ``EVENT_COLUMNS``. A Column with a path
            into ``details`` needs the parsed frames (``llm_calls_df``, ...) instead.
        dtype_backend: "numpy_nullable" (default) or "pyarrow" (Arrow-backed).
        strict: For a Workspace: True (default) raises on a damaged session;
            False skips it and lists it in ``df.attrs["skipped"]`` (see ``frames``).
    """
    wanted = None if kinds is None else _event_kinds(kinds)
    df = _frame("events", src, strict, columns, dtype_backend)
    if wanted is None:
        return df
    if "kind" not in df.columns:
        raise ValueError("kinds= keeps rows by their kind: include 'kind' in columns")
    kept = df[df["kind"].isin(wanted).to_numpy(dtype=bool)].reset_index(drop=True)
    kept.attrs = dict(df.attrs)
    return kept


def _event_kinds(kinds: str | Iterable[str]) -> list[str]:
    """``kinds`` as a list of event kinds; a name that is none raises ValueError
    (with the kind meant, when one is close)."""
    from difflib import get_close_matches

    from argus_lab.events import EVENT_KINDS

    if isinstance(kinds, str):
        given = [kinds]
    elif isinstance(kinds, Iterable):
        given = list(kinds)
    else:
        raise TypeError(
            "kinds must be an event kind or a list of them, got "
            f"{kinds!r} ({type(kinds).__name__})"
        )
    for k in given:
        if not isinstance(k, str):
            raise TypeError(
                f"kinds must be event kind names (str), got {k!r} ({type(k).__name__})"
            )
        if k not in EVENT_KINDS:
            close = get_close_matches(k, EVENT_KINDS, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"{k!r} is no event kind{hint} (the kinds: "
                "argus_lab.events.EVENT_KINDS)"
            )
    return given


def attempts_df(
    src: Source,
    *,
    columns: Columns | None = None,
    dtype_backend: DtypeBackend = "numpy_nullable",
    strict: bool = True,
) -> pd.DataFrame:
    """One row per attempt: when it ran and how it ended (retries are rows).

    Args:
        src: A Session, a Workspace (every session in it) or a list of Sessions.
        columns: The column spec; default ``ATTEMPT_COLUMNS``.
        dtype_backend: "numpy_nullable" (default) or "pyarrow" (Arrow-backed).
        strict: For a Workspace: True (default) raises on a damaged session;
            False skips it and lists it in ``df.attrs["skipped"]`` (see ``frames``).
    """
    return _frame("attempts", src, strict, columns, dtype_backend)


def llm_calls_df(
    src: Source,
    *,
    columns: Columns | None = None,
    dtype_backend: DtypeBackend = "numpy_nullable",
    strict: bool = True,
) -> pd.DataFrame:
    """One row per model call: model, tokens, cost, cache hits.

    Args:
        src: A Session, a Workspace (every session in it) or a list of Sessions.
        columns: The column spec; default ``LLM_CALL_COLUMNS``; a Column with
            a Column named after any other ``LlmCall`` field reads it.
        dtype_backend: "numpy_nullable" (default) or "pyarrow" (Arrow-backed).
        strict: For a Workspace: True (default) raises on a damaged session;
            False skips it and lists it in ``df.attrs["skipped"]`` (see ``frames``).
    """
    return _frame("llm_calls", src, strict, columns, dtype_backend)


def tool_calls_df(
    src: Source,
    *,
    columns: Columns | None = None,
    dtype_backend: DtypeBackend = "numpy_nullable",
    strict: bool = True,
) -> pd.DataFrame:
    """Every tool call: task attempts (source "task") and calls models made ("llm").

    Args:
        src: A Session, a Workspace (every session in it) or a list of Sessions.
        columns: The column spec; default ``TOOL_CALL_COLUMNS``.
        dtype_backend: "numpy_nullable" (default) or "pyarrow" (Arrow-backed).
        strict: For a Workspace: True (default) raises on a damaged session;
            False skips it and lists it in ``df.attrs["skipped"]`` (see ``frames``).
    """
    return _frame("tool_calls", src, strict, columns, dtype_backend)


def approvals_df(
    src: Source,
    *,
    columns: Columns | None = None,
    dtype_backend: DtypeBackend = "numpy_nullable",
    strict: bool = True,
) -> pd.DataFrame:
    """One row per approval request (or policy refusal): decision, who, how long.

    Args:
        src: A Session, a Workspace (every session in it) or a list of Sessions.
        columns: The column spec; default ``APPROVAL_COLUMNS``.
        dtype_backend: "numpy_nullable" (default) or "pyarrow" (Arrow-backed).
        strict: For a Workspace: True (default) raises on a damaged session;
            False skips it and lists it in ``df.attrs["skipped"]`` (see ``frames``).
    """
    return _frame("approvals", src, strict, columns, dtype_backend)


@dataclass(frozen=True)
class Frames:
    """Every frame of some sessions, read once; what ``export`` writes and ``load``
    returns, and what the post-mortem helpers accept instead of a Session.

    Attributes:
        sessions: ``sessions_df``. tasks: ``tasks_df``. events: ``events_df``.
        attempts: ``attempts_df``. llm_calls: ``llm_calls_df``.
        tool_calls: ``tool_calls_df``. approvals: ``approvals_df``.
    """

    sessions: pd.DataFrame
    tasks: pd.DataFrame
    events: pd.DataFrame
    attempts: pd.DataFrame
    llm_calls: pd.DataFrame
    tool_calls: pd.DataFrame
    approvals: pd.DataFrame

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in FRAME_NAMES:
            raise KeyError(f"no frame {name!r} (frames: {', '.join(FRAME_NAMES)})")
        frame: pd.DataFrame = getattr(self, name)
        return frame

    def __iter__(self) -> Iterator[str]:
        return iter(FRAME_NAMES)

    def items(self) -> Iterator[tuple[str, pd.DataFrame]]:
        """(frame name, DataFrame) pairs, in FRAME_NAMES order."""
        return ((n, self[n]) for n in FRAME_NAMES)

    @property
    def session_ids(self) -> list[str]:
        """The sessions these frames cover, oldest first."""
        return [str(s) for s in self.sessions["session_id"]]

    def session(self, name_or_id: str) -> Frames:
        """The frames of one session, chosen by name or id.

        Raises:
            KeyError: no such session here (the message lists the names).
        """
        s = self.sessions
        hit = s[(s["session_id"] == name_or_id) | (s["name"] == name_or_id)]
        if len(hit) != 1:
            names = ", ".join(str(n) for n in s["name"])
            raise KeyError(f"no session {name_or_id!r} in these frames ({names})")
        sid = hit["session_id"].iloc[0]
        parts = {
            n: f[f["session_id"] == sid].reset_index(drop=True) for n, f in self.items()
        }
        return Frames(**parts)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{n}={len(f)}" for n, f in self.items())
        return f"<Frames {sizes}>"


def frames(
    src: Source,
    *,
    dtype_backend: DtypeBackend = "numpy_nullable",
    strict: bool = True,
) -> Frames:
    """Every frame of a Session, a Workspace or a list of Sessions, reading each once.

    Args:
        src: A Session, a Workspace (every session in it) or a list of Sessions.
        dtype_backend: "numpy_nullable" (default) or "pyarrow" (Arrow-backed).
        strict: For a Workspace: True (default) raises on a damaged session
            (CorruptCheckpointError naming it and the record); False reads the
            others and says which were skipped and why: every frame's
            ``attrs["skipped"]`` maps their ids to the reason, and a warning is
            logged (logger "argus_lab").
    """
    with paused_gc():  # see _frame
        data = read_sessions(src, strict=strict)
        for d in data.sessions:
            # The events frame needs the whole table: built first, the other
            # frames read their columns from it, not from a parse of their own.
            d.event_table()
        built = {
            f.name: _build(f.name, data, None, dtype_backend) for f in fields(Frames)
        }
        del data
    return Frames(**built)


def schema(frame: str | None = None) -> pd.DataFrame:
    """The documented schema: frame, column, dtype and meaning of every column.

    Args:
        frame: One frame's name ("tasks", "events", ...); default all of them.
    """
    import pandas as pd

    names = FRAME_NAMES if frame is None else (frame,)
    parts: list[Any] = []
    for n in names:
        if n not in FRAME_COLUMNS:
            raise KeyError(f"no frame {n!r} (frames: {', '.join(FRAME_NAMES)})")
        df = FRAME_COLUMNS[n].describe()
        df.insert(0, "frame", n)
        parts.append(df)
    out: pd.DataFrame = pd.concat(parts, ignore_index=True)
    return out
