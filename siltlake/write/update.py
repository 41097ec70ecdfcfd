"""Updates (docs/design.md, "Updates and concurrent writers"): rewrite partitions, publish them as one table version.

An update reads everything a partition holds (its newest version's manifest and every small object
above it, live or delayed), computes the new rows with Spark, writes them as one object sorted by event
time under a key of its own, and commits in one catalog transaction guarded by what it read: a
concurrent compaction loses, a concurrent append or update makes this one fail with UpdateConflict.
A delete over several dates writes every partition first and commits them all in one transaction.
"""

from __future__ import annotations

import datetime as dt
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from siltlake.catalog import (
    PublishedVersion,
    RequestApplied,
    TableRecord,
    UpdateBase,
    UpdateConflict,
    UpdateWrite,
    VersionTimeBehind,
    WriteRequest,
)
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import NotFoundError, SiltError
from siltlake.records.coerce import partition_dates
from siltlake.records.physical import physical_rows
from siltlake.records.writer import conform, object_rows, object_schema
from siltlake.storage.filesystem import Storage
from siltlake.storage.keys import update_label
from siltlake.storage.manifests import write_manifests
from siltlake.tabledef import TableDef
from siltlake.write import in_process

if TYPE_CHECKING:
    from pyspark.errors import AnalysisException
    from pyspark.sql import DataFrame, SparkSession

# Spark's answer from the writing task: one row.
_WRITTEN = "rows long, bytes long, outside long, first_outside string, null_column string"


@dataclass(frozen=True)
class UpdateReport:
    table: str
    partition_date: dt.date
    rows_before: int
    rows_after: int
    version: PublishedVersion | None  # None: nothing matched, nothing was written
    object_key: str | None
    seconds: float
    partition_values: str = ""  # below dt, for a table with partition_by


@dataclass(frozen=True)
class _PartitionWriter:
    """Runs in the one Spark task that receives the partition's new rows in event-time order: writes them
    as the table's Parquet schema in row groups of about row_group_bytes, and checks each row belongs here."""

    lake: Storage
    key: str
    table_json: str
    partition_date: dt.date
    row_group_bytes: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = TableDef.from_json(self.table_json)
        schema = table.arrow_schema()
        written = object_schema(table)
        required = [c.name for c in table.columns if not c.nullable]
        rows = outside = 0
        first_outside: str | None = None
        null_column: str | None = None
        pending: list[pa.Table] = []
        pending_bytes = 0
        with (
            self.lake.open_output(self.key) as sink,
            pq.ParquetWriter(sink, written, compression=table.codec, write_statistics=True) as writer,
        ):
            for batch in batches:
                piece = conform(pa.Table.from_batches([batch]), pa.schema([f.with_nullable(True) for f in schema]))
                null_column = null_column or next((n for n in required if piece.column(n).null_count), None)
                times = piece.column(table.time_column)
                wrong = pc.invert(
                    pc.fill_null(
                        pc.equal(partition_dates(times, table.timezone), pa.scalar(self.partition_date, pa.date32())),
                        False,
                    )
                )
                misplaced = pc.sum(wrong).as_py() or 0
                if misplaced and first_outside is None:
                    first_outside = str(pc.filter(times, wrong)[0].as_py())
                outside += misplaced
                rows += piece.num_rows
                if null_column is not None or outside:
                    continue  # refused: keep counting, stop writing
                pending.append(piece)
                pending_bytes += piece.nbytes
                if pending_bytes >= self.row_group_bytes:
                    writer.write_table(self._rows(pending, schema, written))
                    pending, pending_bytes = [], 0
            if pending and null_column is None and not outside:
                writer.write_table(self._rows(pending, schema, written))
        yield pa.RecordBatch.from_pydict(
            {
                "rows": [rows],
                "bytes": [self.lake.size(self.key)],
                "outside": [outside],
                "first_outside": [first_outside],
                "null_column": [null_column],
            }
        )

    def _rows(self, pending: list[pa.Table], schema: pa.Schema, written: pa.Schema) -> pa.Table:
        return object_rows(
            physical_rows(pa.concat_tables(pending).cast(schema), TableDef.from_json(self.table_json)),
            written,
            self.partition_date,
        )


def updatable_table(deployment: Deployment, name: str) -> TableRecord:
    """The table's record, refused for derived tables (their rows come from their query)."""
    record = deployment.catalog.tables.get(name)
    if record.definition.kind == "derived":
        raise SiltError(
            f"{record.qualified_name} is a derived table: its rows come from its query; change the "
            "tables it reads and build it again (`silt derived build`)"
        )
    return record


