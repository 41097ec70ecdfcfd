"""DuckDB over the exact file lists of table versions: `silt sql`'s engine for what translates faithfully
(siltlake.read.translate) and Table.to_duckdb's reader (docs/design.md, "`silt sql` without Spark").

Each table version is a SELECT (a view for `silt sql` and Table.to_duckdb(view=), made unbound so that DuckDB
binds it in each query; a relation for Table.to_duckdb): `read_parquet([its files])` as it is when the files hold
the table's columns, else (with union_by_name where their schemas differ) below a typed empty row set, so columns
added after a file was written read as null and widened ones as their new type; `dt` from each file's `dt=`
directory (or, when the paths hold another `key=value` segment, from one scan per day). A keyed table's
partitions that need a merge on read are merged by siltlake.read.keyed and handed over as Arrow. Objects on S3
are scanned through pyarrow's S3 file system (DuckDB's own needs an extension that is not installed here).
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from siltlake.coltypes import PARTITION_COLUMN
from siltlake.errors import SiltError, missing_data_file

if TYPE_CHECKING:
    from siltlake.catalog import TableRecord
    from siltlake.deployment import Deployment
    from siltlake.read.plan import QueryPlan
    from siltlake.read.translate import Translation
    from siltlake.read.version_files import DataFile

__all__ = [
    "TableSelect",
    "connect",
    "create_view",
    "faithful",
    "run_plan",
    "session_zone",
    "table_select",
    "table_sql",
    "view_statement",
]

DUCKDB_TYPES = {
    "string": "VARCHAR",
    "json": "VARCHAR",
    "int": "INTEGER",
    "bigint": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "timestamp": "TIMESTAMPTZ",
    "date": "DATE",
}
_SCHEMA_TYPE_NAMES = {"TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}  # parquet_schema's name where it differs
_GLOB = set("*?[]{}")
_MISSING = re.compile(r'No files found that match the pattern "([^"]+)"')


def session_zone(deployment: Deployment) -> str:
    """The time zone of siltlake's Spark sessions (spark.sql.session.timeZone; UTC unless configured): Spark's
    hour(), to_date(), date_trunc() and time literals use it, so DuckDB's TimeZone is set to it."""
    from siltlake.read.translate import NotFaithful

    zone = deployment.config.spark.conf.get("spark.sql.session.timeZone", "UTC")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise NotFaithful(f"the session time zone {zone!r} is not an IANA zone name DuckDB knows") from None
    return zone


def columns_of(record: TableRecord) -> list[tuple[str, str]]:
    """The table's (column, type) as readers see it, dt last."""
    return [*((c.name, c.type) for c in record.definition.columns), ("dt", "date")]


def faithful(plan: QueryPlan, deployment: Deployment) -> Translation:
    """The plan's DuckDB translation, or NotFaithful saying why the query goes to Spark."""
    from siltlake.read.translate import NotFaithful, translate

    views = {}
    for view, read in plan.reads.items():
        columns = columns_of(read.record)
        odd = [kind for _, kind in columns if kind not in DUCKDB_TYPES]
        if odd:
            raise NotFaithful(f"{read.record.qualified_name} has a column of type {odd[0]}")
        views[view] = columns
    session_zone(deployment)
    return translate(plan.tree, views)


def connect(zone: str = "UTC") -> Any:
    """A DuckDB connection that never fetches an extension, in Spark's session zone."""
    import duckdb

    connection = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    connection.execute(f"SET TimeZone = {_quote(zone)}")
    return connection


@contextmanager
def bounded(connection: Any, deployment: Deployment) -> Iterator[None]:
    """User SQL on this connection within the query bounds: DuckDB's memory_limit from sql.duckdb_memory_limit (set
    before the configuration is locked), and the command's time bound (siltlake.spark.time_bound) interrupts it."""
    import duckdb

    from siltlake.spark import current_bound

    limit = deployment.config.sql.duckdb_memory_limit
    connection.execute(f"SET memory_limit = {_quote(limit)}")
    bound = current_bound()
    try:
        with bound.stopping(connection.interrupt) if bound is not None else nullcontext():
            yield
    except duckdb.OutOfMemoryException:
        raise SiltError(
            f"the query needs more memory than sql.duckdb_memory_limit ({limit}) lets DuckDB use; raise "
            "it, or narrow the query; nothing was written"
        ) from None


