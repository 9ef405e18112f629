"""Invariant 7: secrets never reach a checkpoint, an event or a DataFrame."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import argus_lab as al
from argus_lab.redact import MASK, Redactor

SECRET = "s3cr3t-Value-7f9a2c41e8"


@al.tool
def leak(token: str, *, ctx: al.ToolContext) -> dict[str, str]:
    """Returns the secret it was given, in several places."""
    return {"echo": token, "note": f"used {token}", "api_key": "inline-value-123"}


@al.tool
def leak_error(token: str) -> None:
    """Raises with the secret in the message."""
    raise RuntimeError(f"auth failed for token {token}")


def all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


@pytest.mark.slow
def test_secret_in_args_result_and_exception_lands_nowhere(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARGUS_TEST_SECRET_TOKEN", SECRET)
    plan = {
        "goal": "leak",
        "tasks": [
            {
                "id": "a",
                "tool": "leak",
                "args": {"token": "${env.ARGUS_TEST_SECRET_TOKEN}"},
            },
            {
                "id": "b",
                "tool": "leak_error",
                "args": {"token": "${env.ARGUS_TEST_SECRET_TOKEN}"},
            },
            {"id": "c", "tool": "leak", "args": {"token": "${a.result.echo}"}},
        ],
    }
    s = ws.new_session(plan=plan, tools=[leak, leak_error], name="leaky")
    s.run()
    assert s.result("a") == {"echo": MASK, "note": f"used {MASK}", "api_key": MASK}
    err = s.record("b").error or ""
    assert "auth failed for token" in err and SECRET not in err
    assert SECRET not in (s.record("b").traceback or "")
    frames = [s.tasks_df().to_string(), s.events_df().to_string()]
    s.close()
    assert all(SECRET not in f for f in frames)
    stored = all_bytes(ws.path / "sessions" / s.id)
    assert stored and SECRET.encode() not in stored
    assert b"inline-value-123" not in stored


def test_literal_secret_in_a_plan_is_refused_before_anything_is_written(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARGUS_TEST_SECRET_TOKEN", SECRET)
    plan = {
        "goal": "g",
        "tasks": [{"id": "a", "tool": "leak", "args": {"token": SECRET}}],
    }
    with pytest.raises(al.PlanError, match=r"\$\{env\.NAME\}"):
        ws.new_session(plan=plan, tools=[leak], name="literal")
    assert ws.sessions() == []
    plan["tasks"][0]["args"] = {"token": "sk-ant-api03-" + "x" * 40}  # a key's shape
    with pytest.raises(al.PlanError, match="holds a secret"):
        ws.new_session(plan=plan, tools=[leak], name="literal")


@al.tool
def connect(auth_mode: str) -> str:
    """Echoes its mode."""
    return auth_mode


def test_an_argument_secret_only_by_its_name_is_refused_saying_so(
    ws: al.Workspace,
) -> None:
    # auth_mode: "none" is stored masked (its name reads as a secret field),
    # so it is refused; the error must say the name is why, not call "none"
    # a secret, and must not repeat the value.
    plan = {
        "goal": "g",
        "tasks": [{"id": "a", "tool": "leak", "args": {"auth_mode": "none-at-all"}}],
    }
    plan["tasks"][0]["tool"] = "connect"
    with pytest.raises(al.PlanError, match="'auth_mode' holds a secret by its name"):
        ws.new_session(plan=plan, tools=[connect], name="named")
    assert ws.sessions() == []
    plan["tasks"][0]["args"] = {"auth_mode": "${env.ARGUS_TEST_MODE}"}
    ws.new_session(plan=plan, tools=[connect], name="named").close()


def test_missing_env_reference_fails_the_task_clearly(ws: al.Workspace) -> None:
    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": "a",
                "tool": "leak",
                "args": {"token": "${env.ARGUS_NOT_SET_ANYWHERE}"},
            }
        ],
    }
    s = ws.new_session(plan=plan, tools=[leak], name="noenv")
    s.run()
    assert "ARGUS_NOT_SET_ANYWHERE is not set" in (s.record("a").error or "")


def test_secrets_option_masks_values_held_elsewhere(ws: al.Workspace) -> None:
    @al.tool
    def reveal() -> str:
        return "the vault code is correct-horse-battery"

    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "r", "tool": "reveal"}]},
        tools=[reveal],
        name="opt",
        secrets=["correct-horse-battery"],
    )
    s.run()
    assert s.result("r") == f"the vault code is {MASK}"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345", "abcdefghijklmn"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
        ("x-api-key: sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAA"),
        ("password=hunter2hunter2", "hunter2"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "abcdefghijklmnop"),
        ("AKIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
    ],
)
def test_secret_shapes_are_masked(text: str, secret: str) -> None:
    out = Redactor(environ={}).text(text)
    assert MASK in out and secret not in out


def test_env_values_by_name_and_harmless_values_kept() -> None:
    r = Redactor(
        environ={
            "GITHUB_TOKEN": "tok-123456789",
            "DEBUG": "verbose1234",
            "MY_PASSWORD": "1",
        }
    )
    assert r.text("a tok-123456789 b") == f"a {MASK} b"
    assert r.text("verbose1234") == "verbose1234"  # not a secret's name
    assert r.text("1 + 1") == "1 + 1"  # too short to mask everywhere
    assert r.value({"idempotency_key": "abc123def", "token": "zzz"}) == {
        "idempotency_key": "abc123def",
        "token": MASK,
    }


def test_field_names_are_matched_as_words_not_fragments() -> None:
    r = Redactor(environ={})
    data = {
        "author": "Jane Austen",
        "keywords": "romance",
        "primary_key": 7,
        "api_key": "abc123456",
        "github_token": "zzz999999",
        "password": "pw",
    }
    assert r.value(data) == {
        "author": "Jane Austen",
        "keywords": "romance",
        "primary_key": 7,
        "api_key": MASK,
        "github_token": MASK,
        "password": MASK,
    }


def test_a_secret_read_through_env_never_lands_even_in_approvals(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SMTP_PASS", "hunter2-correct-horse")  # not a secret's name

    @al.tool(side_effect="write")
    def send_mail(to: str, credential: str) -> str:
        """A write: asks for approval, showing its args."""
        return f"sent to {to}"

    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": "m",
                "tool": "send_mail",
                "args": {"to": "a@b.c", "credential": "${env.SMTP_PASS}"},
            }
        ],
    }
    s = ws.new_session(plan=plan, tools=[send_mail], name="mail")
    s.run()
    asked = s.pending_approvals()["m"]
    assert asked["args"]["credential"] == MASK
    s.approve("m")
    assert s.run().status == "succeeded"
    s.close()
    stored = all_bytes(ws.path / "sessions" / s.id)
    assert b"hunter2-correct-horse" not in stored


def test_large_results_are_redacted_before_they_become_artifacts(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARGUS_TEST_SECRET_TOKEN", SECRET)

    @al.tool
    def big(token: str) -> dict[str, object]:
        return {"rows": ["x" * 100] * 1000, "leak": token}

    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": "b",
                "tool": "big",
                "args": {"token": "${env.ARGUS_TEST_SECRET_TOKEN}"},
            }
        ],
    }
    s = ws.new_session(plan=plan, tools=[big], name="bigleak")
    s.run()
    assert s.record("b").result_ref is not None
    assert s.result("b")["leak"] == MASK
    assert SECRET.encode() not in all_bytes(ws.path / "artifacts")


GH_SHAPE = "ghp_" + "Zq7" * 12  # a GitHub token's shape, and a valid class name


class _ShapedError(Exception):
    pass


_ShapedError.__name__ = GH_SHAPE


@al.tool
def shaped(n: int) -> dict[str, object]:
    """Puts secret shapes into every field a step's record and events carry."""
    if n == 1:
        raise _ShapedError("password=hunter2-hunter2")
    return {"Authorization": "Bearer abcdefghijklmnop", "cookie": "c-0123456789"}


