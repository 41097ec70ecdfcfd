"""read: DataFrames over what a table shows readers, and Spark SQL over `schema.table` names."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from siltlake.errors import SiltError
from siltlake.read.plan import QueryPlan, parse_query, plan_query
from siltlake.read.sandbox import check_query

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from siltlake.catalog import TableRecord
    from siltlake.deployment import Deployment

__all__ = ["QueryPlan", "objects_frame", "plan_query", "query_tables", "spark_schema", "sql", "table"]


def spark_schema(record: TableRecord, physical: bool = False) -> StructType:
    """The table's columns as Spark types, plus the partition column dt (physical: named as objects hold them)."""
    from pyspark.sql.types import DateType, StructField, StructType
    from pyspark.sql.types import _parse_datatype_string as parse

    spark_types = {
        "string": "string",
        "json": "string",
        "int": "int",
        "bigint": "bigint",
        "double": "double",
        "boolean": "boolean",
        "timestamp": "timestamp",
        "date": "date",
    }
    fields = [
        StructField(c.physical_name if physical else c.name, parse(spark_types.get(c.type, c.type)), nullable=True)
        for c in record.definition.columns
    ]
    return StructType([*fields, StructField("dt", DateType(), nullable=False)])


def table(
    spark: SparkSession,
    name: str,
    deployment: Deployment | None = None,
    *,
    as_of_version: int | None = None,
    as_of: dt.datetime | None = None,
    dates: Collection[dt.date] | None = None,
) -> DataFrame:
    """A DataFrame of what the table shows (with its dt column), pinned when the read starts.

    Current state: switched partitions show their published merged version's objects; the others show
    their newest update's objects, if any, and the live objects above them up to the largest small
    object id at the start of the read. as_of_version (a table version: the state after that publish
    commit; outside the readable versions it is an error naming them) or as_of (naive UTC, or aware)
    reads an earlier published state, from each partition version's file list. `dates` reads only the
    partitions of those dates. The catalog is asked a constant number of queries, whatever the partitions.
    """
    from siltlake.clock import to_naive_utc
    from siltlake.deployment import Deployment

    if deployment is None:
        deployment = Deployment.open()
        deployment.catalog.check_ready()  # as Lake.open: never read a catalog of another revision
    record = deployment.catalog.tables.get(name)
    as_of = to_naive_utc(as_of) if as_of is not None else None
    views = deployment.catalog.version_reads.reader_snapshot(
        record.id, as_of_version=as_of_version, as_of=as_of, table_name=record.qualified_name, dates=dates
    )
    # A version is read with its own columns and types (docs/design.md "What time travel shows").
    record = deployment.catalog.tables.definition_at(record, as_of_version, as_of)
    return objects_frame(
        spark,
        record,
        deployment,
        [view.manifest_key for view in views if view.manifest_key],
        [
            (view.partition_date, object_id, False, view.partition_values)
            for view in views
            for object_id in view.live_object_ids
        ],
    )


