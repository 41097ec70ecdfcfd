"""`silt history`: a table's or one partition's published versions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import date_option, format_option
from siltlake.cli.output import Column, emit, format_count, format_size

HISTORY_COLUMNS = (
    Column("date", "dt"),
    Column("version", right=True),
    Column("table_version", "table version", right=True),
    Column("op"),
    Column("shows"),
    Column("created_at", "created (UTC)"),
    Column("rows", show=lambda n: _blank(n, format_count), right=True),
    Column("bytes", "size", lambda n: _blank(n, format_size), right=True),
)


def _blank(value: int | None, show: Callable[[int], str]) -> str:
    """A definition change's row has no rows or size."""
    return "" if value is None else show(value)


@click.command()
@click.argument("name")
@date_option()
@format_option
@click.pass_context
@friendly
def history(context: click.Context, name: str, date: dt.date | None, fmt: str) -> None:
    """A table's or one partition's published versions."""
    from siltlake.lake import Lake, NoSuchPartition

    try:
        rows = Lake(deployment_of(context)).table(name).history(date=date)
    except NoSuchPartition as exc:
        raise click.BadParameter(str(exc), param_hint="--date") from None
    emit(fmt, HISTORY_COLUMNS, rows, empty=f"{name} has no published versions yet; run `silt publish --once`")
