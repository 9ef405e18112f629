"""Secrets by the routes the sweeps of issue 14 and the sixth session left out.

Each test hands a secret to Argus the way a user would (the environment, a
session's ``secrets=``, a document to ingest) by a route nobody had tried,
then scans every byte (and every path) under the workspace: no copy lands,
and what was stored still opens.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.store.memory import Memory
from tests.fixtures.llm.fake_api import FakeAPI, error

SECRET = "hole-" + uuid.uuid4().hex  # random from its 6th character
ENV = "ARGUS_HOLES_TOKEN"  # named like a secret: the redactor knows its value
ANTHROPIC = "sk-ant-api03-" + uuid.uuid4().hex + uuid.uuid4().hex[:8]


def scan(root: Path, *needles: str) -> list[str]:
    """``needle: path`` for every file under ``root`` whose bytes or whose
    path (below ``root``) hold one of ``needles`` (by its first 12 characters)."""
    hits = []
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        hits += [f"{n[:12]}: {rel} (its path)" for n in needles if n[:12] in rel]
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            hits += [f"{n[:12]}: {rel}" for n in needles if n[:12].encode() in data]
    return hits


def test_memory_added_or_ingested_directly_holds_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The memory tool masked what a task remembered; memory.add and
    # memory.ingest, the user's own calls into the same LanceDB, did not.
    monkeypatch.setenv(ENV, SECRET)
    mem = Memory(tmp_path / "memory", embedder=None)
    mem.add(f"the deploy token is {SECRET}", metadata={"key": ANTHROPIC, "n": 3})
    notes = tmp_path / "notes.md"
    notes.write_text(f"# Setup\n\nexport ANTHROPIC_API_KEY={ANTHROPIC}\n\nThen run.\n")
    mem.ingest(notes)
    texts = sorted(r.text for r in mem.search("deploy token setup", k=5))
    assert texts == [
        "# Setup\n\nexport ANTHROPIC_API_KEY=[REDACTED]\n\nThen run.",
        "the deploy token is [REDACTED]",
    ], texts
    hit = mem.search("deploy", k=1)[0]
    assert hit.metadata == {"key": "[REDACTED]", "n": 3}
    assert list((tmp_path / "memory").rglob("*.lance"))  # the scan reads LanceDB
    assert scan(tmp_path / "memory", SECRET, ANTHROPIC) == []


@al.tool
def read_late_env() -> dict[str, str]:
    """Returns an env var set after the session was opened."""
    return {"v": "the key is " + os.environ["ARGUS_LATE_API_KEY"]}


def test_an_env_secret_set_after_the_session_opened_never_lands(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A notebook opens the session in one cell and runs `%env KEY=...` in the
    # next: the redactor read the environment once, when the session opened.
    plan = {"goal": "g", "tasks": [{"id": "a", "tool": "read_late_env"}]}
    s = ws.new_session(plan=plan, tools=[read_late_env])
    monkeypatch.setenv("ARGUS_LATE_API_KEY", SECRET)
    s.run()
    assert s.result("a") == {"v": "the key is [REDACTED]"}
    s.tasks_df()
    s.close()
    assert scan(ws.path, SECRET) == []


@al.tool
def echo(value: str) -> dict[str, str]:
    """Returns its argument."""
    return {"value": value}


ECHO_PLAN = {
    "goal": "g",
    "tasks": [
        {"id": "a", "tool": "echo", "args": {"value": "x"}},
        {
            "id": "b",
            "tool": "echo",
            "deps": ["a"],
            "args": {"value": "${a.result.value}"},
        },
    ],
}


@pytest.mark.parametrize(
    "word", ["succeeded", "status", "task_id", "session", "REDACTED"]
)
def test_a_secret_that_is_a_word_of_the_rows_is_refused_before_anything_is_stored(
    ws: al.Workspace, word: str
) -> None:
    # Masked in the rows, "succeeded" made the meta unreadable, "status" lost
    # task a's status (it ran again after a reopen), "task_id" its record;
    # "REDACTED" masked the mask again at every commit ("[[REDACTED]]").
    with pytest.raises(ValueError, match="words Argus's own records are made of"):
        ws.new_session(plan=ECHO_PLAN, tools=[echo], secrets=[word], name="w")
    assert ws.sessions() == []
    s = ws.new_session(plan=ECHO_PLAN, tools=[echo], name="w")
    s.run()
    s.close()
    with pytest.raises(ValueError, match="words Argus's own records are made of"):
        ws.open("w", tools=[echo], secrets=[word])


@pytest.mark.parametrize(
    ("secrets", "error", "match"),
    [
        (["pw123"], ValueError, "value 1 has 5 characters"),
        ("a-whole-password", TypeError, "not one string"),
        (["long-enough-value", 12345678], TypeError, "value 2 is a int"),
    ],
)
def test_secrets_that_could_not_be_masked_as_asked_are_refused(
    ws: al.Workspace, secrets: object, error: type[Exception], match: str
) -> None:
    # "pw123" was silently not masked (shorter than 6); one string was taken
    # as its characters, each too short to mask: nothing was masked at all.
    with pytest.raises(error, match=match) as e:
        ws.new_session(plan=ECHO_PLAN, tools=[echo], secrets=secrets)
    assert "pw123" not in str(e.value) and "a-whole" not in str(e.value)
    assert ws.sessions() == []


def test_an_env_value_that_is_a_word_of_the_rows_leaves_the_session_readable(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Configuration under a secret-like name (AUTH, KEY, TOKEN...) is no secret.
    monkeypatch.setenv("ARGUS_HOLES_AUTH_MODE", "succeeded")
    monkeypatch.setenv("ARGUS_HOLES_KEY_FIELD", "status")
    s = ws.new_session(plan=ECHO_PLAN, tools=[echo], name="env-words")
    s.run()
    s.close()
    with ws.open("env-words", tools=[echo]) as again:
        assert {t: again.record(t).status for t in "ab"} == {
            "a": "succeeded",
            "b": "succeeded",
        }
        assert again.info.status == "succeeded"


@al.tool(side_effect="write")
def send(to: str) -> str:
    """A write: asks for approval first."""
    return f"sent to {to}"


@al.tool
def fails() -> None:
    """Fails every time."""
    raise RuntimeError("no")


_USER_DATA = {"result", "args", "edited_args", "input", "problems", "output_schema"}
"""Fields whose keys are a user's (a result's, a tool's arguments)."""


