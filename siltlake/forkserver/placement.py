"""Where and how eagerly a command runs: its cgroups, CPU affinity, scheduling policy, nice value and I/O priority.

A fork inherits the server's, not the client's: `nice -n 19 silt merge --once` from cron, `ionice -c3`, `taskset`,
or a command a service manager starts in a slice with a CPU quota, would escape what its caller set. So the client
sends its own (`of_this_process`) and the session takes them before it forks the command (`take`); one it may not
take (a lower nice value without the privilege) refuses the request, and the client runs the command itself. A
cgroup the server's user may not enter (another login session's scope) is refused only when it, or a cgroup above
it that the server's is not under, sets a limit (CPU, memory, tasks, I/O): else the command runs in the server's.

Only `os` here: the client imports this before every command (ctypes, for the I/O priority, only on the
architectures whose system call numbers are known, and only when it is first asked).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

# ioprio_get and ioprio_set by architecture (their numbers are not in Python's os module).
_IOPRIO_CALLS = {"x86_64": (252, 251), "aarch64": (31, 30), "arm64": (31, 30)}
_IOPRIO_WHO_PROCESS = 1


def of_this_process() -> dict[str, Any]:
    """This process's placement, as the session compares and takes it."""
    return {name: read() for name, read in _READERS.items()}


def take(wanted: dict[str, Any]) -> str | None:
    """Make this process's placement the client's (its forks inherit it); what could not be taken, else None."""
    here = _cgroups()
    if wanted.get("cgroups") is not None and here is not None and wanted["cgroups"] != here:
        refusal = _enter_cgroups(wanted["cgroups"], here)
        if refusal:
            return refusal
    steps = (
        ("affinity", lambda: os.sched_setaffinity(0, wanted["affinity"]), "its CPU affinity"),
        (
            "policy",
            lambda: os.sched_setscheduler(0, wanted["policy"], os.sched_param(wanted["priority"])),
            "its scheduling policy",
        ),
        ("priority", lambda: os.sched_setparam(0, os.sched_param(wanted["priority"])), "its scheduling priority"),
        ("nice", lambda: os.setpriority(os.PRIO_PROCESS, 0, wanted["nice"]), "its nice value"),
    )
    for name, apply, what in steps:
        current = _READERS[name]()  # read after the steps before it (a policy change can move the priority)
        if name in wanted and wanted[name] != current:
            try:
                apply()
            except OSError as exc:
                return f"{what} ({wanted[name]}) is not the server's ({current}) and may not be taken ({exc.strerror})"
    if wanted.get("ioprio") is not None and wanted["ioprio"] != _ioprio_get():
        failure = _ioprio_set(wanted["ioprio"])
        if failure:
            return f"its I/O priority ({wanted['ioprio']:#x}) is not the server's and may not be taken ({failure})"
    return None


def _affinity() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def _priority() -> int:
    return os.sched_getparam(0).sched_priority


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def _cgroups() -> str | None:
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="surrogateescape") as listing:
            return listing.read()
    except OSError:  # not Linux
        return None


def _enter_cgroups(wanted: str, here: str) -> str | None:
    """Move this process into each hierarchy's cgroup of `wanted` (a /proc/self/cgroup listing) where it is
    elsewhere. One it may not enter (another login session's scope, a system service's) is left when nothing
    between it and the cgroup it shares with the server limits the client (the command runs as it would there);
    a limit this process would escape is a refusal, and so is a cgroup not visible here."""
    current = dict(_hierarchies(here))
    mounts = _cgroup_mounts()
    for hierarchy, path in _hierarchies(wanted):
        if current.get(hierarchy) == path:
            continue
        mount = _mount_of(hierarchy, mounts)
        if mount is None or not os.path.isdir(directory := _directory(*mount, path)):
            return f"its cgroup {hierarchy}:{path} is not the server's and is not visible here"
        try:
            with open(os.path.join(directory, "cgroup.procs"), "w", encoding="ascii") as entering:
                entering.write(str(os.getpid()))
            continue
        except OSError as exc:
            refused = exc.strerror
        for limited in _below_common(path, current.get(hierarchy, "/")):
            limit = limit_in(_directory(*mount, limited))
            if limit:
                return (
                    f"its cgroup {hierarchy}:{path} limits it ({limited}: {limit}) and the server may not enter it "
                    f"({refused})"
                )
    return None


def _directory(root: str, point: str, path: str) -> str:
    inside = path[len(root) :] if root != "/" and path.startswith(root) else path
    return os.path.join(point, inside.lstrip("/"))


