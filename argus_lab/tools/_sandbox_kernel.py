"""Kernel mechanisms the sandbox's parent sets up: cgroups and the seccomp filter.

- **cgroups** (v2, or v1 as on hosts with a hybrid layout): one folder per run
  with ``pids`` (most processes), ``memory`` (the whole process tree's
  memory, tmpfs pages of the task folder included) and ``cpu`` (cores kept
  busy at once) controllers; the launcher
  joins them before it starts anything, so every descendant is counted.
- **seccomp**: the filter is compiled here with libseccomp (through
  ``pyseccomp``'s ctypes binding of the system's ``libseccomp.so.2``) into
  classic BPF, and the sandbox only loads those bytes (``prctl``), so the child
  needs nothing but the standard library.
- **a memory watch**, where no memory cgroup can be made: the process tree's
  resident memory summed every 50 ms, the run killed over the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

_CONTROLLERS = ("pids", "memory", "cpu")
_PERIOD = 100_000
"""The cpu controller's accounting period, microseconds (the kernel default)."""


@functools.cache
def _cgroup_parents() -> dict[str, tuple[Path, int]]:
    """controller -> (a folder where we may create limited children, version)."""
    if not sys.platform.startswith("linux"):
        return {}
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
        own_text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return {}
    own: dict[str, str] = {}
    for line in own_text.splitlines():
        _, ctrls, path = line.split(":", 2)
        for c in ctrls.split(",") if ctrls else ["<v2>"]:
            own[c] = path
    found: dict[str, tuple[Path, int]] = {}
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        root, mnt = fields[3], fields[4].replace("\\040", " ")
        fstype, opts = rest[0], rest[2].split(",")
        for ctrl in _CONTROLLERS:
            if fstype == "cgroup" and ctrl in opts and ctrl in own:
                rel, version = own[ctrl], 1
            elif fstype == "cgroup2" and "<v2>" in own:
                rel, version = own["<v2>"], 2
            else:
                continue
            if root != "/" and rel.startswith(root):
                rel = rel[len(root) :]
            base = Path(mnt + "/" + rel.lstrip("/"))
            if version == 2:
                # Only where the controller is already enabled for children:
                # turning it on would change the host's cgroup setup.
                try:
                    ctl = (base / "cgroup.subtree_control").read_text().split()
                except OSError:
                    continue
                if ctrl not in ctl:
                    continue
            if os.access(base, os.W_OK) and (ctrl not in found or version == 2):
                found[ctrl] = (base, version)
    return found


class Cgroups:
    """The cgroups of one run (one folder per v1 controller, one for v2)."""

    def __init__(self, paths: dict[str, tuple[Path, int]]) -> None:
        self.paths = paths

    @classmethod
    def create(cls, max_pids: int, memory: int, cpus: float = 1.0) -> Cgroups:
        """Creates what this machine allows; a controller left out is reported
        missing by the launcher (and named in ``sandbox_status`` warnings)."""
        name = f"argus-sandbox-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        made: dict[str, tuple[Path, int]] = {}
        for ctrl, (base, version) in _cgroup_parents().items():
            _sweep(base)
            path = base / name
            try:
                path.mkdir(exist_ok=version == 2)
                quota = max(1000, round(cpus * _PERIOD))
                if ctrl == "pids":
                    (path / "pids.max").write_text(str(max_pids))
                elif ctrl == "cpu" and version == 2:
                    (path / "cpu.max").write_text(f"{quota} {_PERIOD}")
                elif ctrl == "cpu":
                    (path / "cpu.cfs_period_us").write_text(str(_PERIOD))
                    (path / "cpu.cfs_quota_us").write_text(str(quota))
                elif version == 2:
                    (path / "memory.max").write_text(str(memory))
                    with contextlib.suppress(OSError):
                        (path / "memory.swap.max").write_text("0")
                else:
                    (path / "memory.limit_in_bytes").write_text(str(memory))
                    with contextlib.suppress(OSError):  # no swap accounting
                        (path / "memory.memsw.limit_in_bytes").write_text(str(memory))
            except OSError:
                with contextlib.suppress(OSError):
                    path.rmdir()
                continue
            made[ctrl] = (path, version)
        return cls(made)

    @property
    def procs(self) -> dict[str, str]:
        """controller -> its ``cgroup.procs`` file, for the launcher to join."""
        return {c: str(p / "cgroup.procs") for c, (p, _) in self.paths.items()}

    @property
    def home(self) -> dict[str, str]:
        """controller -> the ``cgroup.procs`` file of the cgroup the run's was
        made in: the launcher goes back there once its child has started."""
        return {c: str(p.parent / "cgroup.procs") for c, (p, _) in self.paths.items()}

    def memory(self) -> tuple[int | None, bool]:
        """(peak bytes of the whole tree, whether the OOM killer struck)."""
        if "memory" not in self.paths:
            return None, False
        path, version = self.paths["memory"]
        peak_file = "memory.peak" if version == 2 else "memory.max_usage_in_bytes"
        events = "memory.events" if version == 2 else "memory.oom_control"
        peak: int | None = None
        oom = False
        with contextlib.suppress(OSError, ValueError):
            peak = int((path / peak_file).read_text())
        with contextlib.suppress(OSError, ValueError):
            for line in (path / events).read_text().splitlines():
                key, _, value = line.partition(" ")
                oom = oom or (key == "oom_kill" and int(value) > 0)
        return peak, oom

    def remove(self) -> None:
        """Removes the folders, killing stragglers (there are none when the run
        had a PID namespace: its end took every process with it)."""
        for path, _ in dict.fromkeys(self.paths.values()):
            for _ in range(200):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    with contextlib.suppress(OSError, ValueError):
                        for pid in (path / "cgroup.procs").read_text().split():
                            with contextlib.suppress(OSError):
                                os.kill(int(pid), signal.SIGKILL)
                    time.sleep(0.005)


