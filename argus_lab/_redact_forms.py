"""The forms libraries write a secret value in by themselves (``redact.py``)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["encoded_forms", "text_codec"]


def encoded_forms(values: Iterable[str], min_len: int) -> set[str]:
    """The forms libraries write a secret value in by themselves, so that a
    value is masked in them too: URL-encoded (an HTTP client's error names the
    URL with its query string), JSON-escaped (a quote, a backslash, non-ASCII),
    and base64 (an HTTP Basic header is base64 of "user:password"; a blob of
    JSON or a data URL). Base64 can start the value at any of three byte
    alignments; each gives the run of characters that depends on the value's
    bytes alone. What code transforms on purpose (split, hex, compressed,
    encrypted) stays out of reach: see docs/sandbox.md."""
    import base64  # here: only a redactor holding secrets needs them
    import json
    from urllib.parse import quote, quote_plus

    out: set[str] = set()
    for v in values:
        out.update((quote(v, safe=""), quote(v), quote_plus(v)))
        out.update((json.dumps(v)[1:-1], json.dumps(v, ensure_ascii=False)[1:-1]))
        raw = v.encode("utf-8")
        for pad in range(3):
            n = pad + len(raw)
            enc = base64.b64encode(b"\0" * pad + raw).decode("ascii").rstrip("=")
            # The first characters carry bits of what came before the value,
            # the last one (of a partial group) bits of what comes after it.
            core = enc[(0, 2, 3)[pad] : len(enc) - (1 if n % 3 else 0)]
            out.update((core, core.translate(_URLSAFE)))
        out.discard(v)
    return {e for e in out if len(e) >= min_len}


_URLSAFE = str.maketrans("+/", "-_")


def text_codec(data: bytes) -> tuple[str, int]:
    """(codec, where the text starts) of bytes that may be text: UTF-16 by its
    byte-order mark, or without one when every other byte is NUL (ASCII text
    in UTF-16, which also decodes as UTF-8 with a NUL between the letters, so
    that no secret in it was seen), else UTF-8."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return ("utf-16-le" if data[0] == 0xFF else "utf-16-be"), 2
    if len(data) % 2 == 0 and b"\0" in data:
        half = len(data) // 2
        if data[1::2].count(0) == half:
            return "utf-16-le", 0
        if data[0::2].count(0) == half:
            return "utf-16-be", 0
    return "utf-8", 0
