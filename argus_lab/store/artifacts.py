"""Content-addressed files for results too large to sit in a checkpoint record.

Secrets never land here (invariant 7): a store handed out by ``redacting`` masks
every value before its bytes are written (DataFrame cells, column names and
index before parquet, text in bytes and files, files themselves in place), and
refuses binary data holding a secret with an error naming the task.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any, NoReturn

from argus_lab.errors import CorruptCheckpointError, StorageError, ToolError
from argus_lab.redact import Redactor
from argus_lab.store.folders import fsync_dir
from argus_lab.store.space import full_error, is_disk_full

__all__ = ["ARTIFACT", "ArtifactStore", "from_stored", "to_stored"]


class ArtifactStore:
    """Files named by the sha256 of their bytes, shared by a workspace's sessions.

    Writing the same content twice writes one file (the second time reads it
    back to check it), so a retried step never duplicates, and a damaged file
    is replaced by the next write of its content.

    Every put leaves the file's mtime at now, a new file or one found there
    (an orphan a removed session left, which ``argus gc`` may be about to
    delete): gc never deletes a file younger than its grace, and checks the
    age on the file it has already moved out of the way, so a put either
    touched the file first (gc puts it back) or finds it gone and writes it
    anew (``cli/_retention.py``).
    """

    def __init__(
        self,
        root: Path,
        *,
        fsync: bool = False,
        redactor: Redactor | None = None,
        task: str | None = None,
    ) -> None:
        # A Path already (``redacting`` makes one per attempt): not copied again.
        self.root = root if isinstance(root, Path) else Path(root)
        self.fsync = fsync
        self.redactor = redactor
        """Masks what ``to_stored`` stores through this store (None: nothing)."""
        self.task = task
        """The task whose results go through this store (named in refusals)."""

    def redacting(self, redactor: Redactor, task: str) -> ArtifactStore:
        """The same store, masking ``redactor``'s secrets in what task ``task``
        stores through ``to_stored``."""
        return ArtifactStore(self.root, fsync=self.fsync, redactor=redactor, task=task)

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
        if _intact(dest, ref, len(data)) and _touched(dest):
            return ref
        tmp = None
        try:
            made = [
                d for d in (dest.parent, self.root) if self.fsync and not d.is_dir()
            ]
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, dest)
            if self.fsync:
                # A file's name lives in its folder (a new folder's in its
                # parent): flushed too before the commit that points to it, or
                # a power cut may keep the commit and lose the file.
                for d in {dest.parent, *(m.parent for m in made)}:
                    fsync_dir(d)
        except BaseException as e:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            if isinstance(e, OSError) and is_disk_full(e):
                # The runtime adds the session and task (space.with_context).
                raise full_error(
                    dest, e.strerror or e, what=f"writing a {len(data):,}-byte artifact"
                ) from None
            if isinstance(e, OSError):  # read-only, no permission, size limit
                raise self._write_error(dest, len(data), e) from None
            raise
        return ref

    def _write_error(self, dest: Path, size: int, e: OSError) -> StorageError:
        """Why an artifact could not be written, and what to do (the run stops:
        a result that cannot be stored is not the tool's failure)."""
        task = f" for task {self.task!r}" if self.task else ""
        return StorageError(
            f"could not write a {size:,}-byte artifact{task} to {dest} "
            f"({e.strerror or e}). Nothing committed was lost: this write was "
            "not committed and everything before it is intact. Make "
            f"{self.root} writable (its permissions, a read-only mount, a file "
            "size limit), then reopen the session to go on; a write tool that "
            "had already run is then held in doubt, for you to check.",
            task_id=self.task,
        )

    def get_bytes(self, ref: str, *, session_id: str | None = None) -> bytes:
        """Reads an artifact back, checking its hash.

        Raises:
            CorruptCheckpointError: when the file is missing or its bytes changed.
        """
        p = self.path(ref)
        data: bytes | None
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            data = _put_back(p)
        if data is None:
            raise CorruptCheckpointError(
                f"artifact {ref} is missing from {self.root}; the record that "
                "points to it cannot be restored (was the folder cleaned by hand?). "
                f"{_AGAIN}",
                key=ref,
                session_id=session_id,
            )
        if "sha256:" + hashlib.sha256(data).hexdigest() != ref:
            raise CorruptCheckpointError(
                f"artifact {ref} in {self.root} does not match its hash (damaged "
                f"file {p}). {_AGAIN}",
                key=ref,
                session_id=session_id,
            )
        return data


_AGAIN = (
    "Running the task that made it again writes it anew: "
    's.fork(at=TASK, reuse="none").run() (the recorded result would point to '
    "the same file), then the result reads again here too."
)


TOMB = ".gc-"
"""Prefix of an artifact ``argus gc`` moved aside to delete: ``.gc-<pid>-<name>``
(``tomb_of``), read back and put back by any reader meanwhile."""


def tomb_of(path: Path) -> Path:
    """Where this process's gc moves artifact file ``path`` to decide on it."""
    return path.with_name(f"{TOMB}{os.getpid()}-{path.name}")


def put_back_tombs(root: Path) -> None:
    """Puts back under ``root`` (the artifacts folder) the files a gc moved
    aside and did not get to delete or put back (killed): decided on again,
    next time."""
    if not root.is_dir():
        return
    for tomb in root.glob(f"??/{TOMB}*"):
        dest = tomb.with_name(tomb.name.rpartition("-")[2])
        with contextlib.suppress(OSError):
            if dest.exists():
                tomb.unlink()
            else:
                os.rename(tomb, dest)


def _put_back(p: Path) -> bytes | None:
    """The bytes of artifact file ``p`` from where a gc moved it aside to
    delete it (a gc killed between the move and its decision, or deciding
    now), put back in place; None if there is none."""
    for tomb in p.parent.glob(f"{TOMB}*-{p.name}"):
        try:
            os.rename(tomb, p)
            return p.read_bytes()
        except OSError:
            continue
    return None


def _touched(dest: Path) -> bool:
    """Sets ``dest``'s mtime to now; False if it is gone (``argus gc`` moved it
    away meanwhile: the caller writes it anew)."""
    try:
        os.utime(dest)
    except FileNotFoundError:
        return False
    except OSError:
        pass  # not ours to touch (a shared read-only store): it is there
    return True


def _intact(dest: Path, ref: str, size: int) -> bool:
    """Whether ``dest`` already holds the artifact ``ref`` of ``size`` bytes.

    The same content stored twice is written once; but a damaged file there
    (cut short, bit-flipped) must not be taken for it, or rerunning the task
    that made it could never repair it. Read back only when the size matches.
    """
    try:
        if dest.stat().st_size != size:
            return False
        h = hashlib.sha256()
        with dest.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError:
        return False
    return "sha256:" + h.hexdigest() == ref


ARTIFACT = "$artifact"
"""Key of the marker dict that stands for an artifact inside a stored result."""


def _kind(v: object) -> str | None:
    t = type(v)
    mod = t.__module__
    if isinstance(v, bytes | bytearray | memoryview):
        return "bytes"
    if isinstance(v, Path):
        return "path"
    if mod.startswith("pandas") and t.__name__ == "DataFrame":
        return "dataframe"
    if mod.startswith("matplotlib") and t.__name__ == "Figure":
        return "figure"
    return None


def _numpy_leaf(value: Any) -> Any:
    """A numpy scalar as the Python value it holds (``np.int64(3)`` is 3, as
    ``np.float64``, a float, already is; a ``datetime64`` a datetime); a numpy
    array refused with what to return instead. Anything else unchanged, for
    the JSON encoder to judge."""
    t = type(value)
    if not t.__module__.startswith("numpy"):
        return value
    if t.__name__ == "ndarray":
        raise TypeError(
            f"a numpy array (shape {getattr(value, 'shape', '?')}) has no JSON "
            "form: return arr.tolist(), or a DataFrame (stored as parquet)"
        )
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        got = item()  # a Python int, float, bool, str, datetime, ...
        if not type(got).__module__.startswith("numpy"):
            return got
    return value


def to_stored(value: Any, store: ArtifactStore) -> Any:
    """Replaces non-JSON leaves with artifact markers, storing their bytes.

    DataFrames become parquet, matplotlib Figures PNG, bytes stay raw and a
    ``Path`` stores the file's bytes (a task's produced files). A numpy scalar
    becomes the number it holds, and a numpy array is refused with what to
    return instead. Everything else is returned unchanged for the JSON
    encoder to judge.
    """
    if isinstance(value, dict):
        return {k: to_stored(v, store) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_stored(v, store) for v in value]
    kind = _kind(value)
    if kind is None:
        return _numpy_leaf(value)
    red = store.redactor
    if red is not None:  # a secret the tool put in os.environ: before the bytes
        red.learn_new_env()
    name = None
    if kind == "bytes":
        data = bytes(value)
    elif kind == "path":
        p = Path(value)
        if not p.is_file():
            raise ValueError(f"result names a file that does not exist: {p}")
        # The file itself is masked too: it lies in the workspace as well.
        if red is not None and red.scrub_file(p) == "removed":
            _refuse(store, f"file {p.name!r} is binary and held a secret (deleted)")
        if red is not None and red.needed(p.name):  # its name too, as the sandbox's
            p = _renamed(p, red.text(p.name), store)
        data, name = p.read_bytes(), p.name
    elif kind == "dataframe":
        buf = io.BytesIO()
        (red.frame(value) if red is not None else value).to_parquet(buf)
        data = buf.getvalue()
    else:  # figure
        buf = io.BytesIO()
        value.savefig(buf, format="png")
        data = buf.getvalue()
    if red is not None and kind != "path":
        masked = red.mask_bytes(data)
        if masked is None:
            _refuse(store, f"its {kind} result is binary and holds a secret")
        data = masked
    marker = {ARTIFACT: store.put_bytes(data), "type": kind, "bytes": len(data)}
    if name is not None:
        marker["name"] = name
    return marker


def _renamed(p: Path, name: str, store: ArtifactStore) -> Path:
    """``p`` renamed to ``name`` (its name with the secrets masked), never
    over another file."""
    new = p.with_name(name)
    try:
        os.link(p, new)  # fails if ``new`` exists, where a rename would replace it
    except FileExistsError:
        _refuse(store, f"a file's name holds a secret, and {name!r} is taken")
    p.unlink()
    return new


def _refuse(store: ArtifactStore, why: str) -> NoReturn:
    raise ToolError(
        # Not "{why}: masking": "a secret: masking" is a secret's shape
        # ("secret: <value>"), and the stored error read "[REDACTED] it would".
        f"task {store.task!r}: {why}, and masking it would corrupt it, so it is "
        "refused and never stored. Return text, or keep secrets out of binary data",
        task_id=store.task,
    )


def from_stored(
    value: Any, store: ArtifactStore, cache: dict[str, Any] | None = None
) -> Any:
    """Turns artifact markers back into the objects they stood for."""
    if isinstance(value, list):
        return [from_stored(v, store, cache) for v in value]
    if not isinstance(value, dict):
        return value
    ref = value.get(ARTIFACT)
    if not isinstance(ref, str):
        return {k: from_stored(v, store, cache) for k, v in value.items()}
    if cache is not None and ref in cache:
        return cache[ref]
    kind = value.get("type")
    if kind == "path":
        obj: Any = store.path(ref)
        store.get_bytes(ref)  # verify it is there and intact
    else:
        data = store.get_bytes(ref)
        if kind == "dataframe":
            import pandas as pd

            obj = pd.read_parquet(io.BytesIO(data))
        elif kind == "figure":
            obj = _figure_from_png(data)
        else:
            obj = data
    if cache is not None:
        cache[ref] = obj
    return obj


def _figure_from_png(data: bytes) -> Any:
    # A Figure cannot be stored without pickle; its PNG can. Loading gives a
    # Figure showing exactly those pixels, at the same size.
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    img = imread(io.BytesIO(data), format="png")
    h, w = img.shape[:2]
    dpi = 100
    fig = Figure(figsize=(w / dpi, h / dpi), dpi=dpi)
    fig.figimage(img, resize=False)
    return fig