def test_every_field_of_a_step_that_holds_outside_text_is_masked(
    ws: al.Workspace,
) -> None:
    """The store scans task and event rows of a run for secret *values* only
    (fields_redacted): the runtime masks shapes and secret keys field by field,
    every field that can carry outside text included, even an exception's
    class name. Nothing shaped like a secret reaches the stored bytes."""
    plan = {
        "goal": "shapes",
        "tasks": [
            {"id": "ok", "tool": "shaped", "args": {"n": 0}},
            {"id": "bad", "tool": "shaped", "args": {"n": 1}},
        ],
    }
    s = ws.new_session(plan=plan, tools=[shaped], name="shapes")
    s.run()
    assert s.result("ok") == {"Authorization": MASK, "cookie": MASK}
    bad = s.record("bad")
    assert bad.status == "failed" and bad.error_type == MASK
    assert "hunter2" not in (bad.error or "") + (bad.traceback or "")
    failed = [e for e in s.events() if e.kind == "task_failed"]
    assert failed and failed[0].model_dump()["error_type"] == MASK
    s.close()
    stored = all_bytes(ws.path / "sessions" / s.id)
    for needle in (GH_SHAPE, "hunter2", "abcdefghijklmnop", "c-0123456789"):
        assert needle.encode() not in stored, needle


