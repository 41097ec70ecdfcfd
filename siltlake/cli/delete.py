"""`silt delete`: delete the rows matching a predicate from some partitions, as one table version."""

from __future__ import annotations

import datetime as dt

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import parse_now
from siltlake.cli.output import activity
from siltlake.cli.writes import chosen_table, partition_options, print_updates, write_options


@click.command()
@click.argument("name")
@click.option(
    "--where",
    "where",
    required=True,
    help='Spark SQL predicate over the table\'s columns, e.g. "user_id = 42"; rows where it is true are deleted.',
)
@partition_options
@write_options
@click.pass_context
@friendly
def delete(
    context: click.Context,
    name: str,
    where: str,
    dates: tuple[dt.date, ...],
    all_dates: bool,
    now_text: str | None,
    request_id: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Delete the rows matching --where (e.g. an erasure request) from every partition given (neither --date nor
    --all-dates: those --where's conditions on dt allow, every one without them), as one table version stamped with
    --now's time: readers see all of it or none. A date the table lacks is refused before anything is rewritten.
    With --dry-run the matching rows are counted and nothing is written."""
    now = parse_now(now_text)
    table, given, count = chosen_table(deployment_of(context), name, where, dates, all_dates, "delete")
    with activity(f"deleting from {name}…") as step:
        report = table.delete(
            where,
            dates=given,
            request_id=request_id,
            now=now,
            dry_run=dry_run,
            progress=lambda done, date: step(f"deleting from {name} dt={date} ({done + 1} of {count} partitions)…"),
        )
    print_updates(report, as_json=as_json, dry_run=dry_run, changed="deleted")
