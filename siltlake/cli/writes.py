"""What the commands that write rows (delete, update, upsert, restore) share: --request-id and the report of a
partition rewrite (asking before a change: cli.context.confirm)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import click

from siltlake.cli.options import date_option, dry_run_option, json_option, now_option
from siltlake.cli.output import Column, format_count, grid, out, write_json

if TYPE_CHECKING:
    from siltlake.deployment import Deployment
    from siltlake.lake import Table
    from siltlake.write.requests import UpdatesReport

REQUEST_ID_HELP = (
    "An id of this write (e.g. a UUID) that makes it exactly-once: run again with the same id, it "
    "changes nothing and says so. Ids are kept for reap.request_id_retention (default 7d)."
)

request_id_option = click.option("--request-id", default=None, metavar="ID", help=REQUEST_ID_HELP)


def write_options(command):  # a click decorator
    """The options every row-writing command takes: --now, --request-id, --dry-run, --json."""
    for option in (json_option, dry_run_option, request_id_option, now_option):
        command = option(command)
    return command


def partition_options(command):  # a click decorator
    """--date (repeatable) and --all-dates: the partitions a command rewrites (read by chosen_table)."""
    command = click.option("--all-dates", is_flag=True, help="Every partition of the table.")(command)
    return date_option(multiple=True)(command)


def chosen_table(
    deployment: Deployment, name: str, where: str | None, dates: tuple[dt.date, ...], all_dates: bool, operation: str
) -> tuple[Table, Any, int]:
    """The table, the partitions `--date`/`--all-dates` give as Table.delete/update take them (neither: None, the
    days --where's conditions on dt allow), and how many partitions that is (Table.write_partitions, the one
    resolver: a predicate that uses dt wrongly is refused here, before any work)."""
    from siltlake.lake import Lake

    if dates and all_dates:
        raise click.UsageError("give --date YYYY-MM-DD (repeatable) or --all-dates, not both")
    table = Lake(deployment).table(name)  # an unknown table is refused here
    given = "all" if all_dates else list(dates) or None
    wanted, _ = table.write_partitions(where, given, operation)
    return table, given, len(wanted)


def print_updates(report: UpdatesReport, *, as_json: bool, dry_run: bool, changed: str) -> None:
    """A delete's, update's or restore's report: per partition rows before, rows `changed` (deleted, set,
    after) and the version; for a retried request id, what its first commit did."""
    if as_json:
        write_json({**report.as_dict(), "dry_run": dry_run})
        return
    if report.applied_before is not None:
        out.print(report.message, highlight=False, soft_wrap=True)
        return
    columns = (
        Column("dt"),
        Column("rows before", show=format_count, right=True),
        Column(f"{'would be ' if dry_run else ''}{changed}", show=format_count, right=True),
        Column("version", right=True),
    )
    out.print(
        grid(
            columns,
            [
                (
                    p.partition_date.isoformat(),
                    p.rows_before,
                    count,
                    "dry run" if dry_run else str(p.version.version) if p.version else "unchanged",
                )
                for p, count in zip(report.partitions, report.changed(), strict=True)
            ],
        )
    )
    if report.table_version is not None:
        out.print(f"{report.table} is now at table version {report.table_version}", highlight=False)
