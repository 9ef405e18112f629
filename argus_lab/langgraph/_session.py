"""A LangGraph thread as an Argus session: the records that list it.

Argus's ``head``, ``meta`` (SessionInfo) and ``plan`` records, in diskcache's
table as a native session has them, so ``ws.sessions()``, ``argus ls`` and the
analysis frames see the thread (as a plan of no tasks). ``meta`` is written once,
then again only when the status changes (an interrupt, an error, the end), so a
step does not pay for it.
"""

from __future__ import annotations

import time
import zlib
from typing import TYPE_CHECKING

from argus_lab.model import SessionInfo, SessionStatus
from argus_lab.plan import Plan
from argus_lab.store.envelope import encode as encode_argus
from argus_lab.store.head import Head

if TYPE_CHECKING:
    from argus_lab.langgraph._store import ThreadStore

__all__ = ["write_session_records", "write_status"]


def write_session_records(st: ThreadStore) -> None:
    """Writes ``lg:thread`` (the thread id) with ``head``, ``meta`` and ``plan``."""
    from argus_lab.langgraph._record import lg_encode

    now = time.time()
    goal = f"LangGraph thread {st.thread_id!r}"
    meta = SessionInfo(
        id=st.session_id, name=st.session_id, goal=goal, created=now, updated=now
    )
    with st.lock, st.cache.transact(retry=True):
        st.cache._sql(
            "INSERT OR IGNORE INTO LangGraph (key, value) VALUES (?, ?)",
            ("lg:thread", lg_encode({"thread_id": st.thread_id})),
        )
        st.cache.add("head", encode_argus(Head().to_json()))
        st.cache.add("meta", encode_argus(meta.model_dump_json()))
        st.cache.add("plan", encode_argus(Plan(goal=goal).model_dump_json()))


def write_status(st: ThreadStore, status: str, reason: str | None) -> None:
    """Rewrites the status in ``meta`` (inside the caller's transaction)."""
    raw = st.cache.get("meta")
    if raw is None:
        return
    try:
        _, crc, body = raw.split("|", 2)
        if f"{zlib.crc32(body.encode()):08x}" != crc:
            raise ValueError("checksum mismatch")
        info = SessionInfo.model_validate_json(body)
    except ValueError as e:
        raise st.corrupt("meta", e) from None
    new: SessionStatus = status  # type: ignore[assignment]
    info = info.model_copy(
        update={"status": new, "reason": reason, "updated": time.time()}
    )
    st.cache.set("meta", encode_argus(info.model_dump_json()))
