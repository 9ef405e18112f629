"""A cut through a secret before it is masked leaves a part no mask knows.

Masking finds a secret whole: a known value, or a shape (a key, a token,
``password=...``). Text cut before it is masked (a document into chunks, a
tool result for the model, the start of a reply for an error) must end before
a secret or hold it whole. Each test scans every byte under the workspace
(LanceDB data files, SQLite and its -wal) for any 12 characters of the secret.
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.llm import ModelRequest
from argus_lab.llm.testing import FunctionModel, tool_call
from argus_lab.redact import MASK, Redactor, cut_clear, merged_spans
from argus_lab.store.chunking import chunk_text
from argus_lab.store.memory import Memory
from tests.fixtures.llm.fake_api import block_network

ENV = "ARGUS_CUTS_TOKEN"


def _secret() -> str:
    return "Cq" + uuid.uuid4().hex[:22]  # 24 characters, random from the 3rd


def pieces(secret: str, n: int = 12) -> list[str]:
    """Every ``n`` consecutive characters of ``secret``."""
    return [secret[i : i + n] for i in range(len(secret) - n + 1)]


def scan(root: Path, secret: str) -> list[str]:
    """The files under ``root`` (and paths) holding 12 characters of ``secret``."""
    needles = pieces(secret)
    hits = []
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        hits += [f"{rel} (its path)" for s in needles if s in rel]
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            hits += [f"{rel}: {s}" for s in needles if s.encode() in data]
    return hits


def leaks(text: str, secret: str) -> list[str]:
    return [s for s in pieces(secret) if s in text]


# -- the helpers -----------------------------------------------------------


def test_a_cut_through_a_secret_moves_before_it() -> None:
    secret = _secret()
    red = Redactor([secret], environ={})
    text = "a" * 100 + secret + "b" * 100
    for limit in range(95, 130):
        cut = red.cut_point(text, limit)
        if 100 < limit < 124:
            assert cut == 100, limit
        else:
            assert cut == min(limit, len(text)), limit
    assert red.cut_point(text, 10_000) == len(text)
    # A shape (no known value): "password=..." is cut before its keyword.
    shaped = "x " * 40 + "password=Rb7nM2kQ9xR4tW8z tail"
    start = shaped.index("password")
    assert Redactor([], environ={}).cut_point(shaped, start + 12) == start
    assert Redactor([], environ={}).cut_point(shaped, start) == start


def test_cut_clear_settles_between_overlapping_secrets_of_two_redactors() -> None:
    a, b = _secret(), _secret()
    text = "z" * 50 + a + "-" + b + "z" * 50
    # One redactor knows a value that starts inside ``a``: moved before it,
    # the cut splits ``a``, and is moved again, before ``a``.
    red_a, red_b = Redactor([a], environ={}), Redactor([a[10:] + "-" + b], environ={})
    limit = text.index(b) + 5
    assert red_b.cut_point(text, limit) == 60
    assert cut_clear(text, limit, red_b, red_a) == "z" * 50
    assert cut_clear("short", 80) == "short"


def test_merged_spans_join_overlaps_only() -> None:
    assert merged_spans([(5, 9), (0, 3), (8, 12), (12, 14)]) == [
        (0, 3),
        (5, 12),
        (12, 14),
    ]


# -- chunking ----------------------------------------------------------------


def test_no_chunk_edge_cuts_a_span_at_any_size_or_overlap() -> None:
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta\n", "eps.", "\n\n", "zeta", "eta"]
    for _ in range(300):
        parts = [rng.choice(words) for _ in range(rng.randint(5, 120))]
        spans: list[tuple[int, int]] = []
        text = ""
        for w in parts:
            if rng.random() < 0.15:  # a secret, sometimes with blanks in it
                s = rng.choice(["Qx" * rng.randint(3, 40), " pass phrase here ", "k\n"])
                spans.append((len(text), len(text) + len(s)))
                text += s
            text += w + rng.choice([" ", "", "\n"])
        size = rng.randint(2, 80)
        overlap = rng.randint(0, size - 1)
        chunks = chunk_text(text, chunk_size=size, overlap=overlap, whole=spans)
        covered = set()
        for c in chunks:
            assert text[c.start : c.end] == c.text
            covered.update(range(c.start, c.end))
            for a, b in spans:
                assert b <= c.start or a >= c.end or (c.start <= a and b <= c.end), (
                    text,
                    size,
                    overlap,
                    c,
                    (a, b),
                )
        missed = [i for i in range(len(text)) if i not in covered]
        assert all(text[i].isspace() for i in missed), (text, size, overlap)
        assert len(chunks) <= 2 * len(text)  # no creeping a word at a time


def test_a_secret_longer_than_a_chunk_is_held_whole() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\n" + "MIIEow" * 60 + "\n-----END RSA"
    text = "intro words here. " * 3 + pem + " and after it. " * 3
    a = text.index(pem)
    chunks = chunk_text(text, chunk_size=100, overlap=20, whole=[(a, a + len(pem))])
    assert [c for c in chunks if pem in c.text]
    b = a + len(pem)
    assert all(pem in c.text or c.end <= a or c.start >= b for c in chunks)
    assert len(chunks) < 8  # no creeping up to it a word at a time


def _document(secret: str, at: int) -> str:
    """Minified JSON whose token starts ``at`` characters in (as find_06)."""
    head = '{"events":"' + "e" * max(0, at - 24) + '","auth":{"token":"'
    return head[: max(at, 0)] + secret + '"},"tail":"' + "t" * 300 + '"}'


@pytest.mark.parametrize("chunk_size", [16, 50, 1200])
def test_ingest_stores_no_part_of_a_secret_across_chunk_edges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_size: int
) -> None:
    secret = _secret()
    monkeypatch.setenv(ENV, secret)
    mem = Memory(tmp_path / "memory", embedder=None)
    red = Redactor([], environ={ENV: secret})
    for at in (1150, 1170, 1185, 1195, 40, 45):
        doc = _document(secret, at)
        overlap = min(200, chunk_size // 3)
        ids = mem.ingest(
            doc, source=f"log-{at}", chunk_size=chunk_size, overlap=overlap
        )
        rows = [mem.get(i) for i in ids]
        assert all(r is not None for r in rows)
        texts = [r.text for r in rows if r is not None]
        assert not [t for t in texts if leaks(t, secret)], at
        assert not leaks("".join(texts), secret)
        assert any(MASK in t for t in texts)
        for r in rows:  # offsets still point into the document as given
            assert r is not None
            m = r.metadata
            assert red.text(doc[m["start"] : m["end"]]) == r.text
    assert list((tmp_path / "memory").rglob("*.lance"))
    assert scan(tmp_path, secret) == []


def test_ingest_of_a_shape_split_at_a_chunk_edge(tmp_path: Path) -> None:
    key = "sk-ant-api03-" + uuid.uuid4().hex + uuid.uuid4().hex[:8]
    mem = Memory(tmp_path / "memory", embedder=None)
    text = "note: " + "word " * 30 + "ANTHROPIC_API_KEY=" + key + " end"
    ids = mem.ingest(text, source="note.txt", chunk_size=16, overlap=0)
    texts = [r.text for r in map(mem.get, ids) if r is not None]
    assert not [t for t in texts if leaks(t, key[13:])]
    assert scan(tmp_path, key[13:]) == []


# -- the LLM tool loop -------------------------------------------------------


@pytest.fixture
def _no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    block_network(monkeypatch, tmp_path)


@pytest.mark.usefixtures("_no_network")
@pytest.mark.parametrize("inside", [1, 12, 21, 23])
def test_a_tool_result_cut_for_the_model_splits_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inside: int
) -> None:
    from argus_lab.runtime.llm_task import TOOL_RESULT_CHARS

    secret = _secret()
    monkeypatch.setenv(ENV, secret)
    seen: list[str] = []

    @al.tool
    def fetch(n: int) -> str:
        """Reads a long page."""
        return "x" * n + secret + "y" * 50

    def script(req: ModelRequest) -> Any:
        if not any(m.role == "assistant" for m in req.messages):
            # The JSON string opens with a quote: the cut falls ``inside``.
            return tool_call("fetch", {"n": TOOL_RESULT_CHARS - 1 - inside})
        last = req.messages[-1].content[0]
        seen.append(last.content)
        return "Read: " + last.content[-40:]  # quotes what it read

    ws = al.Workspace(tmp_path / "ws")
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "x", "kind": "llm", "description": "Fetch.", "llm_tools": ["fetch"]}
        ],
    }
    s = ws.new_session(
        plan=plan, tools=[fetch], name="l", models=FunctionModel(script, name="m")
    )
    assert s.run().status == "succeeded"
    s.close()
    (content,) = seen
    assert content == '"' + "x" * (TOOL_RESULT_CHARS - 1 - inside)  # no quote after
    assert not leaks(content, secret)
    assert scan(tmp_path / "ws", secret) == []


@pytest.mark.usefixtures("_no_network")
def test_a_result_under_the_limit_reaches_the_model_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = _secret()
    monkeypatch.setenv(ENV, secret)
    seen: list[str] = []

    @al.tool
    def token() -> str:
        """The token a later call needs."""
        return secret

    def script(req: ModelRequest) -> Any:
        if not any(m.role == "assistant" for m in req.messages):
            return tool_call("token", {})
        seen.append(req.messages[-1].content[0].content)
        return "The token is " + json.loads(seen[-1])

    ws = al.Workspace(tmp_path / "ws")
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "x", "kind": "llm", "description": "T.", "llm_tools": ["token"]}
        ],
    }
    s = ws.new_session(
        plan=plan, tools=[token], name="w", models=FunctionModel(script, name="m")
    )
    assert s.run().status == "succeeded"
    assert seen == [json.dumps(secret)]  # the model works with it unmasked
    assert s.result("x") == "The token is " + MASK
    s.close()
    assert scan(tmp_path / "ws", secret) == []


# -- cuts in llm/ for error messages -----------------------------------------


def test_error_snippets_end_before_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    from argus_lab.llm.anthropic import _start
    from argus_lab.llm.base import Message

    secret = _secret()
    monkeypatch.setenv(ENV, secret)
    page = "<html>" + "p" * 70 + secret + "</html>"
    assert _start(page) == page[: page.index(secret)]
    assert _start("<html>short</html>") == "<html>short</html>"
    phrase = "correct horse battery staple"
    monkeypatch.setenv("ARGUS_CUTS_PASSWORD", phrase)
    req = ModelRequest(
        messages=[Message.user("w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 " + phrase + " end")]
    )
    first = req.last_user_text()
    assert first == "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 ...", first
    short = ModelRequest(messages=[Message.user("just a few words")])
    assert short.last_user_text() == "just a few words"
