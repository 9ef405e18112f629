"""A typed state held by the server: JSON documents, JSON Patch, ETags."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jsonpatch

from argus_lab.errors import ConflictError

if TYPE_CHECKING:
    import pandas as pd

    from argus_lab.client import RemoteWorkspace

__all__ = ["RemoteState"]


class RemoteState:
    """A typed state held by the server; documents are plain JSON dicts."""

    def __init__(self, ws: RemoteWorkspace, name: str) -> None:
        self.workspace = ws
        self.name = name
        self._path = ws.path("states", name)

    def __repr__(self) -> str:
        return f"RemoteState({self.name!r})"

    def create(self, doc: dict[str, Any]) -> int:
        """Creates the state with ``doc`` as version 1 (ConflictError if it exists)."""
        r = self.workspace.request("POST", self._path, json=doc)
        return int(r.headers["x-argus-version"])

    def get_json(self, version: int | None = None) -> tuple[int, Any]:
        """(version, document)."""
        params = {} if version is None else {"version": version}
        r = self.workspace.request("GET", self._path, params=params)
        return int(r.headers["x-argus-version"]), r.json()

    def get(self) -> Any:
        return self.get_json()[1]

    def at(self, version: int) -> Any:
        return self.get_json(version)[1]

    @property
    def version(self) -> int:
        return self.get_json()[0]

    def patch(self, ops: list[dict[str, Any]], expected: int) -> int:
        """Commits a JSON Patch against version ``expected``; returns the new
        version. ConflictError when another writer got there first."""
        r = self.workspace.request(
            "PATCH",
            self._path,
            content=json.dumps(ops),
            headers={
                "Content-Type": "application/json-patch+json",
                "If-Match": f'"{expected}"',
            },
        )
        return int(r.headers["x-argus-version"])

    def update(self, fn: Callable[[Any], Any], *, retries: int = 3) -> tuple[int, Any]:
        """Runs ``fn`` on a fresh copy (change it in place or return a new
        one), commits the difference, and re-runs on a conflict."""
        for attempt in range(retries + 1):
            version, doc = self.get_json()
            new = json.loads(json.dumps(doc))
            out = fn(new)
            new = new if out is None else out
            ops = jsonpatch.make_patch(doc, new).patch
            if not ops:
                return version, doc
            try:
                return self.patch(ops, version), new
            except ConflictError:
                if attempt == retries:
                    raise
            time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
        raise AssertionError("unreachable")  # pragma: no cover

    def history(self) -> pd.DataFrame:
        """One row per version, as ``State.history()``."""
        import pandas as pd

        items: list[dict[str, Any]] = []
        since = 0
        while True:
            page = self.workspace.request(
                "GET", self._path + "/history", params={"since": since}
            ).json()
            items += page["items"]
            since = page["next"]
            if not page["more"]:
                break
        df = pd.DataFrame(items)
        if "time" in df:
            df["time"] = pd.to_datetime(df["time"], utc=True)
        return df

    def fork(self, at: int | None = None, name: str | None = None) -> RemoteState:
        """A new state from this one at ``at`` (default: the latest version)."""
        r = self.workspace.request(
            "POST", self._path + "/fork", json={"at": at, "name": name}
        )
        return RemoteState(self.workspace, r.headers["x-argus-state"])
