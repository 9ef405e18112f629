"""Secrets never land (invariant 7): redaction before anything is stored.

A ``Redactor`` knows secret *values* (from environment variables named like
``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, plus any given to it) and
secret *shapes* (API keys, bearer tokens, ``password=...``), and secret *fields*
(dict keys named like those). It rewrites args, results, errors, tracebacks and
event payloads, and scrubs the final JSON text once more before it is written.
Bytes, DataFrames and files get the same treatment before they become artifacts
(``mask_bytes``, ``frame``, ``scrub_file``); binary data holding a secret cannot
be masked without corrupting it, so callers refuse it instead.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from argus_lab import _redact_forms as _forms
from argus_lab._redact_forms import KEPT as _KEPT
from argus_lab._redact_forms import PREFIXES as _PREFIXES
from argus_lab._redact_forms import URL_MATCH as _URL_MATCH
from argus_lab._redact_forms import encoded_forms, text_codec
from argus_lab._redact_forms import has_shape as _has_shape
from argus_lab._redact_forms import may_have_shape as _may_have_shape
from argus_lab._redact_given import KNOWN as _KNOWN
from argus_lab._redact_given import MIN_LEN as _MIN_LEN
from argus_lab._redact_given import check_secrets, count_secrets, known_secrets

__all__ = [
    "MASK",
    "SECRET_NAME",
    "Redactor",
    "check_secrets",
    "count_secrets",
    "cut_clear",
    "known_secrets",
    "merged_spans",
    "reference_only",
    "refuse_secret_key",
]

MASK = "[REDACTED]"
SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH"
    r"|(?:^|_)PASS(?:$|_|PHRASE|CODE)|_PWD$",
    re.I,
)
"""Names (env vars, dict keys, headers) whose values are secrets: DB_PASS,
GPG_PASSPHRASE, VAULT_PASSCODE and MYSQL_PWD too, but not the shell's
PWD/OLDPWD nor PASSENGER_*/BYPASS_*."""
_SECRET_FIELD = re.compile(
    r"(?:^|[_\-.\s])(?:api_?key|access_?key|secret_?key|private_?key|client_?secret"
    r"|secret|token|access_?token|refresh_?token|auth_?token|passw(?:or)?ds?|passphrase"
    r"|passcode|credentials?|authorization|auth|bearer|cookie)(?:$|[_\-.\s])"
    r"|[_\-.\s](?:pass|pwd)(?:$|[_\-.\s])",
    re.I,
)
"""Dict keys whose values are secrets, as whole words: "api_key", "github_token",
"password", "smtp_pass", "db_pwd", but not "author", "keywords", "primary_key",
"bypass", nor a lone "pass" (a count of tests) or "PWD" (the shell's folder,
as ``SECRET_NAME`` says)."""

_NUMBER = frozenset({int, float})  # bool is no number here: a flag hides nothing
_MEMO_LEN = 200  # ``changes`` remembers clean entries this short (names, ids)
_MEMO_SIZE = 4096  # ... this many at most, forgotten together
_KEY_HINTS = (
    "key",
    "secret",
    "token",
    "pass",
    "pwd",
    "credential",
    "auth",
    "bearer",
    "cookie",
)
"""Every key ``_SECRET_FIELD`` matches contains one of these (lower-cased)."""

_NESTED = frozenset({list, tuple, dict})
_CUT_REACH = 1 << 16
"""How far past a cut ``Redactor.cut_point`` seeks a secret running across
it: farther than any key, token or PEM block (a whole text of megabytes would
cost the regex seconds)."""
_CODECS = ("utf-8", "utf-16-le", "utf-16-be")  # how a secret sits in binary data


_REFERENCE = re.compile(r"\$\{[^}]*\}")
_AUTH_SCHEME = re.compile(r"(?i:bearer|basic|token)?\s*")


def refuse_secret_key(
    red: Redactor, value: str, what: str, stored_as: str, advice: str
) -> None:
    """Raises ValueError when ``value``, stored as a key (a name, an id, a
    scope), holds a secret ``red`` knows: masked, it would name nothing, so
    it is refused, and not repeated in the error (it may be logged or served).

    Args:
        what: What it is ("the session name").
        stored_as: How it is stored ("names are stored as keys").
        advice: What to do instead ("Choose another name").
    """
    if red.needed(value):
        raise ValueError(
            f"{what} holds a secret (it matches an API key, token or password, or "
            f"a secret environment variable's value); {stored_as} and cannot be "
            f"masked. {advice}"
        )


def reference_only(s: str) -> bool:
    """Whether ``s`` is ``${...}`` references alone, but for an auth scheme
    before them ("Bearer ${env.TOKEN}"): nothing in it is a secret."""
    if "${" not in s:
        return False
    rest = _REFERENCE.sub(" ", s)
    return "${" not in rest and _AUTH_SCHEME.fullmatch(rest.strip()) is not None


def _strings_masked(x: Any) -> Any:
    if isinstance(x, str):
        return MASK if x and not reference_only(x) else x
    if isinstance(x, dict):
        return {k: _strings_masked(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_strings_masked(v) for v in x]
    return x


_SHAPE_KEYS = (
    "api_key",
    "api-key",
    "apikey",
    "authorization",
    "passwd",
    "password",
    "secret",
    "token",
)
"""The key names of the ``name: value`` shape: a key ending in one of them
("userPassword", "X-Api-Key", "githubToken") was masked by the shape when rows
were scrubbed as JSON text, so it is a secret key for ``value()`` too."""


@functools.lru_cache(maxsize=4096)
def _secret_field(key: str) -> bool:
    # Keys repeat (field names, the same dicts step after step): the regex
    # runs once per distinct key.
    return _SECRET_FIELD.search(key) is not None or key.lower().endswith(_SHAPE_KEYS)


_NUMBER_KEYS = (
    "password",
    "passwords",
    "passwd",
    "passphrase",
    "passcode",
    "secret",
    "apikey",
    "api_key",
    "api-key",
    "secretkey",
    "secret_key",
    "privatekey",
    "private_key",
    "accesskey",
    "access_key",
    "token",
)


_PLAIN_NUMBER_KEYS: set[str] = set()
"""Keys ``_secret_number_key`` said no to, seen by ``changes`` (a set test
costs less than the cached call, on every number of every event)."""


@functools.lru_cache(maxsize=4096)
def _secret_number_key(key: str) -> bool:
    """Whether a number under ``key`` is a secret: a key ending in a password's
    or a key's name ("db_password", "userPasscode", "api_key"), so a numeric
    password is masked. Narrower than ``_secret_field``, whose whole words
    also name counters ("token_budget", "auth_retries"); "pin" is left out
    (a GPIO pin, a pinned version). Each ending holds one of ``_KEY_HINTS``,
    so ``may_hold_secrets`` still sees every key this masks a number under."""
    low = key.lower()
    return low.endswith(_NUMBER_KEYS) or (
        low.endswith(("_pass", "-pass", ".pass", "_pwd", "-pwd", ".pwd"))
    )


@functools.lru_cache(maxsize=1024)
def _secret_env_name(name: str) -> bool:
    return SECRET_NAME.search(name) is not None  # once a name: learn_env runs often


def _secret_entry(k: Any, x: Any) -> bool:
    """Whether ``x`` is text, or data holding text, under a secret-named key.

    The class test comes first: an array's truth value raises, and a number
    has none to mask.
    """
    return (
        (isinstance(x, str) or x.__class__ in _NESTED)
        and bool(x)
        and isinstance(k, str)
        and _secret_field(k)
    )


class Redactor:
    """Masks secrets in values and text.

    Args:
        secrets: Extra secret values to mask (e.g. an API key held in a variable).
        environ: Where to find secret env vars; defaults to ``os.environ``.
    """

    def __init__(
        self,
        secrets: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
        *,
        reserved: Callable[[], Collection[str]] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self._reserved = reserved  # called only when there is a value to check
        self._env_len = len(env) if env is os.environ else -1  # -1: never learn
        named_env = {k: v for k, v in env.items() if _secret_env_name(k)}
        self._env_seen = named_env if env is os.environ else {}
        """os.environ's secret-named variables as last learnt: a new value of
        one (a token refresh) leaves the count as it was."""
        # An env value that is a word of the rows (AUTH_MODE=session) is no secret.
        # A value read from a file keeps its newline (TOKEN="$(cat f)\n"): the
        # text a tool returns holds the value without it as well.
        named = {*named_env.values(), *(v.strip() for v in named_env.values())}
        values = {v for v in named if len(v) >= _MIN_LEN and not self._is_word(v)}
        values.update(secrets)
        _KNOWN.update(v for v in secrets if v and len(v) >= _MIN_LEN)
        kept = {v for v in values if v and len(v) >= _MIN_LEN}
        # Longest first, so a secret containing another is masked whole.
        self.values = sorted(
            kept | encoded_forms(kept, _MIN_LEN), key=len, reverse=True
        )
        self._clean: set[tuple[Any, str]] = set()
        """(key, short text) entries ``changes`` found nothing to mask in, with
        these ``values``: event fields repeat (a tool's name every step)."""

    def add(self, value: str) -> None:
        """Masks ``value`` from now on (e.g. a secret read through ${env.NAME}),
        and the value without the blanks around it (a newline read from a file)."""
        if value.strip() != value:
            self.add(value.strip())
        if len(value) < _MIN_LEN or value in self.values or self._is_word(value):
            return
        _KNOWN.add(value)
        more = {*self.values, value, *encoded_forms([value], _MIN_LEN)}
        self.values = sorted(more, key=len, reverse=True)
        self._clean = set()  # a text clean before may hold this one

    def _is_word(self, value: str) -> bool:
        words = () if self._reserved is None else self._reserved()
        return any(value in w for w in words)

    def learn_new_env(self) -> None:
        """``learn_env`` if os.environ changed since it last ran: a tool set a
        secret env var mid-run (a login) or gave one a new value (a token
        refreshed), and may return it. One ``len()`` and a look at each
        secret-named variable (a new value leaves the count as it was), at
        every step."""
        if self._env_len < 0:
            return
        if self._env_len != len(os.environ):
            self.learn_env()
            return
        get = os.environ.get
        for k, v in self._env_seen.items():
            if get(k) != v:
                self.learn_env()
                return

    def learn_env(self, environ: Mapping[str, str] | None = None) -> None:
        """Masks from now on the values of secret-named env vars set since
        (``%env API_KEY=...`` after a session opened: learnt at each run)."""
        env = os.environ if environ is None else environ
        names = list(filter(_secret_env_name, env))  # each public call: kept cheap
        if env is os.environ and self._env_len >= 0:
            self._env_len = len(env)
            self._env_seen = {k: env[k] for k in names}
        for k in names:
            self.add(env[k])

    def text(self, s: str) -> str:
        """Masks known secret values and secret shapes in a string (and writes
        lone surrogates, which no JSON row can hold, as ``\\udcff`` escapes)."""
        if not s.isascii():  # O(1): the common ASCII text pays nothing more
            s = _utf8(s)
        for v in self.values:
            if v in s:
                s = s.replace(v, MASK)
        if _has_shape(s):
            s = _forms.SHAPES.sub(_mask_shape, s)  # compiled at first need
        return s

    def value(self, v: Any) -> Any:
        """Masks secrets anywhere in JSON-like data, and values under secret keys."""
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if _secret_entry(k, x):
                    out[k] = self._under_secret_key(x, k)
                elif x.__class__ in _NUMBER and isinstance(k, str):
                    out[k] = MASK if _secret_number_key(k) else x
                else:
                    out[k] = self.value(x)
            # Keys are outside text too (a tool may key a dict by a token): the
            # store scans the rows of a step for secret values only, so a
            # shaped key masked nowhere else would be stored as it is.
            if any(isinstance(k, str) and self._rewrites(k) for k in out):
                out = {
                    self.text(k) if isinstance(k, str) else k: x for k, x in out.items()
                }
            return out
        if isinstance(v, list | tuple):
            return [self.value(x) for x in v]
        return v

    def _under_secret_key(self, x: Any, key: Any) -> Any:
        # Every string under a secret key is the secret or part of it: a list
        # of passwords, a token's {"value": ...}; numbers and shapes stay, but
        # for the numbers listed right under a password's or a key's name
        # ("password": [564739]). A plan's reference ("${env.API_KEY}",
        # "Bearer ${env.TOKEN}") is no secret: masked in the stored plan, the
        # task got "[REDACTED]".
        if isinstance(x, str):
            return self.text(x) if reference_only(x) else MASK
        if isinstance(x, list | tuple) and _secret_number_key(key):
            x = [MASK if e.__class__ in _NUMBER else e for e in x]
        return self.value(_strings_masked(x))

    def changes(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """What ``value(data)`` changes in a dict: only the entries it masks,
        masked (empty when nothing needs masking; no copy of the rest)."""
        out: dict[str, Any] = {}
        clean = self._clean
        for k, x in data.items():
            if x.__class__ in _NUMBER:
                if k in _PLAIN_NUMBER_KEYS:
                    continue  # a counter's name (every step's seq, attempt)
                if k.__class__ is str and _secret_number_key(k):
                    out[k] = MASK
                elif k.__class__ is str and len(_PLAIN_NUMBER_KEYS) < _MEMO_SIZE:
                    _PLAIN_NUMBER_KEYS.add(k)
                continue
            if x is None or x.__class__ is bool:
                continue
            short = x.__class__ is str and len(x) <= _MEMO_LEN
            if short and (k, x) in clean:
                continue  # scanned before, with the same secrets
            if _secret_entry(k, x):
                out[k] = self._under_secret_key(x, k)
            else:
                nx = self.value(x)
                if nx is not x and nx != x:
                    out[k] = nx
                elif short:
                    if len(clean) >= _MEMO_SIZE:
                        clean.clear()
                    clean.add((k, x))
        return out

    def spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) of every secret value and secret shape in ``text``."""
        out = []
        for v in self.values:
            i = text.find(v)
            while i >= 0:
                out.append((i, i + len(v)))
                i = text.find(v, i + 1)
        if _has_shape(text):
            out += [m.span() for m in _forms.SHAPES.finditer(text)]
        return out

    def cut_point(self, text: str, limit: int) -> int:
        """Where to cut ``text`` to keep at most ``limit`` characters without
        splitting a secret: ``limit``, or the start of the secret (a value or
        a shape) that runs across it. A cut through one leaves a prefix that
        masking no longer recognises (a model quoting a cut tool result stored
        21 of a token's 24 characters); cut before it, nothing of it is left.

        Secrets are sought up to ``_CUT_REACH`` characters past the cut (a
        known value's length, if longer), not in all of a huge text.
        """
        if limit >= len(text):
            return len(text)
        cut = max(limit, 0)
        reach = max(_CUT_REACH, len(self.values[0]) if self.values else 0)
        for a, b in merged_spans(self.spans(text[: cut + reach])):
            if a < cut < b:
                return a
        return cut

    def may_hold_secrets(self, json_text: str) -> bool:
        """Whether the data ``json_text`` was written from holds anything
        ``value()`` would mask: False is certain, True may be a false alarm.

        For a hash over data (``input_hash``): hashing a secret into a
        checkpoint lets anyone who reads it test guesses of a weak one, so
        data that may hold one is masked first, and this spares the walk for
        the rest. Escapes (a quote, a backslash, non-ASCII) count as alarms: a
        shape can hide behind one.
        """
        if "\\" in json_text or self.has_value(json_text):
            return True
        # A secret key holds one of _KEY_HINTS; a shape, one of TRIGGERS.
        low = json_text.lower()
        return any(map(low.__contains__, _KEY_HINTS)) or _may_have_shape(json_text)

    def _rewrites(self, key: str) -> bool:
        return self.needed(key) or (not key.isascii() and _utf8(key) is not key)

    def needed(self, text: str) -> bool:
        """Whether ``text`` contains anything this redactor would mask."""
        if self.has_value(text):
            return True
        return _has_shape(text)

    def has_value(self, text: str) -> bool:
        """Whether ``text`` contains one of the secret values (shapes aside)."""
        values = self.values
        return bool(values) and any(map(text.__contains__, values))

    def mask_bytes(self, data: bytes) -> bytes | None:
        """``data`` with secrets masked; None when it is binary (not UTF-8) and
        holds a secret, since masking would corrupt it: refuse it then."""
        codec, start = text_codec(data)  # UTF-16 too: a Windows export
        try:
            text = data[start:].decode(codec)
        except UnicodeDecodeError:
            # Shapes are ASCII, and latin-1 maps every byte to one character;
            # ASCII in UTF-16 has a NUL beside each byte: dropped, it reads.
            binary = data.decode("latin-1")
            if any(v.encode(c) in data for v in self.values for c in _CODECS) or any(
                _has_shape(b) for b in (binary, binary.replace("\0", ""))
            ):
                return None
            return data
        if not self.needed(text):
            return data
        return data[:start] + self.text(text).encode(codec)

    def frame(self, df: Any) -> Any:
        """A pandas DataFrame with secrets masked in everything that can hold
        text: names, index, cells, nested cells, attrs (a copy, or ``df``
        itself when nothing needs masking; see ``_redact_frame``)."""
        from argus_lab._redact_frame import masked_frame

        return masked_frame(self, df)

    def scrub_file(self, path: Path) -> Literal["clean", "masked", "removed"]:
        """Masks secrets in a file in place (atomically); a binary file holding
        one is deleted ("removed"), as masking would corrupt it."""
        data = Path(path).read_bytes()
        masked = self.mask_bytes(data)
        if masked is None:
            Path(path).unlink()
            return "removed"
        if masked == data:
            return "clean"
        tmp = Path(path).with_name(f".{Path(path).name}.masking")
        tmp.write_bytes(masked)
        os.replace(tmp, path)
        return "masked"


def cut_clear(text: str, limit: int, *redactors: Redactor) -> str:
    """``text[:limit]``, or shorter: ended before a secret that runs across
    the cut (``Redactor.cut_point``), one that ``redactors`` know or one of
    this process's (``known_secrets``) and the env's, so that what is kept
    holds each secret whole (masked where it is stored) or none of it. For
    text cut before it is masked: a cut prefix is no secret to any mask."""
    if len(text) <= limit:
        return text
    reds = (*redactors, Redactor(known_secrets()))
    cut, moved = limit, True
    while moved:  # moved before one's secret, the cut may split another's
        new = min(r.cut_point(text, cut) for r in reds)
        cut, moved = new, new != cut
    return text[:cut]


def merged_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` (``Redactor.spans``) sorted, overlapping ones joined: a cut
    strictly inside one of these splits a secret; one between two does not."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _utf8(s: str) -> str:
    """``s``, or a copy with its lone surrogates (a file name that is not
    UTF-8, decoded with ``surrogateescape``) as ``\\udcff`` escapes: UTF-8
    cannot encode them, so pydantic-core refused the row and the run stopped."""
    try:
        s.encode()
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode()
    return s


_WHOLE = ("sk-", "gh", "xox", "AKIA", *_PREFIXES)
"""What a shape masked whole starts with (a key: value's and a Bearer
header's start with their keyword)."""


def _mask_shape(m: re.Match[str]) -> str:
    s = m.group(0)
    # A URL's password: the user and host stay. (A "token=" value can end in
    # "@" after a scheme too, with no user:password colon: not this branch.)
    if _URL_MATCH.fullmatch(s):
        return s[: s.index(":", s.index("://") + 3) + 1] + MASK + "@"
    # A token known by what it starts with is masked whole: a PEM block holds
    # spaces and "Proc-Type:", a key "=", which the cut below would keep a
    # part of. A webhook's host and path still read, and "AccountKey=".
    if s.startswith(_WHOLE):
        kept = _KEPT.match(s)
        return MASK if kept is None else kept.group() + MASK
    # Keep the "password=" / "Bearer " prefix so the text still reads.
    cut = max(s.rfind("="), s.rfind(":"), s.rfind(" "))
    if 0 < cut < len(s) - 1:
        # The quote that opens the value stays too: 'password: "x"' is still
        # quoted after masking ('password: "[REDACTED]"').
        rest = s[cut + 1 :]
        lead = len(rest) - len(rest.lstrip("\"' "))
        if lead < len(rest):
            return s[: cut + 1] + rest[:lead] + MASK
    return MASK