@pytest.mark.parametrize(
    "data",
    [
        {"author": "Jane", "api_key": "abc123456", "n": 7, "ok": True, "x": None},
        {"tool": "noop", "bytes": 258, "cached": False},
        {"nested": {"password": "pw-12345", "list": ["Bearer abcdefghijklmnop"]}},
        {"note": "used s3cr3t-Value-7f9a2c41e8 here", "f": 1.5},
        {"db_password": 424242, "token_budget": 5, "input_tokens": 9, "ok": True},
        {"pin_code": 12345678, "apiKey": 7.5, "creds": {"password": [1, "x"]}},
        {"password": [1, 2.5, True], "secret_count": 3},
        {},
    ],
)
def test_changes_are_what_value_would_change(data: dict[str, object]) -> None:
    """``Redactor.changes`` (the runtime's pass over an event's fields) masks
    exactly what ``value`` masks, and names only the entries it changed."""
    r = Redactor(secrets=[SECRET], environ={})
    changed = r.changes(data)
    assert {**data, **changed} == r.value(data)
    assert all(data[k] != v for k, v in changed.items())


def test_changes_remembers_clean_text_only_while_the_secrets_stay_the_same() -> None:
    """``changes`` skips a short entry it found clean before (a tool's name in
    every step's event), but a secret added since is masked in it all the
    same, and an entry under a secret-named key is never taken for clean."""
    r = Redactor(environ={})
    entry = {"tool": "deploy-with-s3cr3t-Value-7f9a"}
    assert r.changes(entry) == {} and r.changes(entry) == {}  # scanned, remembered
    r.add("s3cr3t-Value-7f9a")
    assert r.changes(entry) == {"tool": f"deploy-with-{MASK}"}
    assert r.changes(entry) == {"tool": f"deploy-with-{MASK}"}  # not remembered
    keyed = {"token": "abcdefgh"}
    assert r.changes(keyed) == {"token": MASK} == r.changes(keyed)
    assert r.changes({"note": "abcdefgh"}) == {}  # the same text, another key


def test_the_trigger_prefilter_answers_as_a_test_of_every_trigger() -> None:
    """``_may_have_shape`` tests a shared part for a family of triggers; it
    must say yes exactly where a test of every trigger would."""
    import random

    from argus_lab._redact_forms import TRIGGERS as _TRIGGERS
    from argus_lab._redact_forms import may_have_shape as _may_have_shape

    def every(s: str) -> bool:
        low = s.lower()
        return any(t in low for t in _TRIGGERS) or ("@" in s and "://" in s)

    pieces = [*_TRIGGERS, *(t[:-1] for t in _TRIGGERS), "gh", "api", "passw"]
    pieces += [t[1:] for t in _TRIGGERS]  # each side of the anchor of a trigger
    pieces += ["GHS_", "Api-Key", "PassWd", "x", " ", "-", "_", "@", "://", "é"]
    pieces += ["/", "=", ".", "j", "J", "z", "-----", "\u212a", "\u017f"]
    rng = random.Random(7)
    texts = [t.upper() for t in _TRIGGERS] + ["", "x" * 256, "github pat"]
    texts += ["".join(rng.choices(pieces, k=rng.randint(1, 6))) for _ in range(3000)]
    assert all(_may_have_shape(s) == every(s) for s in texts)
    assert any(_may_have_shape(s) for s in texts) and not _may_have_shape("x" * 256)


@al.tool
def keyed_by_token() -> dict[str, object]:
    """A result keyed by secret-shaped strings, at the top and nested."""
    return {GH_SHAPE: "staging", "nested": {"sk-ant-api03-" + "Q" * 40: 1}}


