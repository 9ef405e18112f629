"""Built-in tools ``memory_add`` and ``memory_search``: the workspace memory as tools.

Both open the memory of the workspace the task runs in (``ctx.workspace /
"memory"``, shared per process by :func:`~argus_lab.store.memory.open_memory`),
so an LLM task, or a plan step, can remember and recall across sessions. LanceDB
is imported when a tool first runs, not when this module is imported.

They live beside the memory (tools/ sits below store/ and must not import it)
and register themselves with ``al.builtin_tools`` when this module is imported,
which ``import argus_lab`` does.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from argus_lab.tools.builtin import provide_builtin
from argus_lab.tools.registry import Tool, ToolContext, tool

__all__ = ["MEMORY_TOOLS", "memory_add", "memory_search"]


# "none": the memory lives in the workspace, inside Argus, so adding to it needs no
# approval (approval policies guard side effects outside Argus); it is idempotent.
@tool(side_effect="none", idempotent=True)
def memory_add(
    text: str,
    kind: Literal["note", "lesson", "result", "document"] = "note",
    metadata: dict[str, Any] | None = None,
    *,
    ctx: ToolContext,
) -> dict[str, Any]:
    """Remember a piece of text for later tasks and later sessions.

    Args:
        text: What to remember, written so it makes sense out of context.
        kind: note (default), lesson (what to do or avoid next time), result or
            document.
        metadata: Optional JSON details to filter on later.
    """
    from argus_lab.store.memory import open_memory  # lancedb: on first use

    if ctx.redactor is not None:  # memory lies in the workspace: no secrets
        text = ctx.redactor.text(text)
        metadata = ctx.redactor.value(metadata)

    # Keyed by the attempt's idempotency key: a crash-retry of the same task
    # rewrites the same memory instead of adding a second one.
    digest = hashlib.sha256(f"{ctx.idempotency_key}\x00{text}".encode()).hexdigest()
    mid = open_memory(ctx.workspace / "memory").add(
        text,
        id=f"{kind}-{digest[:24]}",
        kind=kind,
        session_id=ctx.session_id,
        task_id=ctx.task_id,
        metadata=metadata,
    )
    return {"id": mid, "kind": kind}


@tool(side_effect="none")
def memory_search(
    query: str,
    k: int = 5,
    kind: Literal["note", "lesson", "result", "document"] | None = None,
    this_session_only: bool = False,
    *,
    ctx: ToolContext,
) -> dict[str, Any]:
    """Search what earlier tasks and sessions remembered (hybrid full-text and
    vector search when an embedder is configured, else full-text).

    Args:
        query: What to look for, in words.
        k: How many memories to return (1-50).
        kind: Only memories of this kind (e.g. lesson).
        this_session_only: Only memories written by the current session.
    """
    from argus_lab.store.memory import open_memory  # lancedb: on first use

    hits = open_memory(ctx.workspace / "memory").search(
        query,
        k=max(1, min(k, 50)),
        kind=kind,
        session_id=ctx.session_id if this_session_only else None,
    )
    return {
        "hits": [
            h.model_dump(
                include={"id", "kind", "text", "score", "session_id", "task_id"}
                | {"seq", "metadata"}
            )
            for h in hits
        ],
        "note": hits[0].note if hits else None,
    }


MEMORY_TOOLS: tuple[Tool, ...] = (memory_add, memory_search)
"""The memory tools, for a session's ``tools=`` or the built-in set."""

provide_builtin(*MEMORY_TOOLS)
