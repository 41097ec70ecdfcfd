"""`silt sql`: Spark SQL over the tables."""

from __future__ import annotations

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import format_option
from siltlake.cli.output import Column, activity, console, emit, format_value


@click.command("sql")
@click.argument("query")
@format_option
@click.option("--limit", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Rows to fetch at most; a note on stderr says when the result had more.")
@click.pass_context
@friendly
def sql_command(context: click.Context, query: str, fmt: str, limit: int) -> None:
    """Run Spark SQL over the tables, named schema.table."""
    from siltlake.read import sql

    deployment = deployment_of(context)
    spark = deployment.spark()
    with activity("running the query…"):
        frame = sql(spark, query, deployment)
        rows = frame.limit(limit + 1).collect()  # one more than shown: whether the limit cut the result
    emit(fmt, [Column(name, show=format_value) for name in frame.columns], rows[:limit])
    if len(rows) > limit:
        console.print(f"showing the first {limit:,} row{'' if limit == 1 else 's'}: the result has more "
                      "(--limit sets how many)", highlight=False)
