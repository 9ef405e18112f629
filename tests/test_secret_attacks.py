"""Secrets in the forms the sweep of issue 14 did not try, through real sessions.

Each test hands a secret to a session the way a user would (a provider's key
in a tool's result, a value read through ``${env.NAME}``) in a form a library
produces on its own, then scans every byte under the workspace: no copy lands.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import string
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.redact import MASK, Redactor

# A GitHub fine-grained token ("github_pat_", 22 characters, "_", 59) and the
# access key id of AWS temporary credentials (STS: "ASIA", 16 more).
GH_PAT = "github_pat_11ABCDEFG0" + "aB3dE6gH9jK2mN5pQ8" + "_" + "x7Y" * 20
AWS_STS = "ASIA" + "Q7RT2XKZ9PLM4WNB"
# An AWS secret access key: 40 characters of base64, so "/" and "+" in it.
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCY" + uuid.uuid4().hex[:10]


def scan(root: Path, needles: dict[str, str]) -> list[str]:
    """``name: file`` for every file under ``root`` holding one of ``needles``."""
    hits = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            hits += [
                f"{name}: {p.relative_to(root)}"
                for name, n in needles.items()
                if n.encode() in data
            ]
    return hits


@pytest.mark.parametrize(
    ("name", "key"), [("github_pat", GH_PAT), ("aws_sts", AWS_STS)]
)
def test_every_provider_key_shape_is_masked(name: str, key: str) -> None:
    red = Redactor(environ={})
    out = red.text(f"{name} = {key} ;")
    assert key not in out and MASK in out, out
    assert key[4:16] not in out  # no recognisable piece either
    assert red.value({"creds": [key]}) == {"creds": [MASK]}


@al.tool
def provider_keys() -> dict[str, Any]:
    """A result holding keys of the shapes every provider hands out."""
    return {"github": f"token {GH_PAT} ok", "aws": {"id": AWS_STS}}


def test_provider_keys_in_a_result_never_land(ws: al.Workspace) -> None:
    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "k", "tool": "provider_keys"}]},
        tools=[provider_keys],
        name=f"shapes-{uuid.uuid4().hex[:6]}",
    )
    s.run()
    assert s.result("k") == {"github": f"token {MASK} ok", "aws": {"id": MASK}}
    s.tasks_df()
    s.events_df()
    s.close()
    ws.close()
    assert scan(ws.path, {"github_pat": GH_PAT, "aws_sts": AWS_STS}) == []


def test_url_and_base64_forms_of_a_known_secret_are_masked() -> None:
    red = Redactor([AWS_SECRET], environ={})
    url = urllib.parse.quote(AWS_SECRET, safe="")
    assert url != AWS_SECRET  # the test means something: "/" and "+" change
    for text in (
        f"GET https://s3/x?Signature={url}&a=1 failed",
        f"GET https://s3/x?k={urllib.parse.quote(AWS_SECRET)}",
        f"form: key={urllib.parse.quote_plus(AWS_SECRET)}",
    ):
        assert url not in red.text(text) and MASK in red.text(text), text
    # Base64 starts the value at any of three alignments (an HTTP Basic
    # header's "user:password", a data URL, a JSON blob).
    for prefix in ("", "u:", "us:", "user:"):
        blob = base64.b64encode(f"{prefix}{AWS_SECRET}".encode()).decode()
        safe = base64.urlsafe_b64encode(f"{prefix}{AWS_SECRET}".encode()).decode()
        for b in (blob, safe):
            out = red.text(f"header: {b}")
            assert MASK in out, (prefix, b)
            assert not any(b[i : i + 16] in out for i in range(4, len(b) - 20))
    # A value JSON writes with escapes (non-ASCII, a quote) is found escaped too.
    odd = 'pässwörd-"' + uuid.uuid4().hex[:8]
    red.add(odd)
    escaped = '{"v": "p\\u00e4ssw\\u00f6rd-\\"' + odd[10:] + '"}'
    assert odd[10:] not in red.text(escaped)
    # Ordinary text is left alone.
    assert red.text("a plain sentence with user:alice") == (
        "a plain sentence with user:alice"
    )


@al.tool
def recase(key: str) -> dict[str, str]:
    """Prints a token the way code does: a hex digest upper-cased, a key
    lower-cased in a log line."""
    return {"upper": f"id={key.upper()};", "lower": f"key {key.lower()} used"}


def test_a_known_secret_upper_or_lower_cased_never_lands(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "Ab" + uuid.uuid4().hex  # mixed case: both recasings differ
    monkeypatch.setenv("RECASE_API_TOKEN", token)
    ref = "${env.RECASE_API_TOKEN}"
    s = ws.new_session(
        plan={
            "goal": "g",
            "tasks": [{"id": "r", "tool": "recase", "args": {"key": ref}}],
        },
        tools=[recase],
        name=f"recase-{uuid.uuid4().hex[:6]}",
    )
    s.run()
    assert s.result("r") == {"upper": f"id={MASK};", "lower": f"key {MASK} used"}
    s.close()
    ws.close()
    needles = {"raw": token, "upper": token.upper(), "lower": token.lower()}
    assert scan(ws.path, needles) == []


@al.tool
def call_api(key: str) -> str:
    """Fails like an HTTP client does: the URL, query string encoded, in the error."""
    q = urllib.parse.urlencode({"Signature": key})
    raise RuntimeError(f"403 Forbidden for url 'https://s3.example/x?{q}'")


@al.tool
def basic_header(key: str) -> dict[str, str]:
    """Returns the headers it sent, HTTP Basic auth without its scheme word."""
    token = base64.b64encode(f"admin:{key}".encode()).decode()
    return {"sent": token}


def test_encoded_env_secrets_in_errors_and_results_never_land(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Named like nothing secret: only reading it through ${env.NAME} makes
    # the redactor know it.
    monkeypatch.setenv("S3_SIGNING_VALUE", AWS_SECRET)
    ref = "${env.S3_SIGNING_VALUE}"
    s = ws.new_session(
        plan={
            "goal": "g",
            "tasks": [
                {"id": "api", "tool": "call_api", "args": {"key": ref}},
                {"id": "hdr", "tool": "basic_header", "args": {"key": ref}},
            ],
        },
        tools=[call_api, basic_header],
        name=f"encoded-{uuid.uuid4().hex[:6]}",
        max_consecutive_failures=None,
    )
    s.run()
    assert s.record("api").status == "failed"
    assert MASK in (s.record("api").error or "")
    assert MASK in s.result("hdr")["sent"]
    s.tasks_df()
    s.events_df()
    s.close()
    ws.close()
    url = urllib.parse.quote_plus(AWS_SECRET)
    b64 = base64.b64encode(f"admin:{AWS_SECRET}".encode()).decode()
    needles = {"raw": AWS_SECRET, "url": url, "b64": b64[8:40]}
    assert scan(ws.path, needles) == []


@al.tool
def nested_credentials() -> dict[str, Any]:
    """Secrets under secret-named keys, but not as plain strings."""
    return {
        "password": ["hunter2-first", "hunter2-second"],
        "config": {"api_key": {"value": "inner-key-value", "rotated": 3}},
        "client_secret": ("pair-left", "pair-right"),
        "tokens_used": 12,  # a count, not a secret: kept
    }


def test_values_under_secret_keys_never_land_whatever_their_type(
    ws: al.Workspace,
) -> None:
    red = Redactor(environ={})
    assert red.changes({"password": ["a-b-c-d-e"], "n": 1}) == {"password": [MASK]}
    assert red.value({"token": {"v": "abcdefgh", "n": 2}}) == {
        "token": {"v": MASK, "n": 2}
    }
    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "c", "tool": "nested_credentials"}]},
        tools=[nested_credentials],
        name=f"nested-{uuid.uuid4().hex[:6]}",
    )
    s.run()
    assert s.result("c") == {
        "password": [MASK, MASK],
        "config": {"api_key": {"value": MASK, "rotated": 3}},
        "client_secret": [MASK, MASK],
        "tokens_used": 12,
    }
    s.events_df()
    s.close()
    ws.close()
    needles = {"list": "hunter2-", "dict": "inner-key-value", "tuple": "pair-"}
    assert scan(ws.path, needles) == []


@pytest.mark.slow  # the model stack's first import: ~2-5 s on a loaded machine
def test_a_recorded_llm_exchange_holds_no_secret(
    ws: al.Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RecordingModel's replay file is a log of requests and replies: the
    session masks its own copies, and the recording must hold no secret
    either, whichever way the session came to know it."""
    from argus_lab.llm.base import ModelRequest
    from argus_lab.llm.testing import FunctionModel, RecordingModel

    plain = "plainval-" + uuid.uuid4().hex  # read through ${env.NAME} only
    named = "tokval-" + uuid.uuid4().hex  # an env var named like a secret
    given = "given-" + uuid.uuid4().hex  # handed in as secrets=[...]
    monkeypatch.setenv("DEST_ADDRESS_X", plain)
    monkeypatch.setenv("X_SERVICE_TOKEN", named)

    def answer(req: ModelRequest) -> str:
        prompt = str([m.content for m in req.messages])
        assert plain in prompt and named in prompt  # the model saw them
        return f"repeating {plain} {named} and {given}"

    recording = tmp_path / "replies.jsonl"
    model = RecordingModel(FunctionModel(answer, name="scripted"), recording)
    s = ws.new_session(
        plan={
            "goal": "g",
            "tasks": [
                {
                    "id": "ask",
                    "kind": "llm",
                    "description": "Repeat what you were given.",
                    "args": {
                        "a": "${env.DEST_ADDRESS_X}",
                        "b": "${env.X_SERVICE_TOKEN}",
                    },
                }
            ],
        },
        models=model,
        secrets=[given],
        name=f"recorded-{uuid.uuid4().hex[:6]}",
    )
    s.run()
    assert s.result("ask") == f"repeating {MASK} {MASK} and {MASK}"
    s.close()
    ws.close()
    assert recording.is_file() and "repeating" in recording.read_text()
    needles = {"plain": plain, "named": named, "given": given}
    assert scan(tmp_path, needles) == []


