"""`silt publish`: make new data visible to readers, once or as a daemon."""

from __future__ import annotations

import signal
import sys
import threading

import click

from siltlake.cli.context import deployment_of, friendly, retrying
from siltlake.cli.options import interval_option, now_option, once_option, parse_now
from siltlake.cli.output import activity, console
from siltlake.cli.reports import print_publish_report


@click.command()
@once_option
@now_option
@interval_option("publish.interval")
@click.pass_context
@friendly
def publish(context: click.Context, once: bool, now_text: str | None, interval: float | None) -> None:
    """Make new data visible to readers: switch merged days to their merged objects, close ended days,
    publish new live and merged versions (and sync external catalogs).

    --once exits 1 if an external catalog failed (the next run retries it)."""
    from siltlake.polling import poll_forever
    from siltlake.publish import publish_once

    deployment = deployment_of(context)
    now = parse_now(now_text)
    if once:
        with activity("publishing: switching merged days, closing ended days, publishing versions…"):
            report = publish_once(deployment, now=now)
        print_publish_report(report)
        if report.target_errors:
            sys.exit(1)
        return
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    wait = deployment.config.publish.interval if interval is None else interval
    console.print(f"publishing every {wait:g}s; Ctrl-C stops")
    try:
        poll_forever(lambda: publish_once(deployment, now=now), stop, wait, print_publish_report,
                     on_error=retrying("publish run failed"))
    except KeyboardInterrupt:
        stop.set()
    console.print("stopped")
