"""The Argus Lab exception tree.

Every error carries ``.message`` plus the context it knows (``session_id``,
``task_id``), and its message says what happened and what to do next. Catch a
group to handle its kind: ``except al.StorageError`` for anything wrong with a
checkpoint, ``except al.PlanError`` for anything wrong with a plan.

```
ArgusError                        base of everything raised on purpose
├── PlanError                     a plan is invalid: duplicate id, missing dependency,
│   │                             cycle, unknown tool, bad args (.problems lists them)
│   └── UnresolvedReferenceError  a ${task.result...} or ${env.NAME} reference has
│                                 no value when its task runs
├── ToolError                     a tool failed permanently (not retried)
│   └── ToolArgumentsError        a tool was called with arguments it refuses
├── TransientError                a failure worth retrying: timeout, 429/529/5xx,
│                                 connection reset; retried with backoff and jitter
├── ModelError                    a model call failed permanently (400, auth, no key)
│   └── ReplayMiss                a strict replay has no recorded reply for a request
├── BudgetExceeded                a budget ran out; the session pauses (resumable)
├── ApprovalRequired              a call needs a person's decision and its caller
│                                 cannot wait (an LLM task's tool call)
├── InDoubtError                  a non-idempotent side effect may or may not have
│                                 happened; decide with retry() or skip()
├── SessionStateError             misuse: the task or session is not in a state that
│                                 allows it (retry a task that succeeded, approve one
│                                 that is not waiting, skip a running one)
├── SessionNotFoundError          no session of that name or id (also a KeyError)
├── ConcurrentSessionError        another writer holds the session (lease or version)
├── ConflictError                 a state transaction lost to another writer
├── SecretUnsetError              a stored ${env.NAME} reference is read for a
│                                 program, and NAME is not set in this process
├── StorageError                  a checkpoint cannot be read or written
│   ├── CorruptCheckpointError    a stored record fails its checksum or cannot be read
│   ├── SchemaVersionError        a record is newer than this version, or no migration
│   ├── LostCommitsError          the checkpoint is older than its witness: commits lost
│   └── StorageFullError          the disk is full (also an OSError, errno ENOSPC)
└── MissingDependency             an optional extra is needed (names the pip extra)
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
    "SecretUnsetError",
    "SessionNotFoundError",
    "SessionStateError",
    "StorageError",
    "StorageFullError",
    "ToolArgumentsError",
    "ToolError",
    "TransientError",
    "UnresolvedReferenceError",
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
    """Raised when a plan fails validation; the message names the tasks involved.

    Attributes:
        problems: Each problem found, one line each (empty when the message
            says it all).
    """

    def __init__(
        self,
        message: str,
        *,
        problems: list[str] | None = None,
        session_id: str | None = None,
        task_id: str | None = None,
    ) -> None:
        super().__init__(message, session_id=session_id, task_id=task_id)
        self.problems: list[str] = list(problems or [])


class UnresolvedReferenceError(PlanError):
    """Raised when a ``${task.result...}`` or ``${env.NAME}`` reference has no value
    as its task is about to run (the task did not succeed, the path is not in
    its result, the variable is not set); the task fails with it."""


class ToolError(ArgusError):
    """Raised by (or for) a tool that failed permanently; it is not retried."""


class ToolArgumentsError(ToolError):
    """Raised when a tool is called with arguments its signature refuses; the
    message names each bad field."""


class TransientError(ArgusError):
    """A failure worth retrying (timeouts, rate limits, 5xx, dropped connections).

    From a write tool that is not idempotent, raise it only when nothing took
    effect (refused, rate limited before any work): it is retried as it is.
    One raised over a lost reply (``raise TransientError(...) from e`` with a
    reset connection or a read timeout in ``e``'s chain) puts the task in
    doubt instead, since the request may have gone through.

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
    """Raised when a call needs a person's approval and its caller cannot wait
    for one: a tool an LLM task's model calls (the model reads the message, the
    ``tool_call`` event records it). A task's own call pauses the session."""


class InDoubtError(ArgusError):
    """A non-idempotent side effect was interrupted; it may or may not have happened."""


class SessionStateError(ArgusError):
    """Raised when an action does not fit where the task or session stands:
    retrying a task that succeeded, approving or rejecting one that is not
    waiting for approval, skipping one that runs. Nothing was changed."""


class SessionNotFoundError(ArgusError, KeyError):
    """No session of that name or id in the workspace (a KeyError too)."""

    def __str__(self) -> str:  # KeyError's own would quote the message
        return self.message


class ConcurrentSessionError(ArgusError):
    """Raised when another writer holds the session or wrote to it meanwhile."""


class SecretUnsetError(ArgusError):
    """Raised when a record holds the value of a secret env var, stored as a
    ``${env.NAME}`` reference (a LangGraph checkpoint, a typed state), is read
    for a program, and ``NAME`` is not set in this process: set it and read
    again. Views for people show the reference and do not raise it."""


class StorageError(ArgusError):
    """Something is wrong with a checkpoint: it cannot be read, decoded or
    written. Catch it to handle every storage failure at once."""


class CorruptCheckpointError(StorageError):
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


class SchemaVersionError(StorageError):
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


class LostCommitsError(StorageError):
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


class StorageFullError(StorageError, OSError):
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