def run_plan(plan: QueryPlan, deployment: Deployment, translation: Translation, limit: int | None) -> list[tuple]:
    """Run a translated plan on DuckDB: at most `limit` rows (None: all), values as PySpark's collect() gives them
    (timestamps naive, in this process's local zone); NotFaithful when the rows take an integer sum or average
    where Spark's answer is not the exact one (the query then goes to Spark)."""
    import duckdb

    from siltlake.read.version_files import partition_files

    connection = connect(session_zone(deployment))
    try:
        allowed: list[str] = []
        for view, read in plan.reads.items():
            files = partition_files(deployment, read.record, read.partitions)
            allowed += table_sql(connection, view, deployment, read.record, files)
        with bounded(connection, deployment):
            # The sandbox, again, on DuckDB's side: the files of the views and nothing else, settings locked.
            if allowed:
                connection.execute(f"SET allowed_paths = [{', '.join(_quote(path) for path in allowed)}]")
            connection.execute("SET enable_external_access = false")
            connection.execute("SET lock_configuration = true")
            result = connection.execute(translation.sql)
            rows = result.fetchall() if limit is None else result.fetchmany(limit)
    except duckdb.IOException as exc:
        missing = _MISSING.search(str(exc))
        if missing is None:
            raise
        raise SiltError(missing_data_file(missing.group(1))) from exc  # as the Spark path says it
    except duckdb.InvalidInputException as exc:
        from siltlake.read.translate import BEYOND_SPARK, NotFaithful

        if BEYOND_SPARK not in str(exc):
            raise
        # An integer sum or average the data takes past where Spark's is exact: Spark's answer (or error) is its own.
        raise NotFaithful(
            str(exc).split(BEYOND_SPARK + ": ", 1)[-1].splitlines()[0] + " of these rows may overflow or round on Spark"
        ) from None
    finally:
        connection.close()
    return [tuple(_as_spark(value) for value in row) for row in rows]


def _as_spark(value: object) -> object:
    # PySpark returns a timestamp as a naive datetime in the local zone (datetime.fromtimestamp).
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone().replace(tzinfo=None)
    return value


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def table_sql(
    connection: Any, view: str, deployment: Deployment, record: TableRecord, files: Sequence[DataFile]
) -> list[str]:
    """Create the view `view` of a table version's files on the connection; returns the local paths DuckDB
    reads (an object store's files are read through pyarrow, and none are returned)."""
    made = table_select(connection, view, deployment, record, files)
    create_view(connection, view, made.sql)
    return made.paths


def create_view(connection: Any, view: str, select: str, replace: bool = False) -> None:
    """A temporary view `view` of `select` on the connection. DuckDB binds a view at every query over it; created
    unbound (DuckDB 2.0's defer_binding), the files are bound once per query instead of once more here (a DuckDB
    before 2.0 binds it here too)."""
    connection.execute(_view_sql(view, select, replace))


def view_statement(connection: Any, view: str, select: str, replace: bool = False) -> Any:
    """create_view's statement parsed, to execute on any connection (`connection.execute(statement)`) without
    DuckDB parsing the SELECT again."""
    (statement,) = connection.extract_statements(_view_sql(view, select, replace))
    return statement


def _view_sql(view: str, select: str, replace: bool) -> str:
    deferred = " WITH (defer_binding = true)" if _defers_views() else ""
    return f"CREATE {'OR REPLACE ' if replace else ''}TEMP VIEW {_ident(view)}{deferred} AS {select}"


@functools.cache
def _defers_views() -> bool:
    import duckdb

    return int(duckdb.__version__.split(".")[0]) >= 2


