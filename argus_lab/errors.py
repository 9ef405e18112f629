"""The Argus Lab exception tree.

Every error carries ``.message`` plus the context it knows (``session_id``,
``task_id``), and its message says what happened and what to do next.

```
ArgusError                      base of everything raised on purpose
├── PlanError                   a plan is invalid: duplicate id, missing dependency,
│                               cycle, unknown tool, bad args, bad ${...} reference
├── ToolError                   a tool failed permanently (not retried)
├── TransientError              a failure worth retrying: timeout, 429/529/5xx,
│                               connection reset; retried with backoff and jitter
├── BudgetExceeded              a budget ran out; the session pauses (resumable)
├── ApprovalRequired            a task needs a person's decision before it runs
├── InDoubtError                a non-idempotent side effect may or may not have
│                               happened; decide with retry() or skip()
├── ConcurrentSessionError      another writer holds the session (lease or version)
├── ConflictError               a state transaction lost to another writer
├── CorruptCheckpointError      a stored record fails its checksum or cannot be read
├── SchemaVersionError          a record is newer than this version, or no migration
├── MissingDependency           an optional extra is needed (names the pip extra)
├── ModelError                  a model call failed permanently (400, auth, no key)
│   └── ReplayMiss              a strict replay has no recorded reply for a request
├── LostCommitsError            the checkpoint is older than its witness: commits lost
└── StorageFullError            the disk is full (also an OSError, errno ENOSPC)
```
"""

from __future__ import annotations

__all__ = [
    "ApprovalRequired",
    "ArgusError",
    "BudgetExceeded",
    "ConcurrentSessionError",
    "ConflictError",
    "CorruptCheckpointError",
    "InDoubtError",
    "LostCommitsError",
    "MissingDependency",
    "ModelError",
    "PlanError",
    "ReplayMiss",
    "SchemaVersionError",
    "StorageFullError",
    "ToolError",
    "TransientError",
]


class ArgusError(Exception):
    """Base class of every error Argus Lab raises on purpose.

    Attributes:
        message: What happened and what to do next.
        session_id: The session concerned, when known.
        task_id: The task concerned, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        session_id: str | None = None,
        task_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.session_id = session_id
        self.task_id = task_id


class PlanError(ArgusError):
    """Raised when a plan fails validation; the message names the tasks involved."""


class ToolError(ArgusError):
    """Raised by (or for) a tool that failed permanently; it is not retried."""


class TransientError(ArgusError):
    """A failure worth retrying (timeouts, rate limits, 5xx, dropped connections).

    Attributes:
        retry_after: Seconds the remote side asked us to wait, if it said.
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        session_id: str | None = None,
        task_id: str | None = None,
    ) -> None:
        super().__init__(message, session_id=session_id, task_id=task_id)
        self.retry_after = retry_after


class BudgetExceeded(ArgusError):
    """Raised when a cost, token or step budget runs out; the session pauses."""


class ApprovalRequired(ArgusError):
    """Raised when a task needs a person's approval before it may run."""


class InDoubtError(ArgusError):
    """A non-idempotent side effect was interrupted; it may or may not have happened."""


class ConcurrentSessionError(ArgusError):
    """Raised when another writer holds the session or wrote to it meanwhile."""


class CorruptCheckpointError(ArgusError):
    """Raised when a stored record fails its checksum or cannot be decoded.

    Attributes:
        key: The store key of the damaged record.
    """

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        session_id: str | None = None,
        task_id: str | None = None,
    ) -> None:
        super().__init__(message, session_id=session_id, task_id=task_id)
        self.key = key


class SchemaVersionError(ArgusError):
    """Raised when a record's schema_version cannot be migrated to the current one."""


class MissingDependency(ArgusError):
    """Raised when an optional extra is needed; the message names the pip extra."""


class ModelError(ArgusError):
    """A model call failed permanently (bad request, auth, unknown model, no key).

    It is not retried: the message says what to change. Rate limits, overload,
    5xx, timeouts and dropped connections raise ``TransientError`` instead.

    Attributes:
        status_code: The HTTP status, when the API answered.
        model: The model that was asked.
        request_id: The provider's request id, for support tickets.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        model: str | None = None,
        request_id: str | None = None,
        session_id: str | None = None,
        task_id: str | None = None,
    ) -> None:
        super().__init__(message, session_id=session_id, task_id=task_id)
        self.status_code = status_code
        self.model = model
        self.request_id = request_id


class ReplayMiss(ModelError):
    """A strict replay found no recorded reply for a request.

    Attributes:
        request_hash: The hash of the request that missed.
    """

    def __init__(
        self, message: str, *, model: str = "", request_hash: str = ""
    ) -> None:
        super().__init__(message, model=model)
        self.request_hash = request_hash


class ConflictError(ArgusError):
    """A state transaction lost to another writer: nothing was written.

    Raised when another writer committed after the transaction started
    (optimistic), or holds the state's lock (``transaction(lock=True)``).
    ``st.update(fn, retries=n)`` re-runs ``fn`` on the latest version.

    Attributes:
        state: The state's name.
        version: The state's version when the conflict was seen.
    """

    def __init__(
        self, message: str, *, state: str | None = None, version: int | None = None
    ) -> None:
        super().__init__(message)
        self.state = state
        self.version = version


# -- storage guarantees (issue 13): self-contained, kept apart on purpose ----------
# LostCommitsError       a session's head is older than its witness: commits lost
# StorageFullError       the disk (or SQLite) is full; also an OSError (ENOSPC)


class LostCommitsError(ArgusError):
    """Raised on open when a session's checkpoint is older than its witness.

    SQLite lost committed versions it cannot see (a truncated or damaged WAL,
    a power cut under durability "normal"). The message names the versions and
    the tasks whose intent or result may be lost, and the exact call to go on.

    Attributes:
        head_version: The version the checkpoint holds now.
        witness_version: The latest version that was committed.
        tasks: Tasks those lost commits touched (None: not known, any).
    """

    def __init__(
        self,
        message: str,
        *,
        head_version: int = 0,
        witness_version: int = 0,
        tasks: list[str] | None = None,
        session_id: str | None = None,
    ) -> None:
        super().__init__(message, session_id=session_id)
        self.head_version = head_version
        self.witness_version = witness_version
        self.tasks = tasks


class StorageFullError(ArgusError, OSError):
    """Raised when a write finds the disk (or SQLite's file) full (ENOSPC).

    Nothing committed is lost: the write that failed was not committed. Free
    space and reopen the session to go on.

    Attributes:
        path: The file that could not be written.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        session_id: str | None = None,
        task_id: str | None = None,
    ) -> None:
        super().__init__(message, session_id=session_id, task_id=task_id)
        import errno

        self.errno = errno.ENOSPC
        self.path = path

    def __str__(self) -> str:
        return self.message
