"""Rows held as columns: what the frame builders hand to ``Columns.frame``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Row", "Table"]

Row = dict[str, Any]
"""One row of a frame, as a plain dict keyed by column name."""


class Table:
    """Rows held as columns (name -> one list of values per column), as the frame
    builders produce them: a frame is made from these lists with no dict per row.

    A column may also be an Arrow array (the events' columns): the frame is then
    built from it in C; ``rows()`` and mixed ``concat`` turn it into a list.

    Args:
        columns: Column name -> its values (every list of length ``n``).
        n: The number of rows.
    """

    __slots__ = ("_columns", "_n", "_rows")

    def __init__(self, columns: dict[str, Any], n: int) -> None:
        bad = sorted(k for k, v in columns.items() if len(v) != n)
        if bad:
            raise ValueError(f"columns {bad} do not have {n} values")
        self._columns = columns
        self._n = n
        self._rows: list[Row] | None = None

    def __len__(self) -> int:
        return self._n

    def column(self, name: str) -> Any:
        """The values of one column: a list (all None when the table has no such
        column) or the Arrow array it holds."""
        got = self._columns.get(name)
        return got if got is not None else [None] * self._n

    def values(self, name: str) -> list[Any]:
        """The values of one column as a list."""
        return _as_list(self.column(name))

    def rows(self) -> list[Row]:
        """The rows as dicts (built once, for columns read by path or function)."""
        if self._rows is None:
            names = list(self._columns)
            self._rows = (
                [
                    dict(zip(names, vals, strict=True))
                    for vals in zip(*map(_as_list, self._columns.values()), strict=True)
                ]
                if names
                else [{} for _ in range(self._n)]
            )
        return self._rows

    @staticmethod
    def concat(parts: Sequence[Table]) -> Table:
        """One table of the parts' rows, in order (columns: the union, None-filled)."""
        names: dict[str, None] = {}
        for p in parts:
            names.update(dict.fromkeys(p._columns))
        out: dict[str, Any] = {}
        for name in names:
            cols = [p.column(name) for p in parts]
            if all(not isinstance(c, list) for c in cols):  # Arrow, all of them
                out[name] = _concat_arrow(cols)
                continue
            col: list[Any] = []
            for c in cols:
                col.extend(_as_list(c))
            out[name] = col
        return Table(out, sum(len(p) for p in parts))


def _as_list(col: Any) -> list[Any]:
    return col if isinstance(col, list) else list(col.to_pylist())


def _concat_arrow(cols: list[Any]) -> Any:
    import importlib

    pa = importlib.import_module("pyarrow")  # no type stubs

    if len({c.type for c in cols}) == 1:
        return pa.concat_arrays(cols)
    return pa.array([v for c in cols for v in c.to_pylist()])
