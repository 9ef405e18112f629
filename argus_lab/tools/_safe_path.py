"""Safe paths under a root: the text checks and the one-name-at-a-time walk.

The mechanics behind the file tools (files.py): :func:`path_names` checks the
text of a path and refuses, saying why, anything absolute, with ``..``, NUL or
control characters, backslashes, a Windows drive, percent-encoded traversal, or
over the length limits; :func:`open_folder` then opens each folder name from a
descriptor of the root with ``O_NOFOLLOW``, so the kernel decides what each name
is and a symlink swapped in between check and use cannot lead outside;
:func:`check_file` refuses anything but a regular file with one hard link.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path
from urllib.parse import unquote

from argus_lab.errors import ToolError

__all__ = [
    "DIR_FLAGS",
    "MAX_NAME",
    "MAX_PATH",
    "check_file",
    "kind_of",
    "lstat_at",
    "open_folder",
    "open_root",
    "path_names",
    "refuse",
]

MAX_PATH = 1024
"""Longest path accepted, in characters."""
MAX_NAME = 255
"""Longest single name accepted, in bytes (the usual file-system limit)."""

_RULES = (
    "paths are relative to the session folder, use '/' between names, "
    "and must stay inside it (no absolute paths, no '..', no symlinks)"
)
_DRIVE = re.compile(r"^[A-Za-z]:")
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def refuse(op: str, path: str, why: str) -> ToolError:
    return ToolError(f"{op}: refused path {path!r}: {why}; {_RULES}")


def path_names(op: str, path: str, *, allow_root: bool = False) -> list[str]:
    """Checks the text of ``path`` and returns its names (no '.', no empties)."""
    if not isinstance(path, str):
        raise ToolError(f"{op}: path must be a string, got {type(path).__name__}")
    if "\x00" in path:
        raise refuse(op, path, "it contains a NUL byte")
    if len(path) > MAX_PATH:
        raise refuse(op, path[:60] + "...", f"it is longer than {MAX_PATH} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise refuse(op, path, "it contains a control character")
    if "\\" in path:
        raise refuse(op, path, "it contains a backslash (Windows-style separator)")
    if _DRIVE.match(path):
        raise refuse(op, path, "it looks like a Windows drive path")
    if path.startswith("/"):
        raise refuse(op, path, "it is absolute")
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
            raise refuse(
                op, path, f"its percent-encoding decodes to {decoded!r} (traversal)"
            )
    names = [n for n in path.split("/") if n not in ("", ".")]
    if ".." in names:
        raise refuse(op, path, "it contains '..'")
    for n in names:
        if len(n.encode("utf-8", "surrogatepass")) > MAX_NAME:
            raise refuse(op, path, f"a name in it is longer than {MAX_NAME} bytes")
    if not names and not allow_root:
        raise refuse(op, path, "it names no file")
    return names


def kind_of(mode: int) -> str:
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


def lstat_at(dfd: int, name: str) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=dfd)
    except FileNotFoundError:
        return None


def open_root(root: Path) -> int:
    root.mkdir(parents=True, exist_ok=True)
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_folder(
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
            st = lstat_at(fd, name)
            if st is None and create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=fd)
                st = lstat_at(fd, name)
            if st is None:
                raise ToolError(f"{op}: {shown!r} does not exist (in {path!r})")
            if not stat.S_ISDIR(st.st_mode):
                raise refuse(
                    op, path, f"{shown!r} is a {kind_of(st.st_mode)}, not a folder"
                )
            try:
                nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as e:  # swapped for a symlink or a file since lstat
                raise refuse(op, path, f"{shown!r} cannot be opened safely: {e}") from e
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def check_file(op: str, path: str, st: os.stat_result, limit: int | None) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise refuse(op, path, "it is a symlink")
    if stat.S_ISDIR(st.st_mode):
        raise refuse(op, path, "it is a folder (use list_files)")
    if not stat.S_ISREG(st.st_mode):
        raise refuse(
            op, path, f"it is a {kind_of(st.st_mode)}; only regular files are allowed"
        )
    if st.st_nlink > 1:
        raise refuse(
            op, path, f"it has {st.st_nlink} hard links (it may be a file elsewhere)"
        )
    if limit is not None and st.st_size > limit:
        raise ToolError(
            f"{op}: {path!r} is {st.st_size} bytes, over the read limit of {limit} "
            "bytes; read it in parts with the python tool, or raise the limit with "
            "al.builtin_tools('read_file', max_read_bytes=...)"
        )