def _sweep(base: Path) -> None:
    """Removes empty run folders left by an Argus process that died mid-run
    (its pid is in the name; seen from another PID namespace, a live one's
    folder is still safe: not while it is set up, and a folder with a process
    in it cannot be removed), so they do not pile up."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            parts = entry.name.split("-")
            if len(parts) == 4 and entry.name.startswith("argus-sandbox-"):
                pid = int(parts[2]) if parts[2].isdigit() else 0
                old = time.time() - entry.stat().st_mtime > 60  # not being set up
                if pid and old and not Path(f"/proc/{pid}").exists():
                    with contextlib.suppress(OSError):
                        os.rmdir(entry.path)  # fails while a process is in it


# What the code may not call (errno EPERM unless said otherwise). Namespaces,
# mounts, tracing, kernel keyrings, BPF, io_uring (whose requests seccomp never
# sees), modules, clocks and the like.
_DENIED = tuple(
    [
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "pidfd_getfd",
        "kcmp",
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "setns",
        "unshare",
        "open_tree",
        "move_mount",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "mount_setattr",
        "keyctl",
        "add_key",
        "request_key",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "reboot",
        "swapon",
        "swapoff",
        "acct",
        "quotactl",
        "sethostname",
        "setdomainname",
        "settimeofday",
        "clock_settime",
        "clock_adjtime",
        "adjtimex",
        "syslog",
        "open_by_handle_at",
        "name_to_handle_at",
        "personality",
        "vhangup",
        "iopl",
        "ioperm",
        # What Docker's default profile also denies, less used kernel surface:
        # old interfaces, the x86 LDT, NUMA page moving, mount listings.
        "uselib",
        "ustat",
        "sysfs",
        "_sysctl",
        "lookup_dcookie",
        "nfsservctl",
        "modify_ldt",
        "vm86",
        "vm86old",
        "migrate_pages",
        "move_pages",
        "quotactl_fd",
    ]
)
_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK = 1, 2, 10, 16
_SOCK_STREAM, _SOCK_SEQPACKET = 1, 5
_NETLINK_ROUTE = 0
_F_SETLEASE, _F_NOTIFY = 1024, 1026
_NEW_NAMESPACES = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)


@functools.cache
def seccomp_filter() -> tuple[bytes, str | None]:
    """(the BPF program, why there is none). Cached: it is the same every run."""
    if not sys.platform.startswith("linux"):
        return b"", "seccomp is Linux only"
    try:
        import pyseccomp as sc
    except (ImportError, OSError, RuntimeError) as e:  # no libseccomp.so.2
        return b"", f"libseccomp is unavailable ({e})"
    try:
        f = sc.SyscallFilter(sc.ALLOW)

        def low(i: int, value: int) -> Any:
            # An int argument: the kernel reads its low 32 bits only, and the
            # filter must too (1 << 32 added to socketpair's family made
            # AF_UNIX pass a check for AF_UNIX).
            return sc.Arg(i, sc.MASKED_EQ, 0xFFFFFFFF, value)

        for name in _DENIED:
            # A name this libseccomp does not know (OSError EINVAL, or older
            # bindings' errors) skips that rule, never the whole filter.
            with contextlib.suppress(OSError, RuntimeError, ValueError):
                f.add_rule(sc.ERRNO(errno.EPERM), name)
        for flag in _NEW_NAMESPACES:
            arg = sc.Arg(0, sc.MASKED_EQ, flag, flag)
            f.add_rule(sc.ERRNO(errno.EPERM), "clone", arg)
        # clone3 passes its flags in memory seccomp cannot read: "not
        # implemented" makes the C library fall back to clone, which is checked.
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        # Watching files: every readable host file (/etc, the Python
        # installation) would be a channel between sandboxes of different
        # sessions (one opens, the other sees IN_OPEN) and a view of the host's
        # activity. "Not implemented" makes libraries fall back to polling.
        for name in ("inotify_init", "inotify_init1"):
            f.add_rule(sc.ERRNO(errno.ENOSYS), name)
        for name in ("fanotify_init", "fanotify_mark"):
            f.add_rule(sc.ERRNO(errno.EPERM), name)
        # dnotify (fcntl F_NOTIFY) watches a readable folder as inotify does
        # (/etc, the session folder); a lease (F_SETLEASE) on a file the code's
        # uid owns makes the host's open for writing wait on the code. EINVAL:
        # what a kernel without them (or with leases off) answers.
        for cmd in (_F_NOTIFY, _F_SETLEASE):
            f.add_rule(sc.ERRNO(errno.EINVAL), "fcntl", low(1, cmd))
        # Unix sockets by path or abstract name reach past every namespace;
        # socketpair (pipes between the code's own processes) stays allowed.
        f.add_rule(sc.ERRNO(errno.EACCES), "socket", low(0, _AF_UNIX))
        # A datagram pair (SOCK_RAW is one too, for unix sockets) is not bound
        # to its peer: sendto() or connect() reach any path socket (/dev/log,
        # a socket in the session folder). Stream and seqpacket pairs are
        # connected for good (connect: EISCONN); they stay for multiprocessing.
        for kind in range(16):
            if kind not in (_SOCK_STREAM, _SOCK_SEQPACKET):
                args = (low(0, _AF_UNIX), sc.Arg(1, sc.MASKED_EQ, 15, kind))
                f.add_rule(sc.ERRNO(errno.EACCES), "socketpair", *args)
        # Every other family but IP and netlink (both per network namespace):
        # vsock reaches a virtual machine's host, others reach hardware.
        for family in range(64):
            if family not in (_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK):
                f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", low(0, family))
        # And any family with high bits (the kernel would read the low ones).
        f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.GE, 64))
        # Netlink for routes and addresses only (getifaddrs): the other
        # protocols are not all per network namespace (uevents brought the
        # host's device events in, such as a USB key plugged in).
        # (NE sees all 64 bits: high bits in the protocol are refused too.)
        args = (low(0, _AF_NETLINK), sc.Arg(2, sc.NE, _NETLINK_ROUTE))
        f.add_rule(sc.ERRNO(errno.EPROTONOSUPPORT), "socket", *args)
        with tempfile.TemporaryFile() as out:
            f.export_bpf(out)
            out.seek(0)
            return out.read(), None
    except (OSError, RuntimeError, ValueError) as e:
        return b"", f"libseccomp could not build the filter ({e})"


def can_watch_memory() -> bool:
    """Whether the kernel lists a process's children (CONFIG_PROC_CHILDREN),
    which ``MemoryWatch`` walks."""
    pid = os.getpid()
    return Path(f"/proc/{pid}/task/{pid}/children").exists()


class MemoryWatch:
    """The fallback where no memory cgroup can be made: the resident memory of
    the whole process tree under ``pid``, summed every ``interval`` seconds; over
    ``limit``, ``kill`` is called once. Weaker than a cgroup (a fast allocation
    may pass the limit between two looks), so ``sandbox_status`` says so."""

    def __init__(self, pid: int, limit: int, kill: Callable[[], None]) -> None:
        self.pid, self.limit, self.kill = pid, limit, kill
        self.peak = 0
        self.fired = False
        self.page = os.sysconf("SC_PAGE_SIZE")

    def tree_rss(self) -> int:
        """Bytes resident in ``pid`` and every descendant."""
        total, todo, seen = 0, [self.pid], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            try:
                total += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
                for task in os.listdir(f"/proc/{pid}/task"):
                    kids = Path(f"/proc/{pid}/task/{task}/children").read_text()
                    todo += [int(k) for k in kids.split()]
            except (OSError, ValueError, IndexError):
                continue  # it ended meanwhile
        return total * self.page

    async def run(self, interval: float = 0.05) -> None:
        """Watches until cancelled, or until it has called ``kill``."""
        while True:
            rss = self.tree_rss()
            self.peak = max(self.peak, rss)
            if rss > self.limit:
                self.fired = True
                self.kill()
                return
            await asyncio.sleep(interval)
