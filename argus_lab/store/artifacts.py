"""Content-addressed files for results too large to sit in a checkpoint record."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from argus_lab.errors import CorruptCheckpointError

__all__ = ["ArtifactStore"]


class ArtifactStore:
    """Files named by the sha256 of their bytes, shared by a workspace's sessions.

    Writing the same content twice is free, so a retried step never duplicates.
    """

    def __init__(self, root: Path, *, fsync: bool = False) -> None:
        self.root = Path(root)
        self.fsync = fsync

    def path(self, ref: str) -> Path:
        """The file holding artifact ``ref`` (``sha256:<hex>``)."""
        algo, _, digest = ref.partition(":")
        if algo != "sha256" or len(digest) != 64:
            raise ValueError(f"not an artifact reference: {ref!r}")
        return self.root / digest[:2] / digest

    def put_bytes(self, data: bytes) -> str:
        """Stores bytes (atomically: temp file, then rename); returns the reference."""
        ref = "sha256:" + hashlib.sha256(data).hexdigest()
        dest = self.path(ref)
        if dest.exists():
            return ref
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return ref

    def get_bytes(self, ref: str, *, session_id: str | None = None) -> bytes:
        """Reads an artifact back, checking its hash.

        Raises:
            CorruptCheckpointError: when the file is missing or its bytes changed.
        """
        p = self.path(ref)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            raise CorruptCheckpointError(
                f"artifact {ref} is missing from {self.root}; the record that "
                "points to it cannot be restored (was the folder cleaned by hand?)",
                key=ref,
                session_id=session_id,
            ) from None
        if "sha256:" + hashlib.sha256(data).hexdigest() != ref:
            raise CorruptCheckpointError(
                f"artifact {ref} in {self.root} does not match its hash (damaged file)",
                key=ref,
                session_id=session_id,
            )
        return data
