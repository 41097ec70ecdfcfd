"""The fork server: one resident process per installation and user that has siltlake's libraries imported and
starts each `silt` command as a fork of itself, so a command started by cron or by hand pays no imports.

`silt forkserver start` runs it (docs/operations.md "The fork server"). The `silt` script (siltlake.launch) sends
its command line, working directory, environment and standard streams to it when one listens, and runs the
command in its own process when none does. The client side is in `client`, importing nothing heavy; the server
side in `server`; their messages in `wire`.
"""

from __future__ import annotations

import os
import sys
import zlib

VARIABLE = "SILT_FORKSERVER"
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # siltlake's own directory
OFF = ("off", "0", "no", "false")


def disabled() -> bool:
    """$SILT_FORKSERVER=off: every command runs in its own process, a listening server or not."""
    return os.environ.get(VARIABLE, "").lower() in OFF


def socket_path() -> str:
    """Where this installation's server listens: $SILT_FORKSERVER when it names a path, else a socket named
    after the Python environment and the package, in a directory only this user may enter."""
    chosen = os.environ.get(VARIABLE, "")
    if chosen and chosen.lower() not in OFF:
        return os.path.abspath(chosen)
    base = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp"
    installation = f"{sys.prefix}\0{PACKAGE}".encode(errors="surrogateescape")
    return os.path.join(base, f"siltlake-{os.getuid()}", f"forkserver-{zlib.crc32(installation):08x}.sock")


# Read once, when a process starts or a library the server imported initialises: the interpreter's PYTHON*
# settings, Arrow's (ARROW_IO_THREADS, ARROW_DEFAULT_MEMORY_POOL, ...) and OpenMP's thread counts, glibc's malloc
# tunables, the dynamic loader's, and the locale that chooses the default encoding.
_READ_AT_START_PREFIXES = ("PYTHON", "ARROW_", "OMP_", "MALLOC_")
_READ_AT_START = ("GLIBC_TUNABLES", "LD_PRELOAD", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "LC_CTYPE")
START_SETTINGS = "PYTHON*, ARROW_*, OMP_*, MALLOC_*, GLIBC_TUNABLES, LD_PRELOAD, LD_LIBRARY_PATH, the locale"


def interpreter_key() -> dict[str, object]:
    """What must be equal in a client and its server for a fork of the server to run the client's command as
    the client would: the interpreter, its import path (but the script's own directory), and the settings read
    once, when a process starts (START_SETTINGS)."""
    settings = [(name, value) for name, value in os.environ.items() if name.startswith(_READ_AT_START_PREFIXES)]
    settings += [(name, os.environ.get(name, "")) for name in _READ_AT_START]
    return {"executable": sys.executable, "path": sys.path[1:], "settings": sorted(settings)}


# The client's limits the command takes (lowering one is always allowed; one above the server's hard limit stays
# at the server's).
LIMITS = ("RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_STACK")
