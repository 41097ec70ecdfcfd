"""`silt status`: partitions, unmerged objects and merge jobs per table; failing staging objects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import format_option
from siltlake.cli.output import Column, emit, format_age, format_size, out, shown, write_json

if TYPE_CHECKING:
    from siltlake.catalog.merge_status import TableQueueStatus

_PARTITION_STATES = ("new", "live", "closed", "switched")
_JOB_STATES = ("scheduled", "due", "running", "stale", "continuing", "failed")
STATUS_COLUMNS = (
    Column("table"),
    *(Column(f"partitions_{state}") for state in _PARTITION_STATES),
    Column("unmerged_objects"),
    Column("unmerged_bytes"),
    Column("oldest_unmerged_age_seconds"),
    *(Column(f"jobs_{state}") for state in _JOB_STATES),
)


def _status_row(row: TableQueueStatus) -> list[Any]:
    """A status entry flattened to STATUS_COLUMNS (CSV has no nesting; the parked jobs' errors are in the JSON)."""
    return [
        row["table"],
        *(row["partitions"].get(state, 0) for state in _PARTITION_STATES),
        row["unmerged_objects"],
        row["unmerged_bytes"],
        row["oldest_unmerged_age_seconds"],
        *(row["jobs"][state] for state in _JOB_STATES),
    ]


@click.command()
@format_option
@click.pass_context
@friendly
def status(context: click.Context, fmt: str) -> None:
    """Per table: partitions by state, unmerged small objects, merge jobs by state, parked failures; then
    staging objects whose processing is failing.

    With --format json: one object, {"tables": [...], "failing_staging_objects": [...], "settling": [...],
    "rewritten_staging_files": [...]} (local staging files waiting to settle, or rewritten in place); with
    --format csv: a row per table (the parked jobs' errors and the failing staging objects only in JSON and the
    table)."""
    from dataclasses import asdict

    deployment = deployment_of(context)  # first: it imports the catalog with the start-up GC pause; checks it
    from siltlake.clock import utcnow
    from siltlake.hosts import local_host

    rows = deployment.catalog.merge_queue.status(utcnow(), deployment.config.merge.job_timeout, local_host())
    failing = deployment.catalog.staging.failing()
    now = utcnow()
    settling = deployment.catalog.waits.summary(now)
    rewritten = deployment.catalog.positions.rewritten()
    if fmt == "json":
        write_json(
            {
                "tables": rows,
                "failing_staging_objects": [asdict(f) for f in failing],
                "settling": [
                    {
                        "staging_root": item.staging_root,
                        "waiting": item.waiting,
                        "oldest_wait_seconds": _waited(item.oldest_first_seen, now),
                        "rewritten": item.rewritten,
                    }
                    for item in settling
                ],
                "rewritten_staging_files": [
                    {"uri": p.uri, "reason": p.reason, "detected": p.change_time} for p in rewritten
                ],
            }
        )
        return
    if fmt == "csv":
        emit(fmt, STATUS_COLUMNS, [_status_row(row) for row in rows])
        return
    if not rows:
        out.print("no tables; create one with `silt table create`")
        return
    for row in rows:
        parts, jobs = row["partitions"], row["jobs"]
        failed = f"[red]{jobs['failed']} failed[/]" if jobs["failed"] else "0 failed"
        out.print(f"[bold]{row['table']}[/]", highlight=False)
        # A log table's states (new, live, closed, switched) or a derived table's (built, stale), as counted.
        out.print(f"  partitions  {', '.join(f'{n} {state}' for state, n in parts.items())}", highlight=False)
        out.print(
            f"  unmerged    {row['unmerged_objects']:,} small objects ({format_size(row['unmerged_bytes'])}), "
            f"oldest {format_age(row['oldest_unmerged_age_seconds'])}",
            highlight=False,
        )
        out.print(
            f"  merge jobs  {jobs['scheduled']} scheduled, {jobs['due']} due, {jobs['running']} running, "
            f"{jobs['stale']} stale, {jobs['continuing']} continuing, {failed}",
            highlight=False,
        )
        for parked in row["failed_jobs"]:
            out.print(
                f"  [red]parked[/] {parked['date']} (job {parked['job_id']}, "
                f"{parked['attempts']} attempts): {shown(parked['error'])}",
                highlight=False,
                soft_wrap=True,
            )
    _print_settling(settling, rewritten, now)
    if failing:
        limit = deployment.config.stream.max_failures
        out.print(
            f"[bold]failing staging objects[/] (at {limit} failures, stream.max_failures, an object moves "
            "to `silt unknown list`)",
            highlight=False,
        )
        for item in failing:
            out.print(
                f"  [red]{item.failure_count} of {limit} failures[/] {shown(item.uri)} ({item.table_name}, last "
                f"{item.last_failure_time:%Y-%m-%d %H:%M:%S} UTC): {shown(item.last_failure)}",
                highlight=False,
                soft_wrap=True,
            )


def _waited(first_seen, now) -> float | None:  # naive UTC datetimes
    return (now - first_seen).total_seconds() if first_seen is not None else None


def _print_settling(settling, rewritten, now) -> None:  # catalog.waits' summary, catalog.positions' rewritten
    """Local staging files still being written (not taken yet) and files rewritten in place (never loaded
    again): docs/design.md, "Files written in place and appended to"."""
    for item in settling:
        if item.waiting:
            out.print(
                f"[bold]staging files still being written[/] {item.waiting} under {shown(item.staging_root)} "
                f"wait to settle (the oldest for {format_age(_waited(item.oldest_first_seen, now))}; "
                "stream.settle_time, stream.settle_limit)",
                highlight=False,
            )
    if rewritten:
        out.print(
            "[bold]staging files whose following stopped[/] (rewritten in place, or their delivery failed: "
            "their new bytes are not loaded; `silt staging resume URI --from-offset N` follows one again)",
            highlight=False,
        )
        for position in rewritten:
            stopped = (
                shown(position.reason or "")
                if position.state == "rewritten"
                else f"its delivery {shown(position.pending_uri or '')} is an unknown object (`silt unknown list`)"
            )
            out.print(
                f"  [red]rewritten in place[/] {shown(position.uri)} ({position.change_time:%Y-%m-%d %H:%M:%S}"
                f" UTC; loaded up to offset {position.consumed_end or 0:,}): {stopped}",
                highlight=False,
                soft_wrap=True,
            )
