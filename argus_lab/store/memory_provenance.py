"""Stable memory ids and the automatic memories of tasks (results and lessons).

:func:`memory_id` derives a memory's id from its provenance, so a retried or
resumed task overwrites its memory instead of adding one; :func:`remember_result`
and :func:`remember_lesson` write what a task produced or taught.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from argus_lab.store.memory import Memory

__all__ = ["memory_id", "remember_lesson", "remember_result"]


def memory_id(
    kind: str,
    *,
    session_id: str | None = None,
    task_id: str | None = None,
    text: str | None = None,
) -> str:
    """A stable id: ``<kind>-<hash>``.

    A result or lesson of a task is keyed by (session, task, kind) alone, so a
    retried or resumed task overwrites its memory instead of adding one. Any
    other memory is keyed by its text as well: the same note written twice is
    one memory, two different notes are two.
    """
    parts = [kind, session_id or "", task_id or ""]
    if not (kind in ("result", "lesson") and session_id and task_id):
        parts.append(text or "")
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:24]
    return f"{kind}-{digest}"


def _clip(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit] + f" … [truncated, {len(text)} chars in all]", True


def remember_result(
    memory: Memory,
    *,
    session_id: str,
    task_id: str,
    seq: int,
    result: Any,
    title: str,
    max_chars: int = 2000,
    summarize: Callable[[str], str] | None = None,
) -> str:
    """Stores a succeeded task's result as a ``result`` memory; returns its id.

    Idempotent: the id derives from (session, task), so committing the same task
    twice (crash-retry, resume, a rerun) leaves one memory, the latest.

    Args:
        memory: Where to store it.
        session_id: The session the task ran in.
        task_id: The task.
        seq: The seq of the task's ``task_succeeded`` event.
        result: The (redacted) result: text as is, anything else as JSON.
        title: What the task was (its title, or its id); prefixes the text.
        max_chars: Longer results are cut (or summarised) to this size.
        summarize: Optional text -> summary function (e.g. an LLM call) used
            instead of cutting when the result is longer than max_chars.
    """
    body = (
        result
        if isinstance(result, str)
        else json.dumps(result, ensure_ascii=False, default=str)
    )
    full = len(body)
    if summarize is not None and full > max_chars:
        body, summarized = summarize(body), True
    else:
        summarized = False
    body, cut = _clip(body, max_chars)
    meta = {"title": title, "chars": full, "truncated": cut, "summarized": summarized}
    return memory.add(
        f"{title}: {body}",
        id=memory_id("result", session_id=session_id, task_id=task_id),
        kind="result",
        session_id=session_id,
        task_id=task_id,
        seq=seq,
        metadata=meta,
    )


def remember_lesson(
    memory: Memory,
    *,
    session_id: str,
    task_id: str,
    seq: int,
    error: str,
    attempts: int,
    tool: str | None,
    title: str | None = None,
    args: Any = None,
    max_chars: int = 2000,
) -> str:
    """Stores what a task that failed for good tried, as a ``lesson``; returns its id.

    Idempotent by (session, task), like :func:`remember_result`. Search lessons
    across sessions before a similar task: ``search(desc, kind="lesson")``.

    Args:
        memory: Where to store it.
        session_id: The session the task ran in.
        task_id: The task.
        seq: The seq of the task's ``task_failed`` event.
        error: The final error message.
        attempts: How many attempts were made.
        tool: The tool the task called.
        title: What the task was; default its id.
        args: The (redacted) arguments it was called with.
        max_chars: The text is cut to this size.
    """
    what = f"task {title or task_id}" + (f" (tool {tool})" if tool else "")
    text = f"Lesson: {what} failed for good after {attempts} attempt(s). Error: {error}"
    if args is not None:
        text += " Tried with arguments: " + json.dumps(
            args, ensure_ascii=False, default=str
        )
    text, _ = _clip(text, max_chars)
    meta = {"tool": tool, "attempts": attempts, "error": _clip(error, 500)[0]}
    return memory.add(
        text,
        id=memory_id("lesson", session_id=session_id, task_id=task_id),
        kind="lesson",
        session_id=session_id,
        task_id=task_id,
        seq=seq,
        metadata=meta,
    )
