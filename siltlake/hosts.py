"""This host and its processes, as merge claims record them and liveness checks see them."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

from siltlake.catalog import LocalHost


def _proc_text(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def claim_host() -> str:
    """This host as merge claims record it: the host name, the boot and the pid namespace (where Linux shows
    them). Two processes compare pids only when all three match: two machines may share a name, and
    containers may share a machine and a name but not their process ids."""
    boot = _proc_text("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return " ".join(part for part in (socket.gethostname()[:64], boot, namespace) if part)


def default_owner() -> str:
    """A claimer's identity in the catalog (merge jobs, stream claims): host, pid and a random part, so that
    a pid the host reuses is never taken for the claimer that held it."""
    return f"{socket.gethostname()[:32]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this host still runs (a zombie has exited). Unsure means yes: such claims
    wait out merge.job_timeout as before."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it runs, as another user
        return True
    state = _proc_text(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()
    return not state or state[0] not in ("Z", "X")


def local_host() -> LocalHost:
    """This process as the catalog's claims and status see it."""
    return LocalHost(claim_host(), os.getpid(), process_alive)
