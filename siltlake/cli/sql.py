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
    from siltlake.read.plan import QueryPlan

ENGINE_HELP = ("auto: DuckDB over the exact file lists when the query translates faithfully (the same answer as "
               "Spark's), else Spark; duckdb: DuckDB or an error saying why not; spark: always Spark.")


@click.command("sql")
@click.argument("query")
@format_option
@click.option("--limit", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Rows to fetch at most; a note on stderr says when the result had more.")
@click.option("--engine", type=click.Choice(["auto", "duckdb", "spark"]), default="auto", show_default=True,
              help=ENGINE_HELP)
@click.pass_context
@friendly
def sql_command(context: click.Context, query: str, fmt: str, limit: int, engine: str) -> None:
    """Run Spark SQL over the tables, named schema.table."""
    from siltlake.read.plan import checked_query, plan_query

    # The parse and the sandbox's refusals need no catalog: said before the deployment opens. Then names and
    # time travel are checked, and the reads pinned, before any engine starts.
    tree = checked_query(query)
    deployment = deployment_of(context)
    plan = plan_query(tree, deployment)
    from siltlake.spark import time_bound

    with time_bound(deployment.config.sql.timeout, "sql.timeout", "the query"):
        columns, rows = _run(deployment, query, plan, engine, limit)
    _show(fmt, columns, rows, limit)


def _run(deployment: Deployment, query: str, plan: QueryPlan, engine: str, limit: int) -> tuple[list[str], list]:
    """The query's column names and at most limit + 1 rows (one more than shown: whether the limit cut them), from
    DuckDB when it gives Spark's answer (and the engine allows), else from Spark."""
    if engine != "spark":
        from siltlake.errors import SiltError
        from siltlake.read.duck import faithful, run_plan
        from siltlake.read.translate import NotFaithful

        try:
            translation = faithful(plan, deployment)
            with activity("running the query on DuckDB…"):
                rows = run_plan(plan, deployment, translation, limit + 1)
        except NotFaithful as exc:
            if engine == "duckdb":
                raise SiltError(f"--engine duckdb: this query may not give Spark's answer on DuckDB ({exc}); run "
                                "it with --engine spark or auto") from None
        else:
            return translation.columns, rows
    from siltlake.read import sql
    from siltlake.spark import bound_session, is_remote

    spark = bound_session(_spark_session(deployment))  # a Spark Connect session is tagged here
    try:
        with activity("running the query…"):
            frame = sql(spark, query, deployment, plan=plan)
            collected = frame.limit(limit + 1).collect()
        return frame.columns, collected
    finally:
        if is_remote(spark):
            spark.stop()  # ends this client's session on the server (its temp views), not the server


def _spark_session(deployment: Deployment) -> SparkSession:
    """A session of the Spark Connect server spark.connect names when one answers there (warm: no JVM starts
    here), else this process's own, said on stderr."""
    config = deployment.config.spark
    if config.connect:
        from siltlake.spark import connect_session

        session = connect_session(config)
        if session is not None:
            return session
        console.print(f"no Spark Connect server answers at {config.connect} (spark.connect): starting Spark here",
                      highlight=False)
    return deployment.spark()


def _show(fmt: str, names: list[str], rows: list, limit: int) -> None:
    emit(fmt, [Column(name, show=format_value) for name in names], rows[:limit])
    if len(rows) > limit:
        console.print(f"showing the first {limit:,} row{'' if limit == 1 else 's'}: the result has more "
                      "(--limit sets how many)", highlight=False)
