"""The forms a secret takes in text (``redact.py``): the shapes of secrets
(API keys, tokens, a URL's password, ``password=...``), with the substring
prefilter that spares most text the regex, and the forms libraries write a
secret value in by themselves."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

__all__ = [
    "FOLD",
    "KEPT",
    "PREFIXED",
    "PREFIXES",
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
_B64_WORD = "A-Za-z0-9_-"


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
# A "key: value" whose value is a PEM block is left to the PEM shape, which
# masks the block whole: this one stopped at the first space of the BEGIN
# line, and the scan went on after it, past the block's body.
_NOT_PEM = r"(?!-----(?i:begin))"
_CLASSIC = (
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
    r"[\"']?\s*[:=]\s*[\"']?)(?:(?i:bearer|basic)\s+)?" + _NOT_PEM + r"[^\s\"',;}]{6,})"
)

_PEM_LABEL = r"(?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----"
_PEM_REST = (
    _PEM_LABEL
    # The body up to the END line, or as far as it goes when the block was
    # cut short: anything but a quote or a backslash, so that a masked block
    # never eats the quote that ends a JSON string or a repr, nor half of an
    # escape; the escapes a repr or JSON writes inside one (\n, \\n, \/) are
    # taken whole.
    + r"(?:(?!-----END )(?:[^\"'\\]|\\{1,2}[nrt/]))*"
    + r"(?:-----END "
    + _PEM_LABEL
    + ")?"
)
_B64URL = "[A-Za-z0-9_-]"
_JWT_REST = (
    rf"{_B64URL}{{10,}}\."
    # JWS: header.payload.signature (the signature empty for alg "none")
    rf"(?:ey{_B64URL}{{8,}}\.{_B64URL}*"
    # JWE: header.key.iv.ciphertext.tag (the key empty for "dir")
    rf"|{_B64URL}*\.{_B64URL}{{16,}}\.{_B64URL}+\.{_B64URL}{{16,}})"
)
_GITLAB = (
    "glpat-",
    "gldt-",
    "glrt-",
    "glptt-",
    "glcbt-",
    "glft-",
    "glimt-",
    "glagent-",
    "gloas-",
    "glsoat-",
    "glffct-",
)

PREFIXED: tuple[tuple[tuple[str, ...], str, str | None], ...] = (
    # (what the secret starts with, what follows, the characters that must
    # not come just before it: _token_start; None, any may). Each is issued
    # by one service alone, with a prefix no ordinary text has; the short ones
    # must start a token, and a JWT a base64url run (else a run of "eyJ"s is
    # scanned to its end from each: quadratic). Nothing here uses \s, \w, \b
    # nor "." outside a class (see _found_shape's non-ASCII path).
    (("-----BEGIN ",), _PEM_REST, None),  # RSA, EC, OPENSSH, PGP, PKCS#8...
    (("eyJ",), _JWT_REST, _B64_WORD),  # a JWT: base64url of '{"' opens it
    (("sk_live_", "sk_test_", "rk_live_", "rk_test_"), "[0-9A-Za-z]{16,}", _WORD),
    (("whsec_",), "[A-Za-z0-9+/=]{24,}", _WORD),  # Stripe, Svix webhook secret
    (("AIza",), r"[0-9A-Za-z_\-]{35}", _WORD),  # Google API key
    (("GOCSPX-",), r"[0-9A-Za-z_\-]{24,}", _WORD),  # Google OAuth client secret
    (("ya29.",), r"[0-9A-Za-z_\-]{20,}", _WORD),  # Google OAuth access token
    (("hf_", "api_org_"), "[A-Za-z0-9]{30,}", _WORD),  # Hugging Face
    (_GITLAB, r"[0-9A-Za-z_\-]{20,}(?:\.[0-9a-z]{2}\.?[0-9a-z]{7})?", _WORD),
    (("glc_",), "[A-Za-z0-9+/]{32,}={0,2}", _WORD),  # Grafana Cloud
    (("glsa_",), "[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}", _WORD),  # Grafana service acct
    (("npm_",), "[A-Za-z0-9]{36,}", _WORD),
    (
        ("pypi-AgEIcHlwaS5vcmc", "pypi-AgENdGVzdC5weXBpLm9yZw"),
        r"[A-Za-z0-9_\-]{50,}",
        _WORD,
    ),
    (
        ("hooks.slack.com/",),
        "(?:services|workflows|triggers)/[A-Za-z0-9+/_-]{20,}",
        None,
    ),
    (
        ("discord.com/api/webhooks/", "discordapp.com/api/webhooks/"),
        "[0-9]{5,}/[A-Za-z0-9_-]{20,}",
        None,
    ),
    (("xapp-",), "[0-9]-[A-Za-z0-9-]{10,}", _WORD),  # Slack app-level token
    (("gsk_",), "[A-Za-z0-9]{40,}", _WORD),  # Groq
    (("r8_",), "[A-Za-z0-9]{30,}", _WORD),  # Replicate
    (("pplx-",), "[A-Za-z0-9]{40,}", _WORD),  # Perplexity
    (("xai-",), "[A-Za-z0-9]{60,}", _WORD),  # xAI
    (("lsv2_pt_", "lsv2_sk_"), "[A-Za-z0-9_]{32,}", _WORD),  # LangSmith
    (("tvly-",), "[A-Za-z0-9-]{24,}", _WORD),  # Tavily
    (("pcsk_",), "[A-Za-z0-9_]{40,}", _WORD),  # Pinecone
    (("dop_v1_", "doo_v1_", "dor_v1_"), "[a-f0-9]{64}", _WORD),  # DigitalOcean
    (("shpat_", "shpca_", "shppa_", "shpss_"), "[a-fA-F0-9]{32}", _WORD),  # Shopify
    (("lin_api_",), "[A-Za-z0-9]{40}", _WORD),  # Linear
    (("sntrys_",), "[A-Za-z0-9+/=_]{40,}", _WORD),  # Sentry org token
    (("sntryu_",), "[a-f0-9]{64}", _WORD),  # Sentry user token
    (("pscale_tkn_", "pscale_pw_", "pscale_oauth_"), r"[A-Za-z0-9_=.\-]{32,}", _WORD),
    (("PMAK-",), "[a-fA-F0-9]{24}-[a-fA-F0-9]{34}", _WORD),  # Postman
    (("pul-",), "[a-f0-9]{40}", _WORD),  # Pulumi
    (("hvs.", "hvb."), r"[A-Za-z0-9_\-]{90,}", _WORD),  # HashiCorp Vault
    (("AGE-SECRET-KEY-1",), "[0-9A-Z]{58}", _WORD),  # age
    (("NRAK-",), "[A-Z0-9]{27}", _WORD),  # New Relic user key
    (("HRKU-AA",), r"[0-9A-Za-z_\-]{58}", _WORD),  # Heroku
    (("sq0atp-", "sq0csp-"), r"[0-9A-Za-z_\-]{22,}", _WORD),  # Square
    (("rubygems_",), "[a-f0-9]{48}", _WORD),
    (("AccountKey=", "SharedAccessKey="), "[A-Za-z0-9+/]{40,}={0,2}", None),  # Azure
)
"""Secrets known by what they start with (gitleaks' and detect-secrets'
rules for them, where a prefix alone tells): masked whole (``redact``'s
``_mask_shape``), found from the prefix (``_found_shape``)."""


def _prefixed_source(prefixes: tuple[str, ...], rest: str, word: str | None) -> str:
    starts = [re.escape(p) if word is None else _token_start(p, word) for p in prefixes]
    return "(?:" + "|".join(starts) + ")" + rest


_PREFIXED_SOURCES = [_prefixed_source(*entry) for entry in PREFIXED]
SHAPES: re.Pattern[str]
"""Every shape, in one regex (masking, ``Redactor.text``, goes left to right
through it). Compiled on first use (``__getattr__``): ~8 ms, where nothing
but a text holding a shape needs it."""
_CLASSIC_SHAPES = re.compile(_CLASSIC)
"""SHAPES without PREFIXED: SHAPES matches where one of its alternatives
does, so ``_CLASSIC_SHAPES.search(s) or`` a PREFIXED one's is its answer."""


