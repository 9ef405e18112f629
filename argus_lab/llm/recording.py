"""Planner model calls through a session's replay cache (invariant 9).

An LLM task's model calls are recorded in its session's replay cache
(runtime/llm_task.py); a planner's, made while the session runs (an LLM
replan, an HTN decomposer expanding or repairing a compound), were not. A crash
between the model's answer and the commit of the plan change then asked, and
paid, the model again on resume, and a model answering differently changed the
plan that resumed; a fork replanning the same failure paid again too.

The session's supervisor calls its planner inside ``recording(state)``; each
planner asks ``recorded(self.model)`` for the model to call, which reads and
writes that cache under the LLM tasks' keys (``model:<name>:<request hash>``).
Outside ``recording`` (planning before a session exists) it is the model
itself. ``run_sync`` carries the context into its helper thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from argus_lab.llm.base import Model, ModelRequest, ModelResponse

__all__ = [
    "COUNTED",
    "Paid",
    "RecordedModel",
    "ReplyStore",
    "recorded",
    "recorded_reply",
    "recording",
    "replay_key",
]


class ReplyStore(Protocol):
    """Where replies are recorded (a session's state)."""

    def get_replay(self, key: str) -> dict[str, Any] | None: ...

    def put_replay(self, key: str, data: dict[str, Any]) -> None: ...


COUNTED = "counted:"
"""Prefix of the replay key marking a reply as counted in the session's usage
(put after the commit that counted it): a reply recorded without it was paid
for and never counted (a crash in between), and is counted on resume."""

Paid = list[tuple[str, "ModelResponse"]]
"""(replay key, reply) of the calls a ``recording`` block paid for and has not
counted yet: the caller counts them, commits, then marks them ``COUNTED``."""

_STORE: ContextVar[tuple[ReplyStore, Paid] | None] = ContextVar(
    "argus_reply_store", default=None
)


@contextmanager
def recording(store: ReplyStore, paid: Paid | None = None) -> Iterator[Paid]:
    """Model calls made through ``recorded`` in this block go through ``store``;
    the ones to count (paid now, or before a crash and never counted) are
    appended to ``paid`` (yielded)."""
    out: Paid = [] if paid is None else paid
    token = _STORE.set((store, out))
    try:
        yield out
    finally:
        _STORE.reset(token)


def recorded(model: Model) -> Model:
    """``model``, answering from the replay cache of the ``recording`` block
    this runs in (``model`` itself outside one)."""
    held = _STORE.get()
    return model if held is None else RecordedModel(model, held[0], held[1])


def replay_key(model: Model, request: ModelRequest) -> str:
    """The replay cache's key of ``request`` to ``model`` (LLM tasks' too)."""
    return f"model:{model.name}:{request.hash()}"


def recorded_reply(store: ReplyStore, key: str) -> tuple[ModelResponse, bool] | None:
    """The reply recorded under ``key`` and whether it is still to count, or
    None when there is none. The reply is recorded before the commit that
    counts it, and ``COUNTED`` marked after: a reply without the mark was
    paid for and never counted (a crash between), so it comes back with its
    cost, to count once; one with it is served free (``cached``)."""
    from argus_lab.llm.base import ModelResponse

    cached = store.get_replay(key)
    if cached is None:
        return None
    if store.get_replay(COUNTED + key) is None:
        resp = ModelResponse.model_validate(cached).model_copy(
            update={"cost_note": "paid before a crash, counted on resume"}
        )
        return resp, True
    resp = ModelResponse.model_validate(cached).model_copy(
        update={
            "cached": True,
            "cost_usd": 0.0,
            "cost_note": "served from the session's replay cache",
        }
    )
    return resp, False


class RecordedModel:
    """``model``, answering from ``store`` when it has the reply.

    Args:
        model: The model that really answers.
        store: Where the replies are recorded.
    """

    def __init__(
        self, model: Model, store: ReplyStore, paid: Paid | None = None
    ) -> None:
        self._model = model
        self._store = store
        self._paid: Paid = [] if paid is None else paid

    @property
    def name(self) -> str:
        """The inner model's name (part of the replay key)."""
        return self._model.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The recorded reply to ``request``, else the model's (then recorded)."""
        key = replay_key(self._model, request)
        got = recorded_reply(self._store, key)
        if got is not None:
            resp, to_count = got
            if to_count:
                self._paid.append((key, resp))
            return resp
        resp = await self._model.complete(request)
        self._store.put_replay(key, resp.model_dump(mode="json"))
        self._paid.append((key, resp))
        return resp
