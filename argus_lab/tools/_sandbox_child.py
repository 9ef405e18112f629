"""Code that runs in the sandbox's own processes (see ``argus_lab.tools.sandbox``).

Stdlib only: the source of these functions is sent to ``python -I -c`` (cut out
by ``_sandbox_host._sources``), so each must stand alone and import what it uses
inside its own body. They import little on purpose (no ``json``: the config is
tab-separated lines and the report ``repr``; ``_signal`` rather than
``signal``; no ``typing`` or ``re``): every module imported here is paid on
every call of the tool. The launcher's helpers live beside it, sent in the
same script: the file view and quota in ``_sandbox_view``, Landlock in
``_sandbox_landlock``.
"""

from __future__ import annotations

from typing import Any

# Sent along with this module's functions (one script), so the names resolve.
from argus_lab.tools._sandbox_landlock import _landlock
from argus_lab.tools._sandbox_view import _copy_out, _quota, _view


def _launcher() -> None:
    """The sandbox's first process: namespaces, the task folder's quota, the code.

    argv is ``-c <config> <code>``; on Linux the code comes in a memfd instead
    (``code_fd``), so no ``ps`` on the host shows it. Process tree: this launcher
    (trusted, in the host's PID namespace) -> the code (the forked child, PID 1 of a
    new PID namespace when there is one; when it ends the kernel kills what it left
    behind). Before the code starts, the child builds the file view, drops to an
    unprivileged uid and applies Landlock, rlimits and the seccomp filter; then it
    runs the code itself (``_boot``). The code's exit status travels by the kernel
    only: this launcher waits for it and ends the same way (same exit code or same
    signal).
    The report pipe carries what was set up and the CPU used; the code never
    holds it (closed before ``exec``, and this launcher is outside its PID
    namespace).
    """
    import _signal as signal  # type: ignore[import-not-found]  # signal.py imports enum
    import ctypes
    import os
    import resource
    import sys

    cfg: dict[str, Any] = {}  # "key<TAB>type<TAB>value" lines (_encode_config)
    for line in sys.argv[1].split("\n"):
        key, kind, value = line.split("\t", 2)
        items = value.split("\x1f") if value else []
        if kind == "i":
            cfg[key] = int(value)
        elif kind == "b":
            cfg[key] = value == "1"
        elif kind == "l":
            cfg[key] = items
        elif kind == "d":
            cfg[key] = dict(item.split("=", 1) for item in items)
        else:
            cfg[key] = value
    code_fd = int(cfg.get("code_fd", -1))
    if code_fd >= 0:  # not in argv, where any user of the host reads it
        parts = []
        while chunk := os.read(code_fd, 1 << 20):
            parts.append(chunk)
        os.close(code_fd)
        code = b"".join(parts).decode("utf-8", "surrogatepass")
    else:
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
        "memory": "rlimit",
        "cpu": "rlimit",
        "pid_namespace": False,
        "user_namespace": False,
        "mount_namespace": False,
        "ipc_namespace": False,
        "view": False,
        "quota": False,
        "uid": os.getuid(),
        "seccomp": False,
        "shm": False,
        "proc": False,
        "capabilities": "kept",
        "notes": notes,
    }

    def fail(layer: str, what: str) -> None:
        notes[layer] = f"{what}: {os.strerror(ctypes.get_errno())}"

    def say(kind: str, payload: object) -> None:
        # One line: repr escapes newlines; the parent reads it as a literal.
        os.write(report_fd, repr({kind: payload}).encode() + b"\n")

    def prctl(option: int, arg: int) -> int:
        return int(libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0))

    def unshare(flags: int) -> bool:
        return bool(linux and libc.unshare(ctypes.c_int(flags)) == 0)

    pr_set_pdeathsig, pr_capbset_drop, pr_set_no_new_privs = 1, 24, 38
    new_user, new_net, new_pid, new_ipc = 0x10000000, 0x40000000, 0x20000000, 0x08000000
    new_ns, new_uts = 0x00020000, 0x04000000

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if linux:
        prctl(pr_set_pdeathsig, signal.SIGKILL)
    for ctrl, procs in (cfg.get("cgroups") or {}).items():
        try:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
            iso[{"pids": "processes"}.get(ctrl, ctrl)] = "cgroup"
        except OSError as e:
            notes[ctrl] = f"{ctrl} cgroup: {e}"
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
    host_dir = -1
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
        if unshare(new_ipc | new_uts):
            iso["ipc_namespace"] = True
        else:
            fail("ipc_namespace", "ipc namespace")
        if unshare(new_ns):
            iso["mount_namespace"] = True
            if iso["pid_namespace"]:
                host_dir = _quota(cfg, iso, notes, libc)
            else:  # copying out is safe only once every process has ended
                notes["quota"] = "the tmpfs quota needs a PID namespace"
        else:
            fail("mount_namespace", "mount namespace")
    sandbox_uid = int(cfg["uid"]) if privileged else uid
    sandbox_gid = int(cfg["uid"]) if privileged else gid

    child = os.fork()
    if child:
        # --- the launcher: wait for the code, copy its files out, end like it.
        # Out of the run's cgroups (the child stays, and all it starts): the
        # OOM killer picks by resident memory, for which memfd and tmpfs pages
        # count nowhere, so it killed this launcher, losing the files and the
        # report. Nor do the limits on processes and cores count it.
        for procs in (cfg.get("cgroups_home") or {}).values():
            try:
                with open(procs, "w") as f:
                    f.write(str(os.getpid()))
            except OSError:
                pass  # it stays in: as before, only the OOM killer may pick it
        # The parent's wall-time limit: kill the code (its PID namespace goes
        # with it), then copy the files out as after any end. By a pidfd: the
        # signal may come once the code has ended and been reaped (this
        # launcher copying its files out), when its pid may be another host
        # process's already (the code can cycle the host's pids by forking),
        # and a kill by pid raised inside the copy.
        try:
            pidfd = os.pidfd_open(child)
        except (AttributeError, OSError):  # not Linux, or before 5.3
            pidfd = -1
        reaped: list[bool] = []

        def stop(*_: object) -> None:
            try:
                if pidfd >= 0:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                elif not reaped:
                    os.kill(child, signal.SIGKILL)
            except OSError:
                pass  # it has ended already

        signal.signal(signal.SIGUSR1, stop)
        say("child", child)
        _, status, usage = os.wait4(child, 0)
        reaped.append(True)
        copied: object = None
        try:
            copied = _copy_out(cfg, host_dir) if host_dir >= 0 else None
        except BaseException as e:  # the code's status must still go out
            copied = {"files": 0, "bytes": 0, "skipped": 0, "error": repr(e)[:200]}
        say("exit", {"cpu": usage.ru_utime + usage.ru_stime, "copied": copied})
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            try:  # noqa: SIM105 - contextlib is one import more on every call
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
            os.kill(os.getpid(), sig)
            os._exit(128 + sig)
        os._exit(os.waitstatus_to_exitcode(status))

    # --- the code's process (PID 1 of the new namespace when there is one).
    if host_dir >= 0:
        os.close(host_dir)
    if linux:
        prctl(pr_set_pdeathsig, signal.SIGKILL)
    iso["pid_namespace"] = bool(iso["pid_namespace"]) and os.getpid() == 1
    if iso["mount_namespace"]:
        # A second mount namespace: the read-only view is made here, so the
        # launcher keeps a writable path to the host's task folder.
        if unshare(new_ns):
            _view(cfg, iso, notes, libc)
        else:
            fail("view", "second mount namespace")
        # The working folder was resolved before the tmpfs covered it.
        os.chdir(cfg["folder"])
    nproc = int(cfg["processes"])
    release = os.uname().release.split(".")
    minor = "".join(c for c in [*release, "0"][1] if c.isdigit()) or "0"
    per_userns = release[0].isdigit() and (int(release[0]), int(minor)) >= (5, 14)
    if iso["processes"] != "cgroup" and linux:
        if iso["user_namespace"] and per_userns:
            # Counted per user namespace since Linux 5.14: only our processes.
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            iso["processes"] = "rlimit"
        elif not privileged:
            mine = 0
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    try:  # noqa: SIM105 - no contextlib import (see above)
                        mine += entry.stat().st_uid == uid
                    except OSError:
                        pass
            resource.setrlimit(resource.RLIMIT_NPROC, (mine + nproc, mine + nproc))
            iso["processes"] = "rlimit-shared"
        else:
            notes["processes"] = notes.get("processes", "no writable pids cgroup")

    if linux:
        prctl(pr_set_no_new_privs, 1)
        dropped = True
        for cap in range(64):
            if prctl(pr_capbset_drop, cap) != 0:
                if ctypes.get_errno() != 22:  # EINVAL: past the last capability
                    fail("capabilities", "capability bounding set")
                    dropped = False
                break
        _landlock(cfg, iso, notes, libc)
        if privileged:
            # Root owns /etc/shadow and most of the system: become nobody (the
            # kernel then clears every capability too).
            try:
                os.setgroups([])
                os.setresgid(sandbox_gid, sandbox_gid, sandbox_gid)
                os.setresuid(sandbox_uid, sandbox_uid, sandbox_uid)
            except OSError as e:
                notes["uid"] = f"setuid {sandbox_uid}: {e}"
            prctl(pr_set_pdeathsig, signal.SIGKILL)  # a uid change cleared it
        iso["uid"] = os.getuid()

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
        # soft = hard: SIGKILL at the limit (PID 1 ignores a SIGXCPU it has no
        # handler for, so a softer first warning would only add a second).
        (resource.RLIMIT_CPU, cpu, cpu),
        (resource.RLIMIT_AS, int(cfg["memory"]), int(cfg["memory"])),
        (resource.RLIMIT_FSIZE, int(cfg["file_size"]), int(cfg["file_size"])),
        (resource.RLIMIT_NOFILE, int(cfg["open_files"]), int(cfg["open_files"])),
    ):
        try:
            resource.setrlimit(res, (soft, hard))
        except (ValueError, OSError) as e:
            notes[f"rlimit {res}"] = str(e)
    bpf = bytes.fromhex(cfg.get("seccomp") or "")
    if linux and bpf:
        # Last: the filter forbids the mount and namespace calls made above.
        class Fprog(ctypes.Structure):
            _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

        buf = ctypes.create_string_buffer(bpf, len(bpf))
        prog = Fprog(len(bpf) // 8, ctypes.addressof(buf))
        iso["seccomp"] = True  # reported before loading; undone below if it fails
        say("setup", iso)
        if libc.prctl(22, ctypes.c_ulong(2), ctypes.byref(prog), 0, 0) != 0:
            fail("seccomp", "seccomp filter")
            iso["seccomp"] = False
            say("setup", iso)
    else:
        notes.setdefault("seccomp", "no filter was given (libseccomp missing?)")
        say("setup", iso)
    os.close(report_fd)
    if linux:
        prctl(4, 1)  # PR_SET_DUMPABLE, cleared by the uid change: its own /proc
    # The code runs right here, in this forked interpreter: an exec of a fresh
    # one would cost a second interpreter start-up on every call.
    _boot(code)
    sys.exit(0)


def _boot(src: str) -> None:
    """Runs the code as ``__main__`` (a fresh module, not the launcher's), so
    tracebacks show its lines (file ``<code>``)."""
    import builtins
    import sys

    def show(e: BaseException, tb: Any) -> None:
        import linecache  # only now: imports are paid on every call
        import traceback

        linecache.cache["<code>"] = (len(src), None, src.splitlines(True), "<code>")
        traceback.print_exception(type(e), e, tb)

    sys.argv[:] = ["-c"]
    main = type(sys)("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    try:
        compiled = compile(src, "<code>", "exec", dont_inherit=True)
    except SyntaxError as e:
        show(e, None)
        sys.exit(1)
    try:
        exec(compiled, main.__dict__)
    except SystemExit:
        raise
    except BaseException as e:
        show(e, e.__traceback__.tb_next if e.__traceback__ else None)
        sys.exit(1)
