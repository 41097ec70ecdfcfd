"""Small rewrites without Spark (docs/design.md, "Small rewrites in-process"): a delete of the rows matching a
predicate from a partition whose files total at most `publish.in_process_rewrite_bytes`, and an overwrite with
rows given as a pyarrow table, run in the command's own process. The partition is read with pyarrow (merged on
read where a keyed partition needs it, as every reader does), a delete's predicate runs on DuckDB when
siltlake.read.translate finds it faithful (the same answer as Spark's, the same sandbox), and the new rows go to
the update's own writer and commit (siltlake.write.update): the same object, manifests, table version and
conflict rules as on Spark. Anything else, a larger partition or a predicate that does not translate, goes to
Spark, never to a different answer.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from siltlake.errors import SiltError
from siltlake.storage.manifests import read_manifest

if TYPE_CHECKING:
    from sqlglot import exp

    from siltlake.catalog import TableRecord, UpdateBase
    from siltlake.deployment import Deployment
    from siltlake.read.version_files import DataFile

__all__ = ["SmallDelete", "base_rows_count", "delete_in_process", "no_such_column", "overwrite_rows"]

# The table of the partition's rows on DuckDB's side, and its row numbers (the rows the predicate matches): never
# in the predicate's scope, which is the table's columns alone, as on Spark.
_ROWS = "__silt_rows"
_ROW = "__silt_row"
# Names Spark resolves, where no column has them, as values of the session (current_date, ...): Spark's to say.
_SESSION_NAMES = {
    "current_date",
    "current_time",
    "current_timestamp",
    "current_user",
    "localtimestamp",
    "session_user",
    "user",
}


@dataclass(frozen=True)
class SmallDelete:
    """A delete worked out in-process: the partition's rows before, and those kept (the table's columns)."""

    rows_before: int
    kept: pa.Table


def base_files(deployment: Deployment, record: TableRecord, base: UpdateBase) -> list[DataFile]:
    """What the update reads, in commit order: its manifest's objects, then every small object above it."""
    from siltlake.read.version_files import DataFile

    lake, layout = deployment.lake, record.layout(deployment.instance_key)
    listed = read_manifest(lake, base.manifest_key) if base.manifest_key else []
    date, values = base.partition_date, base.partition_values
    files = [DataFile(uri, date, size, partition_values=values) for uri, size in listed]
    files += [
        DataFile(lake.uri(layout.small_object(date, object_id, delayed, values)), date, None, partition_values=values)
        for object_id, delayed in base.objects
    ]
    return files


def _within_bound(deployment: Deployment, record: TableRecord, files: list[DataFile], bound: int) -> bool:
    """Whether the files total at most `bound` bytes (small objects are looked up, until the bound is passed)."""
    from siltlake.read.version_files import lake_keys

    total = 0
    for key, data_file in zip(lake_keys(deployment, record, files), files, strict=True):
        total += data_file.size if data_file.size is not None else deployment.lake.size(key)
        if total > bound:
            return False
    return True


def _read(deployment: Deployment, record: TableRecord, files: list[DataFile]) -> pa.Table:
    """The partition's rows as readers see them (the table's columns, then dt)."""
    from siltlake.read.version_files import arrow_parts, table_schema

    plain, merged = arrow_parts(deployment, record, files, table_schema(record))
    return plain.to_table() if merged is None else pa.concat_tables([plain.to_table(), merged])


def no_such_column(record: TableRecord, name: str, doing: str, verb: str = "deleted") -> SiltError:
    """The error for SQL naming a column the table has not (the same on Spark's path and this one); `doing`
    begins it ("cannot use --where ... on t"), `verb` ends it ("nothing was deleted")."""
    from siltlake.errors import did_you_mean

    columns = [c.name for c in record.definition.columns]
    hint = (
        " (the expression sees one partition's rows: the dates are chosen with --date)"
        if name.lower() == "dt"
        else did_you_mean(name, columns)
    )
    return SiltError(f"{doing}: no column {name}{hint}; its columns are {', '.join(columns)}; nothing was {verb}")


def where_of(record: TableRecord, where: str) -> str:
    return f"cannot use --where {where!r} on {record.qualified_name}"


def _check_scope(record: TableRecord, predicate: exp.Expr, where: str) -> None:
    """Raise no_such_column for a column the predicate names that the table has not; NotFaithful where only
    Spark can say what a name is (a field of a column, a value of the session)."""
    from sqlglot import exp

    from siltlake.read.translate import NotFaithful

    columns = {c.name.lower() for c in record.definition.columns}
    for column in predicate.find_all(exp.Column):
        parts = [part.name for part in column.parts]
        if not parts or not all(isinstance(part, exp.Identifier) for part in column.parts):
            raise NotFaithful(f"the column {column.sql(dialect='spark')}")
        if parts[0].lower() in columns:
            if len(parts) > 1:
                raise NotFaithful(f"a field of column {parts[0]}")
            continue
        if len(parts) == 1 and parts[0].lower() in _SESSION_NAMES:
            raise NotFaithful(f"{parts[0]}, which Spark may take for a value of the session")
        raise no_such_column(record, ".".join(parts), where_of(record, where))


