"""`silt forkserver`: start, stop and show the fork server that runs each `silt` command as a fork of a process
with siltlake's libraries imported (siltlake.forkserver; docs/operations.md "The fork server")."""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import os
import subprocess
import sys
import time

import click

from siltlake.cli.context import friendly, importing
from siltlake.cli.options import json_option
from siltlake.cli.output import console, out, shown, warm_rendering, write_json

# What the commands import as they run, beside their own modules: a fork has them already. Not Spark: a JVM
# takes seconds either way, and its Python side starts threads.
LIBRARIES = (
    "siltlake.deployment",
    "siltlake.stream",
    "siltlake.stream.group_task",
    "siltlake.workers",
    "siltlake.merge",
    "siltlake.publish",
    "siltlake.reap",
    "siltlake.hosts",
    "siltlake.catalog.merge_status",
    "siltlake.read.query",
    "siltlake.read.plan",
    "siltlake.read.duck",
    "siltlake.read.translate",
    "siltlake.cli.stream_bar",
    "siltlake.cli.merge_bar",
    "duckdb",
    "sqlite3",  # the catalog's drivers
    "psycopg",
    # pyarrow imports pandas (0.2 s) the first time it converts any Python value (a scalar, a list), when installed.
    "pandas",
)
START_SECONDS = 60.0


@click.group(name="forkserver")
def forkserver_group() -> None:
    """Keep a process with siltlake's libraries imported that starts each `silt` command as its fork.

    A command started by cron or by hand then skips its imports (about 0.6 s of CPU). One server per user and
    installation; $SILT_FORKSERVER names its socket, or =off runs every command in its own process."""


@forkserver_group.command()
@friendly
def start() -> None:
    """Start the fork server in the background, unless one listens; wait until it answers."""
    from siltlake.forkserver import VARIABLE, socket_path
    from siltlake.forkserver.client import ask

    path = socket_path()
    running = ask("status")
    if running is not None and not running["same_interpreter"]:
        raise click.ClickException(
            "a fork server for another Python setup (its interpreter, import path, PYTHON* settings or locale) "
            f"listens at {path} (pid {running['pid']}): stop it first (`silt forkserver stop`), or give this one "
            "its own socket with $SILT_FORKSERVER"
        )
    if running is not None and running["code_current"]:
        console.print(f"a fork server already listens at {shown(path)} (pid {running['pid']})", highlight=False)
        return
    if running is not None:  # siltlake's code changed under it: a new one imports the new code
        console.print(f"restarting the fork server (pid {running['pid']}): siltlake's code changed", highlight=False)
        _stop(path)
    log = f"{path}.log"
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    with open(log, "ab") as written:
        server = subprocess.Popen(
            [sys.executable, "-m", "siltlake.cli", "forkserver", "serve"],
            # From /: `-m` puts the directory first on the import path, and a siltlake checkout there would be
            # imported in place of the clients' siltlake. The socket named as this process resolved it.
            cwd="/",
            env={**os.environ, VARIABLE: path},
            stdin=subprocess.DEVNULL,
            stdout=written,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not in this terminal's process group: its Ctrl-C is not the server's
        )
    deadline = time.monotonic() + START_SECONDS
    while (running := ask("status")) is None:
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            tail = _tail(log)
            raise click.ClickException(f"the fork server did not start (its log, {log}):\n{tail}")
        time.sleep(0.05)
    console.print(
        f"fork server listening at {shown(path)} (pid {running['pid']}, log {shown(log)}): "
        "`silt` commands start as its forks",
        highlight=False,
    )


@forkserver_group.command()
@friendly
def stop() -> None:
    """Stop the fork server; commands it started run on. Nothing to do when none listens."""
    from siltlake.forkserver import socket_path

    path = socket_path()
    stopped = _stop(path)
    if stopped is None:
        console.print(f"no fork server listens at {shown(path)}", highlight=False)
    else:
        console.print(f"fork server stopped (pid {stopped})", highlight=False)


def _stop(path: str) -> int | None:
    """Stop the server listening at `path` and wait until its socket is gone; its pid, or None if none listens."""
    from siltlake.forkserver.client import ask

    answer = ask("stop")
    if answer is None:
        return None
    deadline = time.monotonic() + 10
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return int(answer["stopping"])


@forkserver_group.command()
@json_option
@friendly
def status(as_json: bool) -> None:
    """The fork server's socket, pid, start and connections served; exit 1 when none listens."""
    from siltlake.forkserver import socket_path
    from siltlake.forkserver.client import ask

    path = socket_path()
    answer = ask("status")
    if as_json:
        write_json({"path": path, "listening": answer is not None, **(answer or {})})
    elif answer is None:
        out.print(f"no fork server listens at {shown(path)}", highlight=False)
    else:
        since = dt.datetime.fromtimestamp(answer["started"], dt.UTC).isoformat(timespec="seconds")
        caveats = "" if answer["same_interpreter"] else "; for another Python setup: it refuses this one's commands"
        if not answer["code_current"]:
            caveats += "; siltlake's code changed since it started: `silt forkserver start` replaces it"
        out.print(
            f"listening at {shown(path)}: pid {answer['pid']}, since {since}, {answer['connections']} connections"
            + caveats,
            highlight=False,
        )
    if answer is None:
        sys.exit(1)


@forkserver_group.command()
@friendly
def serve() -> None:
    """Run the fork server in the foreground (for a service manager) until SIGTERM, SIGINT or `stop`."""
    from siltlake.forkserver.server import serve as serve_forks

    with importing():
        from siltlake.cli.lazy import REGISTRY

        for name in LIBRARIES:
            with contextlib.suppress(ImportError):  # pandas and psycopg are optional
                importlib.import_module(name)
        for entry in REGISTRY.values():
            importlib.import_module(f"siltlake.cli.{entry.module}")
    warm_rendering()

    def ready(path: str) -> None:
        console.print(f"fork server pid {os.getpid()} listening at {shown(path)}", highlight=False)

    serve_forks(_run_command, on_ready=ready)


def _run_command(argv: list[str]) -> None:
    """One command in a fork: the group, as the `silt` script runs it."""
    from siltlake.cli import main
    from siltlake.cli.output import reopen_consoles

    reopen_consoles()
    main.main(args=argv[1:], prog_name="silt")


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as log:
            return "".join(log.readlines()[-lines:])
    except OSError:
        return ""