@al.tool
def deliver(to: str, note: str, cc: list[str]) -> str:
    """Takes its addresses from the environment."""
    return "delivered"


def test_no_spelling_of_an_env_reference_reaches_the_widget(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The detail panel shows arguments as the task ran with them, but never
    an environment value: however the reference is spaced, as the plan's own
    parser reads it."""
    import json

    from argus_lab.jupyter.widget import GraphWidget

    plain = "plainval-" + uuid.uuid4().hex
    named = "tokval-" + uuid.uuid4().hex
    monkeypatch.setenv("DELIVERY_ADDRESS_X", plain)
    monkeypatch.setenv("DELIVERY_API_TOKEN", named)
    args = {
        "to": "${ env.DELIVERY_ADDRESS_X }",
        "note": "key=${\tenv.DELIVERY_API_TOKEN} sent",
        "cc": ["${env.DELIVERY_ADDRESS_X }", "${ who.result }"],
    }
    s = ws.new_session(
        plan={
            "goal": "g",
            "tasks": [
                {"id": "who", "tool": "echo_text", "args": {"v": "bob"}},
                {"id": "d", "tool": "deliver", "deps": ["who"], "args": args},
            ],
        },
        tools=[deliver, echo_text],
        name=f"widget-{uuid.uuid4().hex[:6]}",
    )
    s.run()
    assert s.record("d").status == "succeeded"
    w = GraphWidget(s)
    w.selected = "d"
    shown = json.dumps(w.detail, default=str)
    assert plain not in shown and named not in shown
    # References to results still resolve; env references stay as written.
    assert w.detail["resolved_args"]["cc"] == ["${env.DELIVERY_ADDRESS_X }", "bob"]
    assert w.detail["resolved_args"]["to"] == "${ env.DELIVERY_ADDRESS_X }"
    s.close()


@al.tool
def echo_text(v: str) -> str:
    """Returns its argument."""
    return v


@pytest.mark.parametrize("kind", ["shape", "env", "given"])
def test_a_state_named_by_a_secret_is_refused_and_leaves_nothing(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A state's name is a folder and a key, like a session's: refused, never
    masked, and the refusal does not repeat it."""
    name = {
        "shape": "sk-ant-api03-" + uuid.uuid4().hex,
        "env": "tokval" + uuid.uuid4().hex[:12],
        "given": "given" + uuid.uuid4().hex[:12],
    }[kind]
    monkeypatch.setenv("STATE_TEST_TOKEN", name if kind == "env" else "unrelated-xyz")
    Redactor([name] if kind == "given" else [], environ={})  # a session's secrets=
    with pytest.raises(ValueError, match="state name holds a secret") as err:
        ws.state(name)
    assert name not in str(err.value)
    ws.close()
    assert scan(ws.path, {kind: name}) == []
    assert not any(name in str(p) for p in ws.path.rglob("*"))


def test_common_secret_env_names_and_url_credentials_are_masked() -> None:
    red = Redactor(
        environ={
            "DB_PASS": "pass-value-1",  # the usual spellings of a password var
            "MYSQL_PWD": "pass-value-2",  # MySQL's own variable
            "SMTP_PASS_FILE_X": "pass-value-3",
            "GPG_PASSPHRASE": "pass-value-4",  # and the PASS* words of GPG, Vault
            "VAULT_PASSCODE": "pass-value-5",
            "PWD": "/work/project",  # the shell's folders: not secrets
            "OLDPWD": "/work/elsewhere",
            "PASSENGER_APP_ENV": "production",
            "BYPASS_CACHE": "always-yes",
        }
    )
    for v in (f"pass-value-{i}" for i in range(1, 6)):
        assert red.text(f"x {v} y") == f"x {MASK} y"
    kept = "in /work/project and /work/elsewhere, production, always-yes"
    assert red.text(kept) == kept
    # A password inside a URL (DATABASE_URL, a proxy, a git remote).
    for url, pw in (
        ("postgres://app:s3cr3t-pw@db:5432/x", "s3cr3t-pw"),
        ("https://user:tok:with:colons@proxy.local/", "tok:with:colons"),
        ("redis://:onlypass123@cache:6379/0", "onlypass123"),
    ):
        out = red.text(f"connect {url} failed")
        assert pw not in out and MASK in out, out
        assert "@" in out  # the host still reads
    assert red.text("see https://example.com/a:b/c@d") == (
        "see https://example.com/a:b/c@d"
    )


@al.tool
def reveal_given() -> str:
    """Returns a value the session was told is secret (secrets=[...])."""
    return f"the code is {GIVEN}"


GIVEN = "given-" + uuid.uuid4().hex


def test_reopening_without_the_sessions_secrets_warns(ws: al.Workspace) -> None:
    """Secret values handed in as secrets=[...] cannot be stored (they are the
    secrets), so a session reopened without them masks nothing it does not
    otherwise know: a rerun or a fork would store them in clear. The session
    keeps how many there were, and ws.open says when fewer come back."""
    import warnings

    plan = {"goal": "g", "tasks": [{"id": "r", "tool": "reveal_given"}]}
    name = f"given-{uuid.uuid4().hex[:6]}"
    s = ws.new_session(plan=plan, tools=[reveal_given], secrets=[GIVEN], name=name)
    s.run()
    assert s.result("r") == f"the code is {MASK}"
    assert s.info.n_secrets == 1
    f = s.fork()
    assert f.info.n_secrets == 1  # a fork inherits them, and so the count
    f.close()
    s.close()
    with pytest.warns(UserWarning, match=r"1 secret value.*secrets=\[\.\.\.\]"):
        s = ws.open(name, tools=[reveal_given])
    s.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # handed in again: nothing to say
        s = ws.open(name, tools=[reveal_given], secrets=[GIVEN])
    assert s.fork(reuse="none").run() is not None
    s.close()
    ws.close()
    assert scan(ws.path, {"given": GIVEN}) == []


def test_a_literal_secret_as_an_argument_name_is_refused(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A literal secret in an argument's value is refused (use ${env.NAME});
    in an argument's name it was taken, then masked in the stored plan only, so
    the task ran with one name now and "[REDACTED]" after a reopen."""
    from argus_lab.errors import PlanError

    key = "sk-ant-api03-" + uuid.uuid4().hex
    env_value = "tokval-" + uuid.uuid4().hex
    monkeypatch.setenv("ARGNAME_TOKEN", env_value)
    for name in (key, env_value):
        plan = {
            "goal": "g",
            "tasks": [
                {"id": "ask", "kind": "llm", "description": "d", "args": {name: 1}}
            ],
        }
        with pytest.raises(PlanError, match="an argument's name holds a secret") as e:
            ws.new_session(plan=plan, name=f"argname-{uuid.uuid4().hex[:6]}")
        assert name not in str(e.value)


def test_values_without_a_truth_value_pass_the_redactor() -> None:
    """An array or a DataFrame inside a result (before it becomes an artifact)
    has no truth value: asking for one raises, so the redactor never does."""
    import numpy as np
    import pandas as pd

    red = Redactor(environ={})
    arr, df = np.array([1, 2]), pd.DataFrame({"a": [1, 2]})
    out = red.value({"a": arr, "password": df, "n": [arr]})
    assert out["a"] is arr and out["password"] is df and out["n"][0] is arr
    assert red.changes({"a": arr, "token": df}) == {}


@al.tool
def login(user: str, password: str) -> str:
    """Pretends to log in (the arguments are what matters)."""
    return f"logged in as {user}"


def _guess(in_hash: str, tool: str, args: dict[str, Any], words: list[str]) -> str:
    """Which of ``words``, put in as the password, hashes to ``in_hash``."""
    from argus_lab.runtime.options import input_hash

    for w in words:
        if input_hash(tool, {**args, "password": w}) == in_hash:
            return w
    return ""


def test_a_stored_input_hash_cannot_be_used_to_guess_a_weak_secret(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A weak password read through ${env.NAME} is masked where stored: its
    # hash must not let a reader of the checkpoint test a dictionary on it.
    monkeypatch.setenv("DB_PASSWORD", "sunshine1")
    words = ["password1", "letmein1", "sunshine1", "hunter22", "dragon12"]
    args = {"user": "ann", "password": "${env.DB_PASSWORD}"}
    plan = {"goal": "g", "tasks": [{"id": "env", "tool": "login", "args": args}]}
    s = ws.new_session(plan=plan, tools=[login], name="hashes")
    assert s.run().status == "succeeded"
    h = s.record("env").input_hash
    assert h is not None
    assert _guess(h, "login", {"user": "ann"}, words) == ""
    assert _guess(h, "login", {"user": "ann"}, [MASK]) == MASK
    # Reopened where no redactor has seen the value yet: the same hash, so
    # nothing is stale; a changed password alone does not make it stale.
    s.close()
    again = al.Workspace(ws.path).open("hashes", tools=[login])
    assert again.stale() == []
    monkeypatch.setenv("DB_PASSWORD", "moonlight2")
    assert again.stale() == []
    again.close()


def test_a_literal_password_in_a_plan_is_refused_before_anything_is_stored(
    ws: al.Workspace,
) -> None:
    # It was stored and its plan row masked as text, which cut the quote
    # before the value: the session could never be opened again.
    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": "lit",
                "tool": "login",
                "args": {"user": "bo", "password": "hunter22"},
            }
        ],
    }
    with pytest.raises(al.PlanError, match=r"argument 'password' holds a secret.*env"):
        ws.new_session(plan=plan, tools=[login], name="lit")
    assert [i.name for i in ws.sessions()] == []


def test_text_beside_a_reference_under_a_secret_name_is_refused(
    ws: al.Workspace,
) -> None:
    # Stored masked, reference and all, it reached the tool as [REDACTED]
    # once the session was reopened. A reference alone, or after an auth
    # scheme, is no secret and passes.
    for value in ("x ${env.HOME}", "pre${env.HOME}post"):
        plan = {
            "goal": "g",
            "tasks": [
                {"id": "a", "tool": "login", "args": {"user": "u", "password": value}}
            ],
        }
        with pytest.raises(al.PlanError, match="by its name"):
            ws.new_session(plan=plan, tools=[login], name="beside")
    for value in ("${env.HOME}", "Bearer ${env.HOME}"):
        plan = {
            "goal": "g",
            "tasks": [
                {"id": "a", "tool": "login", "args": {"user": "u", "password": value}}
            ],
        }
        ws.new_session(plan=plan, tools=[login], name=f"ok{len(value)}").close()


def test_rows_whose_text_holds_a_secret_shape_stay_json_and_masked(
    ws: al.Workspace,
) -> None:
    # A goal quoting a password (escaped in the JSON row, where a scan of
    # the text cannot see it) and one with a bare one: both masked, and the
    # session opens again.
    goal = 'log in with password="hunter22" then password: "dragon12x"'
    plan = {
        "goal": goal,
        "tasks": [
            {
                "id": "a",
                "tool": "login",
                "args": {"user": "x", "password": "${env.HOME}"},
            }
        ],
    }
    s = ws.new_session(plan=plan, tools=[login], name="goal")
    s.close()
    again = al.Workspace(ws.path).open("goal", tools=[login])
    assert "hunter22" not in again.plan.goal and "dragon12x" not in again.plan.goal
    assert MASK in again.plan.goal
    again.close()
    assert scan(ws.path, {"a": "hunter22", "b": "dragon12x"}) == []


def test_the_hint_scan_for_hashes_misses_no_shape_and_no_secret_key() -> None:
    # may_hold_secrets answers False only when nothing could be masked: it
    # sees every shape's trigger (may_have_shape), and every key the
    # secret-key rule matches holds one of its hints.
    from argus_lab._redact_forms import TRIGGERS
    from argus_lab.redact import _SECRET_FIELD

    red = Redactor(environ={})
    assert [t for t in TRIGGERS if not red.may_hold_secrets(f'["{t.upper()}"]')] == []
    keys = [
        "api_key",
        "apikey",
        "access_key",
        "secret_key",
        "private_key",
        "client_secret",
        "secret",
        "token",
        "access_token",
        "refresh_token",
        "auth_token",
        "password",
        "passwd",
        "passphrase",
        "credential",
        "credentials",
        "authorization",
        "auth",
        "bearer",
        "cookie",
    ]
    for k in keys:
        assert _SECRET_FIELD.search(k), k
        assert red.value({k: "abcdefgh"}) != {k: "abcdefgh"}, k
        assert red.may_hold_secrets('{"' + k + '": "abcdefgh"}'), k
    assert not red.may_hold_secrets('["noop", {"i": 0}]')


@al.tool
def oauth_reply(headers: dict[str, str]) -> dict[str, Any]:
    """Returns what a JS-style API replies: camelCase secret keys."""
    return {"accessToken": "ya29-reply-" + "q7Rt2XkZ", "expiresIn": 3600}


def test_camel_case_and_hyphenated_secret_keys_never_land(ws: al.Workspace) -> None:
    # A row's text once went through the shapes, which catch any key ending
    # in token/secret/password/api-key (``"accessToken":"..."``); rows are
    # now masked as data, so the secret-key rule has to see those keys too.
    red = Redactor(environ={})
    for k in ("accessToken", "clientSecret", "userPassword", "X-Api-Key"):
        assert red.value({k: "abcdefgh1"}) == {k: MASK}, k
    for k in ("max_tokens", "tokens_used", "keywords", "author", "primary_key"):
        assert red.value({k: "abcdefgh1"}) == {k: "abcdefgh1"}, k
    literal = {"accessToken": "ya29-plan-" + "Lm4WnB8c", "X-Api-Key": "k3y-" + "9dF2"}
    plan = {
        "goal": "g",
        "tasks": [{"id": "a", "tool": "oauth_reply", "args": {"headers": literal}}],
    }
    with pytest.raises(al.PlanError, match="holds a secret"):
        ws.new_session(plan=plan, tools=[oauth_reply], name="literal")
    plan["tasks"][0]["args"] = {"headers": {"x": "${env.HOME}"}}
    s = ws.new_session(plan=plan, tools=[oauth_reply], name="reply")
    s.run()
    assert s.result("a") == {"accessToken": MASK, "expiresIn": 3600}
    s.close()
    ws.close()
    assert scan(ws.path, {"plan": "Lm4WnB8c", "reply": "q7Rt2XkZ"}) == []


# -- found by an outside leak hunt (eleventh session) -------------------------

PAT = "ghp_" + "Zx9Lm2Qw8Er4Ty6Ui0Op3As5Df7Gh1Jk2Lq"  # a GitHub token's shape


@al.tool
def noted() -> str:
    return "ok"


def test_policies_handed_to_open_are_stored_masked(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ws.open(approvals=...) stored its policies before the session had a
    Redactor: a reason quoting a key landed in the clear, at every open."""
    monkeypatch.setenv("HUNT_API_KEY", "hunt-" + uuid.uuid4().hex)
    key = __import__("os").environ["HUNT_API_KEY"]
    plan = {"tasks": [{"id": "a", "tool": "noted"}]}
    policy = al.ApprovalPolicy(decision="ask", tools="noted", reason=f"key {key} {PAT}")
    ws.new_session(plan=plan, tools=[noted], name="p", approvals=[policy]).close()
    with ws.open("p", tools=[noted], approvals=[policy]) as s:
        assert key not in repr(s.info.approvals) and PAT not in repr(s.info.approvals)
    assert scan(ws.path, {"env": key, "shape": PAT}) == []


def test_a_budget_scope_or_a_memory_id_holding_a_secret_is_refused(
    ws: al.Workspace,
) -> None:
    """Keys of what is stored: masked, they would name nothing."""
    plan = {"tasks": [{"id": "a", "tool": "noted"}]}
    with ws.new_session(plan=plan, tools=[noted], name="b") as s:
        with pytest.raises(ValueError, match="budget scope holds a secret"):
            s.set_budget(f"subtree:{PAT}", max_steps=3)
        assert s.info.budgets == {}
    for field in ("id", "session_id", "task_id"):
        with pytest.raises(ValueError, match=f"memory's {field} holds a secret"):
            ws.memory.add("a note", **{field: PAT})
    assert scan(ws.path, {"shape": PAT}) == []


def test_an_emitted_events_ids_and_a_plans_errors_are_masked(
    ws: al.Workspace,
) -> None:
    import time

    from argus_lab.events import make_event

    plan = {"tasks": [{"id": "a", "tool": "noted"}]}
    with ws.new_session(plan=plan, tools=[noted], name="e") as s:
        s.run()
        s.emit(make_event("anomaly", session_id=s.id, ts=time.time(), task_id=PAT))
        assert PAT not in s.events_df().to_csv()
    assert scan(ws.path, {"shape": PAT}) == []
    # Plan's own constructors mask what their errors quote, as new_session does.
    for build in (
        lambda: al.Plan.from_yaml(f"tasks:\n  - {{id: a, tool: t, deps: [{PAT}]}}\n"),
        lambda: al.Plan.from_dict({"tasks": [{"id": "a", "tool": "t", PAT: 1}]}),
    ):
        with pytest.raises(al.PlanError) as e:
            build()
        assert PAT not in str(e.value) and PAT not in repr(e.value.problems)


def test_a_tools_hash_does_not_depend_on_a_secret_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tool_hash is stored with every result: a default read from the
    environment (a 6-digit PIN) must not be testable against it."""

    def make(pin_default: str) -> al.Tool:
        def pay(amount: int = 1, pin: str = pin_default) -> dict[str, int]:
            return {"paid": amount}

        return al.tool(pay)

    hashes = set()
    for pin in ("406145", "918273"):
        monkeypatch.setenv("BANK_PIN_PASSWORD", pin)
        hashes.add(make(pin).code_hash)
    assert len(hashes) == 1  # the same code, whatever the PIN
    assert make("plain-default").code_hash not in hashes  # defaults still count


# -- secrets known by their prefix (an outside check, twelfth session) --------


def _random(alphabet: str, n: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


_AN = string.ascii_letters + string.digits
_UD = string.ascii_uppercase + string.digits


def _pem_block(label: str, end: bool = True) -> str:
    raw = base64.b64encode(os.urandom(480)).decode()
    body = "\n".join(raw[i : i + 64] for i in range(0, len(raw), 64))
    return f"-----BEGIN {label}-----\n{body}" + (f"\n-----END {label}-----" * end)


PREFIXED_SECRETS = {
    "pem_rsa": _pem_block("RSA PRIVATE KEY"),
    "pem_pkcs8": _pem_block("PRIVATE KEY"),
    "pem_ec": _pem_block("EC PRIVATE KEY"),
    "pem_openssh": _pem_block("OPENSSH PRIVATE KEY"),
    "pem_encrypted": _pem_block("ENCRYPTED PRIVATE KEY"),
    "pem_cut_short": _pem_block("RSA PRIVATE KEY", end=False),
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    + "eyJ"
    + _random(_AN, 60)
    + "."
    + _random(_AN + "_-", 43),
    "stripe_sk_live": "sk_live_" + _random(_AN, 24),
    "stripe_sk_test": "sk_test_" + _random(_AN, 99),
    "stripe_rk_live": "rk_live_" + _random(_AN, 24),
    "stripe_rk_test": "rk_test_" + _random(_AN, 24),
    "google": "AIza" + _random(_AN + "_-", 35),
    "huggingface": "hf_" + _random(string.ascii_letters, 34),
    "gitlab": "glpat-" + _random(_AN + "_-", 20),
    "npm": "npm_" + _random(_AN, 36),
    "pypi": "pypi-AgEIcHlwaS5vcmc" + _random(_AN + "_-", 120),
    "slack_webhook": "https://hooks.slack.com/services/T"
    + _random(_UD, 8)
    + "/B"
    + _random(_UD, 8)
    + "/"
    + _random(_AN, 24),
    "google_oauth": "GOCSPX-" + _random(_AN + "_-", 28),
    "slack_app": "xapp-1-A" + _random(_UD, 10) + "-" + _random(_AN, 40),
}


def _needles() -> dict[str, str]:
    """Each secret whole, and pieces of it that name it: every body line of
    a PEM block, the last 16 characters of the others (a webhook's host and
    path are kept; its token is what ends it)."""
    out = {}
    for name, v in PREFIXED_SECRETS.items():
        out[name] = v
        if name.startswith("pem"):
            lines = [ln for ln in v.splitlines() if "-----" not in ln]
            out |= {f"{name}:{i}": ln[:40] for i, ln in enumerate(lines)}
        else:
            out[f"{name}:tail"] = v[-16:]
    return out


@al.tool
def hands_out_prefixed() -> dict[str, Any]:
    """A result holding each secret the ways a tool returns them."""
    values = list(PREFIXED_SECRETS.values())
    return {
        "by_name": dict(PREFIXED_SECRETS),
        "listed": values,
        "log": "\n".join(f"{k}={v}" for k, v in PREFIXED_SECRETS.items()),
        "json_text": json.dumps({"creds": PREFIXED_SECRETS}),
        "repr": repr(values),
    }


@al.tool
def fails_quoting(which: str) -> None:
    """Fails with one of the secrets quoted in its message."""
    raise RuntimeError(f"auth failed with {PREFIXED_SECRETS[which]!r}, retry")


@al.tool
def big_prefixed() -> str:
    """A result too large to sit inline: an artifact."""
    return "x" * 100_000 + "\n" + "\n".join(PREFIXED_SECRETS.values())


@al.tool
def frame_prefixed() -> Any:
    """A DataFrame with the secrets in its cells."""
    import pandas as pd

    return pd.DataFrame(
        {"name": list(PREFIXED_SECRETS), "v": [*PREFIXED_SECRETS.values()]}
    )


def test_secrets_known_by_their_prefix_never_land(
    ws: al.Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    """PEM private keys, JWTs, Stripe, Google, Hugging Face, GitLab, npm and
    PyPI tokens and Slack webhooks, returned or quoted in an error: no byte
    of them under the workspace (rows, WAL, artifacts), in the frames or in
    the logs."""
    import logging

    caplog.set_level(logging.DEBUG)
    tasks: list[dict[str, Any]] = [
        {"id": "result", "tool": "hands_out_prefixed"},
        {"id": "big", "tool": "big_prefixed"},
        {"id": "frame", "tool": "frame_prefixed"},
    ]
    tasks += [
        {"id": f"err_{name}", "tool": "fails_quoting", "args": {"which": name}}
        for name in PREFIXED_SECRETS
    ]
    s = ws.new_session(
        plan={"goal": "g", "tasks": tasks},
        tools=[hands_out_prefixed, fails_quoting, big_prefixed, frame_prefixed],
        name=f"prefixed-{uuid.uuid4().hex[:6]}",
        max_consecutive_failures=None,
    )
    s.run()
    needles = _needles()
    files = [p for p in ws.path.rglob("*") if p.is_file()]
    assert any(p.name == "cache.db-wal" for p in files)  # there while open
    assert any(p.is_relative_to(ws.path / "artifacts") for p in files)
    assert scan(ws.path, needles) == []
    out = s.result("result")
    assert set(out["by_name"].values()) <= {
        MASK,
        f"https://hooks.slack.com/services/{MASK}",
    }
    assert json.loads(out["json_text"])  # still JSON
    for name in PREFIXED_SECRETS:
        rec = s.record(f"err_{name}")
        assert rec.status == "failed"
        err = rec.error or ""
        assert "auth failed with '" in err and f"{MASK}', retry" in err, err[-300:]
    assert MASK in s.result("big")[-2000:]
    cells = s.result("frame")["v"].tolist()
    assert all(MASK in c for c in cells), cells
    frames = [s.tasks_df(), s.events_df()]
    texts = [
        f.to_json(date_format="iso", default_handler=str) + f.to_csv() for f in frames
    ]
    s.close()
    ws.close()
    for name, n in needles.items():
        assert all(n not in t for t in texts), name
        assert n not in caplog.text, name
    assert scan(ws.path, needles) == []
