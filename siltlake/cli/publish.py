"""`silt publish`: make new data visible to readers, once or as a daemon."""

from __future__ import annotations

import sys
import threading

import click

from siltlake.cli.context import deployment_of, friendly, retrying
from siltlake.cli.observing import Observing, daemon_logging, stop_on_sigterm
from siltlake.cli.options import (
    bind_option,
    interval_option,
    json_option,
    metrics_port_option,
    now_option,
    once_option,
    parse_now,
)
from siltlake.cli.output import activity, console, write_json
from siltlake.cli.reports import print_publish_report


@click.command()
@once_option
@now_option
@interval_option("publish.interval")
@metrics_port_option
@bind_option
@json_option
@click.pass_context
@friendly
def publish(
    context: click.Context,
    once: bool,
    now_text: str | None,
    interval: float | None,
    metrics_port: int | None,
    bind: str,
    as_json: bool,
) -> None:
    """Make new data visible to readers: switch merged days to their merged objects, close ended days,
    publish new live and merged versions (and sync external catalogs).

    --once exits 1 if an external catalog failed (the next run retries it); --json applies to --once's report."""
    from siltlake.polling import poll_forever
    from siltlake.publish import publish_once

    deployment = deployment_of(context)
    now = parse_now(now_text)
    if once and metrics_port is not None:
        raise click.UsageError("--metrics-port serves a daemon's metrics: give it without --once")
    if as_json and not once:
        raise click.UsageError("--json prints the report of one run: give it with --once")
    if once:
        with activity("publishing: switching merged days, closing ended days, publishing versions…"):
            report = publish_once(deployment, now=now)
        if as_json:
            from dataclasses import asdict

            write_json(asdict(report))
        else:
            print_publish_report(report)
        if report.target_errors:
            sys.exit(1)
        return
    from siltlake.observe.metrics import observe_error, observe_report

    stop = threading.Event()
    stop_on_sigterm(stop)
    wait = deployment.config.publish.interval if interval is None else interval
    daemon_logging(context, "publish")
    observing = Observing(deployment, metrics_port, bind)
    console.print(f"publishing every {wait:g}s; Ctrl-C stops")
    failed = retrying("publish run failed")

    def on_report(report) -> None:  # a PublishReport
        observe_report("publish", report)
        print_publish_report(report)

    def on_error(exc: Exception, seconds: float) -> None:
        observe_error("publish")
        failed(exc, seconds)

    try:
        poll_forever(lambda: publish_once(deployment, now=now), stop, wait, on_report, on_error=on_error)
    except KeyboardInterrupt:
        stop.set()
    finally:
        observing.close()
    console.print("stopped")
