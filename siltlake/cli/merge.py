"""`silt merge`: the merge job queue's worker, once or as a daemon."""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING

import click

from siltlake.cli.context import deployment_of, friendly, importing, needs_spark, retrying
from siltlake.cli.observing import Observing, daemon_logging, stop_on_sigterm
from siltlake.cli.options import (
    bind_option,
    json_option,
    metrics_port_option,
    now_option,
    once_option,
    parse_now,
    table_option,
)
from siltlake.cli.output import console, progress_bar, write_json
from siltlake.cli.reports import print_merge_report, print_merge_schedule

if TYPE_CHECKING:
    from siltlake.merge import MergeReport


@click.command()
@once_option
@now_option
@click.option("--slots", type=int, default=None, help="Jobs run at once (default: merge.slots).")
@table_option
@click.option("--retry-failed", is_flag=True, help="First put parked (failed) jobs back in the queue.")
@json_option
@metrics_port_option
@bind_option
@click.pass_context
@friendly
@needs_spark("silt merge")
def merge(
    context: click.Context,
    once: bool,
    now_text: str | None,
    slots: int | None,
    table_name: str | None,
    retry_failed: bool,
    as_json: bool,
    metrics_port: int | None,
    bind: str,
) -> None:
    """Merge each day's small objects into a few large ones: the merge job queue's worker.

    A round runs every due job (and the jobs they continue into); --once shows a progress bar, says when the
    jobs left for later are due, and exits 1 if a job failed. --now and --json work with --once. Jobs wait
    merge_interval after a partition's first object (failed ones their retry backoff): --now without a time
    first makes every scheduled job due now, so this run merges them; --now TIME runs as if it were then."""
    if now_text is not None and not once:
        raise click.UsageError("--now works with --once")
    if once and metrics_port is not None:
        raise click.UsageError("--metrics-port serves a daemon's metrics: give it without --once")
    now = parse_now(now_text)
    with importing():  # the merge's libraries with the deployment's, without the cyclic GC
        from siltlake.cli.merge_bar import MergeBar
        from siltlake.clock import utcnow
        from siltlake.merge import MergeWorker

        deployment = deployment_of(context)
    clock = (lambda: now) if now is not None else utcnow
    table_ids = [deployment.catalog.tables.get(table_name).id] if table_name else None
    if retry_failed:
        count = 0
        parked_in: list[int | None] = [*table_ids] if table_ids else [None]  # None: every table's
        for table_id in parked_in:
            count += deployment.catalog.merge_queue.retry_parked(clock(), table_id)
        console.print(f"{count} parked jobs queued again")
    if slots is not None and slots < 1:
        raise click.BadParameter("must be at least 1", param_hint="--slots")
    if once:
        if now_text == "":
            advanced = deployment.catalog.merge_queue.advance(clock(), table_ids)
            console.print(f"{advanced} scheduled jobs made due now", highlight=False)
        with progress_bar() as bar:
            worker = MergeWorker(deployment, slots=slots, table_ids=table_ids, progress=MergeBar(bar), clock=clock)
            report = worker.run(once=True)
        finished_at = clock()
        scheduled, next_due = deployment.catalog.merge_queue.scheduled(finished_at, table_ids)
        if as_json:
            write_json({**report.__dict__, "scheduled": scheduled, "next_due": next_due})
        else:
            print_merge_report(report)
            print_merge_schedule(scheduled, next_due, finished_at)
        if report.failed:
            sys.exit(1)
        return
    stop = threading.Event()
    # SIGTERM (a service manager stopping us) finishes the running jobs like Ctrl-C, rather than leaving
    # claims to go stale until another worker takes them over.
    stop_on_sigterm(stop)
    from siltlake.observe.metrics import observe_report

    worker = MergeWorker(deployment, slots=slots, table_ids=table_ids)
    daemon_logging(context, "merge", owner=worker.owner)
    observing = Observing(deployment, metrics_port, bind)
    console.print(f"merging as {worker.owner} with {worker.slots} slots; Ctrl-C stops after the running jobs")
    last = {"claimed": 0}

    def on_round(report: MergeReport) -> None:
        observe_report("merge", report)
        if report.claimed != last["claimed"]:
            last["claimed"] = report.claimed
            print_merge_report(report)

    try:
        worker.run(stop, on_round=on_round, on_error=retrying("catalog unreachable"))
    except KeyboardInterrupt:
        stop.set()
    finally:
        observing.close()
    on_round(worker.report)  # jobs finished since the last report
    console.print("stopped")
