"""Column type changes (docs/design.md "Type changes"): a widening changes the definition only; any other change
rewrites every partition holding a value in the column as an `update` version, converting each value as the stream
would, and commits the partitions with the new definition in one catalog transaction. Rows whose value does not
convert leave the table for an error file (`silt errors list | replay`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from siltlake.catalog import TableRecord
from siltlake.clock import utcnow
from siltlake.coltypes import needs_rewrite, parse_type
from siltlake.deployment import Deployment
from siltlake.errors import CatalogError
from siltlake.publish.iceberg.follow import follow
from siltlake.records.retype import REASON, RECORD, ColumnConverter
from siltlake.storage.keys import update_label
from siltlake.tabledef import TableDef
from siltlake.write.update import PreparedUpdate, PreparedUpdates, base_frame


@dataclass(frozen=True)
class RetypeReport:
    table: str
    column: str
    old_type: str
    new_type: str
    partitions: int  # partitions rewritten (0: a widening, or no partition held a value in the column)
    rows: int  # rows the rewritten partitions held
    bad_rows: int  # of them, rows whose value did not convert: moved to error_file
    error_file: str | None  # its URI (None: every value converted)
    table_version: int | None  # None: a dry run
    seconds: float
    dry_run: bool = False


def alter_column(
    deployment: Deployment,
    name: str,
    column: str,
    type_name: str,
    *,
    rewrite: bool = False,
    now: dt.datetime | None = None,
    progress: Callable[[int, dt.date], None] | None = None,
    dry_run: bool = False,
) -> RetypeReport:
    """Change column `column` of table `name` to `type_name`. A widening (int -> bigint, float -> double) needs
    no rewrite; any other change is refused unless `rewrite`, naming it. `now` (naive UTC) stamps the versions;
    progress(done, date) before each partition is read. A dry run makes the change's checks and writes nothing
    (a rewrite's partitions and rows are not counted)."""
    started = time.monotonic()
    record = deployment.catalog.tables.get(name)
    new_type = parse_type(type_name)
    try:
        old_type = record.definition.column(column).type
    except KeyError:
        old_type = None  # the catalog refuses it, naming the column
    if not rewrite or old_type is None or not needs_rewrite(old_type, new_type):
        tables = deployment.catalog.tables
        record = tables.alter_column_type(name, column, type_name, now, dry_run=dry_run)
        if not dry_run:
            follow(deployment, record)  # its Iceberg snapshot, at once, as every write's
        return RetypeReport(
            record.qualified_name,
            column,
            old_type or "",
            new_type,
            0,
            0,
            0,
            None,
            None if dry_run else tables.changes(record.id)[-1].table_version,
            time.monotonic() - started,
            dry_run,
        )
    before, after = deployment.catalog.tables.retype_plan(name, column, type_name)
    if dry_run:
        return RetypeReport(
            before.qualified_name, column, old_type, new_type, 0, 0, 0, None, None, time.monotonic() - started, True
        )
    prepared, rows, bad_rows, error_key = _rewrite(deployment, before, after, column, now, progress)
    errors = None
    if bad_rows:
        errors = (error_key, deployment.lake.size(error_key), bad_rows)
    else:
        deployment.lake.delete(error_key)
    try:
        change = deployment.catalog.tables.commit_retype(
            before, after, prepared.writes(), f"{column} {new_type} (rewrite)", errors, now
        )
    except CatalogError:  # UpdateConflict, VersionTimeBehind, a changed definition
        # Refused inside the transaction: nothing names these objects or the error file.
        prepared.discard()
        deployment.lake.delete(error_key)
        raise
    follow(deployment, before)
    return RetypeReport(
        before.qualified_name,
        column,
        old_type,
        new_type,
        len(prepared.updates),
        rows,
        bad_rows,
        deployment.lake.uri(error_key) if bad_rows else None,
        change.table_version,
        time.monotonic() - started,
    )


def _rewrite(
    deployment: Deployment,
    before: TableRecord,
    after: TableDef,
    column: str,
    now: dt.datetime | None,
    progress: Callable[[int, dt.date], None] | None,
) -> tuple[PreparedUpdates, int, int, str]:
    """Write each partition holding a value in `column` with the column converted, and the rows that do not
    convert to an error file: (the prepared updates, rows they held, bad rows, the error file's key)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    from siltlake.read import spark_schema

    converted_record = dataclasses.replace(before, definition=after)
    converter = ColumnConverter(before.definition.to_json(), after.to_json(), column)
    error_key = before.layout(deployment.instance_key).rewrite_errors(update_label(utcnow(), uuid.uuid4().hex[:12]))
    source = f"rewrite of {before.qualified_name} column {column} to {after.column(column).type}"
    prepared = PreparedUpdates([], now)
    rows = bad_rows = 0
    try:
        with deployment.lake.open_output(error_key) as errors:
            for done, partition in enumerate(deployment.catalog.partitions.list(before.id)):
                if progress is not None:
                    progress(done, partition.partition_date)
                base = deployment.catalog.versions.update_base(
                    before.id, partition.partition_date, partition.partition_values
                )
                frame = base_frame(deployment.spark(), deployment, before, base)  # Spark only for a partition
                if not frame.where(F.col(column).isNotNull()).limit(1).count():
                    continue  # nothing to convert: the objects read the new column as null, as they should
                schema = StructType(
                    [f for f in spark_schema(converted_record).fields if f.name != "dt"]
                    + [StructField(REASON, StringType()), StructField(RECORD, StringType())]
                )
                converted = frame.mapInArrow(converter, schema).persist()
                held = converted.count()
                for bad in converted.where(F.col(REASON).isNotNull()).select(REASON, RECORD).toLocalIterator():
                    bad_rows += 1
                    line = {
                        "source": f"{source}, dt={partition.partition_date}",
                        "line": bad_rows,
                        "reason": bad[REASON],
                        "raw": bad[RECORD],
                    }
                    errors.write((json.dumps(line, ensure_ascii=False) + "\n").encode())
                update = PreparedUpdate(deployment, converted_record, base, held, time.monotonic(), now)
                prepared.updates.append(update)
                update.write(converted.where(F.col(REASON).isNull()).drop(REASON, RECORD))
                converted.unpersist()
                rows += held
    except BaseException:
        prepared.discard()
        deployment.lake.delete(error_key)
        raise
    return prepared, rows, bad_rows, error_key