def __getattr__(name: str) -> re.Pattern[str]:
    """SHAPES, compiled at its first use (PEP 562)."""
    if name == "SHAPES":
        shapes = re.compile(_CLASSIC[:-1] + "|" + "|".join(_PREFIXED_SOURCES) + ")")
        globals()["SHAPES"] = shapes  # the module's own from now on
        return shapes
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _prefixed_pattern(i: int) -> re.Pattern[str]:
    """PREFIXED[i]'s regex, compiled when a text first holds its trigger (all
    of them at import were ~8 ms more for every process)."""
    return re.compile(_PREFIXED_SOURCES[i])


PREFIXES = tuple(p for prefixes, _, _ in PREFIXED for p in prefixes)
"""What every PREFIXED secret starts with."""
KEPT = re.compile(
    r"hooks\.slack\.com/[a-z]+/|discord(?:app)?\.com/api/webhooks/"
    r"|(?:Account|SharedAccess)Key="
)
"""The start of a PREFIXED match that still reads once the rest is masked."""

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
    *dict.fromkeys(p.lower() for p in PREFIXES),
)


_PARTS = ("api", "passw")
"""Parts shared by several triggers: each ``in`` test is a pass over the text,
so one test of a part stands for its family, whose members are tested only
when the part is there."""
_ANCHORS = ("_", "-", ".", "=", "j", "z")
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


