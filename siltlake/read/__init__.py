"""read: DataFrames over what a table shows readers, and Spark SQL over `schema.table` names."""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp

from siltlake.deployment import Deployment
from siltlake.errors import NotFoundError, SiltError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from siltlake.catalog import TableRecord

__all__ = ["spark_schema", "sql", "table"]


def spark_schema(record: TableRecord) -> StructType:
    """The table's columns as Spark types, plus the partition column dt."""
    from pyspark.sql.types import DateType, StructField, StructType
    from pyspark.sql.types import _parse_datatype_string as parse

    spark_types = {"string": "string", "json": "string", "int": "int", "bigint": "bigint",
                   "double": "double", "boolean": "boolean", "timestamp": "timestamp", "date": "date"}
    fields = [
        StructField(c.name, parse(spark_types.get(c.type, c.type)), nullable=True)
        for c in record.definition.columns
    ]
    return StructType([*fields, StructField("dt", DateType(), nullable=False)])


def table(spark: SparkSession, name: str, deployment: Deployment | None = None) -> DataFrame:
    """The live objects of every partition, pinned to the largest small object id when the read starts."""
    deployment = deployment or Deployment.open()
    record = deployment.catalog.get_table(name)
    layout = record.layout(deployment.instance_key)
    watermark = deployment.catalog.max_small_object_id()
    objects = deployment.catalog.small_objects(record.id, delayed=False, up_to_id=watermark)
    schema = spark_schema(record)
    if not objects:
        return spark.createDataFrame([], schema)
    lake = deployment.lake
    paths = [lake.engine_uri(layout.small_object(o.partition_date, o.id, False)) for o in objects]
    return (
        spark.read.schema(schema)
        .option("basePath", lake.engine_uri(layout.live_prefix()))
        .parquet(*paths)
    )


def _view_name(schema_name: str, table_name: str) -> str:
    return f"__silt_{schema_name}__{table_name}"


def sql(spark: SparkSession, query: str, deployment: Deployment | None = None) -> DataFrame:
    """Run Spark SQL in which tables are named schema.table.

    Spark temp views cannot be qualified, so the query is parsed (sqlglot, Spark dialect), each
    qualified table name is replaced by a temp view of that table, and the query is re-rendered.
    """
    deployment = deployment or Deployment.open()
    try:
        statements = sqlglot.parse(query, read="spark")
    except sqlglot.errors.ParseError as exc:
        raise SiltError(f"cannot parse the query: {exc}") from None
    if len(statements) != 1 or statements[0] is None:
        raise SiltError("give exactly one SQL statement")
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise SiltError("only queries (SELECT, WITH, set operations) are supported")
    cte_names = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    for node in list(tree.find_all(exp.Table)):
        if not node.db:
            if node.name and node.name not in cte_names:
                raise SiltError(f"table {node.name!r} needs its schema: write schema.table")
            continue
        qualified = f"{node.db}.{node.name}"
        try:
            table(spark, qualified, deployment).createOrReplaceTempView(_view_name(node.db, node.name))
        except NotFoundError:
            raise SiltError(f"no table {qualified}; `silt table list` shows the tables") from None
        node.replace(exp.to_table(_view_name(node.db, node.name)).as_(node.alias_or_name))
    return spark.sql(tree.sql(dialect="spark"))
