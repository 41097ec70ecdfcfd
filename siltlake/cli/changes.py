"""`silt changes`: the change feed of a table, the rows each version in (--from, --to] inserted or deleted."""

from __future__ import annotations

import sys

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.output import FORMATS, Column, emit

CHANGE_FORMATS = (*FORMATS, "parquet")


@click.command("changes")
@click.argument("name")
@click.option(
    "--from",
    "start",
    type=click.IntRange(min=0),
    required=True,
    help="The table version the changes start after (0: from the first version).",
)
@click.option(
    "--to",
    "end",
    type=click.IntRange(min=0),
    default=None,
    help="The last table version whose changes are shown (default: the newest).",
)
@click.option(
    "--column",
    "columns",
    multiple=True,
    help="Only this column (repeat for several); the change columns are always kept.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(CHANGE_FORMATS),
    default="table",
    show_default=True,
    help="table, json or csv as other listings; parquet: one Parquet file written to --output.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="With --format parquet: the file to write (`-` for stdout).",
)
@click.pass_context
@friendly
def changes(
    context: click.Context,
    name: str,
    start: int,
    end: int | None,
    columns: tuple[str, ...],
    fmt: str,
    output: str | None,
) -> None:
    """The rows each version of table NAME after --from (up to --to) inserted or deleted, with _change_type,
    _commit_version and _commit_timestamp."""
    from siltlake.lake import Lake
    from siltlake.read.changes import CHANGE_COLUMNS

    if fmt == "parquet" and output is None:
        raise click.UsageError("--format parquet writes a file: give --output FILE (or --output - for stdout)")
    if output is not None and fmt != "parquet":
        raise click.UsageError("--output is for --format parquet; the other formats print on stdout")
    wanted = None
    if columns:
        wanted = [*dict.fromkeys(c for c in columns if c not in CHANGE_COLUMNS), *CHANGE_COLUMNS]
    feed = Lake(deployment_of(context)).table(name).changes(start, end, wanted)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(feed, sys.stdout.buffer if output == "-" else output)
        return
    emit(
        fmt,
        [Column(n) for n in feed.column_names],
        feed.to_pylist(),
        empty=f"{name} has no changes after version {start}" + (f" up to version {end}" if end is not None else ""),
    )