def row_keys(root: Path) -> set[str]:
    """Every dict key of every stored row under ``root`` but the user's."""
    import json
    import sqlite3

    keys: set[str] = set()

    def walk(x: object) -> None:
        if isinstance(x, dict):
            keys.update(k for k in x if isinstance(k, str))
            for k, v in x.items():
                if k not in _USER_DATA:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for db in root.rglob("cache.db"):
        with sqlite3.connect(db) as con:
            for (value,) in con.execute("select value from Cache"):
                if isinstance(value, str) and value.count("|") >= 2:
                    for line in value.split("|", 2)[2].split("\n"):
                        walk(json.loads(line))
    return keys


def test_every_key_of_the_stored_rows_is_a_word_a_secret_cannot_be(
    ws: al.Workspace,
) -> None:
    # row_words() lists the words a secret must not be: the models' own, and
    # the keys the runtime writes into free dicts. A key it missed could be
    # masked in every row by a secret that happens to be that word.
    from argus_lab.llm.testing import FunctionModel
    from argus_lab.store._vocabulary import row_words

    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "echo", "args": {"value": "x"}},
            {"id": "w", "tool": "send", "args": {"to": "${a.result.value}"}},
            {"id": "f", "tool": "fails", "retries": 1},
            {"id": "q", "kind": "llm", "description": "Say hi.", "deps": ["a"]},
        ],
    }
    s = ws.new_session(
        plan=plan,
        tools=[echo, send, fails],
        models=FunctionModel(lambda req: "hi", name="m"),
        max_consecutive_failures=None,
    )
    s.run()
    s.approve("w", {"to": "y"})
    s.run()
    s.retry("f")
    s.run()
    s.fork(name="fork", at="a").close()
    s.close()
    tasks = {"a", "w", "f", "q"}
    assert row_keys(ws.path) - row_words() - tasks == set()


