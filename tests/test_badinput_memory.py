"""Bad input to ws.memory a new user produces: each gets a clear ValueError or
TypeError that names the record and field and says what to pass, and nothing
is written. Real LanceDB, with the lexical HashEmbedder (no model load)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import argus_lab as al
from argus_lab.store.memory import HashEmbedder, Memory


@pytest.fixture
def mem(tmp_path: Path) -> Memory:
    m = Memory(tmp_path / "memory", embedder=HashEmbedder())
    m.add("the Lisbon venue costs 4,100 EUR a day", id="v1", metadata={"city": "lx"})
    return m


ADD_CASES: dict[str, tuple[dict[str, Any], type[Exception], str]] = {
    "no text": ({"text": None}, TypeError, "memory.add takes text, got NoneType"),
    "a number as text": ({"text": 42}, TypeError, "takes text, got int"),
    "a kind with a typo": (
        {"text": "x", "kind": "notes"},
        ValueError,
        "memory record 0: kind: Input should be 'result', 'note', 'document' or "
        "'lesson' (got 'notes')",
    ),
    "a number as id": ({"text": "x", "id": 5}, ValueError, "id: Input should be a"),
    "NaN metadata": (
        {"text": "x", "metadata": {"score": float("nan")}},
        ValueError,
        "memory record 0: metadata must be JSON (NaN and infinity are not JSON)",
    ),
    "infinite metadata": (
        {"text": "x", "metadata": {"score": float("inf")}},
        ValueError,
        "NaN and infinity are not JSON",
    ),
    "an object in metadata": (
        {"text": "x", "metadata": {"when": dt.datetime(2026, 1, 1)}},
        ValueError,
        "Object of type datetime is not JSON serializable), to be stored and "
        "matched by a filter: use text, numbers, bools, None, lists and dicts "
        "(e.g. value.isoformat() for a datetime",
    ),
    "metadata as a list": (
        {"text": "x", "metadata": [1, 2]},
        TypeError,
        "metadata must be a dict of JSON values, got list",
    ),
    "a key that is not text": (
        {"text": "x", "metadata": {1: 2}},
        ValueError,
        "metadata.1.[key]: Input should be a valid string",
    ),
    "a lone surrogate": (
        {"text": "caf\udce9 menu"},
        ValueError,
        "text holds a lone surrogate '\\udce9' at position 3",
    ),
    "50 MB of text": (
        {"text": "word " * 10_000_000},
        ValueError,
        "text is 50,000,000 characters, over the 1,000,000 one memory holds "
        "(search returns it whole): store a long text with memory.ingest(text)",
    ),
}


@pytest.mark.parametrize("name", list(ADD_CASES))
def test_bad_add_is_refused_clearly_and_writes_nothing(mem: Memory, name: str) -> None:
    kwargs, kind, expected = ADD_CASES[name]
    text = kwargs.pop("text")
    with pytest.raises(kind) as info:
        mem.add(text, **kwargs)
    assert expected in str(info.value)
    assert len(mem) == 1 and mem.get("v1") is not None


MANY_CASES: dict[str, tuple[Any, type[Exception], str]] = {
    "one string": ("just a note", TypeError, "add_many takes a list of records"),
    "one dict": ({"text": "x"}, TypeError, "got a dict; for one text, use"),
    "strings in the list": (["a", "b"], TypeError, "memory record 0 is a str, not a"),
    "a typo'd key": (
        [{"text": "ok"}, {"txt": "z"}],
        ValueError,
        "memory record 1: text: Field required; txt: Extra inputs are not "
        "permitted (got 'z'). A record has the keys text (required), id, kind",
    ),
}


@pytest.mark.parametrize("name", list(MANY_CASES))
def test_bad_add_many_names_the_record_and_writes_none(mem: Memory, name: str) -> None:
    records, kind, expected = MANY_CASES[name]
    with pytest.raises(kind) as info:
        mem.add_many(records)
    assert expected in str(info.value)
    assert len(mem) == 1  # not even the good record before the bad one


@pytest.mark.parametrize(
    ("query", "k", "kind", "expected"),
    [
        (None, 5, TypeError, "search takes the query as text, got NoneType"),
        (b"venue", 5, TypeError, "search takes the query as text, got bytes"),
        ("venue", 1.5, TypeError, "k must be a whole number >= 1, got 1.5"),
        ("venue", "3", TypeError, "k must be a whole number >= 1, got '3'"),
        ("venue", True, TypeError, "k must be a whole number >= 1, got True"),
        ("venue", 0, ValueError, "k must be >= 1, got 0"),
        ("venue", -1, ValueError, "k must be >= 1, got -1"),
    ],
)
def test_bad_search_arguments(
    mem: Memory, query: Any, k: Any, kind: type[Exception], expected: str
) -> None:
    with pytest.raises(kind) as info:
        mem.search(query, k=k)
    assert str(info.value) == expected


def test_a_numpy_k_is_a_whole_number(mem: Memory) -> None:
    assert [h.id for h in mem.search("venue", k=np.int64(1))] == ["v1"]


def test_numpy_numbers_in_metadata_and_since_are_numbers(mem: Memory) -> None:
    # Values read from a DataFrame row are numpy scalars: they were stored as
    # text by default=str ("3"), then refused as "not JSON"; they are numbers.
    meta = {"page": np.int64(3), "score": np.float32(0.5), "ok": np.bool_(True)}
    mem.add("the Porto venue costs 3,900 EUR a day", id="v2", metadata=meta)
    got = mem.get("v2")
    assert got is not None and got.metadata == {"page": 3, "score": 0.5, "ok": True}
    assert {k: type(v) for k, v in got.metadata.items()} == {
        "page": int,
        "score": float,
        "ok": bool,
    }
    hits = mem.search("venue", k=5, metadata={"page": np.int64(3)})
    assert [h.id for h in hits] == ["v2"]
    assert {h.id for h in mem.search("venue", k=5, since=np.int64(0))} == {"v1", "v2"}


@pytest.mark.parametrize(
    ("where", "detail"),
    [
        ("citty = 'lx'", "No field named citty"),
        ("(((", "sql parser error"),
        ("1=1; DROP TABLE memories", "sql parser error"),
    ],
)
def test_a_bad_where_names_the_filter_and_the_columns(
    mem: Memory, where: str, detail: str
) -> None:
    with pytest.raises(ValueError) as info:
        mem.search("venue", where=where)
    msg = str(info.value)
    assert msg.startswith(f"memory: where={where!r} is not a valid SQL filter")
    assert "id, kind, text, session_id, task_id, seq, metadata, created_at" in msg
    assert detail in msg and "metadata={...}" in msg
    assert len(mem) == 1 and mem.get("v1") is not None  # the table is intact


@pytest.mark.parametrize(
    "hostile",
    ["x' OR '1'='1", "'; DROP TABLE memories; --", "%", "_", "\\"],
)
def test_quoted_filters_and_ids_match_literally(mem: Memory, hostile: str) -> None:
    """What held already: ids, session ids, kinds and metadata values are quoted."""
    assert mem.search("venue", session_id=hostile) == []
    assert mem.search("venue", metadata={"city": hostile}) == []
    assert mem.get(hostile) is None
    mem.add("hostile text", id=hostile, metadata={"city": hostile})
    assert mem.get(hostile) is not None
    assert [h.id for h in mem.search("hostile", metadata={"city": hostile})] == [
        hostile
    ]
    assert len(mem) == 2


@pytest.mark.parametrize("query", ["", "   ", "the a of and"])
def test_empty_and_stop_word_queries_find_nothing_in_full_text(
    mem: Memory, query: str
) -> None:
    assert mem.search(query, mode="fts") == []


class _Declares:
    """An embedder whose declared ``dim`` (recorded with the vectors) is wrong."""

    name = "declares-8"
    version = "1"
    dim = 8

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0, 0.0, 0.0] for _ in texts]


def _words(texts: list[str]) -> list[list[str]]:
    return [["a", "b"] for _ in texts]


@pytest.mark.parametrize(
    ("embedder", "expected"),
    [
        (
            _Declares(),
            "embedder declares-8 says dim=8 but returned 4-d vectors; fix its dim "
            "attribute (or drop it)",
        ),
        (
            _words,
            "embedder returned something that is not numbers (could not convert "
            "string to float: 'a'); it must return one list of floats per text",
        ),
        (
            lambda texts: [[1.0] * (3 + i) for i, _ in enumerate(texts)],
            "embedder returned vectors of different sizes",
        ),
    ],
)
def test_an_embedder_that_breaks_its_contract_is_named_and_nothing_is_written(
    tmp_path: Path, embedder: Any, expected: str
) -> None:
    m = Memory(tmp_path / "memory", embedder=embedder)
    with pytest.raises(al.ArgusError) as info:
        m.add_many([{"text": "one"}, {"text": "two"}])
    assert expected in str(info.value)
    assert len(m) == 0


def test_a_memory_path_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    with pytest.raises(ValueError, match=r"notes.txt is a file, not a folder"):
        Memory(f, embedder=None)
    assert f.read_text() == "mine"


# -- ingest: a path that is not there is not a document -------------------------


@pytest.mark.parametrize("name", ["notes.md", "docs/handbook.html", "~/report.txt"])
def test_ingest_of_a_missing_file_is_refused_not_stored_as_its_name(
    mem: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # Before: the one-line text "notes.md" was stored as a document.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as info:
        mem.ingest(name)
    assert str(info.value) == (
        f"no file {name!r} (looked in {tmp_path}); check the path, or store a "
        "line of text with memory.add(text)"
    )
    assert len(mem) == 1


@pytest.mark.parametrize("kind", [str, Path])
def test_ingest_of_a_folder_says_to_ingest_its_files(
    mem: Memory, tmp_path: Path, kind: type
) -> None:
    with pytest.raises(IsADirectoryError, match=r"is a folder: ingest its files one"):
        mem.ingest(kind(tmp_path))
    assert len(mem) == 1


def test_ingest_of_a_binary_file_is_refused(mem: Memory, tmp_path: Path) -> None:
    pdf = tmp_path / "paper.pdf"
    pdf.write_bytes(b"%PDF-1.7\n\x00\x01\x02binary stream\xff\xfe")
    with pytest.raises(ValueError) as info:
        mem.ingest(pdf)
    assert str(info.value) == (
        f"{pdf} looks binary (it holds NUL bytes): ingest reads text, markdown and "
        "html; extract the text first (e.g. from a PDF) and ingest that"
    )
    assert len(mem) == 1


@pytest.mark.parametrize(
    ("source", "kind", "expected"),
    [
        (None, TypeError, "ingest takes a file path or the text itself, got NoneType"),
        (b"text", TypeError, "got bytes: decode it first, data.decode()"),
    ],
)
def test_ingest_of_what_is_neither_path_nor_text(
    mem: Memory, source: Any, kind: type[Exception], expected: str
) -> None:
    with pytest.raises(kind) as info:
        mem.ingest(source)
    assert expected in str(info.value)


def test_ingest_format_typo(mem: Memory) -> None:
    with pytest.raises(ValueError, match=r"format must be 'auto', 'text', 'markdown'"):
        mem.ingest("# Title\n\nbody", format="md")


def test_text_with_a_file_like_last_word_and_lines_is_still_text(
    mem: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What holds: multi-line text and one-line text that names no document
    type are ingested as text, as before."""
    monkeypatch.chdir(tmp_path)
    assert len(mem.ingest("see notes.md\nfor the venue list")) == 1
    assert len(mem.ingest("Lisbon was cheaper than Porto")) == 1


