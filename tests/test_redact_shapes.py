"""``has_shape`` answers as ``SHAPES.search`` does, for every string.

The store asks ``Redactor.needed`` of every row it writes; ``has_shape`` seeks
each shape from its keyword rather than trying the regex's case-insensitive
alternatives at every position. A string it wrongly calls clean would be
written unmasked, so it is compared with the regex on strings built from the
pieces shapes are made of: keywords in any case, separators, quotes, runs of
token characters, URLs, and letters whose case folds outside ASCII.
"""

from __future__ import annotations

import json
import random
import re
import string
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus_lab import _redact_forms as forms
from argus_lab._redact_forms import FOLD, PREFIXED, PREFIXES, SHAPES, has_shape
from argus_lab.redact import MASK, Redactor

PIECES = [
    "sk-", "sk-ant-", "ghp_", "gho_", "ghs_", "github_pat_", "xoxb-", "xoxp-",
    "AKIA", "ASIA", "akia", "Bearer", "BASIC", "basic", "bearer",
    "Authorization", "x-api-key", "API_KEY", "api-key", "apikey", "Password",
    "passwd", "SECRET", "secret", "token", "Token", "n_secrets",
    "https://", "://", "@", "user:", ":pw", "ftp", "a+b.c-d",
    ":", "=", " = ", '"', "'", " ", "\t", "\n", ",", ";", "}", "{", "/", "_", "-",
    "abcdefghijklmnop", "ABCDEFGHIJKLMNOP", "0123456789", "Zz9", "~+/=.",
    "\u017f", "\u212a", "\u0130", "\u00e9", "\u00df",
    # The PREFIXED shapes' pieces: their starts, what may come before them,
    # and runs of their bodies' characters.
    "-----BEGIN ", "RSA ", "PRIVATE KEY", "-----", "-----END ", " BLOCK",
    "eyJ", "eyJhbGciOiJIUzI1NiJ9", ".", "sk_live_", "rk_test_", "pk_live_",
    "hf_", "npm_", "glpat-", "AIza", "pypi-AgEIcHlwaS5vcmc", "hooks.slack.com/",
    "services/", "whsec_", "ya29.", "\\n", "\\", "%3D", "a_", "0123456789abcdef",
    "ABCDEFGHIJKLMNOP0123456789abcdef", "AccountKey=",
]  # fmt: skip

texts = st.lists(st.sampled_from(PIECES), max_size=14).map("".join)


@settings(max_examples=3000, deadline=None)
@given(texts)
def test_has_shape_agrees_with_the_regex(s: str) -> None:
    assert has_shape(s) == (SHAPES.search(s) is not None), s


_ALNUM = string.ascii_letters + string.digits
_BODIES = [
    "0123456789abcdef",
    _ALNUM,
    _ALNUM + "_-",
    _ALNUM + "+/=",
    string.ascii_uppercase + string.digits,
    _ALNUM + "_-\u00e9?",
    "ABCDEF0123456789-_. \n",
]
_BEFORE = ["", " ", "a", "Z", "7", "_", "-", "=", '"', "\n", "\\n", "%3D", "\u00e9"]
_BEFORE += ["\udcff", "\u212a"]  # a lone surrogate (a file name), the Kelvin sign
_STARTS = sorted(
    {v for p in PREFIXES for v in (p, p.lower(), p.upper(), p[:-1], p[1:])} - {""}
)
_AFTER = [
    "", " ", ".", "_", "-", "/", '"', "\u00e9", "-----END RSA PRIVATE KEY-----",
    "PRIVATE KEY-----", "_0123abcd", "-0123456789abcdef0123456789abcdef01",
    ".eyJzdWIiOiIxIn0.", "services/T0/B0/" + "x" * 20,
]  # fmt: skip
_body = st.sampled_from(_BODIES).flatmap(
    lambda a: st.integers(0, 130).flatmap(
        lambda n: st.text(alphabet=a, min_size=n, max_size=n)
    )
)
_segment = st.tuples(
    st.sampled_from(_BEFORE), st.sampled_from(_STARTS), _body, st.sampled_from(_AFTER)
).map("".join)
prefixed_texts = st.lists(_segment, min_size=1, max_size=3).map("".join)


