"""Documents for memory: text extraction, overlapping chunks, chunk records.

Pure functions, no third-party imports: ``extract`` turns text, markdown or html
into plain text (html through the stdlib ``html.parser``), ``chunk_text`` cuts
it into overlapping pieces that end at paragraph, line, sentence or word breaks,
and ``document_records`` makes the ``document`` memories ``Memory.ingest``
writes. Every chunk keeps its character offsets: ``text[chunk.start:chunk.end]
== chunk.text`` always holds, where ``text`` is the extracted text.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Literal

from argus_lab.redact import merged_spans

__all__ = [
    "Chunk",
    "Format",
    "chunk_text",
    "detect_format",
    "document_records",
    "extract",
    "html_to_text",
]

Format = Literal["text", "markdown", "html"]

_BLOCK_TAGS = frozenset(
    {"address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt"}
    | {"fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "li"}
    | {"h1", "h2", "h3", "h4", "h5", "h6", "main", "nav", "ol", "p", "pre"}
    | {"section", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul"}
)
_LINE_TAGS = frozenset({"br", "li", "td", "th", "dt", "dd"})
_SKIP_TAGS = frozenset({"script", "style", "noscript", "template", "head"})
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_HTML_SNIFF = re.compile(
    r"^\s*(<!doctype html|<html\b)|</(p|div|body|li|h[1-6]|table)>", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of a document."""

    start: int
    """Offset of the first character in the extracted text."""
    end: int
    """Offset just past the last character (``text[start:end]`` is the chunk)."""
    text: str
    """The chunk's text."""
    heading: str = ""
    """For markdown: the headings above the chunk, joined by " > "."""


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self._skip += 1
        elif tag == "pre":
            self._pre += 1
        if tag == "br":
            self.parts.append("\n")
        elif tag in _BLOCK_TAGS and tag not in _LINE_TAGS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
        if tag in _BLOCK_TAGS:
            self.parts.append("\n" if tag in _LINE_TAGS else "\n\n")

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        # Outside <pre>, html collapses runs of whitespace into one space.
        self.parts.append(data if self._pre else re.sub(r"\s+", " ", data))