class TableSelect(NamedTuple):
    """A table version's SELECT, the local paths it reads, and whether it reads what was registered on the
    connection (then it holds for that connection only)."""

    sql: str
    paths: list[str]
    registered: bool


def table_select(
    connection: Any, name: str, deployment: Deployment, record: TableRecord, files: Sequence[DataFile]
) -> TableSelect:
    """The SELECT of a table version's files, with the table's column names and types (dt last), and the local
    paths it reads. Nothing is bound here: the caller's view or relation binds it. Files read through
    pyarrow are registered on the connection as `name` and a suffix."""
    from siltlake.read.version_files import dirty_dates_of, lake_keys

    lake = deployment.lake
    columns = columns_of(record)
    # The parts hold columns as objects store them (a renamed column under its old name; a dropped column's
    # data under a name no column has now, left out here); the view shows the table's names.
    stored = [*(c.physical_name for c in record.definition.columns), "dt"]
    typed = ", ".join(
        f"CAST({_ident(physical)} AS {DUCKDB_TYPES[kind]}) AS {_ident(name)}"
        for physical, (name, kind) in zip(stored, columns, strict=True)
    )
    empty = ", ".join(
        f"NULL::{DUCKDB_TYPES[kind]} AS {_ident(physical)}" for physical, (_, kind) in zip(stored, columns, strict=True)
    )
    dirty = dirty_dates_of(record, list(files))
    keys = lake_keys(deployment, record, list(files))
    plain = [(key, f.partition_date) for key, f in zip(keys, files, strict=True) if f.partition_date not in dirty]
    parts = [f"SELECT {empty} WHERE false"]
    complete = False  # the parts hold every stored column: no typed empty row set needed under them
    paths: list[str] = []
    registered = False
    exact = False
    local = [] if lake.is_object_store else [lake.path(key) for key, _ in plain]
    if lake.is_object_store or any(not _GLOB.isdisjoint(path) for path in local):
        # pyarrow reads these (S3 through the lake's file system; a path DuckDB would take for a glob, as it is).
        if plain:
            parts.append(
                _arrow_part(
                    connection,
                    f"{name}__files",
                    deployment,
                    record,
                    [f for f in files if f.partition_date not in dirty],
                )
            )
            registered = True
    elif plain:
        paths = local
        segments = {segment for path in paths for segment in path.split("/")[:-1] if "=" in segment}
        shared = shared_file_columns(connection, paths)
        union = "" if shared is not None else "union_by_name = true, "
        complete = shared is not None and set(stored[:-1]) <= {column for column, _ in shared}
        # The files hold the table's columns as it names and types them, in its order, then dt (or not, as
        # objects written before they held it): read as they are.
        typed_columns = [
            (column, _SCHEMA_TYPE_NAMES.get(DUCKDB_TYPES[kind], DUCKDB_TYPES[kind])) for column, kind in columns[:-1]
        ]
        exact = stored[:-1] == [column for column, _ in columns[:-1]] and shared in (
            typed_columns,
            [*typed_columns, (PARTITION_COLUMN, "DATE")],
        )
        if all(segment.startswith("dt=") for segment in segments) and all(
            sum("=" in segment for segment in path.split("/")[:-1]) == 1 for path in paths
        ):
            # dt from each path's dt= directory, in the place of the files' own dt where they hold one.
            listed = ", ".join(_quote(path) for path in paths)
            parts.append(
                f"SELECT * FROM read_parquet([{listed}], {union}hive_partitioning = true, hive_types = {{'dt': DATE}})"
            )
        else:  # another key=value directory on the way: dt from the partition, one scan per day
            by_day = sorted(zip(paths, (day for _, day in plain), strict=True), key=lambda item: item[1])
            for day, group in itertools.groupby(by_day, key=lambda item: item[1]):
                day_paths = [path for path, _ in group]
                listed = ", ".join(_quote(path) for path in day_paths)
                files_dt = " EXCLUDE (dt)" if _any_holds(day_paths, PARTITION_COLUMN) else ""
                parts.append(
                    f"SELECT *{files_dt}, DATE {_quote(day.isoformat())} AS dt FROM "
                    f"read_parquet([{listed}], {union}hive_partitioning = false)"
                )
    if dirty:
        parts.append(
            _arrow_part(
                connection, f"{name}__merged", deployment, record, [f for f in files if f.partition_date in dirty]
            )
        )
        registered = True
    if complete and len(parts) == 2:
        if exact:
            return TableSelect(parts[1], paths, registered)
        parts = parts[1:]
    union = " UNION ALL BY NAME ".join(parts)
    return TableSelect(f"SELECT {typed} FROM ({union})", paths, registered)


