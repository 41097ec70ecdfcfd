"""The server's side. One thread, three kinds of process:

- the server accepts a connection from a process of its own user and forks a session for it;
- the session reads the request, refuses it when the client's interpreter differs or siltlake's code changed
  since the server started (and then stops the server), else forks the command and watches it: it passes on
  the signals the client forwards, ends the command when the client goes away, and sends the command's status;
- the command takes the client's standard streams, directory, umask, environment, arguments and placement
  (forkserver.placement: cgroups, affinity, scheduling, nice, I/O priority, taken by the session), runs, runs
  its exit handlers and exits: it never returns into the server's loop.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import resource
import select
import signal
import socket
import stat
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from siltlake.errors import Refusal
from siltlake.forking import flush_standard_streams, fork
from siltlake.forkserver import PACKAGE, START_SETTINGS, interpreter_key, placement, socket_path, wire

_STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_JOB_CONTROL = (signal.SIGTSTP, signal.SIGCONT)


class _Stopped(Exception):
    pass


def source_stamp(root: str = PACKAGE) -> list[int]:
    """How many Python files the package has, their newest modification and their total size: a server whose
    stamp changed runs old code."""
    count = newest = size = 0
    for directory, _folders, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                info = os.stat(os.path.join(directory, name))
                count, newest, size = count + 1, max(newest, info.st_mtime_ns), size + info.st_size
    return [count, newest, size]


def serve(
    run: Callable[[list[str]], object],
    path: str | None = None,
    stamp: Callable[[], object] = source_stamp,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve until SIGTERM, SIGINT or SIGHUP, or a `stop` request. The caller has imported what the commands
    use; `run(argv)` runs one command (raising SystemExit, as a command line does)."""
    if threading.active_count() > 1:
        names = ", ".join(thread.name for thread in threading.enumerate())
        raise Refusal(f"a fork server runs one thread; after its imports this process runs more ({names})")
    path = os.path.abspath(path or socket_path())
    listener, inode = _listen(path)
    os.chdir("/")  # holds no directory of its start (a checkout deleted, a mount point); each command takes its own
    key = wire.as_received(interpreter_key())
    state: dict[str, Any] = {"pid": os.getpid(), "started": time.time(), "connections": 0, "path": path}
    first_stamp = wire.as_received(stamp())

    def fresh() -> bool:
        return bool(wire.as_received(stamp()) == first_stamp)

    def stop(_number: int, _frame: object) -> None:
        raise _Stopped

    for number in _STOPPING:
        signal.signal(number, stop)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # sessions are reaped by the kernel
    try:
        if on_ready is not None:
            on_ready(path)
        gc.collect()  # what the imports left for the collector is not frozen into every fork (siltlake.forking)
        flush_standard_streams()
        while True:
            connection, _address = listener.accept()
            with connection:
                if not wire.same_user(connection):
                    continue
                _fork_session(connection, listener, run, state, key, fresh)
                state["connections"] += 1
    except _Stopped:
        pass
    finally:
        for number in (*_STOPPING, signal.SIGCHLD):
            signal.signal(number, signal.SIG_DFL)
        listener.close()
        try:
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        except OSError:
            pass


def _listen(path: str) -> tuple[socket.socket, int]:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    held = os.stat(directory)
    if held.st_uid not in (os.getuid(), 0) or (held.st_mode & 0o022 and not held.st_mode & stat.S_ISVTX):
        raise Refusal(
            f"another user may replace the socket in {directory} (owner uid {held.st_uid}, mode "
            f"{stat.filemode(held.st_mode)}): name one in a directory of your own with $SILT_FORKSERVER"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except FileNotFoundError:
        pass
    except ConnectionRefusedError:
        os.unlink(path)  # a server that died without removing it
    else:
        raise Refusal(f"a fork server already listens at {path}: `silt forkserver stop` stops it")
    finally:
        probe.close()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)  # the socket is born readable and writable by its user only
    try:
        listener.bind(path)
    finally:
        os.umask(previous)
    listener.listen(64)
    return listener, os.stat(path).st_ino


def _fork_session(
    connection: socket.socket, listener: socket.socket, run: Callable, state: dict, key: object, fresh: Callable
) -> None:
    """A session for the connection, in a fork; the stop signals wait until the fork has its own handlers."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
    try:
        if fork() == 0:

            def session() -> int:
                listener.close()
                return _session(connection, run, state, key, fresh)

            _as_child(session)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPPING)


def _as_child(body: Callable[[], int]) -> None:
    """Run `body` in a fresh fork and exit with its status: nothing unwinds into the forking process's frames."""
    status = 70
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPPING)
        status = body()
    except BaseException:
        traceback.print_exc()
    finally:
        flush_standard_streams()
        os._exit(status)


