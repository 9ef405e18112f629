"""Lost commits are seen, named, and resumed from without repeating a side effect.

``tests/ledger_worker.py`` runs 40 ledger tasks in a subprocess and dies by
SIGKILL, so the last commits are still frames of the SQLite WAL. The tests damage
that WAL (cut it to half, flip one byte) the way a bad copy or a bad sector does:
SQLite then silently rolls the session back; Argus must raise LostCommitsError.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import argus_lab as al
from tests import ledger_worker as lw

N = 40


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace (and ledger.txt beside it) of a run killed with its WAL intact."""
    base = tmp_path_factory.mktemp("lost")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    p = subprocess.run(
        [
            sys.executable,
            str(Path(lw.__file__)),
            str(base / "ws"),
            str(base / "ledger.txt"),
            str(N),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == -9, p.stderr
    assert p.stdout.strip() == "succeeded"
    return base


@pytest.fixture
def damaged(
    killed_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], al.Workspace]:
    def make(how: str) -> al.Workspace:
        shutil.copytree(killed_run / "ws", tmp_path / "ws")
        shutil.copy(killed_run / "ledger.txt", tmp_path / "ledger.txt")
        monkeypatch.setenv("ARGUS_TEST_LEDGER", str(tmp_path / "ledger.txt"))
        (d,) = (tmp_path / "ws" / "sessions").iterdir()
        wal = d / "cache.db-wal"
        # Every commit is in the WAL: the run never closed its connections.
        assert wal.stat().st_size > 100_000
        how, _, witness = how.partition("+")
        if how == "truncate":
            os.truncate(wal, wal.stat().st_size // 2)
        else:
            data = bytearray(wal.read_bytes())
            data[len(data) // 2] ^= 0x01
            wal.write_bytes(bytes(data))
        # The witness damaged too (the same bad copy, the same bad sector): the
        # journal must still see the loss.
        if witness == "witness-deleted":
            (d / "witness").unlink()
        elif witness == "witness-flipped":
            data = bytearray((d / "witness").read_bytes())
            data[6] ^= 0x01
            (d / "witness").write_bytes(bytes(data))
        elif witness == "witness-emptied":
            os.truncate(d / "witness", 0)
        return al.Workspace(tmp_path / "ws")

    return make


def test_an_intact_wal_opens_with_every_result(
    killed_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(killed_run / "ws", tmp_path / "ws")
    monkeypatch.setenv("ARGUS_TEST_LEDGER", str(killed_run / "ledger.txt"))
    with al.Workspace(tmp_path / "ws").open("ledger", tools=lw.TOOLS) as s:
        assert s.counts()["succeeded"] == N


@pytest.mark.parametrize(
    "how",
    [
        "truncate",
        "flip",
        "truncate+witness-deleted",
        "flip+witness-flipped",
        "truncate+witness-emptied",
    ],
)
def test_damaged_wal_raises_lost_commits_and_resume_repeats_nothing(
    damaged: Callable[[str], al.Workspace], how: str
) -> None:
    ws = damaged(how)
    ran_before = Counter(line.split()[0] for line in lw.ledger_lines())
    assert len(ran_before) == N and set(ran_before.values()) == {1}

    with pytest.raises(al.LostCommitsError) as info:
        ws.open("ledger", tools=lw.TOOLS)
    e = info.value
    assert e.witness_version > e.head_version > 0
    assert e.tasks  # named, task by task
    msg = e.message
    assert f"its checkpoint holds version {e.head_version} but version " in msg
    assert f"{e.witness_version} had been committed" in msg
    assert e.tasks[0] in msg
    assert (
        f"al.Workspace({str(ws.path)!r}).open('ledger', tools=[...], "
        "accept_lost_commits=True)"
    ) in msg
    assert (
        f"argus -w {ws.path} resume ledger --accept-lost-commits --tools MODULE_OR_FILE"
    ) in msg

    # Follow the advice.
    s = ws.open(
        "ledger", tools=lw.TOOLS, accept_lost_commits=True, approvals=lw.APPROVE_ALL
    )
    with s:
        survived = {t for t, r in s.records.items() if r.status == "succeeded"}
        assert 0 < len(survived) < N
        assert survived.isdisjoint(e.tasks)
        res = s.run()
        # Non-idempotent charges whose outcome was lost are held, never rerun.
        doubt = {t for t, r in s.records.items() if r.status == "in_doubt"}
        assert res.status == "paused" and "in doubt" in (res.reason or "")
        assert doubt == {t for t in e.tasks if s.plan.task(t).tool == "charge"}
        assert Counter(line.split()[0] for line in lw.ledger_lines()) == ran_before

        # Each took effect (the ledger says so): skip them, and finish.
        for t in sorted(doubt):
            s.skip(t, "the ledger shows the charge")
        res = s.run()
        assert res.status == "succeeded"
        # Idempotent stamps whose results were lost reran with the same key.
        for t in set(e.tasks) - doubt:
            assert s.record(t).status == "succeeded"
    assert Counter(line.split()[0] for line in lw.ledger_lines()) == ran_before
    assert [
        e.kind for e in s.events() if getattr(e, "recovered", None) == "lost_commits"
    ]


def test_events_after_a_loss_are_numbered_past_every_lost_one(
    killed_run: Path, damaged: Callable[[str], al.Workspace], tmp_path: Path
) -> None:
    # A live view or a server's stream may have shown the lost events: a new
    # event must never take the number one of them had.
    shutil.copytree(killed_run / "ws", tmp_path / "intact")
    with al.Workspace(tmp_path / "intact").open("ledger", tools=lw.TOOLS) as s:
        seen = max(e.seq for e in s.events())
    ws = damaged("truncate")
    with ws.open("ledger", tools=lw.TOOLS, accept_lost_commits=True) as s:
        events = s.events()
        survived = [e.seq for e in events if e.kind != "resumed"]
        resumed = [e for e in events if getattr(e, "recovered", None) == "lost_commits"]
        assert max(survived) < seen  # events were lost
        assert [e.seq for e in resumed] == [seen + 1]


def test_accepting_once_is_enough(damaged: Callable[[str], al.Workspace]) -> None:
    ws = damaged("truncate")
    ws.open("ledger", tools=lw.TOOLS, accept_lost_commits=True).close()
    # The head has jumped past the witness: a plain open works again.
    with ws.open("ledger", tools=lw.TOOLS) as s:
        assert s.counts()["running"] > 0


def test_without_the_journal_every_unfinished_task_is_suspect(
    damaged: Callable[[str], al.Workspace],
) -> None:
    ws = damaged("truncate")
    (d,) = (ws.path / "sessions").iterdir()
    (d / "journal").unlink()
    with pytest.raises(al.LostCommitsError) as info:
        ws.open("ledger", tools=lw.TOOLS)
    assert info.value.tasks is None
    assert "The journal does not name every lost commit's tasks" in info.value.message
    with ws.open("ledger", tools=lw.TOOLS, accept_lost_commits=True) as s:
        c = s.counts()
        assert c["running"] == N - c["succeeded"] > 0


def test_argus_resume_follows_the_advice(
    damaged: Callable[[str], al.Workspace], capsys: pytest.CaptureFixture[str]
) -> None:
    from argus_lab.cli import main

    ws = damaged("flip")
    tools = str(Path(lw.__file__))
    before = Counter(line.split()[0] for line in lw.ledger_lines())
    argv = ["-w", str(ws.path), "resume", "ledger", "--tools", tools, "--yes"]
    assert main(argv) == 4  # LostCommitsError: an Argus error, said in full
    err = capsys.readouterr().err
    assert err.startswith("argus resume: session 'ledger' (")
    assert "--accept-lost-commits --tools MODULE_OR_FILE" in err
    assert main([*argv, "--accept-lost-commits"]) == 3  # paused: in doubt
    out = capsys.readouterr().out
    assert "in doubt" in out
    assert Counter(line.split()[0] for line in lw.ledger_lines()) == before


def test_under_full_durability_the_witness_is_flushed_and_matches_the_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from argus_lab.store.checkpoints import SessionStore
    from argus_lab.store.witness import Witness

    ws = al.Workspace(tmp_path / "ws", durability="full")
    s = ws.new_session(plan=lw.plan(6), tools=lw.TOOLS, approvals=lw.APPROVE_ALL)
    monkeypatch.setenv("ARGUS_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    with s:
        assert s.run().status == "succeeded"
    assert not [t for t in threading.enumerate() if t.name == "argus-witness"]
    folder = ws.path / "sessions" / s.id
    store = SessionStore(folder, s.id)
    head = store.read_head()
    store.close()
    assert head is not None and Witness(folder, fsync=False).read() == head.version
    # A damaged witness proves nothing: it is ignored, never a false alarm.
    (folder / "witness").write_bytes(b"AW1 9999999999999999 00000000\n")
    ws.open(s.id, tools=lw.TOOLS).close()


def test_a_long_journal_starts_afresh_once_no_wal_is_left(ws: al.Workspace) -> None:
    s = ws.new_session(plan=lw.plan(2), tools=lw.TOOLS, name="j")
    s.close()  # the last connection checkpoints the WAL into cache.db
    journal = ws.path / "sessions" / s.id / "journal"
    assert not (journal.parent / "cache.db-wal").exists()
    with journal.open("a") as f:  # as after a long life
        f.write("".join(f"{v} t000\n" for v in range(1, 9000)))
    assert journal.stat().st_size > 1 << 16
    ws.open("j", tools=lw.TOOLS).close()
    assert journal.stat().st_size == 0


def test_a_commit_landing_while_another_reader_loads_is_no_loss(
    ws: al.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session loaded while its runner commits (the server reading a session a
    run is writing) sees the witness move on during the load: that is no loss.
    The commit is made to land exactly inside the load, at its witness read."""
    from argus_lab.store.witness import Witness
    from tests.conftest import BASIC_TOOLS

    plan = {
        "goal": "g",
        "tasks": [{"id": f"a{i}", "tool": "add", "args": {"a": i}} for i in range(4)],
    }
    s = ws.new_session(plan=plan, tools=BASIC_TOOLS, name="race")
    s.step()
    real = Witness.read
    armed = [True]

    def read_while_committing(w: Witness) -> int | None:
        if armed[0] and w.path.parent == s.path:
            armed[0] = False
            s.step()  # the runner commits again, in the middle of the load
        return real(w)

    monkeypatch.setattr(Witness, "read", read_while_committing)
    other = al.Workspace(ws.path)
    seen = other.open("race", tools=BASIC_TOOLS)
    assert not armed[0]  # the commit did land inside the load
    assert seen.record("a0").status == "succeeded"
    seen.close()
    other.close()
    s.close()


@pytest.mark.parametrize("how", ["truncate", "truncate+witness-deleted"])
def test_tasks_in_doubt_after_a_loss_carry_the_key_their_lost_attempt_used(
    damaged: Callable[[str], al.Workspace], how: str
) -> None:
    # A person (or code) checks an in-doubt task by its idempotency key: a
    # lost commit's task must name the key its lost attempt ran under, which
    # is also the key s.retry reuses, or the check finds nothing and the
    # retry pays a second time.
    ws = damaged(how)
    paid = dict(line.split() for line in lw.ledger_lines())
    with ws.open(
        "ledger", tools=lw.TOOLS, accept_lost_commits=True, approvals=lw.APPROVE_ALL
    ) as s:
        marked = {t: r for t, r in s.records.items() if r.status == "running"}
        assert marked
        for t, r in marked.items():  # known as soon as the session opens
            assert r.idempotency_key == paid[t], t
        assert s.run().status == "paused"
        doubt = {t: r for t, r in s.records.items() if r.status == "in_doubt"}
        assert doubt
        for t, r in doubt.items():
            assert r.idempotency_key == paid[t], t
            assert f"idempotency key {paid[t]!r}" in (r.reason or ""), r.reason
            # The check a person makes: by the key.
            took = any(r.idempotency_key in ln for ln in lw.ledger_lines())
            if took:
                s.skip(t, "the ledger shows the charge")
            else:
                s.retry(t)
        assert s.run().status == "succeeded"
    assert set(Counter(ln.split()[0] for ln in lw.ledger_lines()).values()) == {1}


@pytest.mark.parametrize(
    ("status", "bump"),
    [("failed", 1), ("blocked", 1), ("skipped", 1), ("succeeded", 1), ("pending", 0)],
)
def test_a_lost_intents_key_is_its_generations(status: str, bump: int) -> None:
    # A skipped task moves on only by s.retry, a succeeded one by a rerun of
    # a stale result: each a new generation, whose key the lost attempt used.
    from argus_lab.model import TaskRecord, idempotency_key
    from argus_lab.store.loss import _lost_intent

    rec = TaskRecord(task_id="t", status=status, generation=2)  # type: ignore[arg-type]
    lost = _lost_intent("sid", rec)
    assert lost.generation == 2 + bump
    assert lost.idempotency_key == idempotency_key("sid", "t", 2 + bump)
    carried = rec.model_copy(update={"key_of": "parent"})
    key = _lost_intent("sid", carried).idempotency_key
    # A fork's carried task keeps its parent's key only in its own generation.
    assert key == idempotency_key("parent" if not bump else "sid", "t", 2 + bump)