@al.tool
def named_file(value: str, *, ctx: al.ToolContext) -> Path:
    """Writes a file named after its argument and returns it."""
    p = Path(ctx.workdir) / f"report-{value}.txt"
    p.write_text("body\n")
    return p


def test_a_file_named_by_a_secret_never_lands_under_that_name(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The text of a returned file and of write_file was masked, and the
    # sandbox renamed its files; a returned file's name, and write_file's
    # path, were kept as they were: the secret lay in the workspace's tree.
    from argus_lab.tools.builtin import builtin_tools

    monkeypatch.setenv(ENV, SECRET)
    ref = "${env." + ENV + "}"
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "named", "tool": "named_file", "args": {"value": ref}},
            {"id": "w", "tool": "write_file", "args": {"path": ref, "content": "x"}},
        ],
    }
    tools = [named_file, *builtin_tools("write_file")]
    s = ws.new_session(plan=plan, tools=tools, max_consecutive_failures=None)
    s.run()
    s.approve("w")
    s.run()
    assert s.record("named").status == "succeeded"
    assert s.result("named").read_text() == "body\n"
    folder = ws.path / "files" / s.id
    assert [p.name for p in folder.rglob("report-*")] == ["report-[REDACTED].txt"]
    assert s.record("w").status == "failed"
    assert "the path holds a secret" in (s.record("w").error or "")
    s.close()
    assert scan(ws.path, SECRET) == []


@al.tool
def binary_with_secret(value: str) -> bytes:
    """Binary data holding its argument: refused, never masked."""
    return b"\x89PNG\r\n\x1a\n\xff" + value.encode() + b"\x00"