def record_and_base(
    deployment: Deployment, name: str, partition_date: dt.date, values: str = ""
) -> tuple[TableRecord, UpdateBase]:
    """The table's record and what a rewrite of one partition starts from (its current version's objects)."""
    record = updatable_table(deployment, name)
    try:
        return record, deployment.catalog.versions.update_base(record.id, partition_date, values)
    except SiltError as exc:
        raise SiltError(f"{record.qualified_name}: {exc}") from None


def base_frame(spark: SparkSession, deployment: Deployment, record: TableRecord, base: UpdateBase) -> DataFrame:
    """The partition's current rows as a Spark frame, without the `dt` column."""
    from siltlake.read import objects_frame

    frame = objects_frame(
        spark,
        record,
        deployment,
        [base.manifest_key] if base.manifest_key else [],
        [(base.partition_date, object_id, delayed, base.partition_values) for object_id, delayed in base.objects],
    )
    return frame.drop("dt")


class PreparedUpdate:
    """An update whose object and manifests are written; commit() publishes it (or raises UpdateConflict).

    Split in two so that tests and callers can see exactly which writes race with which commits."""

    def __init__(
        self,
        deployment: Deployment,
        record: TableRecord,
        base: UpdateBase,
        rows_before: int,
        started: float,
        now: dt.datetime | None,
    ) -> None:
        self.deployment = deployment
        self.record = record
        self.base = base
        self.rows_before = rows_before
        self.started = started
        self.now = now
        self.object_key: str | None = None
        self.manifest_key: str | None = None
        self.symlink_key: str | None = None
        self.rows_after = rows_before
        self.bytes = 0

    def write(self, frame: DataFrame | pa.Table) -> None:
        """Write the partition's new rows (the table's columns; a pyarrow table: in this process, see
        write.in_process) as one object and its manifests."""
        definition = self.record.definition
        layout = self.record.layout(self.deployment.instance_key)
        label = update_label(utcnow(), uuid.uuid4().hex[:12])
        key = layout.update_object(self.base.partition_date, label, self.base.partition_values)
        writer = _PartitionWriter(
            self.deployment.lake, key, definition.to_json(), self.base.partition_date, definition.row_group_bytes
        )
        if isinstance(frame, pa.Table):  # the writer called here, in event-time order
            report = next(writer(iter(frame.sort_by(definition.time_column).to_batches()))).to_pylist()[0]
        # One task receives every row in event-time order (Spark sorts, spilling to disk as needed).
        elif (
            written := frame.coalesce(1)
            .sortWithinPartitions(definition.time_column)
            .mapInArrow(writer, _WRITTEN)
            .collect()
        ):
            report = written[0].asDict()
        else:  # a frame without partitions never reached the task: the partition is now empty
            report = next(writer(iter([]))).to_pylist()[0]
        if report["null_column"] or report["outside"]:
            self.deployment.lake.delete(key)
            if report["null_column"]:
                raise SiltError(
                    f"column {report['null_column']!r} of {definition.qualified_name} is not nullable, "
                    "but the new rows hold nulls in it; nothing was changed"
                )
            raise SiltError(
                f"{report['outside']} of the new rows do not belong to dt={self.base.partition_date} in "
                f"{definition.timezone} (first event time: {report['first_outside']}); an update replaces one "
                "partition: filter the rows to that date; nothing was changed"
            )
        self.object_key, self.rows_after, self.bytes = key, report["rows"], report["bytes"]
        self.manifest_key, self.symlink_key = write_manifests(
            self.deployment.lake,
            layout,
            self.base.partition_date,
            self.base.upper,
            [(key, report["bytes"])],
            label=label,
            values=self.base.partition_values,
        )

    def discard(self) -> None:
        """Delete what write() wrote (the update will not be committed)."""
        for key in (self.object_key, self.manifest_key, self.symlink_key):
            if key is not None:
                self.deployment.lake.delete(key)

    def report(self, version: PublishedVersion | None) -> UpdateReport:
        return UpdateReport(
            self.record.qualified_name,
            self.base.partition_date,
            self.rows_before,
            self.rows_after,
            version,
            self.object_key,
            time.monotonic() - self.started,
            self.base.partition_values,
        )

    def commit(self) -> UpdateReport:
        return PreparedUpdates([self], self.now).commit()[0]


