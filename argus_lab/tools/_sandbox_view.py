"""The sandbox's file view and its task folder's quota (``argus_lab.tools.sandbox``).

Stdlib only, and each function stands alone (its source is sent to the sandbox's
``python -I -c``, like ``_sandbox_child``). The mechanisms are the kernel's own:
mount namespaces, ``tmpfs`` with ``size=`` for the quota, ``mount_setattr`` for a
read-only tree, ``open_tree``/``move_mount`` to keep a few folders visible under
hidden ones.
"""

from __future__ import annotations

from typing import Any


def _quota(
    cfg: dict[str, Any], iso: dict[str, object], notes: dict[str, str], libc: Any
) -> int:
    """In the launcher's mount namespace: a size-limited tmpfs on the task folder.

    Returns a descriptor of the host's (now covered) task folder, where the
    launcher copies the files once the code has ended, or -1 without a quota.
    """
    import ctypes
    import os

    ms_nosuid, ms_nodev, ms_rec, ms_private = 2, 4, 1 << 14, 1 << 18
    folder = str(cfg["folder"])
    if libc.mount(b"none", b"/", None, ctypes.c_ulong(ms_rec | ms_private), None):
        notes["quota"] = f"mount propagation: {os.strerror(ctypes.get_errno())}"
        return -1
    host_dir = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    uid = int(cfg["uid"]) if os.getuid() == 0 else os.getuid()
    gid = int(cfg["uid"]) if os.getuid() == 0 else os.getgid()
    opts = (
        f"size={int(cfg['disk'])},nr_inodes={int(cfg['max_inodes'])},mode=0700,"
        f"uid={uid},gid={gid}"
    )
    ok = libc.mount(
        b"tmpfs",
        folder.encode(),
        b"tmpfs",
        ctypes.c_ulong(ms_nosuid | ms_nodev),
        opts.encode(),
    )
    if ok != 0:
        notes["quota"] = f"tmpfs: {os.strerror(ctypes.get_errno())}"
        os.close(host_dir)
        return -1
    iso["quota"] = True
    return host_dir


def _view(
    cfg: dict[str, Any], iso: dict[str, object], notes: dict[str, str], libc: Any
) -> None:
    """In the code's own mount namespace: the host read-only, secrets hidden.

    Hidden folders get an empty tmpfs on top, hidden files ``/dev/null``; the
    folders the code needs under them (the Python installation, the session
    folder with the task folder) are cloned first and put back. Then the whole
    tree turns read-only, except the task folder; /dev/shm and /proc are new.
    """
    import ctypes
    import os

    ms_nosuid, ms_nodev, ms_noexec, ms_bind = 2, 4, 8, 4096
    ms_rec, ms_private = 1 << 14, 1 << 18
    at_fdcwd, at_recursive = -100, 0x8000
    clone_flags = 1 | os.O_CLOEXEC | at_recursive  # OPEN_TREE_CLONE
    attr_rdonly, attr_nosuid = 1, 2
    sys_open_tree, sys_move_mount, sys_mount_setattr = 428, 429, 442

    class MountAttr(ctypes.Structure):
        _fields_ = (
            ("attr_set", ctypes.c_uint64),
            ("attr_clr", ctypes.c_uint64),
            ("propagation", ctypes.c_uint64),
            ("userns_fd", ctypes.c_uint64),
        )

    def err(what: str) -> None:
        notes[what] = os.strerror(ctypes.get_errno())

    def mount(src: str, dst: str, fstype: str | None, flags: int, data: str) -> bool:
        ok = libc.mount(
            src.encode(),
            dst.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        )
        if ok != 0:
            err(f"mount {dst}")
        return bool(ok == 0)

    def setattr(path: str, flags: int, on: int, off: int) -> bool:
        attr = MountAttr(on, off, 0, 0)
        ok = libc.syscall(
            ctypes.c_long(sys_mount_setattr),
            ctypes.c_int(at_fdcwd),
            path.encode(),
            ctypes.c_uint(flags),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        )
        if ok != 0:
            err(f"mount_setattr {path}")
        return bool(ok == 0)

    def under(p: str, q: str) -> bool:
        return p == q or p.startswith(q.rstrip("/") + "/")

    if not mount("none", "/", None, ms_rec | ms_private, ""):
        return
    folder = str(cfg["folder"])
    if not iso.get("quota"):  # its own mount, so it can stay writable below
        mount(folder, folder, None, ms_bind, "")

    def top(paths: list[str]) -> list[str]:
        return [p for p in paths if not any(q != p and under(p, q) for q in paths)]

    def cover(paths: list[str]) -> bool:
        for h in paths:
            if not os.path.lexists(h) or os.path.islink(h):
                continue  # under a hidden folder after all, or a link
            if os.path.isdir(h):
                ok = mount(
                    "tmpfs", h, "tmpfs", ms_nosuid | ms_nodev, "size=1m,mode=0755"
                )
            else:
                ok = mount("/dev/null", h, None, ms_bind, "")
            if not ok:
                return False
        return True

    hide = [p for p in cfg["hide"] if os.path.lexists(p) and not os.path.islink(p)]
    keep = top([str(p) for p in cfg["keep"] if os.path.isdir(p)])
    # Hidden paths inside a kept folder (pip.conf in a virtual environment
    # inside the hidden project) are covered after the kept folders are put
    # back, or the put-back copy would show them again.
    inside = [h for h in hide if any(h != k and under(h, k) for k in keep)]
    first = top([h for h in hide if h not in inside])
    dirs = [h for h in first if os.path.isdir(h)]
    clones: list[tuple[str, int]] = []
    for k in keep:
        if any(under(k, h) for h in dirs):
            fd = int(libc.syscall(sys_open_tree, at_fdcwd, k.encode(), clone_flags))
            if fd < 0:
                err(f"open_tree {k}")
                return
            clones.append((k, fd))
    if not cover(first):
        return
    for k, fd in clones:
        os.makedirs(k, mode=0o755, exist_ok=True)
        ok = libc.syscall(sys_move_mount, fd, b"", at_fdcwd, k.encode(), 4)
        os.close(fd)
        if ok != 0:
            err(f"move_mount {k}")
            return
    if not cover(top(inside)):
        return
    if not setattr("/", at_recursive, attr_rdonly | attr_nosuid, 0):
        return
    if not setattr(folder, 0, 0, attr_rdonly):
        return
    iso["view"] = True
    size = f"size={int(cfg['file_size'])},mode=1777"
    iso["shm"] = mount("tmpfs", "/dev/shm", "tmpfs", ms_nosuid | ms_nodev, size)
    if iso["pid_namespace"]:
        flags = ms_nosuid | ms_nodev | ms_noexec
        iso["proc"] = mount("proc", "/proc", "proc", flags, "")


