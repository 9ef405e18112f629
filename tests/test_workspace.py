"""argus_lab.workspace: the public API the CLI and analysis use to find, read and
delete sessions (resolve, path_of, store, session_ids, delete), and the typed
session options."""

from __future__ import annotations

import threading

import pytest

import argus_lab as al
from argus_lab.runtime.options import SessionArgs, SessionOptions
from tests.conftest import BASIC_TOOLS
from tests.waiting import wait_until

PLAN = {"goal": "add", "tasks": [{"id": "a", "tool": "add", "args": {"a": 1}}]}


def test_resolve_and_contains_take_a_name_or_an_id(ws: al.Workspace) -> None:
    with ws.new_session(plan=PLAN, tools=BASIC_TOOLS, name="one") as s:
        sid = s.id
    assert ws.resolve("one") == sid and ws.resolve(sid) == sid
    assert "one" in ws and sid in ws and "two" not in ws and 3 not in ws
    with pytest.raises(KeyError, match=r"no session 'two' .*recent: one"):
        ws.resolve("two")


def test_a_prefix_or_a_typo_names_no_session_but_the_error_names_the_ones_meant(
    ws: al.Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    from argus_lab.cli import main

    ids = {}
    for name in ("report-a1", "report-b2", "other"):
        with ws.new_session(plan=PLAN, tools=BASIC_TOOLS, name=name) as s:
            ids[name] = s.id
    # A prefix is not resolved (it could name another session tomorrow, and
    # `argus rm` takes names), but the ones it starts are listed, by id too.
    with pytest.raises(KeyError) as e:
        ws.resolve("report")
    assert str(e.value) == (
        f"no session 'report' in {ws.path}: a session is named by its whole name "
        f"or id, and 2 start with it: report-a1 ({ids['report-a1']}), "
        f"report-b2 ({ids['report-b2']})"
    )
    prefix = ids["other"][:20]
    with pytest.raises(KeyError, match=rf"1 starts with it: other \({ids['other']}\)"):
        ws.open(prefix)
    with pytest.raises(KeyError, match=r"did you mean 'other'\?$"):
        ws.resolve("othre")
    with pytest.raises(KeyError, match=r"\(recent: report-a1, report-b2, other\)$"):
        ws.resolve("zzz")
    # The CLI says the same, as a usage error (exit 2).
    assert main(["-w", str(ws.path), "show", "report"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("argus show: no session 'report' in ")
    assert "2 start with it: report-a1 (" in err


def test_path_of_store_and_session_ids(ws: al.Workspace) -> None:
    with ws.new_session(plan=PLAN, tools=BASIC_TOOLS, name="one") as s:
        s.run()
        assert ws.path_of(s) == ws.path_of(s.info) == ws.path_of("one")
        sid = s.id
    assert (ws.path_of(sid) / "cache.db").is_file()
    with ws.store("one") as store:
        assert store.read_meta().name == "one"
        kinds = [e.kind for e in store.read_events()]
    assert kinds[0] == "session_created" and "task_succeeded" in kinds
    assert ws.session_ids() == [sid]


def test_delete_frees_the_name_and_the_folders(ws: al.Workspace) -> None:
    with ws.new_session(plan=PLAN, tools=BASIC_TOOLS, name="one") as s:
        s.run()
        sid = s.id
    (ws.path / "files" / sid).mkdir(parents=True, exist_ok=True)
    (ws.path / "files" / sid / "out.txt").write_text("x" * 1000)
    freed = ws.delete("one")
    assert freed > 1000
    assert "one" not in ws and ws.session_ids() == [] and ws.sessions() == []
    assert not (ws.path / "sessions" / sid).exists()
    assert not (ws.path / "files" / sid).exists()
    with ws.new_session(plan=PLAN, tools=BASIC_TOOLS, name="one") as again:
        assert again.id != sid  # the name is free again
    with pytest.raises(KeyError):
        ws.delete("nope")


def test_delete_refuses_a_running_session(ws: al.Workspace) -> None:
    go = threading.Event()

    @al.tool
    def wait() -> str:
        """Waits for the test."""
        go.wait(30)
        return "done"

    plan = {"tasks": [{"id": "w", "tool": "wait"}]}
    with ws.new_session(plan=plan, tools=[wait], name="busy") as s:
        s.start()
        wait_until(lambda: s.record("w").status == "running", "the task to run")
        with pytest.raises(al.ConcurrentSessionError, match="stop that run") as e:
            ws.delete("busy")
        # The same words as every live-lease refusal (store/head.lease_message).
        assert "'busy' is being run by process" in str(e.value)
        assert "lease valid" in str(e.value) and "this process" in str(e.value)
        go.set()
        wait_until(lambda: s.info.status == "succeeded", "the run to end")
    assert "busy" in ws
    ws.delete("busy")
    assert "busy" not in ws


def test_session_args_are_the_session_options() -> None:
    assert SessionArgs.__optional_keys__ == set(SessionOptions.__dataclass_fields__)


def test_an_unknown_option_names_the_known_ones(ws: al.Workspace) -> None:
    with pytest.raises(TypeError, match="session options are: concurrency"):
        ws.new_session(plan=PLAN, tools=BASIC_TOOLS, concurency=2)  # type: ignore[call-arg]