def html_to_text(html: str) -> str:
    """Strips tags (scripts, styles and the head are dropped), keeps paragraphs.

    Args:
        html: An html document or fragment.

    Returns:
        Plain text with block elements separated by blank lines and entities
        decoded.
    """
    p = _TextExtractor()
    p.feed(html)
    p.close()
    text = "".join(p.parts)
    text = re.sub(r"[ \t]*\n[ \t]*", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def detect_format(text: str, name: str | None = None) -> Format:
    """Guesses a document's format from its file name, else from its content."""
    if name:
        suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
        if suffix in ("html", "htm", "xhtml"):
            return "html"
        if suffix in ("md", "markdown", "mdown"):
            return "markdown"
        if suffix:
            return "text"
    if _HTML_SNIFF.search(text[:4096]):
        return "html"
    if _HEADING.search(text[:4096]):
        return "markdown"
    return "text"


def extract(text: str, fmt: Format) -> str:
    """The plain text that chunk offsets refer to (html: tags stripped)."""
    if fmt == "html":
        return html_to_text(text)
    return text


def _break_before(text: str, lo: int, hi: int, headings: list[int]) -> int:
    """The best place to end a chunk in ``text[lo:hi]``, or ``hi`` if none.

    Just before a markdown heading is best, then a blank line, a line break, a
    sentence end, a space.
    """
    i = bisect.bisect_right(headings, hi - 1) - 1
    if i >= 0 and headings[i] > lo:
        return headings[i]
    window = text[lo:hi]
    for sep in ("\n\n", "\n"):
        i = window.rfind(sep)
        if i > 0:
            return lo + i + len(sep)
    best = -1
    for m in re.finditer(r"[.!?;:][\"')\]]*\s", window):
        best = m.end()
    if best > 0:
        return lo + best
    i = max(window.rfind(" "), window.rfind("\t"))
    return lo + i + 1 if i > 0 else hi


def _headings(text: str) -> tuple[list[int], list[str]]:
    """Markdown heading positions and the breadcrumb in force after each."""
    positions: list[int] = []
    crumbs: list[str] = []
    stack: list[tuple[int, str]] = []
    for m in _HEADING.finditer(text):
        level = len(m.group(1))
        stack = [(lv, t) for lv, t in stack if lv < level] + [(level, m.group(2))]
        positions.append(m.start())
        crumbs.append(" > ".join(t for _, t in stack))
    return positions, crumbs


def _inside(starts: list[int], ends: list[int], i: int) -> int:
    """The index of the span (sorted, disjoint) that ``i`` falls strictly
    inside (a cut there splits it), else -1."""
    k = bisect.bisect_right(starts, i) - 1
    return k if k >= 0 and starts[k] < i < ends[k] else -1


def chunk_text(
    text: str,
    *,
    chunk_size: int = 1200,
    overlap: int = 200,
    markdown: bool = False,
    whole: Iterable[tuple[int, int]] = (),
) -> list[Chunk]:
    """Cuts text into chunks of at most ``chunk_size`` characters with overlap.

    A chunk ends at the last markdown heading (with ``markdown``) or paragraph
    break in its second half, else the last line break, sentence end or space;
    the next chunk starts about ``overlap`` characters earlier, at a word
    boundary — except after a heading break, where sections do not overlap.
    Leading and trailing whitespace is left out of each chunk (offsets are
    adjusted to match).

    Args:
        text: Plain text (see :func:`extract`).
        chunk_size: Largest chunk, in characters.
        overlap: Characters shared by consecutive chunks (less than chunk_size).
        markdown: Break at headings and record the heading breadcrumb in force
            where each chunk's new text begins.
        whole: (start, end) spans no chunk edge cuts (``Redactor.spans``: the
            secrets, masked chunk by chunk; a cut through one left two halves
            no mask recognised). A chunk ends before such a span, or holds it
            whole, past ``chunk_size`` if need be.

    Returns:
        The chunks, in order; empty for blank text.

    Raises:
        ValueError: chunk_size < 1, or overlap not in [0, chunk_size).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if not 0 <= overlap < chunk_size:
        raise ValueError(
            f"overlap must be >= 0 and < chunk_size ({chunk_size}), got {overlap}"
        )
    positions, crumbs = _headings(text) if markdown else ([], [])
    spans = merged_spans(whole)
    starts_, ends_ = [a for a, _ in spans], [b for _, b in spans]
    starts = set(positions)
    n = len(text)
    out: list[Chunk] = []
    pos = fresh = 0  # fresh: where the text not in the previous chunk begins
    while pos < n:
        hi = min(n, pos + chunk_size)
        lo = pos + chunk_size // 2
        end = hi if hi == n else _break_before(text, lo, hi, positions)
        if (k := _inside(starts_, ends_, end)) >= 0:
            # Before the span where that is in the chunk's second half, as a
            # break is; else past it (the chunk grows): ended before it each
            # time, the next chunks would creep up to it a word at a time.
            end = starts_[k] if starts_[k] >= lo else ends_[k]
        start, stop = pos, end
        while start < stop and text[start].isspace():
            start += 1
        while stop > start and text[stop - 1].isspace():
            stop -= 1
        # Blanks are kept where a span holds them (a secret ending in "\n").
        if (k := _inside(starts_, ends_, start)) >= 0:
            start = starts_[k]
        if (k := _inside(starts_, ends_, stop)) >= 0:
            stop = ends_[k]
        if stop > start:
            i = bisect.bisect_right(positions, max(start, fresh)) - 1
            out.append(
                Chunk(start, stop, text[start:stop], crumbs[i] if i >= 0 else "")
            )
        if end >= n:
            break
        fresh = end
        if end in starts:
            pos = end  # a new section: no overlap
            continue
        # Past the last chunk's first character too: whitespace skipped at its
        # start must not make the next chunk begin at the same place.
        nxt = max(end - overlap, pos + 1, out[-1].start + 1 if out else 0)
        # Start the overlap at a word boundary, never past the chunk's end.
        while 0 < nxt < end and not text[nxt - 1].isspace():
            nxt += 1
        if (k := _inside(starts_, ends_, nxt)) >= 0:
            nxt = ends_[k]  # within the chunk: ``end`` splits no span
        pos = nxt
    return out


def document_records(
    path_or_text: str | Path,
    *,
    source: str | None = None,
    chunk_size: int = 1200,
    overlap: int = 200,
    format: Format | Literal["auto"] = "auto",
    metadata: Mapping[str, Any] | None = None,
    whole: Callable[[str], Iterable[tuple[int, int]]] | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """Reads and chunks a document into ``document`` memory records.

    See ``Memory.ingest`` for the arguments; ``whole`` gives the spans of the
    extracted text no chunk edge may cut (``Redactor.spans``: see
    :func:`chunk_text`).

    Returns:
        The id prefix shared by the document's chunks (derived from the source,
        so re-ingesting a source replaces its chunks), and one record per chunk
        with id ``<prefix>-<index:06d>``.
    """
    name: str | None = None
    if format not in ("auto", "text", "markdown", "html"):
        raise ValueError(
            f"format must be 'auto', 'text', 'markdown' or 'html', got {format!r}"
        )
    if isinstance(path_or_text, os.PathLike):
        path_or_text = Path(path_or_text)
    elif not isinstance(path_or_text, str):
        hint = (
            ": decode it first, data.decode()"
            if isinstance(path_or_text, bytes | bytearray)
            else ""
        )
        raise TypeError(
            "ingest takes a file path or the text itself, got "
            f"{type(path_or_text).__name__}{hint}"
        )
    # os.path.isfile answers False where Path.is_file raises: a line of text
    # with a word over 255 bytes ("File name too long"), a NUL character.
    is_path = isinstance(path_or_text, Path)
    text = str(path_or_text)
    if not is_path and len(text) < 4096 and "\n" not in text:
        is_path = os.path.isfile(os.path.expanduser(text))
        if not is_path:
            _refuse_missing_file(text)
    if is_path:
        p = Path(path_or_text).expanduser().resolve()
        raw = _read_document(p)
        name = p.name
        source = source or str(p)
    else:
        raw = text
    fmt: Format = detect_format(raw, name) if format == "auto" else format
    source = source or "text:" + hashlib.sha256(raw.encode()).hexdigest()[:16]
    plain = extract(raw, fmt)
    chunks = chunk_text(
        plain,
        chunk_size=chunk_size,
        overlap=overlap,
        markdown=fmt == "markdown",
        whole=() if whole is None else whole(plain),
    )
    prefix = "document-" + hashlib.sha256(source.encode()).hexdigest()[:20]
    records = []
    for i, c in enumerate(chunks):
        meta = dict(metadata or {}) | {
            "source": source,
            "start": c.start,
            "end": c.end,
            "chunk": i,
            "n_chunks": len(chunks),
            "format": fmt,
        }
        if c.heading:
            meta["heading"] = c.heading
        records.append(
            {"id": f"{prefix}-{i:06d}", "kind": "document", "text": c.text}
            | {"metadata": meta}
        )
    return prefix, records


_DOC_SUFFIXES = frozenset(
    {".txt", ".text", ".md", ".markdown", ".rst", ".html", ".htm", ".xhtml"}
    | {".csv", ".json", ".jsonl", ".log", ".pdf", ".docx"}
)


def _refuse_missing_file(text: str) -> None:
    """A one-line 'text' that names a folder or a missing file was meant as a
    path: ingesting the name itself would store a useless one-line document."""
    where = os.path.expanduser(text.strip())
    if os.path.isdir(where):
        raise IsADirectoryError(
            f"{text!r} is a folder: ingest its files one by one, e.g. "
            f"for p in Path({text!r}).glob('*.md'): memory.ingest(p)"
        )
    nameable = "\0" not in where and all(
        len(part.encode()) <= 255 for part in where.split(os.sep)
    )  # else no file could have this name: it is text
    # A sentence may end in a file name ("the list is in venues.csv"): with
    # spaces, it is a path only where its folder is there.
    pathlike = not any(c.isspace() for c in where) or (
        os.sep in where and os.path.isdir(os.path.dirname(where) or ".")
    )
    if nameable and pathlike and os.path.splitext(where)[1].lower() in _DOC_SUFFIXES:
        raise FileNotFoundError(
            f"no file {text!r} (looked in {os.getcwd()}); check the path, or "
            "store a line of text with memory.add(text)"
        )


def _read_document(p: Path) -> str:
    if p.is_dir():
        raise IsADirectoryError(
            f"{p} is a folder: ingest its files one by one, e.g. "
            f"for f in Path({str(p)!r}).glob('*.md'): memory.ingest(f)"
        )
    data = p.read_bytes()
    if b"\0" in data[:8192]:
        raise ValueError(
            f"{p} looks binary (it holds NUL bytes): ingest reads text, markdown "
            "and html; extract the text first (e.g. from a PDF) and ingest that"
        )
    return data.decode("utf-8", errors="replace")
