"""A JSON Patch (RFC 6902) between two JSON documents, in time proportional to
what changed.

``jsonpatch.make_patch`` visits every value of both documents in Python (and
serializes each to compare it): ~700 ms for a 1 MB state where one field
changed. Here unchanged subtrees are skipped by one C-level ``==`` each, so a
small change to a big state costs about a millisecond; only lists whose length
changed other than at their end go to ``jsonpatch``'s list diff.

One blind spot, the price of the C-level ``==``: a number that only changes
type inside an otherwise equal container (``[1]`` to ``[1.0]``, possible only in
``Any``-typed fields) is not seen; ``State`` then writes a full snapshot when
the patch comes out empty, and the next snapshot stores it in any case.
"""

from __future__ import annotations

from typing import Any

import jsonpatch

__all__ = ["diff"]


def _esc(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _same(a: Any, b: Any) -> bool:
    # `1 == 1.0 == True` in Python but not in JSON: the types must match too.
    return a is b or (type(a) is type(b) and a == b)


def diff(old: Any, new: Any) -> list[dict[str, Any]]:
    """The operations that turn ``old`` into ``new`` (empty when equal)."""
    out: list[dict[str, Any]] = []
    if old is not new:
        _diff(old, new, "", out)
    return out


def _diff(old: Any, new: Any, path: str, out: list[dict[str, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for k, v in old.items():
            p = f"{path}/{_esc(k)}"
            if k not in new:
                out.append({"op": "remove", "path": p})
            elif not _same(v, new[k]):
                _diff(v, new[k], p, out)
        for k, v in new.items():
            if k not in old:
                out.append({"op": "add", "path": f"{path}/{_esc(k)}", "value": v})
    elif isinstance(old, list) and isinstance(new, list):
        n, m = len(old), len(new)
        if m == n:
            for i, (a, b) in enumerate(zip(old, new, strict=True)):
                if not _same(a, b):
                    _diff(a, b, f"{path}/{i}", out)
        elif m > n and _same(new[:n], old):  # appended
            out.extend({"op": "add", "path": f"{path}/-", "value": x} for x in new[n:])
        elif m < n and _same(old[:m], new):  # cut at the end
            out.extend(
                {"op": "remove", "path": f"{path}/{i}"} for i in range(n - 1, m - 1, -1)
            )
        else:
            for op in jsonpatch.make_patch(old, new).patch:
                op = dict(op)
                op["path"] = path + op["path"]
                if "from" in op:
                    op["from"] = path + op["from"]
                out.append(op)
    else:
        out.append({"op": "replace", "path": path, "value": new})
