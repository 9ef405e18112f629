"""ArgusSaver, the LangGraph checkpointer: conformance, codec, integrity, deltas."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import decimal
import enum
import json
import operator
import pickle
import shutil
import sqlite3
import subprocess
import sys
import uuid
import zlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel

import argus_lab as al
from argus_lab.langgraph import ArgusSaver, UnsafeValueError
from argus_lab.langgraph._codec import decode, encode
from argus_lab.langgraph._record import US, thread_session_id
from argus_lab.langgraph._serde import ArgusSerde

FIXTURES = Path(__file__).parent / "fixtures"


class Acc(TypedDict):
    results: Annotated[list[str], operator.add]
    i: int


def chain(n: int, payload: int = 512) -> Any:
    """N no-op nodes in a row, each appending ``payload`` characters."""
    g = StateGraph(Acc)
    for k in range(n):
        g.add_node(
            f"n{k}",
            lambda s, k=k: {"results": [f"{k:06d}" * (payload // 6)], "i": s["i"] + 1},
        )
    g.add_edge(START, "n0")
    for k in range(n - 1):
        g.add_edge(f"n{k}", f"n{k + 1}")
    g.add_edge(f"n{n - 1}", END)
    return g


def cfg(thread: str, n: int = 100) -> Any:
    return {"configurable": {"thread_id": thread}, "recursion_limit": n + 10}


def test_import_argus_lab_does_not_import_langgraph() -> None:
    code = (
        "import sys, argus_lab\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langgraph', 'langchain_core', 'argus_lab.langgraph'))\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


class _SyncPath(ArgusSaver):
    """The conformance suite awaits the async methods; this saver's async
    methods call the sync ones directly, so the suite checks the sync path."""

    async def aget_tuple(self, config: Any) -> Any:
        return self.get_tuple(config)

    async def alist(self, config: Any, **kw: Any) -> AsyncIterator[Any]:
        for t in self.list(config, **kw):
            yield t

    async def aput(self, *a: Any) -> Any:
        return self.put(*a)

    async def aput_writes(
        self, config: Any, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.delete_for_runs(run_ids)

    async def acopy_thread(self, a: str, b: str) -> None:
        self.copy_thread(a, b)

    async def aprune(
        self, ids: Sequence[str], *, strategy: str = "keep_latest"
    ) -> None:
        self.prune(ids, strategy=strategy)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [ArgusSaver, _SyncPath], ids=["async", "sync"])
def test_conformance_every_capability(
    cls: type[ArgusSaver], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.conformance.report import ProgressCallbacks

    made: list[Path] = []

    @checkpointer_test(name=f"ArgusSaver ({'sync' if cls is _SyncPath else 'async'})")
    async def factory() -> AsyncIterator[ArgusSaver]:
        d = tmp_path / f"ws{len(made)}"
        made.append(d)
        saver = cls(al.Workspace(d))
        yield saver
        saver.close()

    report = asyncio.run(validate(factory, progress=ProgressCallbacks.verbose()))
    with capsys.disabled():  # the report goes to the CI log, passed or not
        report.print_report()
    caps = report.results
    assert set(caps) == {
        "put",
        "put_writes",
        "get_tuple",
        "list",
        "delete_thread",
        "delete_for_runs",
        "copy_thread",
        "prune",
    }
    failed = {k: r.failures for k, r in caps.items() if not r.passed}
    assert not failed
    assert sum(r.tests_passed for r in caps.values()) >= 80


def test_a_graph_resumes_from_a_fresh_saver_with_its_whole_history(
    ws: al.Workspace,
) -> None:
    app = chain(30).compile(checkpointer=ArgusSaver(ws))
    out = app.invoke({"results": [], "i": 0}, cfg("t"))
    assert out["i"] == 30 and len(out["results"]) == 30

    again = chain(30).compile(checkpointer=ArgusSaver(ws))
    assert again.get_state(cfg("t")).values == out
    history = list(again.get_state_history(cfg("t")))
    assert [len(h.values.get("results", [])) for h in history] == [
        *range(30, -1, -1),
        0,
    ]
    assert [h.values.get("i") for h in history[:3]] == [30, 29, 28]


class Color(enum.Enum):
    RED = "red"


class Point(BaseModel):
    x: int
    when: dt.datetime


@dataclasses.dataclass
class Box:
    items: tuple[int, ...]
    tag: str = "t"


def test_the_codec_round_trips_what_graphs_keep_as_plain_json() -> None:
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.types import Interrupt, Send

    value = {
        "tuple": (1, "a"),
        "set": {1, 2},
        "bytes": b"\x00\xff",
        "when": dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
        "day": dt.date(2026, 12, 1),
        "id": uuid.UUID(int=7),
        "money": decimal.Decimal("1.10"),
        "color": Color.RED,
        "model": Point(x=1, when=dt.datetime(2026, 1, 1)),
        "box": Box(items=(1, 2)),
        "msgs": [HumanMessage("hi", id="1"), AIMessage("yo", id="2")],
        "send": Send("node", {"k": 1}),
        "interrupt": Interrupt(value={"q": "ok?"}, id="abc"),
        "dollar": {"$": "not a tag"},
        "int_keys": {1: "one"},
        "nan": float("inf"),
    }
    data = encode(value, "state")

    back = decode(json.loads(json.dumps(data)))
    assert back == value
    assert type(back["tuple"]) is tuple and type(back["msgs"][1]) is AIMessage


class Opaque:
    """A class only pickle could store."""


def test_a_value_only_pickle_could_store_is_refused_naming_channel_and_type(
    ws: al.Workspace,
) -> None:
    class S(TypedDict):
        n: int
        thing: Any

    g = StateGraph(S)
    g.add_node("ok", lambda s: {"n": 1})
    g.add_node("bad", lambda s: {"thing": Opaque()})
    g.add_edge(START, "ok")
    g.add_edge("ok", "bad")
    g.add_edge("bad", END)
    app = g.compile(checkpointer=ArgusSaver(ws))
    with pytest.raises(UnsafeValueError) as e:
        app.invoke({"n": 0}, cfg("p"), durability="sync")
    assert "channel 'thing'" in str(e.value)
    assert "test_langgraph.Opaque" in str(e.value)
    assert "never pickles" in str(e.value)
    assert isinstance(e.value, al.ArgusError)
    # What was committed before stays; the refused write left nothing behind.
    state = app.get_state(cfg("p"))
    assert state.values == {"n": 1}
    assert state.next == ("bad",)
    with pytest.raises(ValueError, match="never unpickles"):
        ArgusSerde().loads_typed(("pickle", pickle.dumps(1)))


def test_nothing_is_pickled_and_every_record_is_checksummed_json(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no(*a: Any, **k: Any) -> Any:
        raise AssertionError("pickle was called")

    for name in ("dumps", "loads", "dump", "load"):
        monkeypatch.setattr(pickle, name, no)
    saver = ArgusSaver(ws)
    app = chain(8).compile(checkpointer=saver)
    app.invoke({"results": [], "i": 0}, cfg("j"))
    assert app.get_state(cfg("j")).values["i"] == 8
    folder = ws.path / "sessions" / thread_session_id("j")
    con = sqlite3.connect(folder / "cache.db")
    argus = con.execute("SELECT key, mode, value FROM Cache").fetchall()
    rows = con.execute("SELECT key, value FROM LangGraph").fetchall()
    con.close()
    # Argus's own records (listed as a session) are raw text in diskcache's table.
    assert sorted(k for k, _, _ in argus) == ["head", "meta", "plan"]
    assert {mode for _, mode, _ in argus} == {1}
    assert len(rows) > 30
    for key, value in [*rows, *((k, v) for k, _, v in argus)]:
        assert isinstance(value, str), key
        sv, crc, body = value.split("|", 2)
        assert int(sv) >= 1 and f"{zlib.crc32(body.encode()):08x}" == crc
        json.loads(body)
    # The table itself refuses anything but text.
    con = sqlite3.connect(folder / "cache.db")
    with pytest.raises(sqlite3.IntegrityError):
        # (a pickled 1, as bytes)
        con.execute("INSERT INTO LangGraph VALUES ('x', ?)", (b"\x80\x04K\x01.",))
    con.close()


def test_a_damaged_record_names_the_thread_and_the_checkpoint(
    ws: al.Workspace,
) -> None:
    saver = ArgusSaver(ws)
    app = chain(5).compile(checkpointer=saver)
    app.invoke({"results": [], "i": 0}, cfg("dmg"))
    latest = app.get_state(cfg("dmg")).config["configurable"]["checkpoint_id"]
    saver.close()
    folder = ws.path / "sessions" / thread_session_id("dmg")
    con = sqlite3.connect(folder / "cache.db")
    key = f"c{US}{US}{latest}"
    (text,) = con.execute(
        "SELECT value FROM LangGraph WHERE key = ?", (key,)
    ).fetchone()
    con.execute(
        "UPDATE LangGraph SET value = ? WHERE key = ?",
        (text.replace('"n', '"N', 1), key),
    )
    con.commit()
    con.close()
    fresh = chain(5).compile(checkpointer=ArgusSaver(ws))
    with pytest.raises(al.CorruptCheckpointError) as e:
        fresh.get_state(cfg("dmg"))
    assert "'dmg'" in e.value.message and latest in e.value.message
    assert "checksum" in e.value.message
    # The other threads of the workspace still load.
    fresh.invoke({"results": [], "i": 0}, cfg("other"))
    assert fresh.get_state(cfg("other")).values["i"] == 5


def test_a_v1_thread_keeps_loading(ws: al.Workspace) -> None:
    from tests.fixtures import make_langgraph_v1_fixture as fx

    src = FIXTURES / "langgraph_v1"
    for folder in src.iterdir():
        shutil.copytree(folder, ws.path / "sessions" / folder.name)
    saver = ArgusSaver(ws)
    app = fx.build().compile(checkpointer=saver)
    c = cfg(fx.THREAD)
    state = app.get_state(c)
    assert state.next == ("ask",)
    assert state.interrupts[0].value == {"question": "go on?"}
    assert [n[:6] for n in state.values["notes"]] == [f"note {k}" for k in range(6)]
    assert state.values["pair"] == (7, "seven") and state.values["when"] == fx.WHEN
    assert len(list(app.get_state_history(c))) == 9  # input + 8 steps
    from langgraph.types import Command

    out = app.invoke(Command(resume="yes"), c)
    assert out["answer"] == "yes" and len(out["notes"]) == 6


def _record_bytes(ws: al.Workspace, thread: str) -> int:
    folder = ws.path / "sessions" / thread_session_id(thread)
    con = sqlite3.connect(folder / "cache.db")
    (n,) = con.execute(
        "SELECT sum(length(key) + length(value)) FROM LangGraph"
    ).fetchone()
    con.close()
    return int(n)


@pytest.mark.slow
def test_bytes_per_step_stay_flat_while_a_reducer_list_grows(
    ws: al.Workspace,
) -> None:
    per_step = {}
    for n in (50, 400):
        saver = ArgusSaver(ws)
        chain(n).compile(checkpointer=saver).invoke(
            {"results": [], "i": 0}, cfg(f"flat{n}", n)
        )
        saver.close()
        per_step[n] = _record_bytes(ws, f"flat{n}") / n
    # A whole-list rewrite would be ~100 KB per step at n = 400 (200 x 512 B).
    assert per_step[400] < 1.3 * per_step[50], per_step
    assert per_step[400] < 6000, per_step
    print(per_step)


def test_copy_thread_forks_and_the_copy_goes_its_own_way(ws: al.Workspace) -> None:
    saver = ArgusSaver(ws)
    app = chain(6).compile(checkpointer=saver)
    app.invoke({"results": [], "i": 0}, cfg("src"))
    saver.copy_thread("src", "fork")
    assert app.get_state(cfg("fork")).values == app.get_state(cfg("src")).values
    app.update_state(cfg("fork"), {"results": ["extra"]})
    assert app.get_state(cfg("fork")).values["results"][-1] == "extra"
    assert len(app.get_state(cfg("src")).values["results"]) == 6
    assert set(saver.thread_ids()) == {"src", "fork"}


def test_two_savers_never_lose_an_update(ws: al.Workspace) -> None:
    first, second = ArgusSaver(ws), ArgusSaver(ws)
    app1 = chain(4).compile(checkpointer=first)
    app2 = chain(4).compile(checkpointer=second)
    app1.invoke({"results": [], "i": 0}, cfg("both"))
    with pytest.raises(al.ConcurrentSessionError, match="being written by process"):
        app2.update_state(cfg("both"), {"i": 100})
    first.release("both")
    app2.update_state(cfg("both"), {"i": 100})  # free now: the second takes it
    # The first saver's next commit finds the head changed and writes nothing.
    with pytest.raises(al.ConcurrentSessionError):
        app1.update_state(cfg("both"), {"i": -1})
    assert app1.get_state(cfg("both")).values["i"] == 100


def test_a_thread_is_listed_like_a_session_until_it_is_deleted(
    ws: al.Workspace,
) -> None:
    saver = ArgusSaver(ws)
    chain(3).compile(checkpointer=saver).invoke({"results": [], "i": 0}, cfg("lst"))
    (info,) = ws.sessions()
    assert info.id == info.name == thread_session_id("lst")
    assert info.goal == "LangGraph thread 'lst'" and info.status == "succeeded"
    # The workspace's frames read it too: one task per node execution
    # (tests/test_langgraph_views.py pins the details).
    assert len(al.analysis.sessions_df(ws)) == 1
    assert list(al.analysis.tasks_df(ws)["title"]) == ["__start__", "n0", "n1", "n2"]
    saver.delete_thread("lst")
    assert ws.sessions() == []


def test_an_interrupt_shows_as_awaiting_approval_until_it_is_answered(
    ws: al.Workspace,
) -> None:
    from langgraph.types import Command, interrupt

    class S(TypedDict):
        answer: str

    g = StateGraph(S)
    g.add_node("ask", lambda s: {"answer": interrupt("ship it?")})
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    app = g.compile(checkpointer=ArgusSaver(ws))
    app.invoke({"answer": ""}, cfg("ask"))
    (info,) = ws.sessions()
    assert info.status == "paused"
    assert info.reason == "awaiting approval: ship it?"
    assert app.invoke(Command(resume="yes"), cfg("ask"))["answer"] == "yes"
    (info,) = ws.sessions()
    assert info.status == "succeeded" and info.reason is None


def test_a_task_s_writes_and_the_next_checkpoint_share_one_commit(
    ws: al.Workspace,
) -> None:
    import threading

    from argus_lab.langgraph._group import GroupCommit
    from argus_lab.langgraph._store import ThreadStore
    from tests.waiting import wait_until

    st = ThreadStore(
        ws.path / "sessions" / "lg-g", "g", durability="full", holder="h", lease_ttl=30
    )
    group = GroupCommit(st, linger=30.0)
    group.run(lambda: st.set("k0", 0), linger=False)
    before = st.read_head()
    assert before is not None
    done = threading.Event()

    def writes() -> None:  # put_writes: waits for a partner (here, up to 30 s)
        group.run(lambda: st.set("k1", 1), linger=True)
        done.set()

    t = threading.Thread(target=writes)
    t.start()
    wait_until(lambda: len(group._queue) == 1, "the writes to be queued")
    group.run(lambda: st.set("k2", 2), linger=False)  # put: commits both at once
    assert done.wait(10), "the lingering writes were not committed with the put"
    t.join()
    after = st.read_head()
    assert after is not None and after.version == before.version + 1
    assert st.get("k1") == 1 and st.get("k2") == 2
    st.close()


def test_tasks_df_has_one_row_per_node_execution(ws: al.Workspace) -> None:
    from langgraph.types import Command, interrupt

    saver = ArgusSaver(ws)
    chain(4).compile(checkpointer=saver).invoke({"results": [], "i": 0}, cfg("df"))
    df = saver.tasks_df("df")
    assert list(df["node"]) == ["__start__", "n0", "n1", "n2", "n3"]
    assert list(df["step"]) == [0, 1, 2, 3, 4]
    assert set(df["status"]) == {"succeeded"}
    assert df.loc[1, "writes"] == ["results", "i", "branch:to:n1"]
    assert (df["duration"].dropna() >= 0).all() and df["ended"].notna().all()

    class S(TypedDict):
        answer: str

    g = StateGraph(S)
    g.add_node("ask", lambda s: {"answer": interrupt("ok?")})
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    app = g.compile(checkpointer=saver)
    app.invoke({"answer": ""}, cfg("q"))
    assert saver.tasks_df("q")["status"].tolist() == ["succeeded", "awaiting approval"]
    app.invoke(Command(resume="yes"), cfg("q"))
    assert saver.tasks_df("q")["status"].tolist() == ["succeeded", "succeeded"]
    with pytest.raises(KeyError, match="no LangGraph thread 'nope'"):
        saver.tasks_df("nope")
