"""read: DataFrames over what a table shows readers, and Spark SQL over `schema.table` names."""

from __future__ import annotations

import datetime as dt
import functools
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

__all__ = ["objects_frame", "spark_schema", "sql", "table"]


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
    their newest update's objects, if any, and the live objects above them up to the largest small
    object id at the start of the read. as_of_version (each partition's newest version at or below it)
    or as_of (naive UTC, or aware) reads an earlier published state. The catalog is asked a constant
    number of queries, whatever the partitions.
    """
    from siltlake.clock import to_naive_utc

    deployment = deployment or Deployment.open()
    record = deployment.catalog.get_table(name)
    views = deployment.catalog.reader_snapshot(
        record.id, as_of_version=as_of_version, as_of=to_naive_utc(as_of) if as_of is not None else None)
    return objects_frame(spark, record, deployment, [view.manifest_key for view in views if view.manifest_key],
                         [(view.partition_date, object_id, False) for view in views
                          for object_id in view.live_object_ids])


def objects_frame(spark: SparkSession, record: TableRecord, deployment: Deployment, manifest_keys: list[str],
                  small_objects: list[tuple[dt.date, int, bool]]) -> DataFrame:
    """A DataFrame (with the dt column) of the objects the manifests list and of small objects
    (date, id, delayed), read with the table's current schema (added columns read as null)."""
    from siltlake.publish.manifests import read_manifest
    from siltlake.storage import for_engine

    layout = record.layout(deployment.instance_key)
    schema = spark_schema(record)
    lake = deployment.lake
    with ThreadPoolExecutor(max(1, min(16, len(manifest_keys)))) as pool:
        listed = list(pool.map(lambda key: read_manifest(lake, key), manifest_keys))
    uris = [for_engine(uri) for entries in listed for uri, _ in entries]
    uris += [lake.engine_uri(layout.small_object(date, object_id, delayed))
             for date, object_id, delayed in small_objects]
    # dt comes from the dt=YYYY-MM-DD directory of each object (partition discovery under basePath): one
    # scan per area (merged, live, delayed) the objects are in.
    scans: dict[str, list[str]] = {}
    for uri in uris:
        scans.setdefault(uri.rsplit("/dt=", 1)[0], []).append(uri)
    frames = [spark.read.schema(schema).option("basePath", prefix).parquet(*paths) for prefix, paths in scans.items()]
    if not frames:
        return spark.createDataFrame([], schema)
    return functools.reduce(lambda left, right: left.unionByName(right), frames)


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