@settings(max_examples=3000, deadline=None)
@given(prefixed_texts)
def test_has_shape_agrees_with_the_regex_on_prefixed_shapes(s: str) -> None:
    """The PREFIXED shapes are found from their triggers (in text beyond
    ASCII, in a copy where each other character is a "?"); their bodies are
    long, so they are built here around each start, of every length near
    the ones the shapes ask for."""
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
    ("https://example.org/mask-rcnn-benchmark-results-on-coco-data", False),
    ("OPENAI_API_KEY=sk-proj-" + "a1B2" * 8, True),
    ("\\nsk-" + "a1B2" * 8, True),  # after an escape JSON or a repr writes
    ("%3Dsk-" + "a1B2" * 8, True),  # after a URL-encoded "="
    # Known by their prefix (PREFIXED), and what only looks like them.
    ("sk_live_" + "a1B2" * 4, True),
    ("sk_live_" + "a1B2" * 3 + "a1B", False),  # 15 characters: too short
    ("pk_live_" + "a1B2" * 6, False),  # Stripe's publishable key
    ("task_test_abcdefghijklmnopqrst", False),  # inside a word
    ("network_test_abcdefghijklmnopqrst", False),
    ("\\nsk_test_" + "a1B2" * 6, True),  # after an escape
    ("%3Dsk_test_" + "a1B2" * 6, True),
    ("risk-assessment-for-the-quarterly-report", False),  # a URL's slug
    ("sk-assessment-for-the-quarterly-report", True),
    ("AIza" + "x" * 35, True),
    ("AIza" + "x" * 34, False),
    ("hf_" + "aBcD" * 8, True),
    ("hf_hub_download_model_from_the_cache_dir", False),
    ("glpat-" + "x" * 20, True),
    ("npm_" + "9" * 36, True),
    ("npm_config_registry=https://registry.npmjs.org/", False),
    ("pypi-AgEIcHlwaS5vcmc" + "A" * 50, True),
    ("https://hooks.slack.com/services/T0000/B0000/" + "x" * 24, True),
    ("https://hooks.slack.com/services/", False),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig_-", True),
    ("eyJhbGciOiJIUzI1NiJ9", False),  # a header alone: base64 of JSON
    ("data:application/json;base64,eyJhIjogMSwgImIiOiAyfQ==", False),
    ("xeyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", False),  # inside a run
    ("-----BEGIN PRIVATE KEY-----", True),  # a block cut short is masked
    ("-----BEGIN CERTIFICATE-----\nMIIB", False),  # public
    ("-----BEGIN PUBLIC KEY-----\nMIIB", False),
    ("sha256:" + "0123456789abcdef" * 4, False),
    ("id 123e4567-e89b-12d3-a456-426614174000", False),
    ("a skeleton key, the basics of tokens", False),
    ("caf\u00e9 AIza" + "x" * 35, True),  # beyond ASCII: found from the trigger
    ("caf\u00e9 AIza" + "x" * 34 + "\u00e9", False),
]


def test_known_strings() -> None:
    for s, expected in CASES:
        assert has_shape(s) is expected, s
        assert (SHAPES.search(s) is not None) is expected, s
    red = Redactor()
    assert red.needed("password: hunter22") and not red.needed('{"n_secrets":0}')


