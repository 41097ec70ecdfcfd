"""`silt delete`: delete the rows matching a predicate from some partitions, as one table version."""

from __future__ import annotations

import datetime as dt

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import date_option, now_option, parse_now
from siltlake.cli.output import Column, activity, format_count, grid, out

OUTCOME_COLUMNS = (Column("dt"), Column("rows before", show=format_count, right=True),
                   Column("deleted", show=format_count, right=True), Column("version", right=True))


@click.command()
@click.argument("name")
@click.option("--where", "where", required=True, help="Spark SQL predicate over the table's columns, e.g. "
              "\"user_id = 42\"; rows where it is true are deleted.")
@date_option(multiple=True)
@click.option("--all-dates", is_flag=True, help="Every partition of the table.")
@now_option
@click.pass_context
@friendly
def delete(context: click.Context, name: str, where: str, dates: tuple[dt.date, ...], all_dates: bool,
           now_text: str | None) -> None:
    """Delete the rows matching --where (e.g. an erasure request) from every partition given, as one table
    version stamped with --now's time: readers see all of it or none. A date the table lacks is refused
    before anything is rewritten."""
    from siltlake.publish import delete_where

    if bool(dates) == all_dates:
        raise click.UsageError("give the partitions: --date YYYY-MM-DD (repeatable) or --all-dates")
    now = parse_now(now_text)
    deployment = deployment_of(context)
    record = deployment.catalog.tables.get(name)
    wanted = [p.partition_date for p in deployment.catalog.partitions.list(record.id)] if all_dates else list(dates)
    with activity(f"deleting from {name}…") as step:
        reports = delete_where(deployment, name, wanted, where, now=now, progress=lambda done, date: step(
            f"deleting from {name} dt={date} ({done + 1} of {len(wanted)} partitions)…"))
    out.print(grid(OUTCOME_COLUMNS, [
        (report.partition_date.isoformat(), report.rows_before, report.rows_before - report.rows_after,
         str(report.version.version) if report.version else "unchanged") for report in reports]))
