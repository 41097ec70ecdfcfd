"""`silt sql`: Spark SQL over the tables; small questions answered by DuckDB without starting Spark."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import format_option
from siltlake.cli.output import Column, activity, console, emit, format_value

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from siltlake.deployment import Deployment

ENGINE_HELP = (
    "auto: DuckDB over the exact file lists when the query translates faithfully (the same answer as "
    "Spark's), else Spark; duckdb: DuckDB or an error saying why not; spark: always Spark."
)


@click.command("sql")
@click.argument("query")
@format_option
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=1000,
    show_default=True,
    help="Rows to fetch at most; a note on stderr says when the result had more.",
)
@click.option(
    "--engine", type=click.Choice(["auto", "duckdb", "spark"]), default="auto", show_default=True, help=ENGINE_HELP
)
@click.pass_context
@friendly
def sql_command(context: click.Context, query: str, fmt: str, limit: int, engine: str) -> None:
    """Run Spark SQL over the tables, named schema.table."""
    from siltlake.lake import Lake
    from siltlake.read.plan import checked_query

    # The parse and the sandbox's refusals need no catalog: said before the deployment opens. Lake.sql then checks
    # names and time travel, and pins the reads, before any engine starts.
    checked_query(query)
    deployment = deployment_of(context)
    result = Lake(deployment).sql(
        query, engine=engine, limit=limit, spark=lambda: _spark_session(deployment), running=activity
    )
    _show(fmt, list(result.columns), list(result.rows), result.truncated, limit)


def _spark_session(deployment: Deployment) -> SparkSession:
    """A session of the Spark Connect server spark.connect names when one answers there (warm: no JVM starts
    here), else this process's own, said on stderr."""
    config = deployment.config.spark
    if config.connect:
        from siltlake.spark import connect_session

        session = connect_session(config)
        if session is not None:
            return session
        console.print(
            f"no Spark Connect server answers at {config.connect} (spark.connect): starting Spark here", highlight=False
        )
    return deployment.spark()


def _show(fmt: str, names: list[str], rows: list, truncated: bool, limit: int) -> None:
    emit(fmt, [Column(name, show=format_value) for name in names], rows)
    if truncated:
        console.print(
            f"showing the first {limit:,} row{'' if limit == 1 else 's'}: the result has more (--limit sets how many)",
            highlight=False,
        )
