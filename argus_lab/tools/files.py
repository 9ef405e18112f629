"""File tools kept inside the session folder: read_file, write_file, list_files.

Every path is relative to the session's folder (``ctx.workdir``) and is resolved
one name at a time from an open descriptor of that folder, with ``O_NOFOLLOW``:
the kernel, not a string check, decides what each name is, so a symlink or a
folder swapped for a symlink between check and use cannot lead outside. Before
that, the text of the path is checked, and refused with a message saying why, if
it is absolute, holds a ``..`` name, a NUL or control character, a backslash, a
Windows drive, percent-encoding that decodes to a separator or ``..``, or is
longer than 1024 characters (255 per name). Symlinks are refused wherever they
appear, even ones pointing inside; files with more than one hard link, FIFOs,
sockets and device files are refused; reads and writes have size limits.
The path checks and the descriptor walk are in ``_safe_path.py``; this module
is the operations on top of them and the tools.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from argus_lab.errors import ToolError
from argus_lab.tools._safe_path import (
    DIR_FLAGS,
    MAX_NAME,
    MAX_PATH,
    check_file,
    kind_of,
    lstat_at,
    open_folder,
    open_root,
    path_names,
    refuse,
)
from argus_lab.tools.registry import Tool, ToolContext, tool

__all__ = [
    "MAX_NAME",
    "MAX_PATH",
    "MAX_READ_BYTES",
    "MAX_WRITE_BYTES",
    "list_dir",
    "make_file_tools",
    "read_text",
    "walk_files",
    "write_text",
]

MAX_READ_BYTES = 1 << 20
"""Default read limit (1 MiB)."""
MAX_WRITE_BYTES = 1 << 20
"""Default write limit (1 MiB)."""
MAX_ENTRIES = 1000
"""Most entries ``list_files`` returns for one folder."""


def read_text(root: Path, path: str, *, max_bytes: int = MAX_READ_BYTES) -> str:
    """Reads a UTF-8 text file under ``root`` safely (see the module docstring).

    Raises:
        ToolError: The path is refused, missing, too large or not UTF-8 text.
    """
    op = "read_file"
    names = path_names(op, path)
    root_fd = open_root(root)
    try:
        dfd = open_folder(op, path, root_fd, names[:-1])
    finally:
        os.close(root_fd)
    try:
        st = lstat_at(dfd, names[-1])
        if st is None:
            raise ToolError(f"{op}: {path!r} does not exist")
        check_file(op, path, st, max_bytes)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(names[-1], flags, dir_fd=dfd)
        except OSError as e:
            raise refuse(op, path, f"it cannot be opened safely: {e}") from e
    finally:
        os.close(dfd)
    try:
        fst = os.fstat(fd)
        if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            raise refuse(op, path, "it was replaced while being opened")
        check_file(op, path, fst, max_bytes)
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise ToolError(f"{op}: {path!r} grew over the read limit of {max_bytes} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ToolError(
            f"{op}: {path!r} is not UTF-8 text ({len(data)} bytes, {e.reason} at "
            f"byte {e.start}); inspect binary files with the python tool"
        ) from None


def write_text(
    root: Path, path: str, content: str, *, max_bytes: int = MAX_WRITE_BYTES
) -> dict[str, Any]:
    """Writes ``content`` to a file under ``root`` atomically (temp file + rename).

    Missing parent folders are created inside ``root``. An existing target must be
    a regular file with one link; it is replaced, never written through.

    Returns:
        ``{"path": <normalised relative path>, "bytes": <bytes written>}``.

    Raises:
        ToolError: The path is refused or the content is too large.
    """
    op = "write_file"
    names = path_names(op, path)
    if not isinstance(content, str):
        raise ToolError(f"{op}: content must be a string, got {type(content).__name__}")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ToolError(f"{op}: content for {path!r} is not valid text: {e}") from None
    if len(data) > max_bytes:
        raise ToolError(
            f"{op}: content for {path!r} is {len(data)} bytes, over the write limit "
            f"of {max_bytes} bytes; write it in parts, or raise the limit with "
            "al.builtin_tools('write_file', max_write_bytes=...)"
        )
    name = names[-1]
    root_fd = open_root(root)
    try:
        dfd = open_folder(op, path, root_fd, names[:-1], create=True)
    finally:
        os.close(root_fd)
    try:
        st = lstat_at(dfd, name)
        if st is not None:
            check_file(op, path, st, None)
        tmp = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o666, dir_fd=dfd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            if isinstance(e, IsADirectoryError):
                raise refuse(op, path, "it is a folder") from e
            raise
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return {"path": "/".join(names), "bytes": len(data)}


def list_dir(
    root: Path, path: str = ".", *, max_entries: int = MAX_ENTRIES
) -> dict[str, Any]:
    """Lists one folder under ``root`` (symlinks are listed, never followed).

    Returns:
        ``{"path": ..., "entries": [{"name", "type", "size"}], "truncated": bool}``,
        entries sorted by name; ``type`` is file, dir, symlink, fifo, socket,
        char_device, block_device or other; ``size`` is bytes for files, else None.
    """
    op = "list_files"
    names = path_names(op, path, allow_root=True)
    root_fd = open_root(root)
    try:
        dfd = open_folder(op, path, root_fd, names)
    finally:
        os.close(root_fd)
    entries: list[dict[str, Any]] = []
    try:
        with os.scandir(dfd) as it:
            found = sorted(it, key=lambda e: e.name)
        for e in found[:max_entries]:
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            kind = kind_of(st.st_mode)
            size = st.st_size if kind == "file" else None
            entries.append({"name": e.name, "type": kind, "size": size})
    finally:
        os.close(dfd)
    return {
        "path": "/".join(names) or ".",
        "entries": entries,
        "truncated": len(found) > max_entries,
    }


def walk_files(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Yields ``(relative posix path, stat)`` of regular files under ``root``.

    Walks by descriptor with ``O_NOFOLLOW``: symlinks are neither followed nor
    yielded, and nor are files with several hard links or special files, so what
    it yields is safe to read even if something hostile wrote the tree.
    """
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    stack: list[tuple[int, str]] = [(top, "")]
    try:
        while stack:
            fd, prefix = stack.pop()
            try:
                with os.scandir(fd) as it:
                    names = sorted(e.name for e in it)
                for name in names:
                    st = lstat_at(fd, name)
                    if st is None:
                        continue
                    rel = prefix + name
                    if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                        yield rel, st
                    elif stat.S_ISDIR(st.st_mode):
                        try:
                            sub = os.open(name, DIR_FLAGS, dir_fd=fd)
                        except OSError as e:
                            if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                                continue
                            raise
                        stack.append((sub, rel + "/"))
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)


