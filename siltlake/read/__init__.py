"""read: DataFrames over what a table shows readers, and Spark SQL over `schema.table` names."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from siltlake.deployment import Deployment
from siltlake.errors import NotFoundError, SiltError
from siltlake.read.sandbox import check_query, refuse_substitution

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType
    from sqlglot import exp

    from siltlake.catalog import TableRecord

__all__ = ["objects_frame", "query_tables", "spark_schema", "sql", "table"]


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
          as_of_version: int | None = None, as_of: dt.datetime | None = None,
          dates: Collection[dt.date] | None = None) -> DataFrame:
    """A DataFrame of what the table shows (with its dt column), pinned when the read starts.

    Current state: switched partitions show their published merged version's objects; the others show
    their newest update's objects, if any, and the live objects above them up to the largest small
    object id at the start of the read. as_of_version (a table version: the state after that publish
    commit; outside the readable versions it is an error naming them) or as_of (naive UTC, or aware)
    reads an earlier published state, from each partition version's file list. `dates` reads only the
    partitions of those dates. The catalog is asked a constant number of queries, whatever the partitions.
    """
    from siltlake.clock import to_naive_utc

    deployment = deployment or Deployment.open()
    record = deployment.catalog.tables.get(name)
    views = deployment.catalog.versions.reader_snapshot(
        record.id, as_of_version=as_of_version, as_of=to_naive_utc(as_of) if as_of is not None else None,
        table_name=record.qualified_name, dates=dates)
    return objects_frame(spark, record, deployment, [view.manifest_key for view in views if view.manifest_key],
                         [(view.partition_date, object_id, False) for view in views
                          for object_id in view.live_object_ids])


def objects_frame(spark: SparkSession, record: TableRecord, deployment: Deployment, manifest_keys: list[str],
                  small_objects: list[tuple[dt.date, int, bool]]) -> DataFrame:
    """A DataFrame (with the dt column) of the objects the manifests list and of small objects
    (date, id, delayed), read with the table's current schema (added columns read as null).

    A keyed table's partitions that need a merge on read are read by one Spark task each, in commit order
    (the manifest's objects, then the small objects by id), and reduced to one row per key there."""
    from siltlake.storage.filesystem import for_engine
    from siltlake.storage.keys import partition_base, partition_date_of
    from siltlake.storage.manifests import read_manifest

    layout = record.layout(deployment.instance_key)
    schema = spark_schema(record)
    lake = deployment.lake
    with ThreadPoolExecutor(max(1, min(16, len(manifest_keys)))) as pool:
        listed = list(pool.map(lambda key: read_manifest(lake, key), manifest_keys))
    from siltlake.read.keyed import dirty_dates
    from siltlake.read.objects import arrow_objects_frame, arrow_partitions_frame, spark_reads

    # Every object as (URI, date), each partition's in commit order.
    objects = [(uri, partition_date_of(partition_base_segment(uri))) for entries in listed for uri, _ in entries]
    objects += [(lake.uri(layout.small_object(date, object_id, delayed)), date)
                for date, object_id, delayed in sorted(small_objects, key=lambda o: o[1])]
    definition = record.definition
    dirty = dirty_dates([(date, uri) for uri, date in objects]) if definition.keyed else set()
    frames = []
    if dirty:
        partitions: dict[dt.date, list[str]] = {}
        for uri, date in objects:
            if date in dirty:
                partitions.setdefault(date, []).append(uri)
        frames.append(arrow_partitions_frame(spark, lake, schema, sorted(partitions.items()),
                                             definition.primary_key, definition.sequence_column))
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
        frames += [spark.read.schema(schema).option("basePath", prefix).parquet(*paths)
                   for prefix, paths in scans.items()]
    if not frames:
        return spark.createDataFrame([], schema)
    return functools.reduce(lambda left, right: left.unionByName(right), frames)


def partition_base_segment(uri: str) -> str:
    """The dt=<date> segment of an object's URI (its parent directory)."""
    from urllib.parse import unquote

    return unquote(uri.rsplit("/", 2)[-2])


def _view_name(schema_name: str, table_name: str, pin: tuple[str, object] | None = None) -> str:
    """The temp view of a table, one per (table, version or time) pair a query reads."""
    name = f"__silt_{schema_name}__{table_name}"
    if pin is None:
        return name
    kind, value = pin
    if kind == "version":
        return f"{name}__v{value}"
    assert isinstance(value, dt.datetime)
    return f"{name}__t{value:%Y%m%d%H%M%S%f}"


# Parts of a table reference the rewrite keeps as they are: Spark applies them to the view just as to a table.
_KEPT_TABLE_PARTS = {"this", "db", "alias", "sample", "hints", "pivots", "joins", "laterals", "version"}


def _time_travel(node: exp.Table, qualified: str) -> tuple[str, object] | None:
    """("version", n) or ("time", naive UTC) of `t VERSION AS OF n` / `t TIMESTAMP AS OF '...'`; anything
    the reader cannot honour exactly is refused."""
    from sqlglot import exp

    from siltlake.read.versions import parse_as_of

    clause = node.args.get("version")
    if clause is None:
        return None
    kind = str(clause.this).upper()
    text = clause.sql(dialect="spark")
    value = clause.expression
    if clause.args.get("kind") != "AS OF" or kind not in ("VERSION", "TIMESTAMP"):
        raise SiltError(f"{qualified}: {text!r} is not supported; write VERSION AS OF <n> or "
                        "TIMESTAMP AS OF '<time>'")
    if kind == "VERSION":
        if not (isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit()):
            raise SiltError(f"{qualified}: {text!r}: VERSION AS OF takes a table version number, such as "
                            "VERSION AS OF 3 (`silt history` lists them)")
        return "version", int(value.this)
    if not (isinstance(value, exp.Literal) and value.is_string):
        raise SiltError(f"{qualified}: {text!r}: TIMESTAMP AS OF takes a quoted time, such as "
                        "TIMESTAMP AS OF '2026-11-20 10:00:00' (UTC unless it has an offset)")
    return "time", parse_as_of(value.this)


def _check_alias(node: exp.Table, qualified: str) -> None:
    """Refuse what sqlglot takes for an alias but is not a name (`t@v1`, `t :v1`, `t ?`): the rewrite would
    replace it by the table's name, and the query would read the current state without a word."""
    from sqlglot import exp

    alias = node.args.get("alias")
    if alias is None:
        return
    odd = [part for part in (alias.this, *alias.columns) if part is not None and not isinstance(part, exp.Identifier)]
    if odd:
        raise SiltError(f"{qualified}: {odd[0].sql()!r} after the table is not an alias siltlake's rewrite can carry; "
                        "to read an earlier state write VERSION AS OF <n> or TIMESTAMP AS OF '<time>'")


def _parse(query: str) -> exp.Query:
    """The query's sqlglot tree (Spark dialect): exactly one query statement."""
    import sqlglot
    from sqlglot import exp

    refuse_substitution(query)  # before sqlglot, which may fail on it with a less useful message
    try:
        statements = sqlglot.parse(query, read="spark")
    except sqlglot.errors.ParseError as exc:
        raise SiltError(f"cannot parse the query: {exc}") from None
    if len(statements) != 1 or statements[0] is None:
        raise SiltError("give exactly one SQL statement")
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise SiltError("only queries (SELECT, WITH, set operations) are supported")
    return tree


def query_tables(query: str) -> list[tuple[str, bool]]:
    """The siltlake tables (schema.table) a query reads, in order of first use, each with whether some
    reference pins a version (VERSION/TIMESTAMP AS OF)."""
    from sqlglot import exp

    found: dict[str, bool] = {}
    for node in _parse(query).find_all(exp.Table):
        if node.db:
            qualified = f"{node.db}.{node.name}"
            found[qualified] = found.get(qualified, False) or node.args.get("version") is not None
    return list(found.items())


def sql(spark: SparkSession, query: str, deployment: Deployment | None = None, *,
        reads: Mapping[str, Mapping[str, Any]] | None = None) -> DataFrame:
    """Run Spark SQL in which tables are named schema.table (optionally VERSION AS OF n or TIMESTAMP AS OF '...').

    Spark temp views cannot be qualified, so the query is parsed (sqlglot, Spark dialect), each
    qualified table reference is replaced by a temp view of that table at that version, and the query is
    re-rendered. A clause of a table reference the rewrite cannot carry over is refused, never dropped.
    `reads` gives, per schema.table, how a reference without its own pin reads it (table()'s keyword
    arguments: as_of_version, dates): derived table builds pin their sources so.
    """
    from sqlglot import exp

    deployment = deployment or Deployment.open()
    tree = _parse(query)
    cte_names = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    views: set[str] = set()
    for node in list(tree.find_all(exp.Table)):
        qualified = f"{node.db}.{node.name}" if node.db else node.name
        if node.catalog:
            raise SiltError(f"{node.catalog}.{qualified}: siltlake tables are named schema.table, without a catalog "
                            f"part; write {qualified}")
        unsupported = sorted(key for key, value in node.args.items()
                             if value not in (None, [], False) and key not in _KEPT_TABLE_PARTS)
        _check_alias(node, qualified)
        if unsupported and (node.db or node.name in cte_names):
            raise SiltError(f"{qualified}: the query's {', '.join(unsupported)} clause on a table cannot be "
                            "honoured by siltlake's rewrite; leave it out")
        if not node.db:
            if node.name and node.name not in cte_names:
                raise SiltError(f"table {node.name!r} needs its schema: write schema.table")
            if node.args.get("version") is not None:
                raise SiltError(f"{node.name}: VERSION/TIMESTAMP AS OF applies to siltlake tables (schema.table), "
                                "not to a query's own names")
            continue
        pin = _time_travel(node, qualified)
        view = _view_name(node.db, node.name, pin)
        options = {} if pin is None else {"as_of_version": pin[1]} if pin[0] == "version" else {"as_of": pin[1]}
        if pin is None and reads is not None and reads.get(qualified):
            options = dict(reads[qualified])
            # A view of its own: another query of the session may read the table unpinned meanwhile.
            view = f"{view}__r{hashlib.sha256(repr(sorted(options.items())).encode()).hexdigest()[:12]}"
        if view not in views:
            try:
                table(spark, qualified, deployment, **options).createOrReplaceTempView(view)
            except NotFoundError:
                raise SiltError(f"no table {qualified}; `silt table list` shows the tables") from None
            views.add(view)
        alias = node.alias_or_name
        node.set("version", None)
        node.set("db", None)
        node.set("this", exp.to_identifier(view))
        if not node.alias:
            node.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    rendered = tree.sql(dialect="spark")
    check_query(spark, rendered)  # the text Spark runs, parsed by Spark: it reads the tables and nothing else
    return spark.sql(rendered)
