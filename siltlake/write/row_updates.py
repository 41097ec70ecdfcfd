"""Deletes and updates (SET ... WHERE) of rows, with request ids and dry runs: partition rewrites (update.py)
published as one table version, all of them or none."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.spark import time_bound
from siltlake.write.in_process import no_such_column
from siltlake.write.requests import UpdatesReport, applied_before, commit_updates, write_request
from siltlake.write.update import (
    PreparedUpdate,
    PreparedUpdates,
    base_frame,
    partitions_of,
    prepare_deletes,
    present_dates,
    record_and_base,
    unresolved_column,
    updatable_table,
)

if TYPE_CHECKING:
    from siltlake.catalog import TableRecord

Progress = Callable[[int, dt.date], None]


def delete_rows_where(
    deployment: Deployment,
    name: str,
    dates: Iterable[dt.date],
    where: str,
    *,
    request_id: str | None = None,
    now: dt.datetime | None = None,
    progress: Progress | None = None,
    dry_run: bool = False,
) -> UpdatesReport:
    """Delete the rows matching the Spark SQL predicate `where` from the partitions `dates` as one table version
    (write.update.delete_where), once per request id; a dry run counts them and writes nothing."""
    record = updatable_table(deployment, name)
    request = write_request(record, request_id, "delete")
    applied = applied_before(deployment, request)
    if applied is not None:
        return UpdatesReport(record.qualified_name, (), request_id, applied)
    with time_bound(deployment.config.sql.write_timeout, "sql.write_timeout", f"deleting from {name}"):
        prepared = prepare_deletes(deployment, name, dates, where, now, progress, write=not dry_run)
    if dry_run:
        return UpdatesReport(
            record.qualified_name,
            tuple(u.report(None) for u in prepared.updates),
            request_id,
            rows_changed=tuple(u.rows_before - u.rows_after for u in prepared.updates),
        )
    deleted = sum(u.rows_before - u.rows_after for u in prepared.updates)
    return commit_updates(
        deployment,
        record,
        prepared,
        request,
        f"deleted {deleted} rows from {len(prepared.updates)} partitions where {where}",
    )


def _assignments(record: TableRecord, assignments: Mapping[str, Any]) -> dict[str, Any]:
    """The SET columns, checked: columns of the table, not of its primary key; at least one."""
    definition = record.definition
    where = f"cannot update {definition.qualified_name}"
    if not assignments:
        raise SiltError(f"{where}: give the columns to set, e.g. set={{'action': \"'login'\"}}")
    names = {c.name for c in definition.columns}
    unknown = sorted(set(assignments) - names)
    if unknown:
        raise SiltError(
            f"{where}: {', '.join(unknown)} {'is not a column' if len(unknown) == 1 else 'are not columns'}"
            f" of the table (its columns: {', '.join(c.name for c in definition.columns)}); nothing was "
            "changed"
        )
    placing = sorted(set(assignments) & {f.column for f in definition.partition_fields})
    if placing:
        raise SiltError(
            f"{where}: {', '.join(placing)} partitions the table below dt, and an update rewrites rows in their "
            "partition (delete the rows and append them with the new value); nothing was changed"
        )
    keys = sorted(set(assignments) & set(definition.primary_key))
    if keys:
        raise SiltError(
            f"{where}: {', '.join(keys)} belongs to its primary key, which an update does not change "
            "(delete the rows and upsert them under the new key); nothing was changed"
        )
    return dict(assignments)


def _value_column(spark: Any, value: Any, user: str):  # a Spark Column
    """A SET value as a Spark column: text is a Spark SQL expression over the row's columns (a string literal is
    quoted: "'login'"), anything else (number, bool, None, datetime) a literal."""
    from pyspark.sql import functions as F

    from siltlake.read.sandbox import check_expression

    if isinstance(value, str):
        check_expression(spark, value, user)
        return F.expr(value)
    return F.lit(value)


def _unresolved_in_set(record: TableRecord, assignments: Mapping[str, Any], name: str) -> SiltError | None:
    """The error for a SET value whose text names no column, e.g. {"action": "LOGIN"}: text is Spark SQL, so
    the value was read as the column LOGIN. It says how to write the text instead; None if no value names it."""
    word = re.compile(rf"(?<![\w`'\"]){re.escape(name)}(?![\w`'\"])", re.IGNORECASE)
    for column, value in assignments.items():
        if isinstance(value, str) and word.search(value):
            quoted = "'" + value.replace("'", "''") + "'" if value.strip() == name else f"'{name}'"
            return SiltError(
                f"cannot update {record.qualified_name}: SET {column} = {value!r} reads {name} as a column (a text "
                f"value is a Spark SQL expression over the row), and the table has none of that name; for the text "
                f"write {{{column!r}: {quoted!r}}} (a quoted SQL string literal); its columns are "
                f"{', '.join(c.name for c in record.definition.columns)}; nothing was updated"
            )
    return None


def prepare_update(
    deployment: Deployment,
    name: str,
    partition_date: dt.date,
    assignments: Mapping[str, Any],
    where: str | None,
    now: dt.datetime | None = None,
    write: bool = True,
    partition_values: str = "",
) -> tuple[PreparedUpdate, int]:
    """Write the partition with the SET columns of the rows matching `where` (None: every row) replaced, and
    how many rows match; without `write` (a dry run) only count them."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    from siltlake.read import spark_schema
    from siltlake.read.sandbox import check_expression

    started = time.monotonic()
    record, base = record_and_base(deployment, name, partition_date, partition_values)
    assignments = _assignments(record, assignments)
    spark = deployment.spark()
    frame = base_frame(spark, deployment, record, base)
    types = {field.name: field.dataType for field in spark_schema(record).fields}
    try:
        if where is not None:
            check_expression(spark, where, "silt update --where")
        matching = F.coalesce(F.expr(where), F.lit(False)) if where is not None else F.lit(True)
        values = {
            column: _value_column(spark, value, "silt update --set").cast(types[column])
            for column, value in assignments.items()
        }
        updated = frame.select(
            *[
                (
                    F.when(matching, values[c.name]).otherwise(F.col(c.name)) if c.name in values else F.col(c.name)
                ).alias(c.name)
                for c in record.definition.columns
            ]
        )
        totals = frame.select(F.count(F.lit(1)).alias("rows"), F.count(F.when(matching, 1)).alias("matched"))
        (counted,) = totals.collect()  # an aggregate over the whole frame: one row
    except AnalysisException as exc:
        unresolved = unresolved_column(exc)
        if unresolved is not None:
            raise _unresolved_in_set(record, assignments, unresolved) or no_such_column(
                record, unresolved, f"cannot update {record.qualified_name}", "updated"
            ) from None
        first = str(exc).strip().splitlines()[0]
        raise SiltError(f"cannot update {record.qualified_name}: {first}") from None
    prepared = PreparedUpdate(deployment, record, base, counted["rows"], started, now)
    if counted["matched"] and write:
        prepared.write(updated)
    return prepared, counted["matched"]