def test_a_secret_shaped_dict_key_is_masked_before_it_is_stored(
    ws: al.Workspace,
) -> None:
    """Dict keys carry outside text as values do: since the store scans a
    step's rows for secret values only (fields_redacted), a key shaped like a
    token must be masked by the runtime's field pass or it lands as it is."""
    plan = {"goal": "keys", "tasks": [{"id": "k", "tool": "keyed_by_token"}]}
    s = ws.new_session(plan=plan, tools=[keyed_by_token], name="keys")
    assert s.run().status == "succeeded"
    assert s.result("k") == {MASK: "staging", "nested": {MASK: 1}}
    s.close()
    stored = all_bytes(ws.path / "sessions" / s.id)
    for needle in (GH_SHAPE, "sk-ant-api03-QQQQ"):
        assert needle.encode() not in stored, needle


@pytest.mark.timeout(60)  # a hang guard, not a speed target (see benchmarks/)
def test_a_long_word_beside_a_url_and_an_at_sign_is_scanned_in_linear_time() -> None:
    # The URL-password shape had an unbounded scheme ([A-Za-z][...]*://): from
    # every letter of a long word it scanned to the word's end and back, so a
    # sequence, a hex dump or a minified blob beside any URL and any "@" took
    # quadratic time (16k chars: 0.3 s; 400k: minutes) on every step's text.
    r = Redactor(environ={})
    blob = "ACGT" * 100_000
    text = f"{blob} from https://example.org/seq by me@example.org"
    assert r.text(text) == text
    assert not r.needed(text)
    # A scheme glued to a long word still has its password masked.
    url = f"see x{blob}postgresql://user:pa55word@db.example.org/x"
    masked = r.text(url)
    assert "pa55word" not in masked
    assert masked.endswith(f"postgresql://user:{MASK}@db.example.org/x")


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("token: s3://bucket@ in the log", " in the log"),
        ("secret=ab://cdef@ x", " x"),
    ],
)
def test_a_key_value_shape_ending_in_at_after_a_scheme_is_masked_not_raised(
    text: str, kept: str
) -> None:
    # _mask_shape took any match ending in "@" with "://" for a URL password
    # and looked for the user:password colon after the scheme: a token=...
    # value such as "s3://bucket@" has none, and str.index raised ValueError
    # out of the redactor (a step's text could not be stored).
    out = Redactor(environ={}).text(text)
    assert MASK in out and out.endswith(kept)
    assert "bucket" not in out and "cdef" not in out


@al.tool
def call_api(api_key: str, authorization: str) -> dict[str, bool]:
    """Says whether it was given the key itself, in the key and the header."""
    key = os.environ["ARGUS_TEST_API_KEY"]
    return {"key": api_key == key, "header": authorization == f"Bearer {key}"}


