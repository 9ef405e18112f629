"""Recorded model replies, stored as JSON (invariant 9: replays are free).

A ``ReplyCache`` keys each reply by (model, request hash) and keeps it in a store:
anything with ``get(key) -> dict | None`` and ``put(key, dict)``. Three stores ship:
``MemoryStore``; ``JsonDirStore`` (one pretty JSON file per reply, diff-friendly,
commit it beside a notebook); ``JsonlStore`` (one JSON line per reply, one file).
A session can hand in its own store. Nothing is pickled.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from argus_lab.errors import CorruptCheckpointError, ReplayMiss
from argus_lab.llm.base import ModelRequest, ModelResponse

__all__ = [
    "CacheStore",
    "JsonDirStore",
    "JsonlStore",
    "MemoryStore",
    "ReplayMiss",
    "ReplyCache",
    "open_store",
]

SCHEMA_VERSION = 1


@runtime_checkable
class CacheStore(Protocol):
    """Where recorded replies live. Values are JSON-able dicts."""

    def get(self, key: str) -> dict[str, Any] | None:
        """The value stored under key, or None."""
        ...

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Stores value under key (replacing any)."""
        ...


class MemoryStore:
    """A dict; for tests and short-lived sessions."""

    def __init__(self) -> None:
        self._data: dict[str, dict[str, Any]] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        """The value stored under key, or None."""
        v = self._data.get(key)
        return None if v is None else json.loads(json.dumps(v))

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Stores a copy of value under key."""
        self._data[key] = json.loads(json.dumps(value))

    def keys(self) -> Iterator[str]:
        """Every key stored."""
        return iter(list(self._data))

    def __len__(self) -> int:
        return len(self._data)


_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


class JsonDirStore:
    """One JSON file per reply: ``<dir>/<model>/<request hash>.json``.

    Writes are atomic (temp file + rename), so a crash never leaves half a file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _file(self, key: str) -> Path:
        model, _, digest = key.rpartition(":")
        return (
            self.path
            / _UNSAFE.sub("_", model or "_")
            / f"{_UNSAFE.sub('_', digest)}.json"
        )

    def get(self, key: str) -> dict[str, Any] | None:
        """The value stored under key, or None.

        Raises:
            CorruptCheckpointError: the file is not valid JSON.
        """
        f = self._file(key)
        try:
            text = f.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise CorruptCheckpointError(
                f"recorded reply {str(f)!r} is not valid JSON ({e}); delete it to "
                "record the call again",
                key=key,
            ) from None
        if not isinstance(value, dict):
            raise CorruptCheckpointError(
                f"recorded reply {str(f)!r} is not a JSON object", key=key
            )
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Writes value to its file atomically."""
        f = self._file(key)
        f.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(value, indent=1, ensure_ascii=False) + "\n"  # order kept
        fd, tmp = tempfile.mkstemp(dir=f.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, f)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def keys(self) -> Iterator[str]:
        """Every key stored (model directory names as stored)."""
        if not self.path.is_dir():
            return
        for f in sorted(self.path.glob("*/*.json")):
            yield f"{f.parent.name}:{f.stem}"


class JsonlStore:
    """One JSON line per reply in one file; later lines win.

    The file is read once when the store opens; ``put`` appends a line.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._data: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        if self.path.exists():
            lines = self.path.read_text(encoding="utf-8").splitlines()
            for n, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    self._data[str(row["key"])] = dict(row["value"])
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    raise CorruptCheckpointError(
                        f"line {n} of {str(self.path)!r} is not a recorded reply "
                        '({"key": ..., "value": {...}}); fix or delete that line'
                    ) from None

    def get(self, key: str) -> dict[str, Any] | None:
        """The value stored under key, or None."""
        v = self._data.get(key)
        return None if v is None else json.loads(json.dumps(v))

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Appends one line and remembers the value."""
        line = json.dumps({"key": key, "value": value}, ensure_ascii=False)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
            self._data[key] = json.loads(json.dumps(value))

    def keys(self) -> Iterator[str]:
        """Every key stored."""
        return iter(list(self._data))


def open_store(where: str | os.PathLike[str] | CacheStore) -> CacheStore:
    """A store from a path (``*.jsonl`` -> JsonlStore, else JsonDirStore) or as is."""
    if isinstance(where, str | os.PathLike):
        p = Path(where)
        return JsonlStore(p) if p.suffix == ".jsonl" else JsonDirStore(p)
    if not isinstance(where, CacheStore):
        raise TypeError(
            "a reply cache needs a path or a store with get(key) and put(key, dict), "
            f"got {type(where).__name__}"
        )
    return where


class ReplyCache:
    """Model replies keyed by (model, request hash), in a JSON store.

    Args:
        store: A store, or a path (``*.jsonl`` -> one file, else a directory).
    """

    def __init__(self, store: str | os.PathLike[str] | CacheStore) -> None:
        self.store = open_store(store)

    @staticmethod
    def key(model: str, request_hash: str) -> str:
        """The store key of a reply."""
        return f"{model}:{request_hash}"

    def get(self, model: str, request: ModelRequest) -> ModelResponse | None:
        """The recorded reply to request on model, or None.

        Raises:
            CorruptCheckpointError: the stored record cannot be read.
        """
        h = request.hash()
        value = self.store.get(self.key(model, h))
        if value is None:
            return None
        try:
            return ModelResponse.model_validate(value["response"])
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptCheckpointError(
                f"recorded reply {self.key(model, h)} cannot be read ({e}); delete "
                "it to record the call again",
                key=self.key(model, h),
            ) from None

    def put(self, model: str, request: ModelRequest, response: ModelResponse) -> None:
        """Records response as the reply to request on model."""
        from argus_lab.redact import Redactor, known_secrets

        h = request.hash()
        red = Redactor(known_secrets())
        stored = response.model_copy(update={"cached": False})
        self.store.put(
            self.key(model, h),
            {
                "schema_version": SCHEMA_VERSION,
                "model": model,
                "request_hash": h,
                "recorded_at": time.time(),
                # The request is kept for people reading diffs and for miss
                # diagnostics; lookups use the hash alone, so redacting is safe.
                "request": red.value(
                    request.model_dump(mode="json", exclude_defaults=True)
                ),
                # The reply may repeat a secret the prompt held: a recording
                # is a log, and its copy of the reply is masked like the
                # session's (a replay then serves the masked text).
                "response": red.value(stored.model_dump(mode="json")),
            },
        )

    def miss(self, model: str, request: ModelRequest) -> ReplayMiss:
        """A ReplayMiss naming the request and, if the store can list its keys,
        what is recorded instead."""
        h = request.hash()
        first = request.last_user_text() or "(no user text)"
        msg = (
            f"no recorded reply for model {model!r}, request {h} "
            f"(last user message: {first!r})"
        )
        keys = list(_keys(self.store))
        if keys:
            models = sorted({k.rpartition(":")[0] for k in keys})
            msg += (
                f"; the cache holds {len(keys)} replies (models: {', '.join(models)})"
            )
            if model not in models:
                msg += (
                    f". No reply was recorded for {model!r}: pass model=... to "
                    "ReplayModel to name the model the cache was recorded with"
                )
            else:
                near = _nearest(self.store, keys, model, request)
                if near:
                    msg += f". {near}"
        else:
            msg += "; the cache is empty"
        msg += (
            ". Record it with ReplayModel(cache, strict=False, fallback=model) or "
            "RecordingModel(model, cache) and run once with network access."
        )
        return ReplayMiss(msg, model=model, request_hash=h)


def _keys(store: CacheStore) -> Iterator[str]:
    keys = getattr(store, "keys", None)
    if callable(keys):
        yield from keys()


def _nearest(
    store: CacheStore, keys: list[str], model: str, request: ModelRequest
) -> str:
    """Names the request fields that differ from a recorded request of the same
    model that starts with the same user message (the usual cause of a miss)."""
    want = request.model_dump(mode="json", exclude_defaults=True)
    want.pop("purpose", None)
    first = (want.get("messages") or [None])[0]
    for k in keys[:500]:
        if k.rpartition(":")[0] != model:
            continue
        value = store.get(k) or {}
        got = value.get("request")
        if not isinstance(got, dict):
            continue
        got.pop("purpose", None)
        got_msgs = got.get("messages") or []
        if first is not None and (not got_msgs or got_msgs[0] != first):
            continue
        fields = sorted(f for f in set(want) | set(got) if want.get(f) != got.get(f))
        fields = [f for f in fields if f != "model"]
        if fields:
            return (
                f"A recorded request {k.rpartition(':')[2]} starts with the same "
                f"message but differs in: {', '.join(fields)} (the prompt or the "
                "tools changed since recording)"
            )
    return ""
