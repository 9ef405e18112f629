"""The forms a secret takes in text (``redact.py``): the shapes of secrets
(API keys, tokens, a URL's password, ``password=...``), with the substring
prefilter that spares most text the regex, and the forms libraries write a
secret value in by themselves."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "FOLD",
    "SHAPES",
    "TRIGGERS",
    "URL_MATCH",
    "encoded_forms",
    "has_shape",
    "may_have_shape",
    "text_codec",
]

_URL_PASSWORD = r"[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^\s:@/]*:[^\s@/]+@"
URL_MATCH = re.compile(_URL_PASSWORD)


_WORD = "A-Za-z0-9"


def _token_start(prefix: str, word: str = _WORD) -> str:
    """``prefix`` as a regex that matches only where a token starts: not
    after a character of ``word`` ("task_test_...", "risk-assessment-..."
    hold "sk_test_" and "sk-"), but after any other character, or after an
    escape that JSON, a repr or a URL writes in front of it ("\\nsk_live_...",
    "%3Dsk_live_..."). The test follows the first letter, so that the regex
    seeks the letter."""
    f = re.escape(prefix[0])
    return (
        f
        + rf"(?:(?<![{word}]{f})|(?<=\\[nrt]{f})|(?<=%[0-9A-Fa-f]{{2}}{f}))"
        + re.escape(prefix[1:])
    )


_ANTHROPIC_OPENAI = (
    _token_start("sk-ant-")
    + r"[A-Za-z0-9_\-]{16,}|"
    + _token_start("sk-")
    + r"[A-Za-z0-9_\-]{32,}"
)
_GITHUB = r"gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
_SLACK = r"xox[abeprs]-[A-Za-z0-9-]{10,}"
_AWS = r"A[KS]IA[0-9A-Z]{16}"
SHAPES = re.compile(
    "("
    + _ANTHROPIC_OPENAI  # Anthropic, OpenAI-style
    + "|"
    + _GITHUB  # GitHub, GitHub fine-grained
    + "|"
    + _SLACK  # Slack (xoxe-: a refresh token)
    + "|"
    + _AWS  # AWS access key id (ASIA: temporary, from STS)
    + r"|(?i:bearer|basic)\s+[A-Za-z0-9._~+/=\-]{12,}|"
    # scheme://user:password@, the scheme bounded: unbounded, it rescanned a
    # long word from each of its letters (quadratic time on every step's text).
    + _URL_PASSWORD
    + r"|(?i:(?:x-api-key|authorization|api[_-]?key|password|passwd|secret|token)"
    r"[\"']?\s*[:=]\s*[\"']?)(?:(?i:bearer|basic)\s+)?[^\s\"',;}]{6,})"
)

# ``has_shape``'s pieces. SHAPES spells the case-insensitive shapes with
# (?i:...) groups, which the regex engine tries letter by letter at every
# position: ~45 us for a 300-character row that merely holds "secret" (a
# session's meta row does: "n_secrets"), ~1.5 ms for a 10 KB result that says
# "token". In ASCII text the same shapes are found from where their keyword
# is (str.find, in C) in the lower-cased text, which has the same positions.
_KEYS = (
    "authorization",
    "api_key",
    "api-key",
    "apikey",
    "password",
    "passwd",
    "secret",
    "token",
)
"""SHAPES' ``key: value`` keywords ("x-api-key" holds "api-key")."""

# Every shape above but a URL's password contains one of these (lower-cased): a
# substring test first lets text that holds none skip the regex, which has no
# literal to seek to.
TRIGGERS = (
    "sk-",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "xox",
    "akia",
    "asia",
    "bearer",
    "basic",
    *_KEYS,
)


_PARTS = ("api", "passw")
"""Parts shared by several triggers: each ``in`` test is a pass over the text,
so one test of a part stands for its family, whose members are tested only
when the part is there."""
_ANCHORS = ("_", "-", "z")
"""Characters most text lacks or holds a few of, one of which nearly every
trigger has (of the others, each is a family's, or alone). A one-character
``in`` test is a memchr (~20 ns for 256 characters, where a test of a
3-letter trigger is ~150 ns): a trigger is sought only where its character
is, all of a character's triggers at once by one regex."""
_FAMILIES = tuple((p, tuple(t for t in TRIGGERS if p in t)) for p in _PARTS)
_REST = [t for t in TRIGGERS if not any(p in t for p in _PARTS)]
_ALONE = tuple(t for t in _REST if not any(a in t for a in _ANCHORS))


def _anchored(triggers: list[str]) -> dict[str, list[tuple[str, int]]]:
    """{anchor: [(trigger, where in it the anchor is)]}: each trigger under
    the first of _ANCHORS it holds."""
    out: dict[str, list[tuple[str, int]]] = {}
    for t in triggers:
        a = next((a for a in _ANCHORS if a in t), None)
        if a is not None:
            out.setdefault(a, []).append((t, t.index(a)))
    return out