def test_the_refusal_of_binary_data_reads_whole_once_stored(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "... holds a secret: masking it would ..." has the shape of a secret
    # ("secret: <value>"): the stored error read "[REDACTED] it would ...".
    monkeypatch.setenv(ENV, SECRET)
    args = {"value": "${env." + ENV + "}"}
    plan = {
        "goal": "g",
        "tasks": [{"id": "b", "tool": "binary_with_secret", "args": args}],
    }
    s = ws.new_session(plan=plan, tools=[binary_with_secret])
    s.run()
    error = s.record("b").error or ""
    assert "masking it would corrupt it" in error and "[REDACTED]" not in error, error
    s.close()


def test_a_key_echoed_by_the_api_never_reaches_a_log(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # count_tokens failing logged the SDK's error as it was, and an error body
    # may echo the key it was sent with (ANTHROPIC_API_KEY: not key-shaped).
    from argus_lab.runtime.context import AnthropicTokenCounter

    plain = "plain-" + uuid.uuid4().hex
    monkeypatch.setenv("ANTHROPIC_API_KEY", plain)
    api = FakeAPI(error(401, f"invalid x-api-key {plain}"))
    client = api.client(max_retries=0).with_options(api_key=plain)
    count = AnthropicTokenCounter(client)
    with caplog.at_level("WARNING", logger="argus_lab"):
        assert count("some text") > 0  # estimated instead
    assert "count_tokens failed" in caplog.text
    assert plain not in caplog.text and "[REDACTED]" in caplog.text


def test_every_logger_of_argus_masks_secrets() -> None:
    # A logger's filters see only what is logged through it: a module logging
    # through a name outside LOGGERS would log in clear.
    import ast
    import logging

    from argus_lab._redact_log import LOGGERS

    used = set()
    for path in Path(al.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "getLogger"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                used.add(node.args[0].value)
    assert used and used <= set(LOGGERS), used - set(LOGGERS)
    for name in LOGGERS:
        assert logging.getLogger(name).filters, name


def test_a_secret_in_a_logged_traceback_is_masked(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    monkeypatch.setenv(ENV, SECRET)
    log = logging.getLogger("argus_lab.state")
    with caplog.at_level("ERROR", logger="argus_lab.state"):
        try:
            raise RuntimeError(f"renewal refused for {SECRET}")
        except RuntimeError:
            log.exception("state %s: renewing the lease failed", "s")
    assert "RuntimeError: renewal refused for [REDACTED]" in caplog.text
    assert SECRET[:12] not in caplog.text


def test_a_replanning_prompt_never_carries_the_failed_tasks_secret(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The failed task's error went to the planner's model as it was raised:
    # the secret left the machine in a prompt no one meant it for.
    from argus_lab.llm import ModelRequest
    from argus_lab.llm.testing import FunctionModel, tool_call
    from tests.conftest import BASIC_TOOLS

    monkeypatch.setenv(ENV, SECRET)
    prompts: list[str] = []

    def replacement(req: ModelRequest) -> object:
        prompts.append(req.messages[0].text)
        new = [{"id": "b2", "tool": "echo", "args": {"value": "again"}}]
        return tool_call("submit_plan", {"goal": "x", "tasks": new})

    args = {"message": "${env." + ENV + "}"}
    plan = {
        "goal": "g",
        "tasks": [{"id": "b", "tool": "boom", "args": args, "on_failure": "replan"}],
    }
    planner = al.LLMPlanner(FunctionModel(replacement))
    s = ws.new_session(plan=plan, tools=BASIC_TOOLS, planner=planner)
    assert s.run().status == "succeeded"
    assert len(prompts) == 1 and "Task 'b' failed for good" in prompts[0]
    assert SECRET not in prompts[0] and "[REDACTED]" in prompts[0]
    s.close()


class Unprintable(Exception):
    """An exception whose message cannot be read (its ``__str__`` raises)."""

    def __str__(self) -> str:
        raise ValueError(f"no message for {self.args[0]}")


@al.tool
def raises_unprintable(value: str) -> None:
    """Raises an exception whose ``__str__`` raises, quoting the argument."""
    raise Unprintable(value)


def test_an_exception_whose_message_cannot_be_read_fails_its_task(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reading the failed task's error raised again, out of run(): the run
    # ended with the session "running", and the caller (a notebook's output)
    # got a message quoting the secret that no redactor had seen.
    monkeypatch.setenv(ENV, SECRET)
    args = {"value": "${env." + ENV + "}"}
    tasks = [{"id": t, "tool": "raises_unprintable", "args": args} for t in "ab"]
    s = ws.new_session(
        plan={"goal": "g", "tasks": tasks},
        tools=[raises_unprintable],
        max_consecutive_failures=None,
    )
    assert s.run().status == "failed"
    for t in "ab":  # the second may run inline, on the event loop
        rec = s.record(t)
        assert rec.status == "failed" and rec.error_type == "Unprintable"
        assert rec.error == "Unprintable (its message could not be read)"
        assert "Unprintable: <exception str() failed>" in (rec.traceback or "")
    s.close()
    assert scan(ws.path, SECRET) == []


def test_a_secret_in_a_plans_texts_never_reaches_what_a_notebook_shows(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store kept the plan masked, and the live session masked its goal;
    # a task's title or description, and the constraints, were shown as
    # written: in tasks_df (a DataFrame), the HTML and SVG a notebook saves,
    # the widget's traits and s.plan, though the reopened session showed
    # [REDACTED].
    import json

    from argus_lab.jupyter.widget import GraphWidget

    monkeypatch.setenv(ENV, SECRET)
    plan = {
        "goal": "g",
        "constraints": [f"never print {ANTHROPIC}"],
        "tasks": [
            {
                "id": "a",
                "tool": "echo",
                "title": f"use {SECRET}",
                "description": f"with the key {ANTHROPIC}",
                "args": {"value": "x"},
            }
        ],
    }
    s = ws.new_session(plan=plan, tools=[echo], name="texts")
    s.run()
    task = s.plan.tasks[0]
    assert (task.title, task.description) == (
        "use [REDACTED]",
        "with the key [REDACTED]",
    )
    assert s.plan.constraints == ["never print [REDACTED]"]
    widget = GraphWidget(s, update_interval=0.0)
    shown = {
        "tasks_df": s.tasks_df().to_csv(),
        "html": s._repr_html_(),
        "svg": s.graph_svg(),
        "plan": repr(s.plan),
        "widget": json.dumps(widget.get_state(), default=str),
    }
    widget.close()
    leaks = [k for k, v in shown.items() for n in (SECRET, ANTHROPIC) if n[:12] in v]
    assert leaks == [], leaks
    s.close()
    with ws.open("texts", tools=[echo]) as again:
        assert again.plan == s.plan  # as stored, as shown


@pytest.mark.parametrize(
    "task",
    [
        {"id": "a", "tool": "echo", "deps": [ANTHROPIC], "args": {"value": "x"}},
        {"id": "a", "tool": SECRET, "args": {"value": "x"}},
    ],
)
def test_a_plan_error_quoting_a_secret_shows_it_masked(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch, task: dict[str, object]
) -> None:
    # The error names the dependency or tool as written; a notebook saves it.
    from argus_lab.errors import PlanError

    monkeypatch.setenv(ENV, SECRET)
    with pytest.raises(PlanError) as e:
        ws.new_session(plan={"goal": "g", "tasks": [task]}, tools=[echo])
    shown = str(e.value) + "".join(e.value.problems)
    assert "[REDACTED]" in shown and ANTHROPIC[:12] not in shown
    assert SECRET[:12] not in shown


def test_the_sessions_options_shown_hold_no_secret(ws: al.Workspace) -> None:
    # s.options evaluated in a cell showed secrets=('...',) in its repr.
    given = "given-" + uuid.uuid4().hex
    s = ws.new_session(plan=ECHO_PLAN, tools=[echo], secrets=[given])
    assert s.options.secrets == (given,)  # still there, for the redactor
    assert given not in repr(s.options) and given not in str(s.options)
    s.close()


@al.tool
def frames_of_every_shape(value: str) -> dict[str, Any]:
    """DataFrames holding the value outside plain text cells."""
    import pandas as pd

    nested = pd.DataFrame(
        {
            "tags": [["ok", value]],
            "json": [{"auth": "x", "note": f"via {value}"}],
            "pair": [("a", value)],
            "raw": [f"b {value}".encode()],
        }
    )
    multi = pd.DataFrame(
        [[1, 2]],
        columns=pd.MultiIndex.from_tuples([("a", value), ("b", "x")]),
        index=pd.MultiIndex.from_tuples([(value, 1)]),
    )
    with_attrs = pd.DataFrame({"x": [1]})
    with_attrs.attrs["source"] = f"pulled with {value}"
    return {"nested": nested, "multi": multi, "attrs": with_attrs}


def test_a_secret_anywhere_in_a_dataframe_is_masked_not_refused(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only text cells, flat column names and the index were masked: a list,
    # dict, tuple or bytes cell, a MultiIndex or df.attrs holding a secret
    # reached the parquet, which then refused the whole result (the task
    # failed; its data was lost).
    monkeypatch.setenv(ENV, SECRET)
    args = {"value": "${env." + ENV + "}"}
    plan = {
        "goal": "g",
        "tasks": [{"id": "f", "tool": "frames_of_every_shape", "args": args}],
    }
    s = ws.new_session(plan=plan, tools=[frames_of_every_shape])
    s.run()
    assert s.record("f").status == "succeeded", s.record("f").error
    out = s.result("f")
    nested = out["nested"].iloc[0]
    assert list(nested["tags"]) == ["ok", "[REDACTED]"]
    assert nested["json"] == {"auth": "[REDACTED]", "note": "via [REDACTED]"}
    assert list(nested["pair"]) == ["a", "[REDACTED]"]
    assert nested["raw"] == b"b [REDACTED]"
    assert list(out["multi"].columns) == [("a", "[REDACTED]"), ("b", "x")]
    assert list(out["multi"].index) == [("[REDACTED]", 1)]
    assert out["attrs"].attrs == {"source": "pulled with [REDACTED]"}
    s.close()
    assert scan(ws.path, SECRET) == []


@al.tool
def logs_in() -> dict[str, str]:
    """Sets a secret env var mid-run (a login), then returns it."""
    os.environ["ARGUS_MIDRUN_TOKEN"] = SECRET
    return {"session": f"logged in with {SECRET}"}


@al.tool
def fails_with_env() -> None:
    """Fails quoting a secret env var set by an earlier task."""
    raise RuntimeError("refused: " + os.environ["ARGUS_MIDRUN_TOKEN"])


@al.tool
def big_with_env() -> str:
    """A result too large to sit inline, quoting the env secret."""
    return "x" * 100_000 + os.environ["ARGUS_MIDRUN_TOKEN"]


@al.tool
def logs_in_and_returns_bytes() -> bytes:
    """Sets a secret env var and returns it in bytes (an artifact), at once."""
    os.environ["ARGUS_MIDRUN_TOKEN"] = SECRET
    return f"raw {SECRET}".encode()


def test_an_env_secret_a_tool_sets_mid_run_never_lands(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The redactor learnt the environment when a run began: a token a tool
    # put in os.environ (a login) was stored in clear by every later step.
    monkeypatch.delenv("ARGUS_MIDRUN_TOKEN", raising=False)
    tasks = [
        {"id": "login", "tool": "logs_in"},
        {"id": "fail", "tool": "fails_with_env", "deps": ["login"]},
        {"id": "big", "tool": "big_with_env", "deps": ["login"]},
        {"id": "raw", "tool": "logs_in_and_returns_bytes"},
    ]
    s = ws.new_session(
        plan={"goal": "g", "tasks": tasks},
        tools=[logs_in, fails_with_env, big_with_env, logs_in_and_returns_bytes],
        max_consecutive_failures=None,
    )
    try:
        s.run()
    finally:
        os.environ.pop("ARGUS_MIDRUN_TOKEN", None)
    assert s.result("login") == {"session": "logged in with [REDACTED]"}
    assert s.record("fail").error == "refused: [REDACTED]"
    assert s.result("big").endswith("x[REDACTED]")
    assert s.result("raw") == b"raw [REDACTED]"
    s.close()
    assert scan(ws.path, SECRET) == []


def test_a_replanned_tasks_texts_are_held_masked_as_stored(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A plan patch's new tasks were adopted as the planner wrote them: a title
    # quoting a secret showed in tasks_df though the stored plan masked it.
    from argus_lab.llm import ModelRequest
    from argus_lab.llm.testing import FunctionModel, tool_call
    from tests.conftest import BASIC_TOOLS

    monkeypatch.setenv(ENV, SECRET)

    def replacement(req: ModelRequest) -> object:
        new = {
            "id": "b2",
            "tool": "echo",
            "title": f"retry with {ANTHROPIC}",
            "args": {"value": "again"},
        }
        return tool_call("submit_plan", {"goal": "x", "tasks": [new]})

    plan = {
        "goal": "g",
        "tasks": [
            {
                "id": "b",
                "tool": "boom",
                "args": {"message": "no"},
                "on_failure": "replan",
            }
        ],
    }
    planner = al.LLMPlanner(FunctionModel(replacement))
    s = ws.new_session(plan=plan, tools=BASIC_TOOLS, planner=planner, name="rp")
    assert s.run().status == "succeeded"
    assert [t.title for t in s.plan.tasks] == ["retry with [REDACTED]"]
    assert ANTHROPIC[:12] not in s.tasks_df().to_csv()
    s.close()
    with ws.open("rp", tools=BASIC_TOOLS) as again:
        assert again.plan == s.plan
    assert scan(ws.path, ANTHROPIC) == []


@al.tool
def utf16_file(value: str, *, ctx: al.ToolContext) -> Path:
    """A UTF-16 text file with its byte-order mark (a Windows export)."""
    p = Path(ctx.workdir) / "export.txt"
    p.write_text(f"token={value}\nkey={ANTHROPIC}\n", encoding="utf-16")
    return p


@al.tool
def utf16_bytes(value: str) -> bytes:
    """Text as UTF-16-LE bytes, without a byte-order mark."""
    return f"token={value} key={ANTHROPIC}".encode("utf-16-le")


def test_a_secret_in_utf16_text_never_lands(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # UTF-16 with a BOM is not UTF-8: read as binary, where a secret was looked
    # for in UTF-8 only. Without a BOM, ASCII in UTF-16 is valid UTF-8 with a
    # NUL between the letters: read as text, where no secret was seen.
    monkeypatch.setenv(ENV, SECRET)
    args = {"value": "${env." + ENV + "}"}
    tasks = [{"id": t, "tool": t, "args": args} for t in ("utf16_file", "utf16_bytes")]
    s = ws.new_session(
        plan={"goal": "g", "tasks": tasks}, tools=[utf16_file, utf16_bytes]
    )
    s.run()
    masked = "token=[REDACTED]\nkey=[REDACTED]\n"
    assert s.result("utf16_file").read_text(encoding="utf-16") == masked
    raw = s.result("utf16_bytes")
    assert raw.decode("utf-16-le") == "token=[REDACTED] key=[REDACTED]"
    s.close()
    needles = [
        n.encode(c) for n in (SECRET, ANTHROPIC) for c in ("utf-16-le", "utf-16-be")
    ]
    hits = [
        p
        for p in ws.path.rglob("*")
        if p.is_file()
        for n in needles
        if n in p.read_bytes()
    ]
    assert hits == [] and scan(ws.path, SECRET, ANTHROPIC) == []


def test_binary_data_holding_a_secret_in_utf16_is_refused() -> None:
    from argus_lab.redact import Redactor

    red = Redactor([SECRET], environ={})
    assert red.mask_bytes(b"\x89PNG\xff\x00" + SECRET.encode("utf-16-le")) is None
    assert red.mask_bytes(b"\x89PNG\xff\x00" + ANTHROPIC.encode("utf-16-be")) is None
    assert red.mask_bytes(b"\x89PNG\xff\x00plain") == b"\x89PNG\xff\x00plain"


@al.tool
def refreshes_token() -> str:
    """Replaces the value of a secret env var already set (a token refresh),
    then quotes the new one."""
    new = "fresh-" + SECRET
    os.environ["ARGUS_ROTATED_TOKEN"] = new
    return f"refreshed to {new}"


def test_an_env_secret_a_tool_replaces_mid_run_never_lands(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # learn_new_env looked at len(os.environ) only: a tool that gave a secret
    # variable already there a new value (the count unchanged) had that value
    # stored in clear until the next run.
    monkeypatch.setenv("ARGUS_ROTATED_TOKEN", "stale-" + uuid.uuid4().hex)
    s = ws.new_session(
        plan={"goal": "g", "tasks": [{"id": "refresh", "tool": "refreshes_token"}]},
        tools=[refreshes_token],
    )
    s.run()
    assert s.result("refresh") == "refreshed to [REDACTED]"
    s.close()
    assert scan(ws.path, "fresh-" + SECRET) == []
