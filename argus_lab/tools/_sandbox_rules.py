"""The sandbox's threat model as data: each rule, and which layer enforces it.

``docs/sandbox.md`` describes the same rules, row for row, and
``tests/test_sandbox_attacks.py`` attacks each one. ``sandbox_status()`` names
every rule a machine leaves unenforced (or enforces only in part).
"""

from __future__ import annotations

from typing import Any

RULES: dict[str, str] = {
    "write": "the code writes only in its task folder",
    "metadata": "chmod, chown, utime and setxattr fail outside the task folder",
    "hidden": (
        "/etc/shadow, /etc/gshadow, /root, home folders, the workspace and the "
        "project folder are hidden"
    ),
    "read": (
        "the code reads only system folders, the Python installation and its "
        "session folder"
    ),
    "uid": "the code runs as an unprivileged uid",
    "network": (
        "no network: TCP, UDP and DNS fail, and no socket family but IP and "
        "routing netlink opens (vsock would reach a virtual machine's host)"
    ),
    "unix_sockets": "unix sockets (by path or abstract name) cannot be created",
    "ipc": (
        "no IPC reaches outside the sandbox: SysV IPC, message queues and "
        "/dev/shm are private, and files cannot be watched (inotify, fanotify, "
        "dnotify) or leased"
    ),
    "ptrace": "ptrace and process_vm_readv/writev fail",
    "namespaces": "new user (and other) namespaces cannot be created",
    "memory": "memory is limited for the whole process tree",
    "processes": "the number of processes is limited",
    "cpu": "the cores the process tree keeps busy at once are limited",
    "disk": "the task folder has a quota, and what is copied out stays within it",
    "lifetime": "every process the code starts ends with the run",
    "signals": "signals cannot reach processes outside the sandbox",
    "capabilities": "the code holds no capabilities",
    "report": "the exit status comes from the kernel; the code cannot forge it",
    "environment": "the environment holds no secrets (a fixed, short list)",
}
"""Rule name -> what it promises. ``report`` and ``environment`` hold on every
machine (they are how the parent works, not a kernel feature)."""


def rules(iso: dict[str, Any], network: bool) -> dict[str, tuple[str | None, str]]:
    """Rule name -> (the layer enforcing it, or None; a note when it is weaker).

    A note without a layer: the rule is unenforced. A layer with a note: it
    holds only in part (the note says which part is open).
    """
    notes: dict[str, str] = iso.get("notes") or {}
    userns = notes.get("user_namespace")

    def why(*layers: str) -> str:
        for layer in layers:
            if notes.get(layer):
                return notes[layer]
        return userns or "not available on this platform"

    landlock = iso.get("filesystem") == "landlock"
    view = bool(iso.get("view"))
    seccomp = bool(iso.get("seccomp"))
    unprivileged = iso.get("uid", 0) != 0
    out: dict[str, tuple[str | None, str]] = {}
    out["write"] = (
        (
            ("read-only mount" if view else "") + (" + landlock" if landlock else "")
        ).strip(" +")
        or None,
        "" if view or landlock else why("view", "filesystem"),
    )
    out["metadata"] = ("read-only mount", "") if view else (None, why("view"))
    if view:
        out["hidden"] = ("mount namespace", "")
    elif landlock and unprivileged:
        out["hidden"] = ("landlock + uid", "")
    else:
        out["hidden"] = (None, why("view", "filesystem"))
    out["read"] = ("landlock", "") if landlock else (None, why("filesystem"))
    out["uid"] = (
        ("uid", "") if unprivileged else (None, notes.get("uid") or "runs as root")
    )
    net = iso.get("network")
    if network:
        out["network"] = ("allowed by Limits(network=True)", "")
    elif net == "namespace" and seccomp:
        out["network"] = ("network namespace + seccomp", "")
    elif net == "namespace":
        out["network"] = (
            "network namespace",
            f"other socket families (vsock) are not blocked ({why('seccomp')})",
        )
    elif net == "landlock-tcp":
        out["network"] = ("landlock", f"only TCP is blocked ({why('network')})")
    else:
        out["network"] = (None, why("network"))
    for rule in ("unix_sockets", "ptrace", "namespaces"):
        out[rule] = ("seccomp", "") if seccomp else (None, why("seccomp"))
    ipc_ns = bool(iso.get("ipc_namespace"))
    if ipc_ns and seccomp:
        out["ipc"] = ("ipc namespace + seccomp", "")
    elif ipc_ns:
        out["ipc"] = (
            "ipc namespace",
            f"host files can be watched with inotify ({why('seccomp')})",
        )
    elif seccomp:
        out["ipc"] = (
            "seccomp",
            f"SysV IPC and message queues are the host's ({why('ipc_namespace')})",
        )
    else:
        out["ipc"] = (None, why("ipc_namespace", "seccomp"))
    if iso.get("memory") == "cgroup":
        out["memory"] = ("memory cgroup", "")
    elif iso.get("memory") == "watch":
        out["memory"] = (
            "memory watch",
            "checked every 50 ms (no memory cgroup: "
            f"{notes.get('memory') or 'none writable'}): a fast allocation may pass "
            "the limit before the run is killed",
        )
    else:
        out["memory"] = (
            "rlimit",
            "only per process (RLIMIT_AS): several processes together may use "
            f"more (no memory cgroup: {notes.get('memory') or 'none writable'})",
        )
    if iso.get("cpu") == "cgroup":
        out["cpu"] = ("cpu cgroup", "")
    else:
        out["cpu"] = (
            "rlimit",
            "only CPU seconds per process (RLIMIT_CPU): many processes may keep "
            f"every core busy until the wall-time limit (no cpu cgroup: "
            f"{notes.get('cpu') or 'none writable'})",
        )
    procs = iso.get("processes")
    if procs in ("cgroup", "rlimit"):
        out["processes"] = (f"pids {procs}", "")
    elif procs == "rlimit-shared":
        out["processes"] = (
            "rlimit",
            "the limit counts every process of this user, not only the sandbox's "
            f"(no user namespace: {userns or 'unavailable'})",
        )
    else:
        out["processes"] = (None, why("processes", "pids"))
    if iso.get("quota"):
        out["disk"] = ("tmpfs quota", "")
    else:
        out["disk"] = (
            "rlimit",
            "only per file (RLIMIT_FSIZE); the number of files is not limited "
            f"({why('quota', 'mount_namespace')})",
        )
    pidns = bool(iso.get("pid_namespace"))
    out["lifetime"] = ("pid namespace", "") if pidns else (None, why("pid_namespace"))
    scoped = landlock and int(iso.get("landlock") or 0) >= 6
    out["signals"] = (
        ("pid namespace" if pidns else "landlock", "")
        if pidns or scoped
        else (None, why("pid_namespace"))
    )
    out["capabilities"] = (
        ("dropped", "")
        if iso.get("capabilities") == "dropped"
        else (None, why("capabilities"))
    )
    out["report"] = ("waitpid", "")
    out["environment"] = ("fixed environment", "")
    return out


def warnings(iso: dict[str, Any], network: bool) -> list[str]:
    """One sentence per rule left unenforced or enforced only in part."""
    out = []
    for name, (layer, note) in rules(iso, network).items():
        if layer is None:
            out.append(f"rule {name!r} is NOT enforced: {RULES[name]} ({note})")
        elif note:
            out.append(f"rule {name!r} is weaker: {RULES[name]}, but {note}")
    if iso.get("filesystem") == "landlock" and not iso.get("shm"):
        out.append(
            "no private /dev/shm (no mount namespace), so multiprocessing's "
            "locks will fail"
        )
    return out