def _rand(alphabet: str, n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


_HEX = "0123456789abcdef"
_B64 = _ALNUM + "+/"
_BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"
_PEM_BODY = "\n".join(_rand(_B64, 64, i) for i in range(6)) + "\n" + "AbCd=="
SAMPLES = {
    "-----BEGIN ": (
        "-----BEGIN RSA PRIVATE KEY-----\n"
        + _PEM_BODY
        + "\n-----END RSA PRIVATE KEY-----"
    ),
    "eyJ": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    + _rand(_ALNUM + "_-", 43, 1),
    "sk_live_": "sk_live_" + _rand(_ALNUM, 24, 2),
    "sk_test_": "sk_test_" + _rand(_ALNUM, 99, 3),
    "rk_live_": "rk_live_" + _rand(_ALNUM, 24, 4),
    "rk_test_": "rk_test_" + _rand(_ALNUM, 24, 5),
    "whsec_": "whsec_" + _rand(_B64, 32, 6),
    "AIza": "AIza" + _rand(_ALNUM + "_-", 35, 7),
    "GOCSPX-": "GOCSPX-" + _rand(_ALNUM + "_-", 28, 8),
    "ya29.": "ya29." + _rand(_ALNUM + "_-", 120, 9),
    "hf_": "hf_" + _rand(string.ascii_letters, 34, 10),
    "api_org_": "api_org_" + _rand(string.ascii_letters, 34, 11),
    **{p: p + _rand(_ALNUM + "_-", 20, 12 + i) for i, p in enumerate(forms._GITLAB)},
    "glc_": "glc_" + _rand(_B64, 60, 30) + "==",
    "glsa_": "glsa_" + _rand(_ALNUM, 32, 31) + "_" + _rand(_HEX, 8, 32),
    "npm_": "npm_" + _rand(_ALNUM, 36, 33),
    "pypi-AgEIcHlwaS5vcmc": "pypi-AgEIcHlwaS5vcmc" + _rand(_ALNUM + "_-", 150, 34),
    "pypi-AgENdGVzdC5weXBpLm9yZw": "pypi-AgENdGVzdC5weXBpLm9yZw"
    + _rand(_ALNUM + "_-", 150, 35),
    "hooks.slack.com/": "hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/"
    + _rand(_ALNUM, 24, 36),
    "discord.com/api/webhooks/": "discord.com/api/webhooks/123456789012345678/"
    + _rand(_ALNUM + "_-", 68, 37),
    "discordapp.com/api/webhooks/": "discordapp.com/api/webhooks/1234567890/"
    + _rand(_ALNUM + "_-", 68, 38),
    "xapp-": "xapp-1-A0B1C2D3E4F-1234567890123-" + _rand(_HEX, 64, 39),
    "gsk_": "gsk_" + _rand(_ALNUM, 52, 40),
    "r8_": "r8_" + _rand(_ALNUM, 37, 41),
    "pplx-": "pplx-" + _rand(_ALNUM, 48, 42),
    "xai-": "xai-" + _rand(_ALNUM, 80, 43),
    "lsv2_pt_": "lsv2_pt_" + _rand(_HEX, 32, 44) + "_" + _rand(_HEX, 10, 45),
    "lsv2_sk_": "lsv2_sk_" + _rand(_HEX, 32, 46) + "_" + _rand(_HEX, 10, 47),
    "tvly-": "tvly-dev-" + _rand(_ALNUM, 32, 48),
    "pcsk_": "pcsk_" + _rand(_ALNUM, 5, 49) + "_" + _rand(_ALNUM, 60, 50),
    "dop_v1_": "dop_v1_" + _rand(_HEX, 64, 51),
    "doo_v1_": "doo_v1_" + _rand(_HEX, 64, 52),
    "dor_v1_": "dor_v1_" + _rand(_HEX, 64, 53),
    "shpat_": "shpat_" + _rand(_HEX, 32, 54),
    "shpca_": "shpca_" + _rand(_HEX, 32, 55),
    "shppa_": "shppa_" + _rand(_HEX, 32, 56),
    "shpss_": "shpss_" + _rand(_HEX, 32, 57),
    "lin_api_": "lin_api_" + _rand(_ALNUM, 40, 58),
    "sntrys_": "sntrys_eyJpYXQiOjE3" + _rand(_B64, 80, 59) + "_" + _rand(_B64, 43, 60),
    "sntryu_": "sntryu_" + _rand(_HEX, 64, 61),
    "pscale_tkn_": "pscale_tkn_" + _rand(_ALNUM + "_-", 43, 62),
    "pscale_pw_": "pscale_pw_" + _rand(_ALNUM + "_-", 43, 63),
    "pscale_oauth_": "pscale_oauth_" + _rand(_ALNUM + "_-", 43, 64),
    "PMAK-": "PMAK-" + _rand(_HEX, 24, 65) + "-" + _rand(_HEX, 34, 66),
    "pul-": "pul-" + _rand(_HEX, 40, 67),
    "hvs.": "hvs." + _rand(_ALNUM + "_-", 95, 68),
    "hvb.": "hvb." + _rand(_ALNUM + "_-", 140, 69),
    "AGE-SECRET-KEY-1": "AGE-SECRET-KEY-1" + _rand(_BECH32, 58, 70),
    "NRAK-": "NRAK-" + _rand(string.ascii_uppercase + string.digits, 27, 71),
    "HRKU-AA": "HRKU-AA" + _rand(_ALNUM + "_-", 58, 72),
    "sq0atp-": "sq0atp-" + _rand(_ALNUM + "_-", 22, 73),
    "sq0csp-": "sq0csp-" + _rand(_ALNUM + "_-", 43, 74),
    "rubygems_": "rubygems_" + _rand(_HEX, 48, 75),
    "AccountKey=": "AccountKey=" + _rand(_B64, 86, 76) + "==",
    "SharedAccessKey=": "SharedAccessKey=" + _rand(_B64, 43, 77) + "=",
}
"""A secret of each PREFIXED start, in the format its service issues."""


def test_every_prefixed_start_has_a_sample() -> None:
    assert set(SAMPLES) == set(PREFIXES)
    assert len(PREFIXES) == len(set(PREFIXES))


@pytest.mark.parametrize("start", sorted(SAMPLES))
def test_a_prefixed_secret_is_masked_whole_wherever_it_is(start: str) -> None:
    """Alone, in a sentence, in a JSON document's text, in a repr (with its
    escapes) and after a JSON escape: masked whole (but for a webhook's host
    and path, and Azure's "AccountKey="), and a JSON document still parses."""
    secret = SAMPLES[start]
    kept = forms.KEPT.match(secret)
    masked = (kept.group() if kept else "") + MASK
    red = Redactor(environ={})
    assert SHAPES.fullmatch(secret) and has_shape(secret)
    assert red.text(secret) == masked
    assert red.text(f"the tool said {secret} twice: {secret}; done") == (
        f"the tool said {masked} twice: {masked}; done"
    )
    doc = json.dumps({"out": f"line one\n{secret}\nline three", "n": 1})
    assert json.loads(red.text(doc)) == {
        "out": f"line one\n{masked}\nline three",
        "n": 1,
    }
    assert red.text(repr(f"x {secret} y")) == repr(f"x {masked} y")
    assert red.value({"result": [f"got {secret}"]}) == {"result": [f"got {masked}"]}
    assert red.spans(secret) == [(0, len(secret))]


def test_ascii_text_with_keywords_never_runs_the_slow_regex(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ASCII text that holds keywords is answered without SHAPES, whose
    case-insensitive alternatives cost ~1.6 ms per 10 KB (bench_redact.py):
    counted, not timed."""
    calls: list[str] = []
    classic = forms._CLASSIC_SHAPES

    class Spy:
        def search(self, s: str) -> object:
            calls.append(s)
            return classic.search(s)

    monkeypatch.setattr(forms, "SHAPES", Spy())
    monkeypatch.setattr(forms, "_CLASSIC_SHAPES", Spy())
    row = ("the tokens this call used were counted; secret santa; " * 200)[:10_000]
    assert not has_shape(row) and not Redactor().needed(row)
    assert has_shape(row + " password=hunter22")
    assert has_shape(row + " hf_" + "aBcD" * 8)
    assert calls == []
    assert has_shape("caf\u00e9 secret=abcdefgh") and len(calls) == 1  # not ASCII
    # Beyond ASCII, a PREFIXED shape is found from its trigger too.
    assert has_shape("caf\u00e9 AIza" + "x" * 35) and len(calls) == 2


def test_fold_is_every_letter_the_regex_takes_for_ascii() -> None:
    """FOLD lists every code point beyond ASCII that ``re`` ignoring case
    matches to an ASCII letter (a Python release that adds one fails here)."""
    letter = re.compile("[a-z]", re.IGNORECASE)
    found = {cp for cp in range(128, sys.maxunicode + 1) if letter.fullmatch(chr(cp))}
    assert found == set(FOLD)
    assert all(letter.fullmatch(FOLD[cp]) for cp in FOLD)
    assert all(re.fullmatch(FOLD[cp], chr(cp), re.IGNORECASE) for cp in FOLD)


def test_prefixed_shapes_use_no_class_that_depends_on_unicode() -> None:
    """Beyond ASCII, PREFIXED shapes are sought in a copy of the text with a
    "?" for each other character: exact only while no PREFIXED pattern uses
    \\s, \\w, \\d, \\b or a bare "." (each takes some such characters)."""
    for _, rest, _ in PREFIXED:
        escaped = rest.replace("\\\\", "")  # an escaped backslash: no class
        assert not re.search(r"\\[swdbSWDB]", escaped), rest
        bare = re.sub(r"\[(?:\\.|[^\]])*\]", "", escaped)  # classes out
        assert "." not in bare.replace("\\.", ""), rest
