"""read: DataFrames over what a table shows readers, and Spark SQL over `schema.table` names."""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
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


def table(spark: SparkSession, name: str, deployment: Deployment | None = None, *,
          as_of_version: int | None = None, as_of: dt.datetime | None = None) -> DataFrame:
    """A DataFrame of what the table shows (with its dt column), pinned when the read starts.

    Current state: switched partitions show their published merged version's objects; the others show
    their newest update's objects, if any, and the live objects above them up to the largest small object
    id at the start of the read. as_of_version
    (each partition's newest version at or below it) or as_of (naive UTC, or aware) reads an earlier
    published state. The catalog is asked a constant number of queries, whatever the partitions.
    """
    from siltlake.clock import to_naive_utc
    from siltlake.publish.manifests import read_manifest
    from siltlake.storage import for_engine

    deployment = deployment or Deployment.open()
    record = deployment.catalog.get_table(name)
    layout = record.layout(deployment.instance_key)
    views = deployment.catalog.reader_snapshot(
        record.id, as_of_version=as_of_version, as_of=to_naive_utc(as_of) if as_of is not None else None)
    schema = spark_schema(record)
    lake = deployment.lake
    live_paths = [lake.engine_uri(layout.small_object(view.partition_date, object_id, False))
                  for view in views for object_id in view.live_object_ids]
    manifests = [view for view in views if view.manifest_key is not None]
    with ThreadPoolExecutor(max(1, min(16, len(manifests)))) as pool:
        listed = list(pool.map(lambda view: read_manifest(lake, view.manifest_key), manifests))
    merged_paths = [for_engine(uri) for entries in listed for uri, _ in entries]
    # dt comes from the dt=YYYY-MM-DD directory of each object (partition discovery under basePath).
    frames = [
        spark.read.schema(schema).option("basePath", lake.engine_uri(prefix)).parquet(*paths)
        for prefix, paths in ((layout.live_prefix(), live_paths), (layout.merged_prefix(), merged_paths)) if paths
    ]
    if not frames:
        return spark.createDataFrame([], schema)
    return frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])


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