def _split(members: list[tuple[str, int]]) -> tuple[list[tuple[str, int]], list[str]]:
    """(the triggers an anchor's regex seeks, those tested whole): whole, the
    triggers the anchor starts, which a regex could only test by a lookahead
    at every occurrence of the anchor (~10 ns each in a run of them, a
    table's "-----", where a test of "-----begin " is ~1 ns a character)."""
    return [(t, i) for t, i in members if i], [t for t, i in members if not i]


def _seeker(anchor: str, members: list[tuple[str, int]]) -> re.Pattern[str] | None:
    """A regex that matches ``anchor`` where one of ``members`` (none starts
    with it) holds it: the regex engine seeks the character (a literal
    first), and lookarounds test the rest of the trigger around it. The two
    characters before the anchor are tested first, each in a class (most
    occurrences of the anchor, a date's "-", a run of "-----", a JSON key's
    '"n_', fail there), then the one before it by itself, so that only the
    triggers it ends are tried (~90 ns an "_" in code, not ~160). None for
    no members."""
    if not members:
        return None
    a = re.escape(anchor)
    before: dict[str, list[str]] = {}
    for t, i in members:
        after = f"(?={re.escape(t[i + 1 :])})" if t[i + 1 :] else ""
        before.setdefault(t[i - 1], []).append(f"(?<={re.escape(t[: i + 1])}){after}")
    guard = "[" + "".join(re.escape(c) for c in sorted(before)) + "]"
    if all(i >= 2 for _, i in members):
        guard = (
            "["
            + "".join(sorted({re.escape(t[i - 2]) for t, i in members}))
            + "]"
            + guard
        )
    by_char = [
        f"(?<={re.escape(c)}{a})(?:" + "|".join(xs) + ")"
        for c, xs in sorted(before.items())
    ]
    return re.compile(f"{a}(?<={guard}{a})(?:" + "|".join(by_char) + ")")


def _seek() -> tuple[tuple[str, re.Pattern[str] | None, tuple[str, ...]], ...]:
    out = []
    for a, m in _anchored(_REST).items():
        sought, whole = _split(m)
        out.append((a, _seeker(a, sought), tuple(whole)))
    return tuple(out)


