"""Lost-commit detection for typed states (the sessions' witness, reused).

A state's versions live in SQLite's WAL until a checkpoint copies them into
``cache.db``. A truncated or bit-flipped ``-wal`` (a bad copy, a bad sector, a
power cut under durability "normal") rolls the state back to an older version
without an error; a WAL lost whole even makes the state look never created, so
the next ``ws.state(name)`` would create it again from the model's defaults.
Each commit therefore also writes the version to the ``witness`` file beside
``cache.db`` (``store/witness.py``), and opening a state whose log is older
than its witness raises ``LostCommitsError`` instead of going on in silence.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from argus_lab.errors import LostCommitsError
from argus_lab.store.loss import lost_versions
from argus_lab.store.state_records import Commit, dumps

if TYPE_CHECKING:
    from argus_lab.store.state_log import StateLog

__all__ = ["check_lost_versions"]

log = logging.getLogger("argus_lab.state")


def check_lost_versions(state: StateLog, *, settled: bool, accept: bool) -> None:
    """Raises LostCommitsError when ``state``'s head is older than its witness.

    Args:
        state: The state's log, just opened.
        settled: No WAL was there before it opened (every version is in
            cache.db): a long journal may start afresh.
        accept: Go on from the version that survived: its document is written
            again as version ``witnessed + 1`` (a "recovered" snapshot, with a
            ``lost_commits`` event), so no version number is ever reused.
    """
    witnessed = state.witness.read()
    if witnessed is None:
        return  # a state older than witnesses, or one never committed
    head = state.head()
    have = head.version if head is not None else 0
    if have >= witnessed:
        if settled and have == witnessed:
            state.witness.compact()
        return
    what = lost_versions(
        f"state {state.name!r}", "version(s)", "log", have, witnessed, state.directory
    )
    if not accept:
        kept = (
            f"Every version up to {have} is intact"
            if have
            else "Nothing of the state survived (opening it would have created it "
            "again from the model's defaults)"
        )
        raise LostCommitsError(
            f"{what}. {kept}; the transactions of the lost versions must be made "
            "again by whoever made them. To go on from version "
            f"{have} (as version {witnessed + 1}): "
            f"ws.state({state.name!r}, model=..., accept_lost_commits=True)",
            head_version=have,
            witness_version=witnessed,
        )
    log.warning("%s; going on from version %d as asked", what, have)
    now, seq = have, head.last_seq if head is not None else None
    if head is not None:
        # The surviving document again, as a snapshot at version witnessed + 1:
        # versions never repeat, so an ETag or version a reader saw before the
        # loss can never match a different document made after it.
        doc, schema, refs = state.replay(have)
        # The stored form again, references and all.
        c = Commit(
            doc, dumps(doc), schema, "accept_lost_commits", "recovered", refs=refs
        )
        c.events.append(
            {
                "kind": "lost_commits",
                "state": state.name,
                "ts": time.time(),
                "payload": {"head_version": have, "witness_version": witnessed},
            }
        )
        # Events the lost versions wrote had numbers a reader may have seen
        # (GET /states/NAME/events?since=): new ones are numbered past them.
        lost_seq = state.witness.lost_seq(have, witnessed)
        with state._transaction():
            cur = state.head()
            if cur is not None and cur.version == have:  # nobody else did it
                cur.version = witnessed  # _write makes it witnessed + 1
                cur.last_seq = max(cur.last_seq, lost_seq or 0)
                state._write(cur, c, snapshot=True)
                now, seq = cur.version, cur.last_seq
    state.witness.compact(limit=0)  # its lines name versions that are gone
    # Nothing survived: the first version is written again, so the witness
    # goes back to 0 (otherwise only forward: another opener may be ahead).
    state.witness.record(now, [], last_seq=seq, backwards=head is None)
