"""What the daemons share for operating them: their log identity, the history sampler and the HTTP server
of --metrics-port (siltlake.observe); and `silt dashboard`."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import bind_option
from siltlake.cli.output import console

if TYPE_CHECKING:
    from siltlake.deployment import Deployment
    from siltlake.observe.dashboard import ObserveServer


def daemon_logging(context: click.Context, role: str, **identity: object) -> None:
    """A daemon's log lines carry its role and pid, and show info events unless --log-level says otherwise."""
    from siltlake import logs

    settings = context.find_root().obj or {}
    logs.identify(role=role, **identity)
    if settings.get("log_level") is None:
        logs.configure(settings.get("log_format", "text"), "info")


def not_py4j(record: logging.LogRecord) -> bool:
    """False for a record py4j logs on the root logger (`logging.exception`, with its trace): after a stop signal
    the JVM under a running call is gone, which the daemon's own error handler reports in one line."""
    return "py4j" not in Path(record.pathname).parts


def quiet_py4j() -> None:
    """From now on, py4j's records on the root logger are dropped (a stop signal has arrived)."""
    logging.getLogger().addFilter(not_py4j)


def stop_on_sigterm(stop: threading.Event) -> None:
    """SIGTERM (a service manager's stop) sets `stop`, as Ctrl-C ends the loop. Sent to the whole process group,
    as systemd's default KillMode does, it ends Spark's JVM too, under a running call: py4j's trace of that is
    dropped from then on (quiet_py4j)."""

    def on_term(_signum: int, _frame: object) -> None:
        quiet_py4j()
        stop.set()

    signal.signal(signal.SIGTERM, on_term)


def serve(deployment: Deployment, bind: str, port: int, *, dashboard: bool, metrics: bool = True) -> ObserveServer:
    """Start the HTTP server of --metrics-port or `silt dashboard`; say where, and warn off loopback."""
    from siltlake.config import is_loopback
    from siltlake.observe.dashboard import ObserveServer

    try:
        server = ObserveServer(deployment, bind, port, dashboard=dashboard, metrics=metrics).start()
    except OSError as exc:
        raise click.UsageError(f"cannot listen on {bind}:{port}: {exc.strerror or exc}") from None
    what = " and ".join(
        part
        for part, on in (
            ("the dashboard on " + server.url, dashboard),
            ("metrics on " + server.url + "metrics", metrics),
        )
        if on
    )
    console.print(f"serving {what}", highlight=False, soft_wrap=True)
    if not is_loopback(bind):
        console.print(
            f"[yellow]warning:[/] listening on {bind}, not loopback: anyone who can reach this host can read "
            "the page and metrics (they are read-only, but they show table names and object URIs)",
            highlight=False,
        )
    return server


class Observing:
    """A daemon's history sampler and, with --metrics-port, its server; close() stops both."""

    def __init__(self, deployment: Deployment, metrics_port: int | None, bind: str, *, dashboard: bool = False) -> None:
        from siltlake.observe.history import HistorySampler

        self.server = serve(deployment, bind, metrics_port, dashboard=dashboard) if metrics_port is not None else None
        self.sampler = HistorySampler(deployment).start()

    def close(self) -> None:
        self.sampler.stop()
        if self.server is not None:
            self.server.close()


@click.command("dashboard")
@bind_option
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8787,
    show_default=True,
    help="The port to serve the page (and /metrics) on; 0 picks a free one.",
)
@click.pass_context
@friendly
def dashboard_command(context: click.Context, bind: str, port: int) -> None:
    """Serve the read-only dashboard: per table, charts over time of the backlog, freshness, small-file debt and
    merge throughput (the history the daemons sample into the catalog), partitions by state, recent failures
    and unknown objects; and /metrics. Binds to 127.0.0.1 unless --bind says otherwise. Ctrl-C stops."""
    deployment = deployment_of(context)
    server = serve(deployment, bind, port, dashboard=True)
    stop = threading.Event()
    try:
        while not stop.wait(0.5):  # short waits keep the main thread free for Ctrl-C
            pass
    except KeyboardInterrupt:
        pass
    server.close()
    console.print("stopped")