class PreparedUpdates:
    """Updates of partitions of one table whose objects are written; commit() publishes them all as one table
    version, or none of them."""

    def __init__(self, updates: list[PreparedUpdate], now: dt.datetime | None) -> None:
        self.updates = updates
        self.now = now

    def discard(self) -> None:
        for update in self.updates:
            update.discard()

    def writes(self) -> list[UpdateWrite]:
        """What commit publishes: the updates that wrote an object."""
        return [
            UpdateWrite(u.base, u.object_key, u.manifest_key, u.rows_after, u.bytes)  # type: ignore[arg-type]
            for u in self.updates
            if u.object_key is not None
        ]

    def commit(self, request: tuple[WriteRequest, str] | None = None) -> list[UpdateReport]:
        """Publish; `request` (a request id and what the write did) is recorded in the same transaction."""
        writes = self.writes()
        if not writes:
            return [u.report(None) for u in self.updates]
        try:
            versions = self.updates[0].deployment.catalog.versions.commit_updates(
                writes, self.now or utcnow(), given=self.now is not None, request=request
            )
        except (UpdateConflict, VersionTimeBehind, RequestApplied):
            # Refused inside the transaction, so nothing was committed: nothing will ever list these objects.
            # (Any other failure may have come after the commit; reap deletes what no version names.)
            self.discard()
            raise
        from siltlake.publish.iceberg.follow import follow

        follow(self.updates[0].deployment, self.updates[0].record)  # its Iceberg snapshot, at once
        published = {v.partition_id: v for v in versions}
        return [u.report(published.get(u.base.partition_id)) for u in self.updates]


def unresolved_column(exc: AnalysisException) -> str | None:
    """The column (dotted) a Spark AnalysisException says cannot be resolved, None for any other error."""
    if not (exc.getCondition() or "").startswith("UNRESOLVED_COLUMN"):
        return None
    name = (exc.getMessageParameters() or {}).get("objectName", "")
    parts = re.findall(r"`((?:[^`]|``)*)`", name)
    return ".".join(part.replace("``", "`") for part in parts) if parts else name or None


def prepare_delete(
    deployment: Deployment,
    name: str,
    partition_date: dt.date,
    where: str,
    now: dt.datetime | None = None,
    write: bool = True,
    values: str = "",
) -> PreparedUpdate:
    """Write the partition (of `partition_date` and, below it, `values`) without the rows matching the Spark SQL
    predicate `where` (null counts as no match); without `write` (a dry run) only count them: rows_after is what
    would remain.

    `now` (naive UTC) stamps the version, as publish's does, to drive a simulated clock."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    from siltlake.read.sandbox import check_expression

    started = time.monotonic()
    record, base = record_and_base(deployment, name, partition_date, values)
    small = in_process.delete_in_process(deployment, record, base, where)  # None: Spark's to do
    if small is not None:
        prepared = PreparedUpdate(deployment, record, base, small.rows_before, started, now)
        if not write:
            prepared.rows_after = small.kept.num_rows
        elif small.kept.num_rows < small.rows_before:
            prepared.write(small.kept)
        return prepared
    frame = base_frame(deployment.spark(), deployment, record, base)
    try:
        # Parsed on its own: pasted into a larger expression, "a = 1) OR (true" would balance and match every row.
        check_expression(deployment.spark(), where)  # before Spark analyses or runs any of it
        matching = F.coalesce(F.expr(where), F.lit(False))
        # One scan counts both; the rows are read again only if something is to be deleted.
        totals = frame.select(F.count(F.lit(1)).alias("rows"), F.count(F.when(matching, 1)).alias("matched"))
    except AnalysisException as exc:
        unresolved = unresolved_column(exc)
        if unresolved is not None:  # said as the in-process path says it
            raise in_process.no_such_column(record, unresolved, in_process.where_of(record, where)) from None
        first = str(exc).strip().splitlines()[0]
        raise SiltError(f"cannot use --where {where!r} on {record.qualified_name}: {first}") from None
    (counted,) = totals.collect()  # an aggregate over the whole frame: one row
    prepared = PreparedUpdate(deployment, record, base, counted["rows"], started, now)
    if counted["matched"] and write:
        prepared.write(frame.where(~matching))
    elif not write:
        prepared.rows_after = counted["rows"] - counted["matched"]
    return prepared


def prepare_overwrite(
    deployment: Deployment,
    name: str,
    partition_date: dt.date,
    rows: DataFrame | pa.Table,
    now: dt.datetime | None = None,
    values: str = "",
) -> PreparedUpdate:
    """Write `rows` (a DataFrame with the table's columns; nullable ones may be missing) as the partition (of
    `partition_date` and `values` below it); a pyarrow table is written in this process, without Spark
    (write.in_process)."""
    started = time.monotonic()
    record, base = record_and_base(deployment, name, partition_date, values)
    definition = record.definition
    if definition.partition_by and not isinstance(rows, pa.Table):
        raise SiltError(
            f"cannot overwrite {definition.qualified_name} dt={partition_date}: the table is partitioned below dt "
            f"too ({', '.join(definition.partition_by)}); overwrite it with Arrow rows (Table.overwrite), which are "
            "split by partition, or delete with a predicate"
        )
    given = rows.column_names if isinstance(rows, pa.Table) else rows.columns
    extra = sorted(set(given) - {c.name for c in definition.columns} - {"dt"})
    missing = [c.name for c in definition.columns if c.name not in given and not c.nullable]
    if extra or missing:
        problems = ([f"columns not in the table: {', '.join(extra)}"] if extra else []) + (
            [f"required columns missing: {', '.join(missing)}"] if missing else []
        )
        raise SiltError(f"cannot overwrite {definition.qualified_name} dt={partition_date}: {'; '.join(problems)}")
    if isinstance(rows, pa.Table):
        prepared = PreparedUpdate(
            deployment, record, base, in_process.base_rows_count(deployment, record, base), started, now
        )
        prepared.write(in_process.overwrite_rows(record, partition_date, rows))
        return prepared
    from pyspark.sql import functions as F  # a DataFrame's: Arrow rows need no PySpark installed

    from siltlake.read import spark_schema

    types = {field.name: field.dataType for field in spark_schema(record).fields}
    shaped = rows.select(
        *[
            (F.col(c.name) if c.name in rows.columns else F.lit(None)).cast(types[c.name]).alias(c.name)
            for c in definition.columns
        ]
    )
    prepared = PreparedUpdate(
        deployment, record, base, base_frame(deployment.spark(), deployment, record, base).count(), started, now
    )
    prepared.write(shaped)
    return prepared


def present_dates(deployment: Deployment, record: TableRecord, dates: Iterable[dt.date], verb: str) -> list[dt.date]:
    """`dates` in order, once each; NotFoundError naming those the table has no partition for (nothing was
    `verb`), before anything is written."""
    wanted = sorted(set(dates))
    present = {p.partition_date for p in deployment.catalog.partitions.list(record.id)}
    missing = [date.isoformat() for date in wanted if date not in present]
    if missing:
        raise NotFoundError(f"{record.qualified_name} has no partition {', '.join(missing)}; nothing was {verb}")
    return wanted


def partitions_of(deployment: Deployment, record: TableRecord, dates: list[dt.date]) -> list[tuple[dt.date, str]]:
    """The partitions of `dates` (present ones) as (date, values): one a date, or, for a table partitioned
    below dt, each of the date's."""
    if not record.definition.partition_by:
        return [(date, "") for date in dates]
    wanted = set(dates)
    return [
        (p.partition_date, p.partition_values)
        for p in deployment.catalog.partitions.list(record.id)
        if p.partition_date in wanted
    ]


