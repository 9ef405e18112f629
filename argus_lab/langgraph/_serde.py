"""LangGraph's serializer protocol over Argus's JSON codec (never pickle)."""

from __future__ import annotations

import json
from typing import Any

from argus_lab.langgraph._codec import decode, encode

__all__ = ["ArgusSerde"]


class ArgusSerde:
    """``SerializerProtocol`` for anything LangGraph serializes through the saver.

    ArgusSaver stores records through ``_codec`` directly; this object is what
    LangGraph finds as ``saver.serde``, so no path through the saver pickles.
    """

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """Encodes as ("argus-json", UTF-8 JSON); UnsafeValueError if it cannot."""
        data = encode(obj, "value")
        return "argus-json", json.dumps(data, ensure_ascii=False).encode()

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Decodes what ``dumps_typed`` wrote; refuses every other format."""
        kind, raw = data
        if kind != "argus-json":
            raise ValueError(
                f"ArgusSerde reads only 'argus-json' data, not {kind!r} "
                "(it never unpickles)"
            )
        return decode(json.loads(raw))