_SEEK = _seek()
"""(anchor, the regex that finds its triggers, those tested whole: _split),
for ``may_have_shape``."""


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
        for anchor, seeker, whole in _SEEK:
            if anchor in low and (
                any(map(has, whole))
                or (seeker is not None and seeker.search(low) is not None)
            ):
                return True
    # A URL's password needs both "://" and "@": a URL alone skips the regex.
    return "@" in s and "://" in s


_KEYED_TAIL = re.compile(
    r"[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic)\s+)?(?!-----begin)[^\s\"',;}]{6,}"
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
"""SHAPES' case-sensitive classic shapes, each behind the literal it starts
with (PREFIXED ones are found from their triggers: ``_prefixed``)."""


_Shapes = dict[str, list[tuple[str, int, int]]]
_Finder = tuple[str, re.Pattern[str] | None, _Shapes, tuple[tuple[str, int], ...]]


@functools.cache
def _finders() -> tuple[_Finder, ...]:
    """(anchor, the regex that finds the PREFIXED triggers it seeks (_split),
    {the character before the anchor in such a trigger: [(trigger, where the
    anchor is in it, its PREFIXED entry)]}, ((a trigger tested whole, its
    entry), ...)). Built when a text first holds a trigger."""
    where = {p.lower(): n for n, (ps, _, _) in enumerate(PREFIXED) for p in ps}
    out = []
    for a, members in _anchored(list(where)).items():
        sought, whole = _split(members)
        at: _Shapes = {}
        for t, i in sought:
            at.setdefault(t[i - 1], []).append((t, i, where[t]))
        out.append((a, _seeker(a, sought), at, tuple((t, where[t]) for t in whole)))
    return tuple(out)


def has_shape(s: str) -> bool:
    """``SHAPES.search(s) is not None``, the same answer for every string,
    found faster (``test_redact_shapes``)."""
    return may_have_shape(s) and _found_shape(s)


def _found_shape(s: str) -> bool:
    """``has_shape`` past its substring prefilter (``may_have_shape`` said
    yes): each shape in ASCII text is sought only where its keyword or
    literal is; other text is left to the regex, but for PREFIXED shapes,
    which are ASCII and case-sensitive: in a copy of the text with each other
    character a "?" (which every class they use takes or refuses as it does
    the character), they are found from their triggers as in ASCII text."""
    if not s.isascii():
        if _CLASSIC_SHAPES.search(s) is not None:
            return True
        plain = s.encode("ascii", "replace").decode("ascii")
        return _prefixed(plain, plain.lower())
    if "@" in s and "://" in s and URL_MATCH.search(s) is not None:
        return True
    for literals, pattern in _LITERALS:
        if any(map(s.__contains__, literals)) and pattern.search(s) is not None:
            return True
    low = s.lower()
    return (
        _follows(low, _KEYS, _KEYED_TAIL)
        or _follows(low, _SCHEMES, _SCHEME_TAIL)
        or _prefixed(s, low)
    )


def _prefixed(s: str, low: str) -> bool:
    """Whether a PREFIXED shape starts at one of its triggers in ``s`` (ASCII;
    ``low`` is ``s`` lower-cased)."""
    for anchor, seeker, at, whole in _finders():
        if anchor not in low:
            continue
        for trigger, n in whole:
            p = low.find(trigger)
            while p >= 0:
                if _prefixed_pattern(n).match(s, p):
                    return True
                p = low.find(trigger, p + 1)
        if seeker is not None:
            for m in seeker.finditer(low):
                a = m.start()
                for trigger, i, n in at[low[a - 1]]:
                    p = a - i
                    if (
                        p >= 0
                        and low.startswith(trigger, p)
                        and _prefixed_pattern(n).match(s, p)
                    ):
                        return True
    return False


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