def _below_common(path: str, other: str) -> list[str]:
    """The cgroups from `path` up to, not including, the one it shares with `other`."""
    ours, theirs = path.strip("/").split("/"), other.strip("/").split("/")
    shared = 0
    while shared < min(len(ours), len(theirs)) and ours[shared] == theirs[shared] and ours[shared]:
        shared += 1
    return ["/" + "/".join(ours[:depth]) for depth in range(len(ours), shared, -1) if ours[depth - 1]]


def _first_is(word: str) -> Callable[[str], bool]:
    return lambda value: value.split(" ")[0] == word


# A cgroup's files that limit its processes, each with what its "no limit" looks like (v2, then v1).
_UNLIMITED: dict[str, Callable[[str], bool]] = {
    "cpu.max": _first_is("max"),
    "cpu.weight": _first_is("100"),
    "memory.max": _first_is("max"),
    "memory.high": _first_is("max"),
    "pids.max": _first_is("max"),
    "io.max": lambda value: not value,
    "cpu.cfs_quota_us": _first_is("-1"),
    "cpu.shares": _first_is("1024"),
    "memory.limit_in_bytes": lambda value: value.isdigit() and int(value) >= 1 << 62,  # the page-rounded maximum
}


def limit_in(directory: str) -> str | None:
    """The first limit a cgroup's directory sets ("cpu.max = 20000 100000"), None when it sets none."""
    for name, unlimited in _UNLIMITED.items():
        try:
            with open(os.path.join(directory, name), encoding="ascii", errors="replace") as setting:
                value = setting.read().strip()
        except OSError:  # not this hierarchy's controller, or not enabled here
            continue
        if not unlimited(value):
            return f"{name} = {value}"
    return None


def _hierarchies(listing: str) -> list[tuple[str, str]]:
    """(controllers, path) of each line of a /proc/PID/cgroup listing: "" for the unified (v2) hierarchy."""
    found = []
    for line in listing.splitlines():
        _number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        found.append((controllers, path))
    return found


def _cgroup_mounts() -> list[tuple[str, set[str], str, str]]:
    """(file system type, mount options, root within the hierarchy, mount point) of each mounted cgroup
    hierarchy, by /proc/self/mountinfo."""
    mounts: list[tuple[str, set[str], str, str]] = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
            lines = table.read().splitlines()
    except OSError:
        return mounts
    for line in lines:
        fields, _, rest = line.partition(" - ")
        kind, _source, options = [*rest.split(" "), "", ""][:3]
        if kind in ("cgroup", "cgroup2"):
            parts = fields.split(" ")
            mounts.append((kind, set(options.split(",")), parts[3], parts[4].replace("\\040", " ")))
    return mounts


def _mount_of(hierarchy: str, mounts: list[tuple[str, set[str], str, str]]) -> tuple[str, str] | None:
    """(root, mount point) of the hierarchy a /proc/PID/cgroup line names: "" is cgroup2; a v1 hierarchy is the
    mount whose options hold each of its controllers (and its name=)."""
    wanted = set(hierarchy.split(","))
    for kind, options, root, point in mounts:
        if (kind == "cgroup2") if not hierarchy else (kind == "cgroup" and wanted <= options):
            return root, point
    return None


_syscall: Any = None


def _ioprio_calls() -> tuple[Any, int, int] | None:
    global _syscall
    numbers = _IOPRIO_CALLS.get(os.uname().machine)
    if numbers is None:
        return None
    if _syscall is None:
        import ctypes

        _syscall = ctypes.CDLL(None, use_errno=True).syscall
    return _syscall, *numbers


def _ioprio_get() -> int | None:
    calls = _ioprio_calls()
    if calls is None:
        return None
    syscall, get, _set = calls
    value = syscall(get, _IOPRIO_WHO_PROCESS, 0)
    return None if value < 0 else int(value)


def _ioprio_set(value: int) -> str | None:
    calls = _ioprio_calls()
    if calls is None:
        return "no ioprio_set here"
    import ctypes

    syscall, _get, set_call = calls
    if syscall(set_call, _IOPRIO_WHO_PROCESS, 0, value) < 0:
        return os.strerror(ctypes.get_errno())
    return None


# What each placement is read by (of_this_process, and take between its steps).
_READERS: dict[str, Callable[[], Any]] = {
    "cgroups": _cgroups,
    "affinity": _affinity,
    "policy": lambda: os.sched_getscheduler(0),
    "priority": _priority,
    "nice": _nice,
    "ioprio": _ioprio_get,
}
