"""``has_shape`` answers as ``SHAPES.search`` does, for every string.

The store asks ``Redactor.needed`` of every row it writes; ``has_shape`` seeks
each shape from its keyword rather than trying the regex's case-insensitive
alternatives at every position. A string it wrongly calls clean would be
written unmasked, so it is compared with the regex on strings built from the
pieces shapes are made of: keywords in any case, separators, quotes, runs of
token characters, URLs, and letters whose case folds outside ASCII.
"""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus_lab import _redact_forms as forms
from argus_lab._redact_forms import FOLD, SHAPES, has_shape
from argus_lab.redact import Redactor

PIECES = [
    "sk-", "sk-ant-", "ghp_", "gho_", "ghs_", "github_pat_", "xoxb-", "xoxp-",
    "AKIA", "ASIA", "akia", "Bearer", "BASIC", "basic", "bearer",
    "Authorization", "x-api-key", "API_KEY", "api-key", "apikey", "Password",
    "passwd", "SECRET", "secret", "token", "Token", "n_secrets",
    "https://", "://", "@", "user:", ":pw", "ftp", "a+b.c-d",
    ":", "=", " = ", '"', "'", " ", "\t", "\n", ",", ";", "}", "{", "/", "_", "-",
    "abcdefghijklmnop", "ABCDEFGHIJKLMNOP", "0123456789", "Zz9", "~+/=.",
    "\u017f", "\u212a", "\u0130", "\u00e9", "\u00df", "\\n", "\\", "%3D",
]  # fmt: skip

texts = st.lists(st.sampled_from(PIECES), max_size=14).map("".join)


@settings(max_examples=3000, deadline=None)
@given(texts)
def test_has_shape_agrees_with_the_regex(s: str) -> None:
    assert has_shape(s) == (SHAPES.search(s) is not None), s


CASES = [
    ("sk-ant-" + "a" * 16, True),
    ("sk-" + "A" * 31, False),
    ("sk-" + "A" * 32, True),
    ("ghp_" + "x" * 30, True),
    ("github_pat_" + "x" * 30, True),
    ("xoxb-" + "1" * 10, True),
    ("AKIA" + "Z" * 16, True),
    ("akia" + "Z" * 16, False),
    ("Authorization: Bearer abcdefghijkl", True),
    ("BEARER abcdefghijkl", True),
    ("bearer abcdefghijk", False),
    ('{"X-Api-Key": "abcdef"}', True),
    ('{"x-api-key": "abcde"}', False),
    ("PASSWORD=hunter22", True),
    ("token = 'abc", False),
    ("postgres://me:pw@db/x", True),
    ("see https://example.com/@me", False),
    ('{"n_secrets":0,"name":"bench"}', False),
    ("the tokens were counted, 300 of them", False),
    ("\u017fecret: abcdefgh", True),  # long s: the regex ignoring case says s
    ("AUTHOR\u0130ZATION: abcdefgh", True),
    ("to\u212aen=abcdefgh", True),
    ("caf\u00e9 secret=abcdefgh", True),
    ("xoxe-1-" + "A1" * 10, True),  # Slack's refresh token
    ("xoxo-from-grandma-and-grandpa", False),
    # "sk-" starts a key only where a token starts: not in a URL's slug.
    ("risk-assessment-for-the-quarterly-report", False),
    ("https://example.org/mask-rcnn-benchmark-results-on-coco-data", False),
    ("sk-assessment-for-the-quarterly-report", True),
    ("OPENAI_API_KEY=sk-proj-" + "a1B2" * 8, True),
    ("\\nsk-" + "a1B2" * 8, True),  # after an escape JSON or a repr writes
    ("%3Dsk-" + "a1B2" * 8, True),  # after a URL-encoded "="
]


def test_known_strings() -> None:
    for s, expected in CASES:
        assert has_shape(s) is expected, s
        assert (SHAPES.search(s) is not None) is expected, s
    red = Redactor()
    assert red.needed("password: hunter22") and not red.needed('{"n_secrets":0}')


def test_ascii_text_with_keywords_never_runs_the_slow_regex(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ASCII text that holds keywords is answered without SHAPES, whose
    case-insensitive alternatives cost ~1.6 ms per 10 KB (bench_redact.py):
    counted, not timed."""
    calls: list[str] = []

    class Spy:
        def search(self, s: str) -> object:
            calls.append(s)
            return SHAPES.search(s)

    monkeypatch.setattr(forms, "SHAPES", Spy())
    row = ("the tokens this call used were counted; secret santa; " * 200)[:10_000]
    assert not has_shape(row) and not Redactor().needed(row)
    assert has_shape(row + " password=hunter22")
    assert calls == []
    assert has_shape("caf\u00e9 secret=abcdefgh") and len(calls) == 1  # not ASCII


def test_fold_is_every_letter_the_regex_takes_for_ascii() -> None:
    """FOLD lists every code point beyond ASCII that ``re`` ignoring case
    matches to an ASCII letter (a Python release that adds one fails here)."""
    letter = re.compile("[a-z]", re.IGNORECASE)
    found = {cp for cp in range(128, sys.maxunicode + 1) if letter.fullmatch(chr(cp))}
    assert found == set(FOLD)
    assert all(letter.fullmatch(FOLD[cp]) for cp in FOLD)
    assert all(re.fullmatch(FOLD[cp], chr(cp), re.IGNORECASE) for cp in FOLD)