def _copy_out(cfg: dict[str, Any], host_dir: int) -> dict[str, int]:
    """Copies the task folder's files (from its tmpfs) into the host's folder.

    Runs in the launcher after every process of the code has ended (the quota
    exists only with a PID namespace), so nothing changes underneath. Only
    regular files with one link, outside hidden folders (caches under HOME),
    named in UTF-8 without control characters, at most ``max_files`` of them,
    ``disk`` bytes and 32 folders deep. An entry that cannot be copied (a path
    too long, say) is skipped: the code's exit status must still reach the
    host.
    """
    import os
    import stat

    def bad(name: str) -> bool:
        # Hidden (caches under HOME), not UTF-8 (a result key cannot hold it),
        # or with a control character (a terminal would act on it when shown).
        try:
            name.encode("utf-8")
        except UnicodeError:
            return True
        return name.startswith(".") or any(
            ord(ch) < 32
            or 127 <= ord(ch) < 160
            or 0x202A <= ord(ch) <= 0x202E  # bidi overrides: "exe.txt" shown
            or 0x2066 <= ord(ch) <= 0x2069  # for a name ending in ".exe"
            for ch in name
        )

    src = str(cfg["folder"])
    budget, room = int(cfg["disk"]), int(cfg["max_files"])
    files = size = skipped = 0
    made: set[str] = set()
    for top, subdirs, names in os.walk(src):
        rel_top = os.path.relpath(top, src)
        skipped += sum(1 for d in subdirs if bad(d) and not d.startswith("."))
        subdirs[:] = [d for d in subdirs if not bad(d)]
        if rel_top.count(os.sep) >= 31:
            # 32 levels at most: os.walk recurses (a tree 1,000 deep ended the
            # launcher with RecursionError, and so hid the code's exit status),
            # and the host walks what is copied.
            skipped += len(subdirs)
            subdirs[:] = []
        for name in names:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or name.startswith("."):
                    continue
                if bad(name):
                    skipped += 1
                    continue
                if st.st_nlink > 1 or files >= room or size + st.st_size > budget:
                    skipped += 1
                    continue
                rel = os.path.normpath(os.path.join(rel_top, name))
                # Folders only for the files copied: 4,096 empty ones (the
                # tmpfs's inodes) would take the host's disk past the quota.
                part = ""
                for piece in rel.split(os.sep)[:-1]:
                    part = os.path.join(part, piece)
                    if part not in made:
                        try:  # noqa: SIM105 - no contextlib import (see _sandbox_child)
                            os.mkdir(part, 0o755, dir_fd=host_dir)
                        except FileExistsError:
                            pass
                        made.add(part)
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                fin = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    fout = os.open(rel, flags, 0o644, dir_fd=host_dir)
                    try:
                        while chunk := os.read(fin, 1 << 20):
                            view = memoryview(chunk)
                            while view:  # a write may take only part of it
                                view = view[os.write(fout, view) :]
                    except BaseException:
                        # Never a file cut short (the host's disk full, say):
                        # it would be kept and listed as if whole.
                        try:  # noqa: SIM105 - no contextlib import (see above)
                            os.unlink(rel, dir_fd=host_dir)
                        except OSError:
                            pass
                        raise
                    finally:
                        os.close(fout)
                finally:
                    os.close(fin)
            except OSError:
                skipped += 1
                continue
            files += 1
            size += st.st_size
    os.close(host_dir)
    return {"files": files, "bytes": size, "skipped": skipped}
