"""Landlock for the sandbox's code process (``argus_lab.tools.sandbox``).

Stdlib only, and the function stands alone: its source is sent to the sandbox's
``python -I -c`` with ``_sandbox_child``'s (cut out by
``_sandbox_host._sources``), and the launcher calls it just before dropping to
an unprivileged uid. It talks to the kernel through raw ``syscall`` numbers
(x86-64 and arm64 share them) and adapts to the Landlock ABI it finds.
"""

from __future__ import annotations

from typing import Any


def _landlock(
    cfg: dict[str, Any], iso: dict[str, object], notes: dict[str, str], libc: Any
) -> int:
    """Restricts this process (and what it starts) with Landlock; returns the ABI.

    Writes: the task folder only. Reads and execution: system folders, the Python
    installation (never other folders on ``sys.path``: an editable install puts
    the project, and often its workspace, there), the extra readable folders.
    With ABI >= 4 TCP is denied too unless the network is allowed; with ABI >= 6
    signals and abstract unix sockets cannot reach outside the sandbox.
    """
    import ctypes
    import os
    import stat

    sys_landlock_create_ruleset, sys_landlock_add_rule = 444, 445
    sys_landlock_restrict_self = 446
    abi = int(
        libc.syscall(
            ctypes.c_long(sys_landlock_create_ruleset), None, ctypes.c_size_t(0), 1
        )
    )
    if abi <= 0:
        notes["filesystem"] = f"landlock: {os.strerror(ctypes.get_errno())}"
        return 0
    execute, write_file, read_file, read_dir = 1, 2, 4, 8
    make_char, make_block = 64, 2048
    refer, truncate, ioctl_dev = 1 << 13, 1 << 14, 1 << 15
    handled = (1 << 13) - 1
    if abi >= 2:
        handled |= refer
    if abi >= 3:
        handled |= truncate
    if abi >= 5:
        handled |= ioctl_dev
    file_rights = execute | write_file | read_file | truncate | ioctl_dev

    class RulesetAttr(ctypes.Structure):
        _fields_ = (
            ("fs", ctypes.c_uint64),
            ("net", ctypes.c_uint64),
            ("scoped", ctypes.c_uint64),
        )

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = (("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32))

    net_rights = 0 if cfg["network"] or abi < 4 else 3  # BIND_TCP | CONNECT_TCP
    scoped = 3 if abi >= 6 else 0  # abstract unix sockets | signals
    attr = RulesetAttr(handled, net_rights, scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = int(
        libc.syscall(
            sys_landlock_create_ruleset, ctypes.byref(attr), ctypes.c_size_t(size), 0
        )
    )
    if ruleset < 0:
        notes["filesystem"] = f"landlock ruleset: {os.strerror(ctypes.get_errno())}"
        return 0

    def allow(path: str, rights: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                rights &= file_rights
            rule = PathBeneath(rights & handled, fd)
            if libc.syscall(sys_landlock_add_rule, ruleset, 1, ctypes.byref(rule), 0):
                notes[f"landlock rule {path}"] = os.strerror(ctypes.get_errno())
        finally:
            os.close(fd)

    read = execute | read_file | read_dir
    roots = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"]
    roots += ["/sys/devices/system/cpu"]
    if iso.get("proc"):  # our own /proc: only the sandbox's processes
        roots += ["/proc"]
    else:
        roots += ["/proc/cpuinfo", "/proc/meminfo", "/proc/stat"]
    roots += list(cfg["python_roots"]) + list(cfg["read_paths"])
    for path in dict.fromkeys(roots):
        allow(path, read)
    allow("/dev/null", read_file | write_file | truncate)
    for dev in ("/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"):
        allow(dev, read_file)
    allow(cfg["folder"], handled & ~(make_char | make_block))
    if iso.get("shm"):  # a private, empty tmpfs (see _view)
        allow("/dev/shm", handled & ~(make_char | make_block))
    if libc.syscall(sys_landlock_restrict_self, ruleset, 0) != 0:
        notes["filesystem"] = f"landlock restrict: {os.strerror(ctypes.get_errno())}"
        os.close(ruleset)
        return 0
    os.close(ruleset)
    iso["filesystem"] = "landlock"
    iso["landlock"] = abi
    if net_rights and iso["network"] == "none":
        iso["network"] = "landlock-tcp"
    return abi