def _matching_sql(deployment: Deployment, record: TableRecord, where: str) -> str:
    """DuckDB's text of the row numbers of `_ROWS` the Spark SQL predicate `where` matches (null: no match), or
    NotFaithful (the predicate goes to Spark, which also says what is wrong with one that is wrong)."""
    import sqlglot
    from sqlglot import exp

    from siltlake.read.duck import DUCKDB_TYPES, columns_of, session_zone
    from siltlake.read.plan import refuse_functions
    from siltlake.read.sandbox import refuse_substitution
    from siltlake.read.translate import NotFaithful, translate

    refuse_substitution(where)
    try:
        # Parsed on its own, as Spark's check does: "a = 1) OR (true" must not balance inside a larger text.
        predicate = sqlglot.parse_one(where, read="spark")
    except sqlglot.errors.ParseError:
        raise NotFaithful("the predicate does not parse as Spark SQL here") from None
    if isinstance(predicate, exp.Query) or predicate.find(exp.Query) is not None:
        raise NotFaithful("a predicate with a query in it")
    for node in predicate.walk():
        node.comments = None  # nothing of the user's text reaches DuckDB but the checked tree
    refuse_functions(predicate, "silt delete --where")
    _check_scope(record, predicate, where)
    columns = columns_of(record)[:-1]  # without dt: Spark's delete evaluates the predicate over the table's columns
    odd = [kind for _, kind in columns if kind not in DUCKDB_TYPES]
    if odd:
        raise NotFaithful(f"{record.qualified_name} has a column of type {odd[0]}")
    session_zone(deployment)  # an IANA zone DuckDB knows, or Spark's
    # Translated over the table's columns alone; the row numbers are taken around it, out of the predicate's reach.
    matching = translate(exp.select(exp.Star()).from_(_ROWS).where(predicate), {_ROWS: columns}).sql
    return f"SELECT {_ROW} FROM ({matching})"


def _matched(deployment: Deployment, rows: pa.Table, sql: str) -> pa.Array:
    """Which rows the translated predicate matches (a boolean per row), run on a DuckDB connection that can
    reach nothing but the rows."""
    from siltlake.read.duck import bounded, connect, session_zone

    numbered = rows.append_column(_ROW, pa.array(range(rows.num_rows), pa.int64()))
    connection = connect(session_zone(deployment))
    try:
        connection.register(_ROWS, numbered)
        with bounded(connection, deployment):
            connection.execute("SET enable_external_access = false")
            connection.execute("SET lock_configuration = true")
            hits = connection.sql(sql).to_arrow_table().column(0)
    finally:
        connection.close()
    return pc.is_in(
        numbered.column(_ROW), value_set=hits.combine_chunks() if hits.num_chunks else pa.array([], pa.int64())
    )


def delete_in_process(deployment: Deployment, record: TableRecord, base: UpdateBase, where: str) -> SmallDelete | None:
    """The partition's rows without those matching `where`, worked out in this process; None when the partition
    is above publish.in_process_rewrite_bytes or the predicate may not give Spark's answer on DuckDB."""
    from siltlake.read.translate import NotFaithful

    bound = deployment.config.publish.in_process_rewrite_bytes
    if bound <= 0:
        return None
    files = base_files(deployment, record, base)
    if not _within_bound(deployment, record, files, bound):
        return None
    try:
        sql = _matching_sql(deployment, record, where)
    except NotFaithful:
        return None
    rows = _read(deployment, record, files).drop_columns(["dt"])
    return SmallDelete(rows.num_rows, rows.filter(pc.invert(_matched(deployment, rows, sql))))


def base_rows_count(deployment: Deployment, record: TableRecord, base: UpdateBase) -> int:
    """How many rows the partition shows: from the files' footers, unless a keyed partition needs a merge on
    read to say it."""
    from siltlake.read.version_files import dirty_dates_of, lake_keys

    files = base_files(deployment, record, base)
    if dirty_dates_of(record, files):
        return _read(deployment, record, files).num_rows
    lake = deployment.lake
    return sum(
        pq.read_metadata(lake.path(key), filesystem=lake.filesystem).num_rows
        for key in lake_keys(deployment, record, files)
    )


def overwrite_rows(record: TableRecord, partition_date: dt.date, rows: pa.Table) -> pa.Table:
    """`rows` (the table's columns; nullable ones may be missing) as the table's columns and types (the writer
    says which required column holds nulls); SiltError for a column that cannot be read as its type."""
    from siltlake.records.writer import conform

    schema = pa.schema([field.with_nullable(True) for field in record.definition.arrow_schema()])
    try:
        return conform(rows, schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SiltError(
            f"cannot overwrite {record.qualified_name} dt={partition_date}: a column cannot be read as "
            f"its type ({exc}); nothing was changed"
        ) from None