def test_an_env_reference_under_a_secret_named_argument_survives_a_reopen(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The way to pass a key is ${env.NAME}, and its argument is named like a
    # secret: every string under such a name was masked when the plan was
    # stored, so after ws.open the tool got "[REDACTED]" as its key.
    monkeypatch.setenv("ARGUS_TEST_API_KEY", SECRET)
    args = {
        "api_key": "${env.ARGUS_TEST_API_KEY}",
        "authorization": "Bearer ${env.ARGUS_TEST_API_KEY}",
    }
    plan = {"goal": "g", "tasks": [{"id": "a", "tool": "call_api", "args": args}]}
    ws.new_session(plan=plan, tools=[call_api], name="ref").close()
    s = ws.open("ref", tools=[call_api])
    assert s.plan.task("a").args == args
    s.run()
    assert s.status == "succeeded"
    assert s.result("a") == {"key": True, "header": True}
    s.close()
    assert SECRET.encode() not in all_bytes(ws.path / "sessions" / s.id)
    # A literal under a secret name is still masked, a reference beside it too.
    r = Redactor(environ={})
    assert r.value({"api_key": "live-123456", "token": "x ${env.K}"}) == {
        "api_key": MASK,
        "token": MASK,
    }


def _pem(label: str, body_lines: int = 8, headers: str = "") -> str:
    import base64

    raw = base64.b64encode(os.urandom(48 * body_lines)).decode()
    body = "\n".join(raw[i : i + 64] for i in range(0, len(raw), 64))
    return f"-----BEGIN {label}-----\n{headers}{body}\n-----END {label}-----"


@pytest.mark.parametrize(
    "label",
    [
        "RSA PRIVATE KEY",
        "PRIVATE KEY",
        "EC PRIVATE KEY",
        "DSA PRIVATE KEY",
        "OPENSSH PRIVATE KEY",
        "ENCRYPTED PRIVATE KEY",
        "PGP PRIVATE KEY BLOCK",
    ],
)
def test_a_pem_private_key_is_masked_whole_across_its_lines(label: str) -> None:
    r = Redactor(environ={})
    pem = _pem(label)
    body = pem.splitlines()[1:-1]
    out = r.text(f"key file:\n{pem}\nloaded from /etc/ssl/k.pem")
    assert out == f"key file:\n{MASK}\nloaded from /etc/ssl/k.pem"
    # In an error quoting it with repr() (its newlines written "\\n"), in a
    # JSON document's text, and as a value: the same.
    err = r.text(f"ValueError: bad key {pem!r} (len {len(pem)})")
    assert err == f"ValueError: bad key '{MASK}' (len {len(pem)})"
    doc = r.text(json.dumps({"key": pem, "path": "k.pem"}))
    assert json.loads(doc) == {"key": MASK, "path": "k.pem"}
    assert r.value({"files": [pem]}) == {"files": [MASK]}
    assert not any(line in out + err + doc for line in body)


def test_a_pem_block_cut_short_or_with_headers_is_masked_from_its_begin_line() -> None:
    r = Redactor(environ={})
    legacy = _pem(
        "RSA PRIVATE KEY",
        headers="Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,0A1B2C3D4E5F6071\n\n",
    )
    assert r.text(f"a {legacy} b") == f"a {MASK} b"
    # No END line (a truncated log line, a result cut at a size limit): the
    # body after BEGIN is masked, to the end of the text ...
    cut = _pem("OPENSSH PRIVATE KEY")[:400]
    assert (
        r.text(f"head -c 400 id_ed25519:\n{cut}") == f"head -c 400 id_ed25519:\n{MASK}"
    )
    # ... or to the quote that ends the string it is in, so that a JSON row
    # or a repr still parses.
    doc = json.dumps({"out": cut, "truncated": True})
    assert json.loads(r.text(doc)) == {"out": MASK, "truncated": True}
    assert r.text(repr(cut) + " was cut") == f"'{MASK}' was cut"
    # A certificate or a public key is no secret.
    cert = _pem("CERTIFICATE")
    assert r.text(cert) == cert
    pub = _pem("PUBLIC KEY")
    assert r.text(pub) == pub


def test_a_pem_after_a_secret_keyword_is_masked_whole_not_cut_at_its_first_space() -> (
    None
):
    """A "key: value" shape stopped the value at the first space (after
    "-----BEGIN"), and the scan went on past the block: its body stayed."""
    r = Redactor(environ={})
    pem = _pem("RSA PRIVATE KEY")
    for text, masked in [
        (f"secret: {pem}", f"secret: {MASK}"),
        (f"password='{pem}'", f"password='{MASK}'"),
        (f'{{"token": "{pem}"}}', f'{{"token": "{MASK}"}}'),
        (f"private_key = {pem}\n", f"private_key = {MASK}\n"),
    ]:
        assert r.text(text) == masked
    doc = json.dumps({"secret": pem, "x": 1}, indent=1)  # as text, not a dict
    assert json.loads(r.text(doc)) == {"secret": MASK, "x": 1}


JWT = (
    "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ"
    ".eyJzdWIiOiJ1c2VyLTQyIiwiZXhwIjoxOTAwMDAwMDAwfQ"
    ".dGhpcyBpcyBub3QgYSByZWFsIHNpZ25hdHVyZSBidXQgaXQgbG9va3MgbGlrZSBvbmU"
)


def test_a_jwt_is_masked_in_json_text_headers_cookies_and_urls() -> None:
    r = Redactor(environ={})
    doc = json.dumps({"id_token": JWT, "jwt": JWT, "list": [JWT], "n": 2})
    assert json.loads(r.text(doc)) == {
        "id_token": MASK,
        "jwt": MASK,
        "list": [MASK],
        "n": 2,
    }
    assert r.text(f"Authorization: Bearer {JWT}") == f"Authorization: Bearer {MASK}"
    assert r.text(f"Set-Cookie: session={JWT}; Path=/") == (
        f"Set-Cookie: session={MASK}; Path=/"
    )
    assert r.text(f"GET /cb#state=1&access={JWT}") == f"GET /cb#state=1&access={MASK}"
    # A JWE (encrypted): five parts, the key empty for "dir".
    jwe = (
        "eyJhbGciOiJkaXIiLCJlbmMiOiJBMjU2R0NNIn0"
        "..aXZpdmFsdWUxMjM0NQ.Y2lw.dGFnMTIzNDU2Nzg5MDEy"
    )
    assert r.text(f"jwe {jwe} ok") == f"jwe {MASK} ok"
    assert r.value({"claims": JWT}) == {"claims": MASK}


@pytest.mark.parametrize(
    "text",
    [
        "pk_live_51H8b2cKZ3a4b5c6d7e8f9g0h1i2j3k4l5",  # Stripe publishable
        "pk_test_TYooMQauvdEDq54NiTphI7jx",
        "def test_network_test_connectivityWithRetries():",
        "risk-assessment-for-the-quarterly-report-2024",  # a URL's slug
        "https://github.com/u/mask-rcnn-benchmark-results-on-coco-dataset",
        "the skeleton key opens the basic shed",
        "hf_hub_download(repo_id='gpt2', filename='config.json')",
        "npm_config_cache=/home/u/.npm",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "uuid 123e4567-e89b-12d3-a456-426614174000",
        "data:application/json;base64,eyJhIjogMSwgImIiOiAyfQ==",
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----",
        "glpat- is GitLab's prefix for personal tokens",
        "AIza is how a Google key starts",
        "https://hooks.slack.com/services/ (your webhook here)",
    ],
)
def test_look_alikes_of_secrets_known_by_their_prefix_are_left_alone(
    text: str,
) -> None:
    r = Redactor(environ={})
    assert r.text(text) == text and not r.needed(text)


def test_rows_holding_prefixed_secrets_stay_json_once_scrubbed() -> None:
    """The store masks a row value by value (``_commit.scrubbed``): a row
    with a PEM block, a JWT and a webhook in its strings and keys parses."""
    from argus_lab.store._commit import scrubbed

    r = Redactor(environ={})
    pem = _pem("EC PRIVATE KEY")
    hook = "https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/" + "Zq" * 12
    row = {
        "result": {"pem": pem, "text": f"tok {JWT}; hook {hook}", JWT: 1},
        "error": f"RuntimeError: {pem[:300]!r}",
    }
    out = json.loads(scrubbed(r, json.dumps(row)))
    assert out == {
        "result": {
            "pem": MASK,
            "text": f"tok {MASK}; hook https://hooks.slack.com/services/{MASK}",
            MASK: 1,
        },
        "error": f"RuntimeError: '{MASK}'",
    }


def test_numbers_under_password_and_key_names_are_masked(ws: al.Workspace) -> None:
    """A numeric password is a secret too: under a key ending in a password's
    or a key's name, as it is or listed right there. Counters named with a
    secret word ("token_budget", "input_tokens") and flags stay, and so does
    a number that only equals a secret's value: Argus's own numbers (a seq,
    a budget) may equal a PIN, and masked they would no longer be numbers."""
    r = Redactor(secrets=["55443322"], environ={})
    data = {
        "db_password": 424242,
        "userPasscode": 1234.5,
        "openaiApiKey": 777777,
        "password": [564739, "x"],
        "passwords": [111222, "hunter2x"],
        "api_key": {"value": "sk-abc-123456", "rotated": 3},
        "token_budget": 5,
        "input_tokens": 9,
        "is_secret": True,
        "rows": 55443322,
        "auth": {"user": "bob", "retries": 3},
    }
    assert r.value(data) == {
        "db_password": MASK,
        "userPasscode": MASK,
        "openaiApiKey": MASK,
        "password": [MASK, MASK],
        "passwords": [MASK, MASK],
        "api_key": {"value": MASK, "rotated": 3},
        "token_budget": 5,
        "input_tokens": 9,
        "is_secret": True,
        "rows": 55443322,
        "auth": {"user": MASK, "retries": 3},  # its text: all under a secret key
    }
    assert r.changes({"seq": 55443322, "attempt": 1, "password": [7]}) == {
        "password": [MASK]
    }
    assert r.may_hold_secrets(json.dumps({"x": {"db_password": 4}}))

    @al.tool
    def login(user: str) -> dict[str, object]:
        """Returns a numeric password, as it is and listed."""
        return {"user": user, "password": 424242, "pins": {"password": [918273]}}

    s = ws.new_session(
        plan={
            "goal": "g",
            "tasks": [{"id": "a", "tool": "login", "args": {"user": "b"}}],
        },
        tools=[login],
        name="numbers",
    )
    assert s.run().status == "succeeded"
    assert s.result("a") == {
        "user": "b",
        "password": MASK,
        "pins": {"password": [MASK]},
    }
    frame = s.tasks_df().to_string()
    s.close()
    stored = all_bytes(ws.path / "sessions" / s.id)
    for needle in (b"424242", b"918273"):
        assert needle not in stored and needle.decode() not in frame


def test_a_budget_equal_to_a_numeric_secret_still_reopens(ws: al.Workspace) -> None:
    """Argus's own numbers are no secrets even when one equals a secret's
    value: a budget of 424242 steps stored as "[REDACTED]" made the session
    impossible to open (its meta no longer validated)."""

    @al.tool
    def noop() -> str:
        """Does nothing."""
        return "ok"

    plan = {"goal": "g", "tasks": [{"id": "a", "tool": "noop"}]}
    s = ws.new_session(
        plan=plan,
        tools=[noop],
        name="pin",
        secrets=["424242"],
        budget=al.Budget(max_steps=424242),
    )
    assert s.run().status == "succeeded"
    s.close()
    s = ws.open("pin", tools=[noop], secrets=["424242"])
    assert s.record("a").status == "succeeded"
    s.close()


def test_a_number_under_a_password_argument_is_refused_in_a_plan(
    ws: al.Workspace,
) -> None:
    """Stored masked, a resumed task would get "[REDACTED]" for its number:
    refused before anything is written, as text is."""

    @al.tool
    def unlock(door_password: int) -> str:
        """Opens a door."""
        return "open"

    plan = {
        "goal": "g",
        "tasks": [{"id": "a", "tool": "unlock", "args": {"door_password": 4321}}],
    }
    with pytest.raises(
        al.PlanError, match="'door_password' holds a secret by its name"
    ):
        ws.new_session(plan=plan, tools=[unlock], name="door")
    assert ws.sessions() == []


def test_an_env_secret_read_with_its_newline_is_masked_without_it() -> None:
    """TOKEN="$(cat file)" style values keep a newline; a tool's text holds
    the value without it (in JSON, at the end of a line)."""
    r = Redactor(environ={"VENDOR_TOKEN": "Qm4xT8vK2pL9wZ3nB7cR5\n"})
    assert r.text('{"t": "Qm4xT8vK2pL9wZ3nB7cR5"}') == f'{{"t": "{MASK}"}}'
    r2 = Redactor(environ={})
    r2.add("  Zq8vN3kP7wR2xT6mB9cL\n")
    assert r2.text("key Zq8vN3kP7wR2xT6mB9cL.") == f"key {MASK}."


def test_keys_named_like_secret_env_vars_are_secret_fields_too() -> None:
    """SECRET_NAME says DB_PASS, MYSQL_PWD and VAULT_PASSCODE name secrets; a
    fetched config dict keyed so was stored in clear. A lone "pass" (a count
    of tests) and the shell's PWD stay."""
    r = Redactor(environ={})
    data = {
        "DB_PASS": "s3cret-db",
        "MYSQL_PWD": "my-pw-123",
        "VAULT_PASSCODE": 918273,
        "smtp_pass": "mail-pw-9",
        "db_pwd": 4455,
        "PWD": "/home/me",
        "pass": 12,
        "bypass": "none",
    }
    assert r.value(data) == {
        "DB_PASS": MASK,
        "MYSQL_PWD": MASK,
        "VAULT_PASSCODE": MASK,
        "smtp_pass": MASK,
        "db_pwd": MASK,
        "PWD": "/home/me",
        "pass": 12,
        "bypass": "none",
    }
    assert {**data, **r.changes(data)} == r.value(data)