def test_a_one_line_sentence_ending_in_a_file_name_is_text(
    mem: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The missing-file rule looked at the suffix alone: a sentence that ends in
    # a file name ("... in venues.csv") was refused as "no file". A path with
    # spaces is still one when its folder is there.
    monkeypatch.chdir(tmp_path)
    assert len(mem.ingest("The full venue list is in venues.csv")) == 1
    assert len(mem.ingest("see docs/README.md for the rules")) == 1
    (tmp_path / "My Notes").mkdir()
    with pytest.raises(FileNotFoundError, match="no file"):
        mem.ingest(str(tmp_path / "My Notes" / "plan.md"))


# -- search filters that could never match --------------------------------------


def test_a_kind_typo_in_a_filter_is_refused_not_an_empty_result(mem: Memory) -> None:
    with pytest.raises(ValueError) as info:
        mem.search("venue", kind=["note", "lessons"])
    assert str(info.value) == (
        "kind 'lessons' is not a memory kind; use one or more of result, note, "
        "document, lesson"
    )


def test_since_as_text_says_how_to_pass_a_date(mem: Memory) -> None:
    with pytest.raises(TypeError) as info:
        mem.search("venue", since="2024-01-01")
    assert "since must be epoch seconds or a datetime, got str '2024-01-01'" in str(
        info.value
    )
    assert "datetime.fromisoformat(text)" in str(info.value)


def test_an_empty_session_list_matches_nothing(mem: Memory) -> None:
    # Before: LanceDB's SQL parser failed on "session_id IN ()".
    assert mem.search("venue", session_id=[]) == []
    assert mem.search("venue", kind=[]) == []


def test_metadata_filter_must_be_a_dict(mem: Memory) -> None:
    with pytest.raises(TypeError, match="metadata must be a dict to match, got list"):
        mem.search("venue", metadata=["lx"])


@pytest.mark.parametrize("call", ["count", "delete"])
def test_count_and_delete_name_a_bad_filter(mem: Memory, call: str) -> None:
    with pytest.raises(ValueError, match=r"^memory: where='citty = 1' is not a valid"):
        getattr(mem, call)("citty = 1")
    assert len(mem) == 1
