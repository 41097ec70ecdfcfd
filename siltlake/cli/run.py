"""`silt run` in a terminal: the single-host loops (siltlake.run.single_host) with a live status table of the loops, a
log line per round that did something, and a clean stop on Ctrl-C or SIGTERM."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from siltlake.cli.context import deployment_of, described, friendly, needs_spark, retrying
from siltlake.cli.derived import print_regenerate_report
from siltlake.cli.observing import daemon_logging, quiet_py4j, serve
from siltlake.cli.options import bind_option, metrics_port_option
from siltlake.cli.output import Column, console, grid
from siltlake.cli.reports import print_merge_report, print_publish_report, print_reap_report, print_stream_report

# siltlake.run.single_host imports the components (and SQLAlchemy, pyarrow): only `silt run` itself loads it.
if TYPE_CHECKING:
    from siltlake.deployment import Deployment
    from siltlake.run.single_host import LoopStatus, SingleHost

STATE_STYLE = {
    "working": "bold green",
    "waiting": "dim",
    "retrying": "bold red",
    "stopping": "yellow",
    "stopped": "dim",
    "starting": "cyan",
}


def _ago(moment: float | None, now: float) -> str:
    if moment is None:
        return ""
    seconds = now - moment
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


def _state(status: LoopStatus, now: float) -> Text:
    text = Text(status.state, style=STATE_STYLE.get(status.state, ""))
    if status.next_at is not None:
        text.append(f" {max(0.0, status.next_at - now):.0f}s")
    if status.detail:
        text.append(f" {status.detail}", style="dim")
    return text


COLUMNS = tuple(Column(header) for header in ("loop", "state", "every", "last work", "since start", "errors"))


def status_table(host: SingleHost) -> Table:
    """One row per loop: state, interval, what its last productive round did, totals, errors."""
    now = time.monotonic()
    rows = []
    for status in host.status.values():
        last = (
            Text.assemble(status.last_work, " ", (_ago(status.last_work_at, now), "dim")) if status.last_work else "-"
        )
        rows.append(
            (
                status.name,
                _state(status, now),
                f"{status.interval:g}s",
                last,
                status.totals or "-",
                Text(str(status.errors), style="red") if status.errors else "0",
            )
        )
    return grid(COLUMNS, rows, title="silt run", title_justify="left", pad_edge=False)


def run_in_terminal(
    deployment: Deployment, console: Console, metrics_port: int | None = None, bind: str = "127.0.0.1"
) -> None:
    """Run every loop until SIGINT or SIGTERM, then wait for their current work; a second signal quits now.
    With metrics_port, serve /metrics and the dashboard (/) there meanwhile."""
    from siltlake.run.single_host import SingleHost

    printers = {
        "stream": lambda report: print_stream_report(report, deployment.staging.root),
        "merge": print_merge_report,
        "publish": print_publish_report,
        "reap": print_reap_report,
        "derived": print_regenerate_report,
    }

    def on_error(name: str, exc: Exception, wait: float) -> None:
        if host.stop_event.is_set():
            # A stop signal sent to the whole process group (systemd's default KillMode, `kill -- -PGID`) stops
            # Spark's JVM too, under the running round: not a failure to retry, and never a Java trace.
            console.print(
                f"{name}: its round ended with the shutdown ({escape(described(exc).message)}); what it "
                "had not committed is taken up again by the next run",
                highlight=False,
                soft_wrap=True,
            )
            return
        retrying(f"{name} failed", console)(exc, wait)

    host = SingleHost(deployment, on_report=lambda name, report: printers[name](report), on_error=on_error)

    def on_signal(signum: int, _frame: object) -> None:
        if host.stop_event.is_set():
            # The user does not want to wait: running merge claims go stale and are taken over after
            # merge.job_timeout, staging objects of an uncommitted wave stay pending.
            console.print("quitting without waiting")
            os._exit(130)
        console.print(
            f"{signal.Signals(signum).name}: stopping after the current stream wave and the running "
            "merge jobs (Ctrl-C again quits now)",
            highlight=False,
        )
        quiet_py4j()  # the JVM may go with the signal: on_error says so, once
        host.stop()

    deployment.catalog.check_ready()  # not initialised: one error line, before the live display starts
    server = serve(deployment, bind, metrics_port, dashboard=True) if metrics_port is not None else None
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    console.print(
        f"single host: stream every {host.status['stream'].interval:g}s, merge every "
        f"{host.status['merge'].interval:g}s (slots {host.worker.slots}), publish every "
        f"{host.status['publish'].interval:g}s, derived tables checked every "
        f"{host.status['derived'].interval:g}s; Ctrl-C stops",
        highlight=False,
    )
    with Live(console=console, get_renderable=lambda: status_table(host), refresh_per_second=2, transient=False):
        try:
            host.start_spark()
        except Exception:
            if not host.stop_event.is_set():
                raise
            # Stopped while Spark started: the signal reached its launcher too. Nothing ran yet.
        # PySpark replaced the SIGINT handler while starting (it cancels jobs and raises KeyboardInterrupt).
        signal.signal(signal.SIGINT, on_signal)
        if host.connect_url:
            token_file = deployment.config.spark.connect_token_file
            console.print(
                f"Spark Connect: {host.connect_url}, clients send the token in {token_file} (`silt sql "
                "--engine spark` does; notebooks: siltlake.spark.connect_session(load_config().spark))",
                highlight=False,
            )
        if not host.stop_event.is_set():
            host.start()
        # Short joins keep the main thread free to run the signal handler.
        while not host.join(timeout=0.25):
            pass
    if not console.is_terminal:
        console.line()  # a file (a service log) gets the final table without its last line break
    if server is not None:
        server.close()
    if host.fatal is not None:
        raise host.fatal  # one error line and a failing exit code, as for any command
    console.print("stopped")


@click.command("run")
@metrics_port_option
@bind_option
@click.pass_context
@friendly
@needs_spark("silt run")
def run_command(context: click.Context, metrics_port: int | None, bind: str) -> None:
    """Single host: stream, merge and publish in one process on one SparkSession, with a live status.

    Intervals come from stream.poll_interval, merge.poll_interval, publish.interval, reap.interval and
    derived.interval (the derived loop builds every stale derived table, as `silt derived build --due`). Ctrl-C or
    SIGTERM stops after the current stream wave and the running merge jobs; a second Ctrl-C quits now.
    --metrics-port serves /metrics and the dashboard (/, as `silt dashboard`) on that port.
    """
    # Until run_in_terminal takes the signals over (after the imports and the catalog check), a SIGTERM ends
    # the command at once, as cleanly: nothing has started yet.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    daemon_logging(context, "run")
    run_in_terminal(deployment_of(context), console, metrics_port, bind)
