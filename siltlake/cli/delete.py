"""`silt delete`: delete the rows matching a predicate, one `update` version per partition."""

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
    """Delete the rows matching --where (e.g. an erasure request): one `update` version per partition,
    stamped with --now's time."""
    from siltlake.publish import delete_rows

    if bool(dates) == all_dates:
        raise click.UsageError("give the partitions: --date YYYY-MM-DD (repeatable) or --all-dates")
    now = parse_now(now_text)
    deployment = deployment_of(context)
    record = deployment.catalog.get_table(name)
    wanted = [p.partition_date for p in deployment.catalog.partitions(record.id)] if all_dates else list(dates)
    outcome = []
    with activity(f"deleting from {name}…") as step:
        for done, date in enumerate(wanted):
            step(f"deleting from {name} dt={date} ({done + 1} of {len(wanted)} partitions)…")
            report = delete_rows(deployment, name, date, where, now=now)
            outcome.append((date.isoformat(), report.rows_before, report.rows_before - report.rows_after,
                            str(report.version.version) if report.version else "unchanged"))
    out.print(grid(OUTCOME_COLUMNS, outcome))