def prepare_deletes(
    deployment: Deployment,
    name: str,
    dates: Iterable[dt.date],
    where: str,
    now: dt.datetime | None = None,
    progress: Callable[[int, dt.date], None] | None = None,
    write: bool = True,
) -> PreparedUpdates:
    """prepare_delete for each of `dates`, all checked to exist before any is written (a missing one is
    refused, named); what was written is deleted if one fails. progress(done, date) before each."""
    record = updatable_table(deployment, name)
    wanted = present_dates(deployment, record, dates, "deleted")
    prepared = PreparedUpdates([], now)
    try:
        for done, (date, values) in enumerate(partitions_of(deployment, record, wanted)):
            if progress is not None:
                progress(done, date)
            prepared.updates.append(prepare_delete(deployment, name, date, where, now, write, values))
    except BaseException:
        prepared.discard()
        raise
    return prepared


def delete_where(
    deployment: Deployment,
    name: str,
    dates: Iterable[dt.date],
    where: str,
    now: dt.datetime | None = None,
    progress: Callable[[int, dt.date], None] | None = None,
) -> list[UpdateReport]:
    """Delete the rows matching `where` (e.g. an erasure request) from the partitions `dates` as one table
    version (an `update` version of each partition that changed): all of them or none."""
    from siltlake.spark import time_bound

    with time_bound(deployment.config.sql.write_timeout, "sql.write_timeout", f"deleting from {name}"):
        prepared = prepare_deletes(deployment, name, dates, where, now, progress)
    return prepared.commit()


def delete_rows(
    deployment: Deployment, name: str, partition_date: dt.date, where: str, now: dt.datetime | None = None
) -> UpdateReport:
    """Delete the rows of one partition matching `where` as one `update` version."""
    (report,) = delete_where(deployment, name, [partition_date], where, now)
    return report


def overwrite_partition(
    deployment: Deployment,
    name: str,
    partition_date: dt.date,
    rows: DataFrame | pa.Table,
    now: dt.datetime | None = None,
) -> UpdateReport:
    """Replace one partition's rows with `rows` as one `update` version."""
    return prepare_overwrite(deployment, name, partition_date, rows, now).commit()