def objects_frame(
    spark: SparkSession,
    record: TableRecord,
    deployment: Deployment,
    manifest_keys: list[str],
    small_objects: list[tuple[dt.date, int, bool, str]],
) -> DataFrame:
    """A DataFrame (with the dt column) of the objects the manifests list and of small objects
    (date, id, delayed, partition values), read with `record`'s definition (a version's own, when pinned: added
    columns read as null).

    A keyed table's partitions that need a merge on read are read by one Spark task each, in commit order
    (the manifest's objects, then the small objects by id), and reduced to one row per key there."""
    from siltlake.storage.filesystem import for_engine
    from siltlake.storage.keys import date_in_key, partition_base
    from siltlake.storage.manifests import read_manifest

    layout = record.layout(deployment.instance_key)
    # Objects are read by the names they hold columns under (a renamed column's old name), then shown by the
    # table's names: every object of a column, whatever it was called, shows under its name now.
    schema = spark_schema(record, physical=True)
    lake = deployment.lake
    with ThreadPoolExecutor(max(1, min(16, len(manifest_keys)))) as pool:
        listed = list(pool.map(lambda key: read_manifest(lake, key), manifest_keys))
    from siltlake.read.keyed import dirty_dates
    from siltlake.read.objects import arrow_objects_frame, arrow_partitions_frame, spark_reads
    from siltlake.read.version_files import data_file_key
    from siltlake.records.physical import logical_names, physical_definition, renamed  # loads pyarrow: not at the top

    # Every object as (URI, date), each partition's in commit order; a manifest's entries only inside the lake,
    # each in a dt=<date> directory (one elsewhere, planted or edited by hand, would read with no date: a null dt
    # from pyarrow, a failed sort of the dates on a merge on read).
    objects: list[tuple[str, dt.date]] = []
    for entries in listed:
        for uri, _ in entries:
            data_file_key(lake, uri, record.qualified_name)
            date = date_in_key(uri)
            if date is None:
                raise SiltError(
                    f"{record.qualified_name}: data file {uri} is not in a dt=<date> directory; the "
                    "manifest was written by hand"
                )
            objects.append((uri, date))
    objects += [
        (lake.uri(layout.small_object(date, object_id, delayed, values)), date)
        for date, object_id, delayed, values in sorted(small_objects, key=lambda o: o[1])
    ]
    definition = physical_definition(record.definition)
    dirty = dirty_dates([(date, uri) for uri, date in objects]) if definition.keyed else set()
    frames = []
    if dirty:
        partitions: dict[dt.date, list[str]] = {}
        for uri, date in objects:
            if date in dirty:
                partitions.setdefault(date, []).append(uri)
        frames.append(
            arrow_partitions_frame(
                spark, lake, schema, sorted(partitions.items()), definition.primary_key, definition.sequence_column
            )
        )
        objects = [(uri, date) for uri, date in objects if date not in dirty]
    if not spark_reads(spark, lake):
        # No Hadoop connector for the lake's object store: pyarrow reads the objects inside Spark's tasks.
        if objects:
            frames.append(arrow_objects_frame(spark, lake, schema, objects))
    else:
        # dt comes from the dt=YYYY-MM-DD directory of each object (partition discovery under basePath): one
        # scan per area (merged, live, delayed) the objects are in.
        scans: dict[str, list[str]] = {}
        for uri, _ in objects:
            scans.setdefault(partition_base(for_engine(uri)), []).append(for_engine(uri))
        frames += [
            spark.read.schema(schema).option("basePath", prefix).parquet(*paths) for prefix, paths in scans.items()
        ]
        if record.definition.partition_by:  # discovery finds the levels below dt too: a bucket is no column
            frames = [frame.select(*schema.names) for frame in frames]
    frame = (
        functools.reduce(lambda left, right: left.unionByName(right), frames)
        if frames
        else spark.createDataFrame([], schema)
    )
    return frame.toDF(*logical_names(record.definition, schema.names)) if renamed(record.definition) else frame


def query_tables(query: str) -> list[tuple[str, bool]]:
    """The siltlake tables (schema.table) a query reads, in order of first use, each with whether some
    reference pins a version (VERSION/TIMESTAMP AS OF)."""
    from sqlglot import exp

    found: dict[str, bool] = {}
    for node in parse_query(query).find_all(exp.Table):
        if node.db:
            qualified = f"{node.db}.{node.name}"
            found[qualified] = found.get(qualified, False) or node.args.get("version") is not None
    return list(found.items())


def sql(
    spark: SparkSession,
    query: str,
    deployment: Deployment | None = None,
    *,
    reads: Mapping[str, Mapping[str, Any]] | None = None,
    plan: QueryPlan | None = None,
) -> DataFrame:
    """Run Spark SQL in which tables are named schema.table (optionally VERSION AS OF n or TIMESTAMP AS OF '...').

    Spark temp views cannot be qualified, so the query is planned (siltlake.read.plan: parsed with sqlglot,
    checked, each read pinned), each qualified table reference is replaced by a temp view of that table at that
    version, and the query is re-rendered. A clause of a table reference the rewrite cannot carry over is
    refused, never dropped. `reads` gives, per schema.table, how a reference without its own pin reads it
    (table()'s keyword arguments: as_of_version, dates): derived table builds pin their sources so. `plan`: one
    plan_query already made (`silt sql` plans before it decides on an engine).
    """
    from siltlake.deployment import Deployment

    if deployment is None:
        deployment = Deployment.open()
        deployment.catalog.check_ready()  # as Lake.open: never read a catalog of another revision
    plan = plan or plan_query(query, deployment, reads=reads)
    for view, read in plan.reads.items():
        partitions = read.partitions
        objects_frame(
            spark,
            read.record,
            deployment,
            [p.manifest_key for p in partitions if p.manifest_key],
            [
                (p.partition_date, object_id, False, p.partition_values)
                for p in partitions
                for object_id in p.live_object_ids
            ],
        ).createOrReplaceTempView(view)
    rendered = plan.tree.sql(dialect="spark")
    check_query(spark, rendered)  # the text Spark runs, parsed by Spark: it reads the tables and nothing else
    return spark.sql(rendered)
