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
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from argus_lab.errors import ToolError
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

MAX_PATH = 1024
"""Longest path accepted, in characters."""
MAX_NAME = 255
"""Longest single name accepted, in bytes (the usual file-system limit)."""
MAX_READ_BYTES = 1 << 20
"""Default read limit (1 MiB)."""
MAX_WRITE_BYTES = 1 << 20
"""Default write limit (1 MiB)."""
MAX_ENTRIES = 1000
"""Most entries ``list_files`` returns for one folder."""

_RULES = (
    "paths are relative to the session folder, use '/' between names, "
    "and must stay inside it (no absolute paths, no '..', no symlinks)"
)
_DRIVE = re.compile(r"^[A-Za-z]:")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _refuse(op: str, path: str, why: str) -> ToolError:
    return ToolError(f"{op}: refused path {path!r}: {why}; {_RULES}")


def _parts(op: str, path: str, *, allow_root: bool = False) -> list[str]:
    """Checks the text of ``path`` and returns its names (no '.', no empties)."""
    if not isinstance(path, str):
        raise ToolError(f"{op}: path must be a string, got {type(path).__name__}")
    if "\x00" in path:
        raise _refuse(op, path, "it contains a NUL byte")
    if len(path) > MAX_PATH:
        raise _refuse(op, path[:60] + "...", f"it is longer than {MAX_PATH} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise _refuse(op, path, "it contains a control character")
    if "\\" in path:
        raise _refuse(op, path, "it contains a backslash (Windows-style separator)")
    if _DRIVE.match(path):
        raise _refuse(op, path, "it looks like a Windows drive path")
    if path.startswith("/"):
        raise _refuse(op, path, "it is absolute")
    if "%" in path:
        decoded = path
        for _ in range(4):  # also catches double encoding such as %252e%252e
            nxt = unquote(decoded)
            if nxt == decoded:
                break
            decoded = nxt
        names = re.split(r"[/\\]", decoded)
        if (
            ".." in names
            or "\\" in decoded
            or "\x00" in decoded
            or decoded.count("/") != path.count("/")
        ):
            raise _refuse(
                op, path, f"its percent-encoding decodes to {decoded!r} (traversal)"
            )
    names = [n for n in path.split("/") if n not in ("", ".")]
    if ".." in names:
        raise _refuse(op, path, "it contains '..'")
    for n in names:
        if len(n.encode("utf-8", "surrogatepass")) > MAX_NAME:
            raise _refuse(op, path, f"a name in it is longer than {MAX_NAME} bytes")
    if not names and not allow_root:
        raise _refuse(op, path, "it names no file")
    return names


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "char_device"
    if stat.S_ISBLK(mode):
        return "block_device"
    return "other"


def _lstat(dfd: int, name: str) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=dfd)
    except FileNotFoundError:
        return None


def _open_root(root: Path) -> int:
    root.mkdir(parents=True, exist_ok=True)
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _walk(
    op: str, path: str, root_fd: int, names: list[str], *, create: bool = False
) -> int:
    """Opens the folder ``names`` under ``root_fd`` one name at a time.

    Returns a new descriptor the caller closes. Refuses symlinks and non-folders
    on the way; with ``create``, makes missing folders (only inside the root).
    """
    fd = os.dup(root_fd)
    try:
        for i, name in enumerate(names):
            shown = "/".join(names[: i + 1])
            st = _lstat(fd, name)
            if st is None and create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=fd)
                st = _lstat(fd, name)
            if st is None:
                raise ToolError(f"{op}: {shown!r} does not exist (in {path!r})")
            if not stat.S_ISDIR(st.st_mode):
                raise _refuse(
                    op, path, f"{shown!r} is a {_kind(st.st_mode)}, not a folder"
                )
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:  # swapped for a symlink or a file since lstat
                raise _refuse(
                    op, path, f"{shown!r} cannot be opened safely: {e}"
                ) from e
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def _check_file(op: str, path: str, st: os.stat_result, limit: int | None) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(op, path, "it is a symlink")
    if stat.S_ISDIR(st.st_mode):
        raise _refuse(op, path, "it is a folder (use list_files)")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(
            op, path, f"it is a {_kind(st.st_mode)}; only regular files are allowed"
        )
    if st.st_nlink > 1:
        raise _refuse(
            op, path, f"it has {st.st_nlink} hard links (it may be a file elsewhere)"
        )
    if limit is not None and st.st_size > limit:
        raise ToolError(
            f"{op}: {path!r} is {st.st_size} bytes, over the read limit of {limit} "
            "bytes; read it in parts with the python tool, or raise the limit with "
            "al.builtin_tools('read_file', max_read_bytes=...)"
        )


def read_text(root: Path, path: str, *, max_bytes: int = MAX_READ_BYTES) -> str:
    """Reads a UTF-8 text file under ``root`` safely (see the module docstring).

    Raises:
        ToolError: The path is refused, missing, too large or not UTF-8 text.
    """
    op = "read_file"
    names = _parts(op, path)
    root_fd = _open_root(root)
    try:
        dfd = _walk(op, path, root_fd, names[:-1])
    finally:
        os.close(root_fd)
    try:
        st = _lstat(dfd, names[-1])
        if st is None:
            raise ToolError(f"{op}: {path!r} does not exist")
        _check_file(op, path, st, max_bytes)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(names[-1], flags, dir_fd=dfd)
        except OSError as e:
            raise _refuse(op, path, f"it cannot be opened safely: {e}") from e
    finally:
        os.close(dfd)
    try:
        fst = os.fstat(fd)
        if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            raise _refuse(op, path, "it was replaced while being opened")
        _check_file(op, path, fst, max_bytes)
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
    names = _parts(op, path)
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
    root_fd = _open_root(root)
    try:
        dfd = _walk(op, path, root_fd, names[:-1], create=True)
    finally:
        os.close(root_fd)
    try:
        st = _lstat(dfd, name)
        if st is not None:
            _check_file(op, path, st, None)
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
                raise _refuse(op, path, "it is a folder") from e
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
    names = _parts(op, path, allow_root=True)
    root_fd = _open_root(root)
    try:
        dfd = _walk(op, path, root_fd, names)
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
            kind = _kind(st.st_mode)
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
                    st = _lstat(fd, name)
                    if st is None:
                        continue
                    rel = prefix + name
                    if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                        yield rel, st
                    elif stat.S_ISDIR(st.st_mode):
                        try:
                            sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
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
