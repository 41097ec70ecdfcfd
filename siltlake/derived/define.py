"""Creating a derived table: its sources, its columns (from the query's result), and the cycle check."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from siltlake.catalog import DerivedRecord
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.derivedef import DerivedDef
from siltlake.errors import DefinitionError, NotFoundError
from siltlake.tabledef import Column, TableDef

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

ALLOWED_TYPES = "string, int, bigint, float, double, boolean, timestamp, date or decimal(p,s)"


def siltlake_type(data_type: DataType) -> str | None:
    """The siltlake column type a Spark result type is stored as (None: it cannot be)."""
    from pyspark.sql import types as T

    simple = [
        (T.StringType, "string"),
        (T.ByteType, "int"),
        (T.ShortType, "int"),
        (T.IntegerType, "int"),
        (T.LongType, "bigint"),
        (T.FloatType, "float"),
        (T.DoubleType, "double"),
        (T.BooleanType, "boolean"),
        (T.TimestampType, "timestamp"),
        (T.TimestampNTZType, "timestamp"),
        (T.DateType, "date"),
    ]
    for spark_type, name in simple:
        if isinstance(data_type, spark_type):
            return name
    if isinstance(data_type, T.DecimalType):
        return f"decimal({data_type.precision},{data_type.scale})"
    return None


# Result types the DuckDB translation infers (siltlake.read.translate), as the siltlake types Spark's result
# would be stored as; a result of any other ("null", a decimal of unknown precision) is typed by Spark.
TRANSLATED_TYPES = {
    "int": "int",
    "bigint": "bigint",
    "float": "float",
    "double": "double",
    "string": "string",
    "json": "string",
    "boolean": "boolean",
    "timestamp": "timestamp",
    "date": "date",
}

# A query's result column: its name, the siltlake type it is stored as (None: none can hold it), and its type
# as the engine names it, for messages.
ResultColumn = tuple[str, str | None, str]


def spark_columns(result: StructType) -> list[ResultColumn]:
    """A Spark result's columns."""
    return [(field.name, siltlake_type(field.dataType), field.dataType.simpleString()) for field in result.fields]


def translated_columns(
    deployment: Deployment, query: str, reads: dict[str, dict[str, Any]] | None = None
) -> list[ResultColumn] | None:
    """The query's result columns without a JVM, from its DuckDB translation, which infers the types Spark gives
    (tests/test_fast_sql.py compares both engines' answers); None when the query does not translate faithfully
    or a type is not known exactly: Spark then analyses it."""
    from siltlake.read.duck import faithful
    from siltlake.read.plan import plan_query
    from siltlake.read.translate import NotFaithful

    try:
        translation = faithful(plan_query(query, deployment, reads=reads), deployment)
    except NotFaithful:
        return None
    if not all(kind in TRANSLATED_TYPES for kind in translation.types):
        return None
    return [
        (name, TRANSLATED_TYPES[kind], kind) for name, kind in zip(translation.columns, translation.types, strict=True)
    ]


def table_of(definition: DerivedDef, result: list[ResultColumn]) -> TableDef:
    """The table a query's result is stored as: its columns but dt, which names the partition."""
    kinds = {name: (type_name, shown) for name, type_name, shown in result}
    if "dt" not in kinds:
        raise DefinitionError(
            f"{definition.name}: the query must return a dt column (the partition date, type date); "
            "for a rollup by day, SELECT dt, ... GROUP BY dt, ..."
        )
    if kinds["dt"][0] != "date":
        raise DefinitionError(
            f"{definition.name}: the query's dt column is {kinds['dt'][1]}, not date; CAST it AS date"
        )
    names = [name for name, _, _ in result]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise DefinitionError(
            f"{definition.name}: the query returns several columns named {', '.join(duplicates)}; "
            "give each its own alias"
        )
    columns = []
    for name, type_name, shown in result:
        if name == "dt":
            continue
        if type_name is None:
            raise DefinitionError(
                f"{definition.name}: column {name!r} is {shown}, which a derived table cannot "
                f"store; CAST it to {ALLOWED_TYPES}"
            )
        columns.append(Column(name=name, type=type_name))
    if not columns:
        raise DefinitionError(f"{definition.name}: the query returns no column besides dt")
    return TableDef.from_mapping(
        {
            "schema": definition.schema_name,
            "name": definition.table_name,
            "kind": "derived",
            "columns": [c.model_dump() for c in columns],
            "codec": definition.codec,
        },
        source=definition.name,
    )


def check_cycles(
    definition: DerivedDef, source_ids: list[int], existing: list[DerivedRecord], names: dict[int, str]
) -> None:
    """Refuse a definition whose sources lead back to it through other derived tables."""
    reads = {record.table.id: record.source_ids for record in existing}
    path: list[int] = []

    def walk(table_id: int) -> None:
        if names.get(table_id) == definition.name:
            chain = " -> ".join([definition.name, *(names[t] for t in path)])
            raise DefinitionError(
                f"{definition.name}: its sources lead back to it ({chain}); a derived table cannot read itself"
            )
        for source in reads.get(table_id, ()):
            path.append(source)
            walk(source)
            path.pop()

    for source in source_ids:
        path.append(source)
        walk(source)
        path.pop()


def create_derived(deployment: Deployment, definition: DerivedDef, now: dt.datetime | None = None) -> DerivedRecord:
    """Register a derived table: the tables its query reads, its columns (from the query's DuckDB translation
    when it has one, else Spark analyses the query over empty sources), and how it is kept. Nothing is built yet
    (`build_derived`)."""
    from siltlake.read import query_tables, sql

    catalog = deployment.catalog
    referenced = query_tables(definition.query)
    if not referenced:
        raise DefinitionError(f"{definition.name}: the query reads no siltlake table (write schema.table)")
    pinned = [name for name, pins in referenced if pins]
    if pinned:
        raise DefinitionError(
            f"{definition.name}: leave out VERSION/TIMESTAMP AS OF ({', '.join(pinned)}): a "
            "derived table reads its sources' newest published versions, and records which"
        )
    sources = []
    for name, _ in referenced:
        if name == definition.name:
            raise DefinitionError(
                f"{definition.name}: the query reads the table itself; a derived table cannot read itself"
            )
        try:
            sources.append(catalog.tables.get(name))
        except NotFoundError:
            raise DefinitionError(
                f"{definition.name}: the query reads {name}, which is not a table; `silt table list` shows them"
            ) from None
    names = {record.id: record.qualified_name for record in catalog.tables.list()}
    check_cycles(definition, [s.id for s in sources], catalog.derived.list(), names)
    nothing: dict[str, dict[str, Any]] = {name: {"dates": []} for name, _ in referenced}
    result = translated_columns(deployment, definition.query, nothing)
    if result is None:
        result = spark_columns(sql(deployment.spark(), definition.query, deployment, reads=nothing).schema)
    table = table_of(definition, result)
    # The trigger checked now: a wrong name fails here (translated, its names were resolved against the tables).
    if definition.trigger_sql is not None and translated_columns(deployment, definition.trigger_sql) is None:
        sql(deployment.spark(), definition.trigger_sql, deployment).schema  # noqa: B018 - analysed, not run
    return catalog.derived.create(definition, table, [s.id for s in sources], now or utcnow())
