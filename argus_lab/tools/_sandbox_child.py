"""Code that runs in the sandbox's own processes (see ``argus_lab.tools.sandbox``).

Stdlib only: the source of these functions is sent to ``python -I -c`` (cut out
by ``_sandbox_host._sources``), so each must stand alone and import what it uses
inside its own body.
"""

from __future__ import annotations

from typing import Any


def _launcher() -> None:
    """The sandbox's first process: set up isolation, run the code, report.

    argv is ``-c <config json> <code>``. Process tree: this process (outside any
    new PID namespace; waits) -> ``init`` (PID 1 of the new namespace when there is
    one; applies Landlock, capabilities and rlimits, reaps orphans, reports the
    code's exit status) -> the code (``python -I -c <boot> <code>``). Reports are
    JSON lines on the ``report_fd`` pipe.
    """
    import contextlib
    import ctypes
    import json
    import os
    import re
    import resource
    import signal
    import sys

    cfg = json.loads(sys.argv[1])
    code = sys.argv[2]
    report_fd = int(cfg["report_fd"])
    linux = sys.platform.startswith("linux")
    libc = ctypes.CDLL(None, use_errno=True)
    notes: dict[str, str] = {}  # layer -> why it is missing
    iso: dict[str, object] = {
        "filesystem": "none",
        "landlock": 0,
        "network": "allowed" if cfg["network"] else "none",
        "processes": "none",
        "pid_namespace": False,
        "user_namespace": False,
        "mount_namespace": False,
        "shm": False,
        "proc": False,
        "capabilities": "kept",
        "notes": notes,
    }

    def fail(layer: str, what: str) -> None:
        notes[layer] = f"{what}: {os.strerror(ctypes.get_errno())}"

    def say(kind: str, payload: object) -> None:
        os.write(report_fd, (json.dumps({kind: payload}) + "\n").encode())

    def prctl(option: int, arg: int) -> int:
        return int(libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0))

    def unshare(flags: int) -> bool:
        return bool(linux and libc.unshare(ctypes.c_int(flags)) == 0)

    pr_set_pdeathsig, pr_capbset_drop, pr_set_no_new_privs = 1, 24, 38
    new_user, new_net, new_pid, new_ipc = 0x10000000, 0x40000000, 0x20000000, 0x08000000
    new_ns = 0x00020000

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if linux:
        prctl(pr_set_pdeathsig, signal.SIGKILL)
    if cfg["cgroup_procs"]:
        try:
            with open(cfg["cgroup_procs"], "w") as f:
                f.write(str(os.getpid()))
            iso["processes"] = "cgroup"
        except OSError as e:
            notes["processes"] = f"pids cgroup: {e}"
    uid, gid = os.getuid(), os.getgid()
    privileged = uid == 0
    if linux and not privileged:
        if unshare(new_user):
            try:
                for name, text in (
                    ("setgroups", "deny"),
                    ("uid_map", f"{uid} {uid} 1"),
                    ("gid_map", f"{gid} {gid} 1"),
                ):
                    with open(f"/proc/self/{name}", "w") as f:
                        f.write(text)
                iso["user_namespace"] = True
            except OSError as e:
                notes["user_namespace"] = f"user namespace map: {e}"
        else:
            fail("user_namespace", "user namespace")
    if linux and (privileged or iso["user_namespace"]):
        if not cfg["network"]:
            if unshare(new_net):
                iso["network"] = "namespace"
            else:
                fail("network", "network namespace")
        if unshare(new_pid):
            iso["pid_namespace"] = True
        else:
            fail("pid_namespace", "pid namespace")
        if not unshare(new_ipc):
            fail("ipc_namespace", "ipc namespace")
        if unshare(new_ns):
            iso["mount_namespace"] = True
        else:
            fail("mount_namespace", "mount namespace")

    init = os.fork()
    if init:
        os.close(report_fd)
        _, status = os.waitpid(init, 0)
        code_ = os.waitstatus_to_exitcode(status)
        os._exit(code_ if code_ >= 0 else 128 - code_)

    # --- init: PID 1 of the new namespace when there is one.
    if linux:
        prctl(pr_set_pdeathsig, signal.SIGKILL)
    nproc = int(cfg["processes"])
    m = re.match(r"(\d+)\.(\d+)", os.uname().release)
    per_userns = m is not None and (int(m[1]), int(m[2])) >= (5, 14)
    if iso["processes"] != "cgroup" and linux:
        if iso["user_namespace"] and per_userns:
            # Counted per user namespace since Linux 5.14: only our processes.
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            iso["processes"] = "rlimit"
        elif not privileged:
            mine = 0
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    with contextlib.suppress(OSError):
                        mine += entry.stat().st_uid == uid
            resource.setrlimit(resource.RLIMIT_NPROC, (mine + nproc, mine + nproc))
            iso["processes"] = "rlimit-shared"
        else:
            notes["processes"] = (
                notes.get("processes", "no writable pids cgroup")
                + "; root ignores RLIMIT_NPROC"
            )

    iso["pid_namespace"] = bool(iso["pid_namespace"]) and os.getpid() == 1
    if iso["mount_namespace"]:
        _mounts(cfg, iso, notes, libc)

    if linux:
        prctl(pr_set_no_new_privs, 1)
        _landlock(cfg, iso, notes, libc)
        dropped = True
        for cap in range(64):
            if prctl(pr_capbset_drop, cap) != 0:
                if ctypes.get_errno() != 22:  # EINVAL: past the last capability
                    fail("capabilities", "capability bounding set")
                    dropped = False
                break

        class CapHeader(ctypes.Structure):
            _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))

        class CapData(ctypes.Structure):
            _fields_ = (
                ("effective", ctypes.c_uint32),
                ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32),
            )

        header = CapHeader(0x20080522, 0)
        data = (CapData * 2)()
        if libc.capset(ctypes.byref(header), data) != 0:
            fail("capabilities", "capset")
            dropped = False
        if dropped:
            iso["capabilities"] = "dropped"

    cpu = int(cfg["cpu"])
    for res, soft, hard in (
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_AS, int(cfg["memory"]), int(cfg["memory"])),
        (resource.RLIMIT_FSIZE, int(cfg["file_size"]), int(cfg["file_size"])),
        (resource.RLIMIT_NOFILE, int(cfg["open_files"]), int(cfg["open_files"])),
    ):
        try:
            resource.setrlimit(res, (soft, hard))
        except (ValueError, OSError) as e:
            notes[f"rlimit {res}"] = str(e)
    say("setup", iso)

    child = os.fork()
    if child == 0:
        os.close(report_fd)
        if linux:
            prctl(pr_set_pdeathsig, signal.SIGKILL)
        python = cfg["python"]
        try:
            os.execv(python, [python, "-I", "-c", cfg["boot"], code])
        except OSError as e:
            os.write(2, f"sandbox: cannot start {python}: {e}\n".encode())
        os._exit(127)
    while True:  # reap orphans until the code's own process ends
        try:
            pid, status, usage = os.wait4(-1, 0)
        except ChildProcessError:
            break
        if pid == child:
            cpu_used = usage.ru_utime + usage.ru_stime
            say("exit", {"status": status, "cpu": cpu_used})
            break
    os._exit(0)