def update_rows(
    deployment: Deployment,
    name: str,
    assignments: Mapping[str, Any],
    where: str | None,
    dates: Iterable[dt.date],
    *,
    request_id: str | None = None,
    now: dt.datetime | None = None,
    progress: Progress | None = None,
    dry_run: bool = False,
) -> UpdatesReport:
    """SET `assignments` (column -> Spark SQL expression, or a literal value) in the rows matching `where` (None:
    every row) of the partitions `dates`, as one `update` table version: all of them or none, once per request
    id. A missing date is refused before anything is written."""
    record = updatable_table(deployment, name)
    _assignments(record, assignments)
    request = write_request(record, request_id, "update")
    applied = applied_before(deployment, request)
    if applied is not None:
        return UpdatesReport(record.qualified_name, (), request_id, applied)
    wanted = present_dates(deployment, record, dates, "updated")
    prepared = PreparedUpdates([], now)
    matched: list[int] = []
    with time_bound(deployment.config.sql.write_timeout, "sql.write_timeout", f"updating {name}"):
        try:
            for done, (date, below) in enumerate(partitions_of(deployment, record, wanted)):
                if progress is not None:
                    progress(done, date)
                update, count = prepare_update(deployment, name, date, assignments, where, now, not dry_run, below)
                prepared.updates.append(update)
                matched.append(count)
        except BaseException:
            prepared.discard()
            raise
    if dry_run:
        return UpdatesReport(
            record.qualified_name,
            tuple(u.report(None) for u in prepared.updates),
            request_id,
            rows_changed=tuple(matched),
        )
    columns = ", ".join(f"{column} = {value!r}" for column, value in assignments.items())
    detail = f"set {columns} in {sum(matched)} rows of {len(wanted)} partitions" + (
        f" where {where}" if where is not None else ""
    )
    report = commit_updates(deployment, record, prepared, request, detail)
    return report if report.applied_before is not None else replace(report, rows_changed=tuple(matched))
