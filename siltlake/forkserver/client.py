"""The client's side: hand a command to this installation's fork server, pass on the signals this process gets,
and end as the command ended. Imports only the standard library's light modules: it runs before every command."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import sys
from typing import Any

from siltlake.forkserver import LIMITS, disabled, interpreter_key, placement, socket_path, wire

# The signals a user or a service manager sends a command; the command's fork gets each one this process gets
# (SIGTSTP and the SIGCONT after it: _suspender).
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def run_through_server(argv: list[str]) -> int | None:
    """The command's exit status when the fork server ran it; None when it did not and the caller runs it: no
    server listens, $SILT_FORKSERVER=off, a standard stream is closed, or the server refused (said on stderr).
    A command ended by a signal ends this process by the same signal."""
    if disabled():
        return None
    try:
        for descriptor in (0, 1, 2):
            os.fstat(descriptor)
        directory = os.getcwd()
    except OSError:
        return None
    path = socket_path()
    connection = _connected(path)
    if connection is None:
        return None
    with connection:
        mask = os.umask(0o022)
        os.umask(mask)
        request = {
            "op": "run",
            "argv": argv,
            "cwd": directory,
            "env": dict(os.environ),
            "umask": mask,
            "limits": {name: resource.getrlimit(getattr(resource, name)) for name in LIMITS},
            "placement": placement.of_this_process(),
            "key": interpreter_key(),
            "streams": [[stream.encoding, stream.errors] if stream else None for stream in (sys.stdout, sys.stderr)],
        }
        # Forwarding starts before the request: a signal during the handshake reaches the command once it starts
        # (the session reads it after the request), or, should the command run here, this process.
        forwarded: list[int] = []
        previous = {number: signal.signal(number, _forwarder(connection, forwarded)) for number in FORWARDED}
        previous[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, _suspender(connection))
        try:
            try:
                wire.send(connection, request, [0, 1, 2])
                reply, _ = wire.receive(connection)
            except (OSError, ValueError):
                reply = {"refused": None}  # it went away before starting the command
            if "refused" in reply:
                if reply["refused"]:
                    refusal = f"silt: the fork server ({path}) refused: {reply['refused']}; running in this process\n"
                    sys.stderr.write(refusal)
                _restore(previous)
                for number in forwarded:
                    os.kill(os.getpid(), number)
                return None
            try:
                ending, _ = wire.receive(connection)
            except (OSError, ValueError):
                sys.stderr.write(f"silt: lost the fork server ({path}) while it ran the command; status unknown\n")
                return 1
        finally:
            _restore(previous)
    if "signal" in ending:
        ended_by = int(ending["signal"])
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP have no handler to reset
            signal.signal(ended_by, signal.SIG_DFL)
        os.kill(os.getpid(), ended_by)
        return 128 + ended_by  # a signal whose default is not to end a process
    return int(ending["exit"])


def ask(op: str) -> dict[str, Any] | None:
    """The server's answer to `status` or `stop`; None when none listens."""
    connection = _connected(socket_path())
    if connection is None:
        return None
    with connection:
        try:
            wire.send(connection, {"op": op, "key": interpreter_key()})
            return wire.receive(connection)[0]
        except (OSError, ValueError):
            return None


def _connected(path: str) -> socket.socket | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
        if not wire.same_user(connection):
            sys.stderr.write(f"silt: {path} is served by another user's process; running in this process\n")
            connection.close()
            return None
    except OSError:
        connection.close()
        return None
    return connection


def _forwarder(connection: socket.socket, forwarded: list[int]) -> Any:
    def forward(number: int, _frame: object) -> None:
        forwarded.append(number)
        with contextlib.suppress(OSError):  # the command has ended: its status is on its way
            connection.send(bytes([number]))

    return forward


def _suspender(connection: socket.socket) -> Any:
    """Ctrl-Z: the command's processes stop, then this one, as the shell expects of a job; SIGCONT continues both.
    Where the kernel does not stop this process (its process group is orphaned: no shell to continue it), the
    command continues at once too."""

    def suspend(number: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            connection.send(bytes([number]))
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)  # stopped here until SIGCONT, or not at all
        signal.signal(number, suspend)
        with contextlib.suppress(OSError):  # continued, or never stopped: so is the command
            connection.send(bytes([signal.SIGCONT]))

    return suspend


def _restore(handlers: dict[signal.Signals, Any]) -> None:
    for number, handler in handlers.items():
        signal.signal(number, handler)
