"""Secrets masked in a pandas DataFrame before it becomes parquet (``redact.py``).

Parquet is binary: a secret left in it can only be refused (the task fails,
``store/artifacts.py``), never masked there. So everything a frame holds that
can hold text is masked first: column names and the index (each level of a
MultiIndex too), their names, text cells, lists, dicts and tuples of text in a
cell (a JSON column, tags), text in bytes cells, and ``df.attrs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argus_lab.redact import Redactor

__all__ = ["masked_frame"]


def masked_frame(red: Redactor, df: Any) -> Any:
    """``df`` with secrets masked (a copy, or ``df`` itself when nothing needs
    masking)."""
    from pandas.api.types import is_object_dtype, is_string_dtype

    def cell(x: Any) -> Any:
        if isinstance(x, str):
            return red.text(x)
        if isinstance(x, tuple):  # a MultiIndex label, a tuple cell
            return tuple(cell(v) for v in x)
        if isinstance(x, list | dict):
            return red.value(x)
        if isinstance(x, bytes):
            masked = red.mask_bytes(x)
            return x if masked is None else masked  # binary: parquet refuses it
        return x

    def needs(x: Any) -> bool:
        if isinstance(x, str):
            return red.needed(x)
        return isinstance(x, bytes | list | tuple | dict) and cell(x) != x

    def any_needs(values: Any) -> bool:
        if not (is_object_dtype(values) or is_string_dtype(values)):
            return False
        return any(map(needs, values))

    out = df
    if any(map(needs, df.columns)):
        out = out.set_axis(df.columns.map(cell), axis="columns")
    if any_needs(df.index):
        out = out.set_axis(df.index.map(cell), axis="index")
    for axis in ("index", "columns"):
        names = list(getattr(out, axis).names)
        if any(map(needs, names)):
            out = out.rename_axis(**{axis: [cell(n) for n in names]})
    for i in range(len(out.columns)):
        series = out.iloc[:, i]
        if any_needs(series):
            out = out.copy() if out is df else out
            out.isetitem(i, series.map(cell))
    if df.attrs and red.value(df.attrs) != df.attrs:
        out = out.copy() if out is df else out
        out.attrs = red.value(df.attrs)
    return out
