"""read_file, write_file, list_files: kept inside the session folder; builtin_tools."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

import argus_lab as al
from argus_lab.errors import ToolError
from argus_lab.tools.builtin import builtin_tools
from argus_lab.tools.files import list_dir, read_text, walk_files, write_text

SECRET = "outside secret\n"


@pytest.fixture
def tools() -> dict[str, al.Tool]:
    return {t.name: t for t in builtin_tools("read_file", "write_file", "list_files")}


def snapshot(top: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``top`` (symlinks not followed) with mode, size, mtime."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(top))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def planted(tmp_path: Path, ctx: al.ToolContext) -> dict[str, Any]:
    """An outside folder with a secret, and traps inside the session folder."""
    root = Path(ctx.workdir)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (root / "file.txt").write_text("inside\n")
    (root / "sub").mkdir()
    os.symlink(outside, root / "link_out")
    os.symlink(root / "chain2", root / "chain1")
    os.symlink(outside, root / "chain2")
    os.symlink("file.txt", root / "link_in")  # even a symlink inside is refused
    os.link(outside / "secret.txt", root / "hard")
    os.mkfifo(root / "fifo")
    if os.geteuid() == 0:
        os.mknod(root / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return {"root": root, "outside": outside}


# id, path, words the refusal must contain. Each is tried with read_file and
# write_file; nothing may change anywhere (the snapshot covers the whole tmp dir).
ATTEMPTS = [
    ("absolute", "/etc/passwd", "absolute"),
    ("absolute-outside", "<outside>/secret.txt", "absolute"),
    ("dotdot", "../../../outside/secret.txt", "'..'"),
    ("dotdot-inner", "sub/../../../../outside/x.txt", "'..'"),
    ("url-encoded", "%2e%2e/%2e%2e/%2e%2e/outside/secret.txt", "percent-encoding"),
    ("url-encoded-slash", "..%2f..%2f..%2foutside%2fsecret.txt", "percent-encoding"),
    ("double-encoded", "%252e%252e/%252e%252e/outside/x.txt", "percent-encoding"),
    ("symlink-out", "link_out/secret.txt", "symlink"),
    ("symlink-out-final", "link_out", "symlink"),
    ("symlink-chain", "chain1/secret.txt", "symlink"),
    ("symlink-inside", "link_in", "symlink"),
    ("hard-link", "hard", "hard links"),
    ("device-file", "null", "char_device"),
    ("fifo", "fifo", "fifo"),
    ("very-long-path", "a/" * 600 + "x.txt", "longer than 1024"),
    ("very-long-name", "x" * 300 + ".txt", "longer than 255"),
    ("nul-byte", "ok.txt\x00../../../etc/passwd", "NUL"),
    ("control-char", "a\nb.txt", "control character"),
    ("windows-separators", "..\\..\\..\\outside\\secret.txt", "backslash"),
    ("windows-drive", "C:/Windows/system.ini", "Windows drive"),
    ("through-a-file", "file.txt/x.txt", "'file.txt' is a file, not a folder"),
    ("empty", "", "names no file"),
]


@pytest.mark.parametrize("op", ["read_file", "write_file"])
@pytest.mark.parametrize(
    ("case", "path", "why"), ATTEMPTS, ids=[a[0] for a in ATTEMPTS]
)
def test_traversal_attempts_are_refused_and_nothing_is_written(
    tmp_path: Path,
    ctx: al.ToolContext,
    tools: dict[str, al.Tool],
    planted: dict[str, Any],
    op: str,
    case: str,
    path: str,
    why: str,
) -> None:
    if case == "device-file" and os.geteuid() != 0:
        pytest.skip("creating a device file needs root")
    path = path.replace("<outside>", str(planted["outside"]))
    before = snapshot(tmp_path)
    args = {"path": path} if op == "read_file" else {"path": path, "content": "PWNED"}
    with pytest.raises(ToolError) as ei:
        tools[op].fn(**args, ctx=ctx)
    msg = ei.value.message
    assert msg.startswith(f"{op}: ") and why in msg, msg
    if case not in ("very-long-path", "nul-byte", "control-char"):
        assert repr(path) in msg  # the message names the path
    assert snapshot(tmp_path) == before
    assert (planted["outside"] / "secret.txt").read_text() == SECRET


@pytest.mark.parametrize(
    "path",
    ["/", "..", "../../..", "link_out", "chain1", "%2e%2e", "file.txt", "C:\\", "fifo"],
)
def test_list_files_refuses_the_same(
    tmp_path: Path,
    ctx: al.ToolContext,
    tools: dict[str, al.Tool],
    planted: Any,
    path: str,
) -> None:
    before = snapshot(tmp_path)
    with pytest.raises(ToolError, match="refused path"):
        tools["list_files"].fn(path=path, ctx=ctx)
    assert snapshot(tmp_path) == before


def test_write_read_roundtrip_creates_folders_atomically(
    ctx: al.ToolContext, tools: dict[str, al.Tool]
) -> None:
    out = tools["write_file"].fn(
        path="./notes//deep/plan.md", content="héllo\n", ctx=ctx
    )
    assert out == {"path": "notes/deep/plan.md", "bytes": len("héllo\n".encode())}
    assert tools["read_file"].fn(path="notes/deep/plan.md", ctx=ctx) == "héllo\n"
    tools["write_file"].fn(path="notes/deep/plan.md", content="v2", ctx=ctx)
    assert tools["read_file"].fn(path="notes/deep/plan.md", ctx=ctx) == "v2"
    # No temporary files are left behind.
    assert os.listdir(Path(ctx.workdir) / "notes" / "deep") == ["plan.md"]
    # A literal '%' that decodes to nothing dangerous is just a name.
    tools["write_file"].fn(path="100% done.txt", content="x", ctx=ctx)
    assert (Path(ctx.workdir) / "100% done.txt").read_text() == "x"


def test_list_files_gives_name_type_and_size(
    ctx: al.ToolContext, tools: dict[str, al.Tool], planted: dict[str, Any]
) -> None:
    out = tools["list_files"].fn(ctx=ctx)
    assert out["path"] == "." and out["truncated"] is False
    by_name = {e["name"]: e for e in out["entries"]}
    assert by_name["file.txt"] == {"name": "file.txt", "type": "file", "size": 7}
    assert by_name["sub"] == {"name": "sub", "type": "dir", "size": None}
    assert by_name["link_out"]["type"] == "symlink"
    assert by_name["fifo"]["type"] == "fifo"
    assert [e["name"] for e in out["entries"]] == sorted(by_name)
    assert tools["list_files"].fn(path="sub", ctx=ctx)["entries"] == []
    with pytest.raises(ToolError, match="'nope' does not exist"):
        tools["list_files"].fn(path="nope", ctx=ctx)


def test_size_limits_say_how_to_raise_them(ctx: al.ToolContext) -> None:
    small = {
        t.name: t
        for t in builtin_tools(
            "read_file", "write_file", max_read_bytes=10, max_write_bytes=20
        )
    }
    small["write_file"].fn(path="a.txt", content="x" * 20, ctx=ctx)
    with pytest.raises(
        ToolError, match=r"over the write limit of 20 bytes.*max_write_bytes"
    ):
        small["write_file"].fn(path="b.txt", content="x" * 21, ctx=ctx)
    with pytest.raises(
        ToolError, match=r"20 bytes, over the read limit of 10.*max_read_bytes"
    ):
        small["read_file"].fn(path="a.txt", ctx=ctx)
    assert not (Path(ctx.workdir) / "b.txt").exists()


def test_read_errors_are_clear(ctx: al.ToolContext, tools: dict[str, al.Tool]) -> None:
    root = Path(ctx.workdir)
    (root / "bin.dat").write_bytes(b"\xff\xfe\x00binary")
    (root / "d").mkdir()
    with pytest.raises(ToolError, match="not UTF-8 text"):
        tools["read_file"].fn(path="bin.dat", ctx=ctx)
    with pytest.raises(ToolError, match="does not exist"):
        tools["read_file"].fn(path="missing.txt", ctx=ctx)
    with pytest.raises(ToolError, match="is a folder"):
        tools["read_file"].fn(path="d", ctx=ctx)
    with pytest.raises(ToolError, match="is a folder"):
        tools["write_file"].fn(path="d", content="x", ctx=ctx)
    assert (root / "d").is_dir()


def test_low_level_helpers_and_walk_skip_links(tmp_path: Path) -> None:
    root = tmp_path / "r"
    write_text(root, "a/b.txt", "1")
    (tmp_path / "o.txt").write_text("outside")
    os.symlink(tmp_path, root / "up")
    os.link(tmp_path / "o.txt", root / "a" / "hl.txt")
    assert read_text(root, "a/b.txt") == "1"
    assert [e["name"] for e in list_dir(root, "a")["entries"]] == ["b.txt", "hl.txt"]
    assert [rel for rel, _ in walk_files(root)] == ["a/b.txt"]


def test_builtin_tools_by_name() -> None:
    tools = builtin_tools("python", "read_file", "write_file", "list_files", "python")
    assert [t.name for t in tools] == [
        "python",
        "read_file",
        "write_file",
        "list_files",
    ]
    assert builtin_tools("python")[0] is tools[0]  # the defaults are shared
    props = {t.name: t.schema()["input_schema"] for t in tools}
    assert set(props["python"]["properties"]) == {"code", "timeout", "check"}
    assert props["python"]["required"] == ["code"]
    assert props["read_file"]["required"] == ["path"]
    assert props["write_file"]["required"] == ["path", "content"]
    assert props["list_files"]["properties"]["path"]["default"] == "."
    side = {t.name: (t.side_effect, t.idempotent) for t in tools}
    assert side == {
        "python": ("none", True),
        "read_file": ("read", True),
        "write_file": ("write", True),
        "list_files": ("read", True),
    }
    assert tools[0].is_async and tools[0].takes_ctx


def test_builtin_tools_errors() -> None:
    with pytest.raises(
        ValueError, match=r"unknown built-in tool 'shell'; known: python"
    ):
        builtin_tools("shell")
    # Through the public name, which registers the memory tools (tools/ cannot
    # import store/); the module's own function alone would not know them.
    assert [t.name for t in al.builtin_tools("memory_add", "memory_search")] == [
        "memory_add",
        "memory_search",
    ]
    with pytest.raises(ValueError, match="name the built-in tools"):
        builtin_tools()