def _mounts(
    cfg: dict[str, Any], iso: dict[str, object], notes: dict[str, str], libc: Any
) -> None:
    """In the sandbox's own mount namespace: a private /dev/shm and /proc.

    /dev/shm becomes an empty tmpfs of ``file_size`` bytes (multiprocessing keeps
    its semaphores there), and /proc shows only the sandbox's processes. Nothing
    is mounted unless mount events are first kept from reaching the host.
    """
    import ctypes
    import os

    ms_nosuid, ms_nodev, ms_noexec, ms_rec, ms_private = 2, 4, 8, 1 << 14, 1 << 18

    def mount(src: str, dst: str, fstype: str | None, flags: int, data: str) -> bool:
        ok = libc.mount(
            src.encode(),
            dst.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        )
        if ok != 0:
            notes[f"mount {dst}"] = os.strerror(ctypes.get_errno())
        return bool(ok == 0)

    if not mount("none", "/", None, ms_rec | ms_private, ""):
        return
    size = f"size={int(cfg['file_size'])},mode=1777"
    iso["shm"] = mount("tmpfs", "/dev/shm", "tmpfs", ms_nosuid | ms_nodev, size)
    if iso["pid_namespace"]:
        flags = ms_nosuid | ms_nodev | ms_noexec
        iso["proc"] = mount("proc", "/proc", "proc", flags, "")


def _landlock(
    cfg: dict[str, Any], iso: dict[str, object], notes: dict[str, str], libc: Any
) -> int:
    """Restricts this process (and what it starts) with Landlock; returns the ABI.

    Writes: the task folder only. Reads and execution: system folders, the Python
    installation and its import path, the extra readable folders. With ABI >= 4
    TCP is denied too unless the network is allowed; with ABI >= 6 signals and
    abstract unix sockets cannot reach outside the sandbox.
    """
    import ctypes
    import os
    import stat
    import sys

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
    roots += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    roots += [p for p in sys.path if p and os.path.isabs(p)]
    roots += [os.path.dirname(os.path.realpath(cfg["python"]))]
    roots += list(cfg["read_paths"])
    for path in dict.fromkeys(roots):
        allow(path, read)
    allow("/dev/null", read_file | write_file | truncate)
    for dev in ("/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"):
        allow(dev, read_file)
    allow(cfg["folder"], handled & ~(make_char | make_block))
    if iso.get("shm"):  # a private, empty tmpfs (see _mounts)
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


def _boot() -> None:
    """Runs the code in ``__main__`` so tracebacks show its lines (file ``<code>``)."""
    import linecache
    import sys
    import traceback

    src = sys.argv[1]
    sys.argv[:] = ["-c"]
    linecache.cache["<code>"] = (len(src), None, src.splitlines(True), "<code>")
    env = sys.modules["__main__"].__dict__
    del env["_boot"]
    try:
        compiled = compile(src, "<code>", "exec", dont_inherit=True)
    except SyntaxError as e:
        traceback.print_exception(type(e), e, None)
        sys.exit(1)
    try:
        exec(compiled, env)
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__.tb_next if e.__traceback__ else None
        traceback.print_exception(type(e), e, tb)
        sys.exit(1)
