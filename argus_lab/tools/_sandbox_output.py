"""The ``python`` tool's output as the host keeps it (``argus_lab.tools.sandbox``).

stdout and stderr are drained as they come; over the limit only their head and
tail are kept, cut with a marker, never inside a secret the redactor knows
(nor is the tail of it a failure's message shows);
control characters a terminal would act on are shown as escapes.
"""

from __future__ import annotations

import asyncio
import re

from argus_lab.redact import Redactor

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""Characters a terminal acts on (ESC sequences, 8-bit CSI, bell, backspace)
or that reorder text (bidi overrides): never passed on as they are."""


def _visible(text: str) -> str:
    """``text`` safe to show in a terminal: line ends become ``\\n`` (a bare
    ``\\r`` would overwrite what was printed) and other control characters
    their escape (``\\x1b``), so the code's output cannot clear the screen,
    retitle the window, write the clipboard or fake what was printed."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


_PAD = 4096
"""Bytes kept past each cut of a long output, to find a secret across it."""


class _Capture:
    """Keeps the head and tail of a stream within ``limit`` bytes; ``text()``
    decodes it (bad UTF-8 replaced) and makes control characters visible."""

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 64)
        self.tail_size = self.limit // 4
        self.head = bytearray()  # the first limit + _PAD bytes
        self.tail = bytearray()  # the last bytes past the first limit
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        start = self.total
        self.total += len(chunk)
        room = self.limit + _PAD - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        rest = chunk[max(0, self.limit - start) :]
        if rest:
            self.tail += rest
            keep = self.tail_size + _PAD
            if len(self.tail) > 2 * keep:
                del self.tail[: len(self.tail) - keep]

    def text(self, redactor: Redactor | None = None) -> str:
        """The output, cut in the middle with a marker if over the limit. With
        ``redactor``, a cut never falls inside a secret (half a secret is one
        the redactor could no longer find): the cut moves to its edge."""
        if self.total <= self.limit:
            return _visible(self.head.decode("utf-8", "replace"))
        tail = bytes(self.tail[-self.tail_size :])
        n_head = self.limit - len(tail)
        head_ext = bytes(self.head[: n_head + _PAD]).decode("utf-8", "replace")
        tail_ext = bytes(self.tail[-(self.tail_size + _PAD) :]).decode(
            "utf-8", "replace"
        )
        h = len(bytes(self.head[:n_head]).decode("utf-8", "replace"))
        t = len(tail_ext) - len(tail.decode("utf-8", "replace"))
        if redactor is not None:
            for a, b in sorted(redactor.spans(head_ext), reverse=True):
                if a < h < b:
                    h = a
            for a, b in sorted(redactor.spans(tail_ext)):
                if a < t < b:
                    t = b
        ends = head_ext[:h], tail_ext[t:]
        cut = self.total - sum(len(e.encode("utf-8", "replace")) for e in ends)
        marker = f"\n[... truncated {cut} bytes ...]\n"
        return _visible(ends[0] + marker + ends[1])


async def _drain(stream: asyncio.StreamReader | None, cap: _Capture) -> None:
    if stream is None:
        return
    while chunk := await stream.read(1 << 16):
        cap.feed(chunk)


def _tail(text: str, n: int = 1500, redactor: Redactor | None = None) -> str:
    """The last ``n`` characters; the cut moves past a secret it would split."""
    text = text.strip()
    if len(text) <= n:
        return text
    start = len(text) - n
    for a, b in sorted(redactor.spans(text) if redactor else []):
        if a < start < b:
            start = b
    return "..." + text[start:]
