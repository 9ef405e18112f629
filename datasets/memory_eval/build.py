"""Builds memories.jsonl.gz and queries.jsonl from written.tsv (deterministic).

``written.tsv`` holds what was written by hand: 152 memories (lessons, tool
results, notes), each with a lexical query (shares words with it) and a
paraphrase query (shares no content word with it; checked here with
:mod:`overlap`). This script adds a pool of generated distractor memories and
writes the two files the benchmark and tests read. Rerun after editing
written.tsv: ``python datasets/memory_eval/build.py``.

Distractors are drawn from templates shaped like what Argus memory holds (the
texts :func:`remember_lesson` and :func:`remember_result` write, and free
notes), filled with words of the written memories and a list of agent-task
words: so a lexical query meets many rows containing its words, as it would in
a real workspace, while a distractor is word salad, not a rewording of any
target. Query words are not used (see README.md for why).
"""

from __future__ import annotations

import csv
import gzip
import json
import random
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from overlap import STOPWORDS, shared  # noqa: E402

N_DISTRACTORS = 12_000
SEED = 19

TOOLS = [
    "web_search",
    "fetch_url",
    "read_file",
    "write_file",
    "run_python",
    "shell",
    "send_email",
    "memory_search",
    "memory_add",
    "sql_query",
    "http_get",
    "summarize",
    "translate",
    "ocr",
    "geocode",
    "calendar",
    "spreadsheet",
]
ERRORS = [
    "TimeoutError",
    "ConnectionError",
    "ValueError",
    "KeyError",
    "PermissionError",
    "HTTPError 500",
    "HTTPError 404",
    "HTTPError 403",
    "RuntimeError",
    "OSError",
]
AGENT_WORDS = """report summary draft table chart dataset column row file folder
page link request response answer question plan step task session result note
lesson error retry limit budget cost price user customer team project meeting
deadline schedule week month day hour minute list item value field record entry
source document message email invoice order product service account version
update change review check test sample batch queue worker server client""".split()  # noqa: SIM905 (a word list reads better as text)
NOTE_TEMPLATES = [
    "Note: the {a} for the {b} should mention {c}.",
    "Remember that {a} is handled by the {b} team.",
    "Reminder: check the {a} and the {b} again on {day}.",
    "The {a} was discussed on {day}; next step is to ask about {b}.",
    "Idea for later: compare {a} with {b}.",
    "{A} is tracked in the {b} sheet, see the tab for {day}.",
]
LESSON_TEMPLATES = [
    "Lesson: task {task} (tool {tool}) failed for good after {n} attempt(s). "
    "Error: {err}: {a} not available",
    "Lesson: task {task} failed for good after {n} attempt(s). Error: {err}: "
    "unexpected value in {a}",
    "Lesson: {a} did not work with {b}; the fallback worked instead.",
    "Lesson: always check the {a} first, the {b} depends on it.",
]
RESULT_TEMPLATES = [
    '{Title}: {{"count": {x}, "status": "ok", "source": "{c}"}}',
    "{Title}: found {x} items and {y} entries.",
    '{Title}: {{"rows": {x}, "columns": ["id", "{c}", "updated_at"]}}',
    "{Title}: the total is {x} and the median is {y}.",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]


def words_of(texts: list[str]) -> list[str]:
    """The distinct content words of texts, in first-seen order."""
    seen: dict[str, None] = {}
    for t in texts:
        for w in re.findall(r"[a-z][a-z-]+", t.lower()):
            if w not in STOPWORDS and len(w) > 2:
                seen.setdefault(w)
    return list(seen)


def distractor(rng: random.Random, vocab: list[str], i: int) -> dict[str, object]:
    a, b, c, d = rng.sample(vocab, 4)
    tid = f"t{rng.randint(1, 60):02d}"
    kind = rng.choice(["lesson", "result", "note"])
    slots = {
        "a": a,
        "b": b,
        "c": c,
        "d": d,
        "A": a.capitalize(),
        "x": rng.randint(2, 9999),
        "y": rng.randint(2, 999),
        "n": rng.randint(1, 5),
        "day": rng.choice(DAYS),
        "tool": rng.choice(TOOLS),
        "err": rng.choice(ERRORS),
        "task": tid,
        "Title": f"{rng.choice(['Find', 'Summarise', 'Check', 'List'])} {a} {b}",
    }
    templates = {"lesson": LESSON_TEMPLATES, "result": RESULT_TEMPLATES}
    text = rng.choice(templates.get(kind, NOTE_TEMPLATES)).format(**slots)
    return {
        "id": f"x{i:05d}",
        "kind": kind,
        "text": text,
        "session_id": f"s{rng.randint(1, 400):03d}",
        "task_id": tid,
        "seq": rng.randint(1, 500),
    }


def main() -> None:
    with (HERE / "written.tsv").open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    rng = random.Random(SEED)
    memories: list[dict[str, object]] = []
    queries: list[dict[str, object]] = []
    for i, r in enumerate(rows):
        mid = f"m{i:03d}"
        if shared(r["memory"], r["paraphrase_query"]):
            raise SystemExit(f"row {i + 2}: paraphrase shares content words")
        if not shared(r["memory"], r["lexical_query"]):
            raise SystemExit(f"row {i + 2}: lexical query shares no content word")
        memories.append(
            {
                "id": mid,
                "kind": r["kind"],
                "text": r["memory"],
                "session_id": f"s{rng.randint(1, 400):03d}",
                "task_id": f"task_{i:03d}",
                "seq": rng.randint(1, 500),
            }
        )
        for style in ("lexical", "paraphrase"):
            queries.append(
                {
                    "id": f"q{len(queries):03d}",
                    "query": r[f"{style}_query"],
                    "relevant": [mid],
                    "paraphrase": style == "paraphrase",
                }
            )
    vocab = words_of([r["memory"] for r in rows])
    vocab += [w for w in AGENT_WORDS if w not in vocab]
    memories += [distractor(rng, vocab, i) for i in range(N_DISTRACTORS)]
    rng.shuffle(memories)
    with gzip.GzipFile(HERE / "memories.jsonl.gz", "wb", mtime=0) as gz:
        for m in memories:
            gz.write((json.dumps(m, ensure_ascii=False) + "\n").encode())
    with (HERE / "queries.jsonl").open("w") as f:
        for q in queries:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    print(f"{len(memories)} memories, {len(queries)} queries, {len(vocab)} words")


if __name__ == "__main__":
    main()