def _session(
    connection: socket.socket, run: Callable[[list[str]], object], state: dict, key: object, fresh: Callable[[], bool]
) -> int:
    request, descriptors = wire.receive(connection, 3)
    try:
        op = request.get("op")
        refusal = None
        if op == "status":
            wire.send(connection, {**state, "same_interpreter": request.get("key") == key, "code_current": fresh()})
            return 0
        if op == "stop":
            os.kill(state["pid"], signal.SIGTERM)
            wire.send(connection, {"stopping": state["pid"]})
            return 0
        if op != "run" or len(descriptors) != 3:
            refusal = f"not a request it knows ({op!r}, {len(descriptors)} streams)"
        elif request.get("key") != key:
            refusal = (
                f"its Python, import path or settings read when a process starts ({START_SETTINGS}) differ from "
                f"the server's (pid {state['pid']})"
            )
        elif not fresh():
            os.kill(state["pid"], signal.SIGTERM)
            refusal = "siltlake's code changed since it started, so it stops (`silt forkserver start` starts it again)"
        else:
            refusal = placement.take(request.get("placement") or {})  # the command's fork inherits it
        if refusal is not None:
            wire.send(connection, {"refused": refusal})
            return 0
        command = fork()
        if command == 0:
            _as_child(lambda: _command(request, descriptors, connection, run))
        # The command's own process group, set on both sides of the fork (whichever runs first).
        with contextlib.suppress(OSError):
            os.setpgid(command, command)
    finally:
        for descriptor in descriptors:
            os.close(descriptor)
    with contextlib.suppress(OSError):  # a client gone already: the watch sees it and stops the command
        wire.send(connection, {"started": command})
    return _watch(connection, command)


def _watch(connection: socket.socket, command: int) -> int:
    """Pass the client's signals to the command until it ends, then send its status."""
    ended = os.pidfd_open(command)
    sources: list[Any] = [connection, ended]
    while True:
        ready, _, _ = select.select(sources, [], [])
        if ended in ready:
            _, status = os.waitpid(command, 0)
            if os.WIFSIGNALED(status):
                ending = {"signal": os.WTERMSIG(status)}
            else:
                ending = {"exit": os.waitstatus_to_exitcode(status)}
            with contextlib.suppress(OSError):  # the client is gone
                wire.send(connection, ending)
            return 0
        try:
            numbers = connection.recv(64)
        except OSError:
            numbers = b""
        if not numbers:  # the client went away: stop the command as a service manager would
            _signal(command, signal.SIGTERM)
            sources = [ended]
        for number in numbers:
            if number in _JOB_CONTROL:  # as a terminal's: the command's workers and JVM stop and continue with it
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.killpg(command, number)
            else:
                _signal(command, number)


def _signal(process: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError, ValueError):
        os.kill(process, number)


def _command(
    request: dict, descriptors: list[int], connection: socket.socket, run: Callable[[list[str]], object]
) -> int:
    connection.close()
    with contextlib.suppress(OSError):  # a group of its own: Ctrl-Z stops the processes it starts too
        os.setpgid(0, 0)
    for target, descriptor in enumerate(descriptors):
        os.dup2(descriptor, target)
    for descriptor in descriptors:
        if descriptor > 2:
            os.close(descriptor)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()  # the client's TZ
    for name, wanted in (request.get("limits") or {}).items():
        _limit(name, *wanted)
    sys.argv = list(request["argv"])
    with contextlib.suppress(OSError):  # top and `ps -o comm` show the command, not the server's
        Path("/proc/self/comm").write_text(" ".join(["silt", *sys.argv[1:2]])[:15])
    for stream, spec in zip((sys.stdout, sys.stderr), request.get("streams") or (), strict=False):
        if stream is not None and spec:
            with contextlib.suppress(AttributeError, ValueError, OSError):
                stream.reconfigure(encoding=spec[0], errors=spec[1], line_buffering=stream.isatty())  # type: ignore[union-attr]
    try:
        run(sys.argv)
        code = 0
    except SystemExit as exit:
        code = _exit_status(exit.code)
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    _shutdown = getattr(threading, "_shutdown", None)
    if _shutdown is not None:
        _shutdown()  # non-daemon threads end, as at an interpreter's exit
    atexit._run_exitfuncs()
    return code


def _limit(name: str, soft: int, hard: int) -> None:
    """Take the client's limit, within this process's hard limit (which only root may raise)."""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        which = getattr(resource, name)
        ceiling = resource.getrlimit(which)[1]
        hard = _lower(hard, ceiling)
        resource.setrlimit(which, (_lower(soft, hard), hard))


def _lower(first: int, second: int) -> int:
    if first == resource.RLIM_INFINITY:
        return second
    return first if second == resource.RLIM_INFINITY else min(first, second)


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