def make_file_tools(
    *, max_read_bytes: int = MAX_READ_BYTES, max_write_bytes: int = MAX_WRITE_BYTES
) -> dict[str, Tool]:
    """Builds the three file tools with the given size limits, keyed by name."""
    if max_read_bytes <= 0 or max_write_bytes <= 0:
        raise ValueError("max_read_bytes and max_write_bytes must be positive")

    @tool(name="read_file", side_effect="read")
    def read_file(path: str, *, ctx: ToolContext) -> str:
        """Reads a UTF-8 text file from the session folder and returns its text.

        Args:
            path: Relative path inside the session folder, with '/' between names,
                e.g. "notes/plan.md". Absolute paths, '..' and symlinks are refused.
        """
        return read_text(Path(ctx.workdir), path, max_bytes=max_read_bytes)

    # Writing the same content to the same path twice leaves the same state, so a
    # crash-retry may safely repeat it.
    @tool(name="write_file", side_effect="write", idempotent=True)
    def write_file(path: str, content: str, *, ctx: ToolContext) -> dict[str, Any]:
        """Writes a UTF-8 text file in the session folder (replacing it if present).

        Missing folders on the way are created. Returns the path and bytes written.

        Args:
            path: Relative path inside the session folder, with '/' between names,
                e.g. "out/report.md". Absolute paths, '..' and symlinks are refused.
            content: The full text of the file.
        """
        if ctx.redactor is not None:  # the file lies in the workspace: no secrets
            if ctx.redactor.needed(path):  # masked, the file would go elsewhere
                raise ToolError(
                    "write_file: the path holds a secret; a file's name lies in "
                    "the workspace like its text: name the file without it",
                    task_id=ctx.task_id,
                )
            content = ctx.redactor.text(content)
        return write_text(Path(ctx.workdir), path, content, max_bytes=max_write_bytes)

    @tool(name="list_files", side_effect="read")
    def list_files(path: str = ".", *, ctx: ToolContext) -> dict[str, Any]:
        """Lists a folder of the session folder: each entry's name, type and size.

        Args:
            path: Relative folder path inside the session folder; "." is its top.
        """
        return list_dir(Path(ctx.workdir), path)

    return {t.name: t for t in (read_file, write_file, list_files)}