def _seeker(anchor: str, members: list[tuple[str, int]]) -> re.Pattern[str]:
    """A regex that matches ``anchor`` where one of ``members`` holds it: the
    regex engine seeks the character (a literal first), and lookarounds test
    the rest of the trigger around it. The character that comes just before
    the anchor is tested first, in one class (most occurrences of the anchor,
    a date's "-" or a run of "-----", fail there), then by itself, so that
    only the triggers it ends are tried (~110 ns an "_" in code, not ~160)."""
    a = re.escape(anchor)
    before: dict[str, list[str]] = {}
    ahead = []
    for t, i in members:
        after = f"(?={re.escape(t[i + 1 :])})" if t[i + 1 :] else ""
        if i:
            before.setdefault(t[i - 1], []).append(
                f"(?<={re.escape(t[: i + 1])}){after}"
            )
        else:
            ahead.append(after)
    alts = []
    if before:
        guard = "".join(re.escape(c) for c in sorted(before))
        by_char = [
            f"(?<={re.escape(c)}{a})(?:" + "|".join(xs) + ")"
            for c, xs in sorted(before.items())
        ]
        alts.append(f"(?<=[{guard}]{a})(?:" + "|".join(by_char) + ")")
    alts += ahead
    return re.compile(a + "(?:" + "|".join(alts) + ")")


_SEEK = tuple((a, _seeker(a, m)) for a, m in _anchored(_REST).items())
"""(anchor, the regex that finds its triggers), for ``may_have_shape``."""


def may_have_shape(s: str) -> bool:
    """Whether ``s`` holds a trigger (lower-cased, and the letters beyond
    ASCII that the regex takes for ASCII ones folded: ``FOLD``) or a URL with
    a password."""
    # map() over a bound method: the loop runs in C, no generator per value.
    low = (s if s.isascii() else s.translate(FOLD)).lower()
    has = low.__contains__
    if any(map(has, _ALONE)):
        return True
    for part, members in _FAMILIES:
        if part in low and any(map(has, members)):
            return True
    if any(map(has, _ANCHORS)):  # most short texts have none: no loop
        for anchor, seeker in _SEEK:
            if anchor in low and seeker.search(low) is not None:
                return True
    # A URL's password needs both "://" and "@": a URL alone skips the regex.
    return "@" in s and "://" in s


_KEYED_TAIL = re.compile(
    r"[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic)\s+)?[^\s\"',;}]{6,}"
)
_SCHEMES = ("bearer", "basic")
_SCHEME_TAIL = re.compile(r"\s+[a-z0-9._~+/=\-]{12,}")
FOLD = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}
"""The letters beyond ASCII that the regex, ignoring case, takes for an ASCII
letter (dotted and dotless i, long s, the Kelvin sign): "\u017fecret: ..." is
a shape, and the prefilter must see "secret" in it."""
_LITERALS = (
    (("sk-",), re.compile(_ANTHROPIC_OPENAI)),
    (("gh", "github_pat_"), re.compile(_GITHUB)),
    (("xox",), re.compile(_SLACK)),
    (("AKIA", "ASIA"), re.compile(_AWS)),
)
"""SHAPES' case-sensitive shapes, each behind the literal it starts with."""


def has_shape(s: str) -> bool:
    """``SHAPES.search(s) is not None``, the same answer for every string,
    found faster (``test_redact_shapes``)."""
    return may_have_shape(s) and _found_shape(s)


def _found_shape(s: str) -> bool:
    """``has_shape`` past its substring prefilter (``may_have_shape`` said
    yes): each shape in ASCII text is sought only where its keyword or
    literal is; other text is left to the regex."""
    if not s.isascii():
        return SHAPES.search(s) is not None
    if "@" in s and "://" in s and URL_MATCH.search(s) is not None:
        return True
    for literals, pattern in _LITERALS:
        if any(map(s.__contains__, literals)) and pattern.search(s) is not None:
            return True
    low = s.lower()
    return _follows(low, _KEYS, _KEYED_TAIL) or _follows(low, _SCHEMES, _SCHEME_TAIL)


def _follows(low: str, words: tuple[str, ...], tail: re.Pattern[str]) -> bool:
    """Whether ``tail`` matches right after an occurrence of one of ``words``."""
    for w in words:
        i = low.find(w)
        while i >= 0:
            if tail.match(low, i + len(w)) is not None:
                return True
            i = low.find(w, i + 1)
    return False


def encoded_forms(values: Iterable[str], min_len: int) -> set[str]:
    """The forms libraries write a secret value in by themselves, so that a
    value is masked in them too: URL-encoded (an HTTP client's error names the
    URL with its query string), JSON-escaped (a quote, a backslash, non-ASCII),
    and base64 (an HTTP Basic header is base64 of "user:password"; a blob of
    JSON or a data URL). Base64 can start the value at any of three byte
    alignments; each gives the run of characters that depends on the value's
    bytes alone. What code transforms on purpose (split, hex, compressed,
    encrypted) stays out of reach: see docs/sandbox.md. Also the value
    upper- and lower-cased: hex and base32 tokens mean the same in either
    case, and code prints them in both."""
    import base64  # here: only a redactor holding secrets needs them
    import json
    from urllib.parse import quote, quote_plus

    out: set[str] = set()
    for v in values:
        out.update((quote(v, safe=""), quote(v), quote_plus(v)))
        out.update((json.dumps(v)[1:-1], json.dumps(v, ensure_ascii=False)[1:-1]))
        out.update((v.lower(), v.upper()))
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
