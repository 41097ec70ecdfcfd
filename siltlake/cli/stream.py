"""`silt stream`: staging objects into live and delayed small objects, once or as a daemon."""

from __future__ import annotations

import sys
import threading

import click

from siltlake.cli.context import deployment_of, friendly, importing, needs_spark, retrying
from siltlake.cli.observing import Observing, daemon_logging, stop_on_sigterm
from siltlake.cli.options import bind_option, interval_option, json_option, metrics_port_option, once_option
from siltlake.cli.output import console, progress_bar, write_json
from siltlake.cli.reports import print_stream_report


@click.command()
@once_option
@interval_option("stream.poll_interval")
@json_option
@metrics_port_option
@bind_option
@click.pass_context
@friendly
@needs_spark("silt stream")
def stream(
    context: click.Context, once: bool, interval: float | None, as_json: bool, metrics_port: int | None, bind: str
) -> None:
    """Turn staging objects into live and delayed small objects.

    A round registers new staging objects and processes every pending one; --once waits up to
    stream.settle_time for local files still being written, shows a progress bar and exits 1 if some objects
    failed (they stay pending and are retried) or a staging file changed other than by appending (reported
    once, not loaded: see `silt unknown list`). --json applies to --once's report."""
    with importing():  # the stream's libraries with the deployment's, without the cyclic GC
        from siltlake.cli.stream_bar import StreamBar
        from siltlake.stream import stream_forever, stream_once
        from siltlake.workers import fork_workers, start_workers

        deployment = deployment_of(context)
    # The workers are forks of this process now that it holds the decoders: they import nothing.
    if not fork_workers():
        start_workers("siltlake.stream.group_task")
    if once and metrics_port is not None:
        raise click.UsageError("--metrics-port serves a daemon's metrics: give it without --once")
    if once:
        with progress_bar() as bar:
            report = stream_once(deployment, StreamBar(bar, "staging objects"), settle_wait=True)
        if as_json:
            write_json({**report.__dict__, "dropped_by_object": [vars(item) for item in report.dropped_by_object]})
        else:
            print_stream_report(report, deployment.staging.root)
        stopped = deployment.catalog.positions.rewritten()  # following stopped, whenever it was found
        if stopped and not report.rewritten:
            console.print(
                f"{len(stopped)} staging files whose following stopped (`silt status`; `silt staging resume`)",
                highlight=False,
            )
        if report.failed or report.rewritten or report.changed_reputs or stopped:
            sys.exit(1)
        return
    from siltlake.observe.metrics import observe_error, observe_report

    stop = threading.Event()
    # SIGTERM (a service manager's stop) ends after the current round, as Ctrl-C does.
    stop_on_sigterm(stop)
    daemon_logging(context, "stream")
    observing = Observing(deployment, metrics_port, bind)
    console.print("streaming; Ctrl-C stops after the current round")
    failed = retrying("stream round failed")

    def on_report(report) -> None:  # a StreamReport
        observe_report("stream", report)
        print_stream_report(report, deployment.staging.root)

    def on_error(exc: Exception, wait: float) -> None:
        observe_error("stream")
        failed(exc, wait)

    try:
        stream_forever(deployment, stop, on_report, interval, on_error=on_error)
    except KeyboardInterrupt:
        stop.set()
    finally:
        observing.close()
    console.print("stopped")
