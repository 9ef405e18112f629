"""A JSON Patch (RFC 6902) between two JSON documents, in time proportional to
what changed (``diff``), and a patch from outside applied safely (``apply_ops``:
one operation at a time, copies capped, errors naming the operation).

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

import json
from typing import Any

import jsonpatch

__all__ = [
    "MAX_PATCH_COPY",
    "PatchTestFailed",
    "PatchTooLarge",
    "apply_ops",
    "diff",
]

MAX_PATCH_COPY = 8 << 20
"""Bytes the ``copy`` operations of one JSON Patch may copy in all: each copy
can double the document, so 40 of them in a 1 MB request would need 2**40
times its size; honest patches copy far less."""


class PatchTestFailed(ValueError):
    """A ``test`` operation of a JSON Patch did not hold; nothing was written."""


class PatchTooLarge(ValueError):
    """A JSON Patch copies more than ``MAX_PATCH_COPY`` bytes; nothing was written."""


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


def apply_ops(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """``doc`` (changed in place) with the JSON Patch ``ops`` applied, one
    operation at a time so that copies are counted as they go.

    Raises:
        PatchTestFailed: a ``test`` operation did not hold.
        PatchTooLarge: the patch copies more than ``MAX_PATCH_COPY`` bytes.
        ValueError: an operation does not apply, or the document would stop
            being a JSON object where it was one.
    """
    was_object = isinstance(doc, dict)
    copied = 0
    for i, op in enumerate(ops):
        try:
            if op.get("op") == "copy" and isinstance(op.get("from"), str):
                copied += len(
                    json.dumps(jsonpatch.JsonPointer(op["from"]).resolve(doc))
                )
                if copied > MAX_PATCH_COPY:
                    raise PatchTooLarge(
                        f"the JSON Patch copies more than {MAX_PATCH_COPY} bytes "
                        f"(operation {i}); send the values instead"
                    )
            doc = jsonpatch.apply_patch(doc, [op], in_place=True)
        except jsonpatch.JsonPatchTestFailed as e:
            raise PatchTestFailed(
                f"operation {i} (test {op.get('path')}) failed: {e}; nothing "
                "was written"
            ) from None
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
            raise ValueError(
                f"the JSON Patch does not apply: operation {i} "
                f"({op.get('op')} {op.get('path')!r}): {e}"
            ) from None
    if was_object and not isinstance(doc, dict):
        raise ValueError(
            "the JSON Patch would make the state a "
            f"{type(doc).__name__}; it must stay a JSON object (its fields "
            "at the root)"
        )
    return doc
