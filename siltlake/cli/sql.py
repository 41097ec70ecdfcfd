"""`silt sql`: Spark SQL over the tables; small questions answered by DuckDB without starting Spark."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from siltlake.cli.context import deployment_of, friendly, importing
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
    # What the query needs is imported first, with the configuration and the catalog, without the cyclic GC
    # (context.importing); siltlake.lake is not: Lake.sql is run_sql.
    with importing():
        from siltlake.read.query import Translations, run_sql

        translations = Translations.default()
        # A query run before (its DuckDB translation kept) is neither parsed nor translated again: no sqlglot.
        kept = engine != "spark" and translations is not None and translations.get(query) is not None
        tree = None
        if not kept:
            from siltlake.read.plan import checked_query

            # The parse and the sandbox's refusals need no catalog: said before the deployment opens. run_sql
            # then checks names and time travel, and pins the reads, before any engine starts.
            tree = checked_query(query)
        deployment = deployment_of(context)
        if engine != "spark":  # DuckDB, and (unless kept) the dialect the translation writes
            import duckdb  # noqa: F401

            import siltlake.read.duck

            if not kept:
                from sqlglot.dialects import Dialect

                import siltlake.read.translate  # noqa: F401

                Dialect.get_or_raise("duckdb")
    result = run_sql(
        deployment,
        query,
        engine=engine,
        limit=limit,
        spark=lambda: _spark_session(deployment),
        running=activity,
        tree=tree,
        translations=translations,
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