# Local data file -> its Parquet schema as DuckDB describes it. Data files are written once under keys never reused
# (object ids, range bounds), so what a footer said stays true; bounded, as a long-lived reader's process would grow.
_FILE_SCHEMAS: dict[str, tuple] = {}
_FILE_SCHEMAS_HELD = 200_000


def shared_file_columns(connection: Any, paths: Sequence[str]) -> list[tuple[str, str]] | None:
    """The (column, DuckDB type) of these local Parquet files if they all have one schema (so DuckDB can read them
    without union_by_name, which reads every footer at each bind), else None. Footers are read once per process
    (parquet_schema), only those not seen."""
    unseen = [path for path in paths if path not in _FILE_SCHEMAS]
    if unseen:
        described: dict[str, list[tuple]] = {path: [] for path in unseen}
        listed = ", ".join(_quote(path) for path in unseen)
        for file_name, *element in connection.execute(
            "SELECT file_name, name, type, type_length, repetition_type, num_children, converted_type, scale, "
            f"precision, field_id, logical_type, duckdb_type FROM parquet_schema([{listed}])"
        ).fetchall():
            described.setdefault(file_name, []).append(tuple(element))
        if len(_FILE_SCHEMAS) + len(described) > _FILE_SCHEMAS_HELD:
            _FILE_SCHEMAS.clear()
        shared: dict[tuple, tuple] = {}
        for path, elements in described.items():
            if elements:  # a path DuckDB named otherwise stays unknown: read with union_by_name
                schema = tuple(elements)
                _FILE_SCHEMAS[path] = shared.setdefault(schema, schema)
    schemas = {_FILE_SCHEMAS.get(path) for path in paths}
    if len(schemas) != 1:
        return None
    (only,) = schemas
    if only is None:
        return None
    return [(element[0], element[-1]) for element in only[1:]]  # below the root; the tables' columns are flat


def _any_holds(paths: Sequence[str], column: str) -> bool:
    """Whether any of these files (their schemas read by shared_file_columns) holds a column of that name."""
    schemas = {schema for schema in map(_FILE_SCHEMAS.get, paths) if schema is not None}
    return any(element[0] == column for schema in schemas for element in schema[1:])


def _arrow_part(connection: Any, name: str, deployment: Deployment, record: TableRecord, files: list[DataFile]) -> str:
    """Register files read by pyarrow (merged on read where a keyed partition needs it) as `name` (and the merged
    rows as `name`_rows): a SELECT of them under the names objects store the columns by, as the typed SELECT reads."""
    from siltlake.read.version_files import stored_parts, table_schema

    parts = stored_parts(deployment, record, files, table_schema(record))
    selects = []
    if parts.plain.files or parts.merged is None:
        connection.register(name, parts.plain)  # the files' own names: nothing renamed, nothing held in memory
        selects.append(f"SELECT * FROM {_ident(name)}")
    if parts.merged is not None:
        connection.register(f"{name}_rows", parts.merged)
        selects.append(
            f"SELECT {', '.join(f'{_ident(f)} AS {_ident(parts.stored(f))}' for f in parts.schema.names)} "
            f"FROM {_ident(name + '_rows')}"
        )
    return " UNION ALL BY NAME ".join(selects)
