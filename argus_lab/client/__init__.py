"""``al.connect(url, token)``: a Workspace served by ``argus serve``, over HTTP.

A second kernel, a dashboard or a CI job reads and steers sessions and states
that live in another process, without opening their files::

    remote = al.connect("http://127.0.0.1:8765", token)
    s = remote.open("conf")
    s.start(); s.approve("book_venue", {"city": "Lyon"})
    for ev in s.stream():        # server-sent events, as they are committed
        print(ev.kind, ev.task_id)
    st = remote.state("trader-1")
    st.update(lambda d: d.update(cash=d["cash"] - 100), retries=5)
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from argus_lab.client._session import RemoteSession
from argus_lab.client._state import RemoteState
from argus_lab.errors import ArgusError, ConflictError, SessionNotFoundError
from argus_lab.model import SessionInfo

__all__ = ["RemoteSession", "RemoteState", "RemoteWorkspace", "connect"]


def connect(url: str, token: str, *, timeout: float = 30.0) -> RemoteWorkspace:
    """The Workspace served at ``url`` (``argus serve``), authenticated by
    ``token``. Checks the token at once (ArgusError when refused)."""
    remote = RemoteWorkspace(url, token, timeout=timeout)
    try:
        remote.states()  # fail here, not at first use, on a wrong URL or token
    except BaseException:
        remote.close()
        raise
    return remote


class RemoteWorkspace:
    """The read and control API of a Workspace over HTTP."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._timeout = timeout
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )

    def __repr__(self) -> str:
        return f"RemoteWorkspace({self.url!r})"

    def close(self) -> None:
        """Closes the HTTP connections."""
        self._http.close()

    def __enter__(self) -> RemoteWorkspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """One call; HTTP errors become Argus errors with the server's detail.

        Raises:
            ConnectionError: the server cannot be reached (names the URL).
            TimeoutError: it did not answer within the timeout.
            KeyError: 404; ConflictError: 409 / 412; ArgusError: the rest.
        """
        try:
            r = self._http.request(method, path, **kw)
        except httpx.TimeoutException as e:
            raise TimeoutError(
                f"{self.url} did not answer {method} {path} within "
                f"{self._timeout} s ({type(e).__name__}); is `argus serve` busy? "
                "Pass a longer timeout to al.connect(..., timeout=...)"
            ) from None
        except httpx.TransportError as e:
            raise ConnectionError(
                f"could not reach {self.url} ({e or type(e).__name__}); is `argus "
                "serve` running there, on this address and port?"
            ) from None
        if r.status_code >= 400:
            self.fail(method, path, r)
        return r

    def path(self, *parts: str) -> str:
        """A URL path with each name quoted as one segment (a name cannot
        reach another route: ``../x`` stays a name)."""
        return "/" + "/".join(quote(p, safe="") for p in parts)

    def fail(self, method: str, path: str, r: httpx.Response) -> None:
        """Raises the Argus error for a failed response."""
        try:
            detail = r.json().get("detail", r.text)
        except ValueError:
            detail = r.text
        msg = f"{method} {path}: {r.status_code} {detail}"
        if r.status_code == 404:
            if path.startswith("/sessions/"):  # as ws.open raises it
                raise SessionNotFoundError(msg)
            raise KeyError(msg)
        if r.status_code in (409, 412):
            ver = r.headers.get("etag", "").strip('"')
            raise ConflictError(msg, version=int(ver) if ver.isdigit() else None)
        if r.status_code == 401:
            raise ArgusError(
                f"{self.url} refused the token: the token is wrong. Use the one "
                "`argus serve` printed on its first start, kept in "
                "<workspace>/server-token on the server's machine."
            )
        raise ArgusError(msg)

    def sessions(self) -> list[SessionInfo]:
        """Every session, oldest first."""
        out: list[SessionInfo] = []
        offset = 0
        while True:
            page = self.request("GET", "/sessions", params={"offset": offset}).json()
            out += [SessionInfo.model_validate(d) for d in page["items"]]
            offset += len(page["items"])
            if not page["items"] or offset >= page["total"]:
                return out

    def open(self, name: str) -> RemoteSession:
        """A session by name or id (KeyError when there is none)."""
        s = RemoteSession(self, name)
        s.refresh()
        return s

    def states(self) -> list[str]:
        """The names of the served workspace's states."""
        items = self.request("GET", "/states").json()["items"]
        return [d["name"] for d in items]

    def state(self, name: str) -> RemoteState:
        """A state by name (created on first ``create``)."""
        return RemoteState(self, name)
