"""Lake.sql: one SQL query over `schema.table` names, answered by DuckDB over the exact file lists when that gives
Spark's answer, else by Spark. `silt sql` runs its queries through it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from siltlake.errors import SiltError
from siltlake.read.plan import QueryPlan, checked_query, plan_query
from siltlake.read.version_files import parse_as_of

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from siltlake.deployment import Deployment

__all__ = ["ENGINES", "SqlResult", "run_sql"]

ENGINES = ("auto", "duckdb", "spark")


@dataclass(frozen=True)
class SqlResult:
    """A query's answer: its `columns`, its `rows` (values as PySpark's collect() gives them, whichever engine
    answered), the `engine` that answered ("duckdb" or "spark") and whether `limit` cut rows off (`truncated`)."""

    columns: tuple[str, ...]
    rows: tuple[tuple, ...]
    engine: str
    truncated: bool = False

    @property
    def num_rows(self) -> int:
        return len(self.rows)

    def to_pylist(self) -> list[dict[str, Any]]:
        """The rows as dicts by column name."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]

    def to_arrow(self) -> pa.Table:
        """The rows as a pyarrow Table, column types inferred from the values (a column of nulls only: null)."""
        import pyarrow as pa

        columns = [[_plain(row[index]) for row in self.rows] for index in range(len(self.columns))]
        return pa.Table.from_arrays([pa.array(values) for values in columns], names=list(self.columns))

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The rows as record batches (the answer is already in memory: this is to_arrow's batches)."""
        yield from self.to_arrow().to_batches()

    def to_pandas(self) -> pd.DataFrame:
        return self.to_arrow().to_pandas()


def _plain(value: object) -> object:
    # A Spark struct arrives as a Row, a tuple subclass pyarrow would read as a list; its fields by name are the struct.
    as_dict = getattr(value, "asDict", None)
    if callable(as_dict):
        return as_dict(recursive=True)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def run_sql(
    deployment: Deployment,
    query: str,
    *,
    engine: str = "auto",
    limit: int | None = None,
    as_of: dt.datetime | str | None = None,
    spark: SparkSession | Callable[[], SparkSession] | None = None,
    running: Callable[[str], AbstractContextManager[object]] | None = None,
) -> SqlResult:
    """Plan the query (names, time travel and the sandbox checked; every read pinned in one catalog snapshot), then
    run it on the engine `engine` allows, within sql.timeout. `as_of` reads every table the query does not pin
    itself as of that time. `spark`: a session, or a function making one when Spark is needed (default: the
    deployment's). `running`: given what runs now ("running the query on DuckDB…"), the context it runs in (a
    command's spinner)."""
    from siltlake.spark import time_bound

    if engine not in ENGINES:
        raise SiltError(f"engine {engine!r}: one of {', '.join(ENGINES)}")
    if limit is not None and limit < 0:
        raise SiltError(f"limit {limit}: a number of rows, 0 or more")
    tree = checked_query(query)
    reads = None
    if as_of is not None:
        pinned = {"as_of": parse_as_of(as_of)}
        reads = {f"{name.db}.{name.name}": pinned for name in _table_references(tree)}
    plan = plan_query(tree, deployment, reads=reads)
    with time_bound(deployment.config.sql.timeout, "sql.timeout", "the query"):
        columns, rows, answered_by = _answer(deployment, query, plan, engine, limit, spark, running or _quietly)
    truncated = limit is not None and len(rows) > limit
    return SqlResult(tuple(columns), tuple(tuple(row) for row in rows[:limit]), answered_by, truncated)


def _quietly(_what: str) -> AbstractContextManager[object]:
    return nullcontext()


def _table_references(tree: Any) -> list[Any]:
    from sqlglot import exp

    return [node for node in tree.find_all(exp.Table) if node.db]


def _answer(
    deployment: Deployment,
    query: str,
    plan: QueryPlan,
    engine: str,
    limit: int | None,
    spark: SparkSession | Callable[[], SparkSession] | None,
    running: Callable[[str], AbstractContextManager[object]],
) -> tuple[list[str], list, str]:
    """The column names and the rows (at most limit + 1: one more says whether the limit cut them), from DuckDB
    when it gives Spark's answer (and the engine allows), else from Spark."""
    fetch = None if limit is None else limit + 1
    if engine != "spark":
        from siltlake.read.duck import faithful, run_plan
        from siltlake.read.translate import NotFaithful

        try:
            translation = faithful(plan, deployment)
            with running("running the query on DuckDB…"):
                rows = run_plan(plan, deployment, translation, fetch)
        except NotFaithful as exc:
            if engine == "duckdb":
                raise SiltError(
                    f"--engine duckdb: this query may not give Spark's answer on DuckDB ({exc}); run "
                    "it with --engine spark or auto"
                ) from None
        else:
            return translation.columns, rows, "duckdb"
    from siltlake.read import sql
    from siltlake.spark import bound_session, is_remote

    session = spark if spark is not None and not callable(spark) else (spark or deployment.spark)()
    made_here = session is not spark
    session = bound_session(session)  # a Spark Connect session is tagged here
    try:
        with running("running the query…"):
            frame = sql(session, query, deployment, plan=plan)
            collected = (frame if fetch is None else frame.limit(fetch)).collect()
        return frame.columns, collected, "spark"
    finally:
        if made_here and is_remote(session):
            session.stop()  # ends this client's session on the server (its temp views), not the server
