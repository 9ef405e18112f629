"""Column conversions done in C: Arrow arrays and lists to pandas arrays.

``to_series`` (``_columns``) builds a frame column from a list of values, or from
an Arrow array when the rows are held as Arrow columns (the events). These are its
fast paths; each gives exactly the array the general pandas path gives, or None
(or an exception pandas would raise too) when it does not apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

__all__ = [
    "arrow",
    "arrow_strings",
    "booleans",
    "categorical",
    "from_arrow",
    "int64",
    "json_string_lists",
    "json_strings",
]


def arrow(module: str = "pyarrow") -> Any:
    """Imports a pyarrow module on first use (pyarrow ships no type stubs)."""
    import importlib

    return importlib.import_module(module)


@cache
def arrow_strings() -> bool:
    """Whether pandas' "string" dtype (NA-valued) is stored in Arrow (pandas 3)."""
    import pandas as pd

    return bool(pd.StringDtype().storage == "pyarrow")


def categorical(values: list[Any], known: Sequence[str]) -> Any:
    """A Categorical of ``values`` with the known categories, then any others
    (sorted); codes looked up in C (a dict's ``__getitem__`` mapped over them)."""
    import numpy as np
    import pandas as pd

    cats = list(known)
    distinct = set(values)
    cats += sorted(distinct - set(cats) - {None})
    code: dict[Any, int] = {c: i for i, c in enumerate(cats)}
    code[None] = -1
    if len(distinct) == 1:  # one value throughout (all None, all succeeded)
        codes = np.full(len(values), code[next(iter(distinct))], np.int64)
    else:
        codes = np.fromiter(map(code.__getitem__, values), np.int64, len(values))
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(cats))


def booleans(values: list[Any]) -> Any:
    """A nullable boolean array if every value is a bool, else None: numpy
    reads the list in C, and its dtype says whether they all were."""
    import numpy as np
    import pandas as pd

    flags = np.array(values)
    if not len(values) or flags.dtype != np.bool_:
        return None
    return pd.arrays.BooleanArray(flags, np.zeros(len(flags), np.bool_))


def int64(values: list[Any]) -> Any:
    """A nullable Int64 array if every value is an int or None, else None.

    Arrow reads the list in C; its inferred type says whether every value was an
    int (a float, bool or text makes it another type, and pandas converts those).
    """
    import pandas as pd

    pa = arrow()
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None
    if arr.type == pa.null():
        arr = arr.cast(pa.int64())
    elif arr.type != pa.int64():
        return None
    mask = arr.is_null().to_numpy(zero_copy_only=False)
    return pd.arrays.IntegerArray(arr.fill_null(0).to_numpy(), mask)


def _needs_escape(arr: Any) -> bool:
    """Whether any text of a new Arrow large_string array holds a character
    ``json`` escapes (a quote, a backslash, a control character).

    Checked on the UTF-8 bytes in numpy: a multi-byte character has no byte
    below 0x80, so these bytes are exactly those characters.
    """
    import numpy as np

    _, offsets, data = arr.buffers()  # a new array: its values start at 0
    used = int(np.frombuffer(offsets, np.int64)[len(arr)]) if data else 0
    if not used:
        return False
    raw = np.frombuffer(data, np.uint8, count=used)
    return bool(raw.min() < 0x20 or (raw == 0x22).any() or (raw == 0x5C).any())


def _text(value: str) -> Any:
    return arrow().scalar(value, arrow().large_string())


def json_strings(values: list[str | None]) -> Any:
    """The JSON text of each str (what ``json`` writes for it with
    ``ensure_ascii=False``: the text in quotes), None staying null, as one Arrow
    array built in C; or None when some text needs an escape, left to
    ``canonical`` one by one.

    10,000 results of 256 characters: ~1 ms, against ~8 ms encoding each in
    Python (most of it allocating 10,000 new strings).
    """
    pa, pc = arrow(), arrow("pyarrow.compute")
    try:
        arr = pa.array(values, pa.large_string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if _needs_escape(arr):
        return None
    return pc.binary_join_element_wise(_text('"'), arr, _text('"'), _text(""))


def json_string_lists(values: list[list[str]]) -> Any:
    """The JSON text of each list of str (as ``json`` writes it: ``["a", "b"]``,
    ``[]``), as one Arrow array built in C; or None when some text needs an
    escape (or a value is not a list of str), left to ``canonical``."""
    pa, pc = arrow(), arrow("pyarrow.compute")
    try:
        arr = pa.array(values, pa.large_list(pa.large_string()))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if arr.null_count or arr.values.null_count or _needs_escape(arr.values):
        return None
    joined = pc.binary_join(arr, _text('", "'))
    quoted = pc.binary_join_element_wise(_text('["'), joined, _text('"]'), _text(""))
    empty = pc.equal(pc.list_value_length(arr), 0)
    return pc.if_else(empty, _text("[]"), quoted)


def from_arrow(
    arr: Any,
    spec: str,
    categories: Sequence[str],
    dtype_backend: str,
    target: Any,
) -> Any:
    """A Series of logical dtype ``spec`` from an Arrow array, or None when the
    array's type is not the one this column expects (the caller converts a list).

    Args:
        arr: The Arrow array.
        spec: The column's logical dtype (``_columns.DtypeSpec``).
        categories: Its known categories (``category`` only).
        dtype_backend: "numpy_nullable" or "pyarrow".
        target: The pandas dtype the column gets under that backend.
    """
    import numpy as np
    import pandas as pd

    pa = arrow()
    t = arr.type
    is_text = t in (pa.string(), pa.large_string())
    s: Any
    if spec in ("string", "json") and is_text:
        if dtype_backend == "pyarrow":
            return pd.Series(pd.arrays.ArrowExtensionArray(arr.cast(pa.string())))
        if not arrow_strings():
            return None
        return pd.Series(pd.arrays.ArrowStringArray(arr))
    if spec == "category" and is_text:
        return pd.Series(_arrow_categorical(arr, categories))
    if spec == "Int64" and t == pa.int64():
        mask = arr.is_null().to_numpy(zero_copy_only=False)
        s = pd.Series(pd.arrays.IntegerArray(arr.fill_null(0).to_numpy(), mask))
    elif spec in ("timestamp", "float64", "duration") and t == pa.float64():
        secs = arr.to_numpy(zero_copy_only=False)  # nulls -> NaN, as None did
        if spec == "timestamp":
            s = pd.Series(pd.to_datetime(secs, unit="s", utc=True).as_unit("ns"))
        else:
            s = pd.Series(np.asarray(secs, dtype="float64"))
    else:
        return None
    return s.astype(target) if dtype_backend == "pyarrow" else s


def _arrow_categorical(arr: Any, known: Sequence[str]) -> Any:
    """``categorical`` of an Arrow string array: its few distinct values mapped
    to codes once, the codes taken in numpy."""
    import numpy as np
    import pandas as pd

    enc = arr.dictionary_encode()
    seen = [v for v in enc.dictionary.to_pylist() if v is not None]
    cats = list(known)
    cats += sorted(set(seen) - set(cats))
    code = {c: i for i, c in enumerate(cats)}
    remap = np.array([code[v] for v in enc.dictionary.to_pylist()], np.int64)
    idx = enc.indices
    codes = np.full(len(arr), -1, np.int64)
    if len(remap):
        mask = idx.is_null().to_numpy(zero_copy_only=False)
        codes = remap[idx.fill_null(0).to_numpy()]
        codes[mask] = -1
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(cats))
