"""`silt update`: set columns of the rows matching a predicate, as one table version."""

from __future__ import annotations

import datetime as dt

import click

from siltlake.cli.context import deployment_of, friendly, needs_spark
from siltlake.cli.options import parse_now
from siltlake.cli.output import activity
from siltlake.cli.writes import chosen_table, partition_options, print_updates, write_options


def _assignments(values: tuple[str, ...]) -> dict[str, str]:
    """--set COLUMN=EXPRESSION options as {column: Spark SQL expression}."""
    assignments: dict[str, str] = {}
    for value in values:
        column, equals, expression = value.partition("=")
        if not equals or not column.strip() or not expression.strip():
            raise click.BadParameter(
                f"{value!r} is not COLUMN=EXPRESSION, e.g. action='login' or action=upper(action)", param_hint="--set"
            )
        if column.strip() in assignments:
            raise click.BadParameter(f"{column.strip()} is set twice", param_hint="--set")
        assignments[column.strip()] = expression.strip()
    return assignments


@click.command("update")
@click.argument("name")
@click.option(
    "--set",
    "assignments",
    multiple=True,
    required=True,
    metavar="COLUMN=EXPRESSION",
    help="A column and its new value, a Spark SQL expression over the row (a text in quotes: "
    "action='login'); repeat the option for several columns.",
)
@click.option(
    "--where",
    "where",
    default=None,
    help="Spark SQL predicate over the table's columns; the rows "
    "where it is true are updated (default: every row of the partitions given). Without --date or "
    "--all-dates, its conditions on dt choose the partitions.",
)
@partition_options
@write_options
@click.pass_context
@friendly
@needs_spark("silt update")
def update_command(
    context: click.Context,
    name: str,
    assignments: tuple[str, ...],
    where: str | None,
    dates: tuple[dt.date, ...],
    all_dates: bool,
    now_text: str | None,
    request_id: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Set columns of the rows of NAME matching --where in every partition given (neither --date nor --all-dates:
    those --where's conditions on dt allow, every one without them), as one table version stamped with --now's time
    (an `update` of each partition with a matching row): readers see all of it or none. Primary key columns are not
    set. With --dry-run the matching rows are counted, nothing is written."""
    values = _assignments(assignments)
    now = parse_now(now_text)
    table, given, count = chosen_table(deployment_of(context), name, where, dates, all_dates, "update")
    with activity(f"updating {name}…") as step:
        report = table.update(
            values,
            where,
            dates=given,
            request_id=request_id,
            now=now,
            dry_run=dry_run,
            progress=lambda done, date: step(f"updating {name} dt={date} ({done + 1} of {count} partitions)…"),
        )
    print_updates(report, as_json=as_json, dry_run=dry_run, changed="set")
