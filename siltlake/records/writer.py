"""Typed rows to time-sorted Parquet objects, one per partition (date, and values below it): the stream's and the
load's writer.

Memory stays bounded: a date whose rows arrive in time order is written as they come, a row group at a time;
other rows are buffered up to spill_bytes, then written as sorted runs that a k-way merge streams into the
final object.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO, NotRequired, TypedDict

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from siltlake.clock import to_naive_utc
from siltlake.coltypes import PARTITION_COLUMN
from siltlake.partspec import row_values
from siltlake.records.coerce import partition_dates
from siltlake.records.physical import logical_names, physical_rows
from siltlake.records.vectorised import all_true
from siltlake.storage import keys
from siltlake.storage.filesystem import Storage
from siltlake.storage.keys import TableLayout
from siltlake.tabledef import TableDef

# Where rows belong: their partition date and the values path below it ("" for a table partitioned by dt alone).
Place = tuple[dt.date, str]


class WrittenPart(TypedDict):
    """One object a writer wrote, as a task reports it to the commit (JSON-able: it leaves a Spark task)."""

    date: str  # its partition date, ISO
    values: NotRequired[str]  # its partition values below dt (siltlake.partspec); absent: none
    tmp_key: str  # where it was written; the commit moves it to its id's key
    rows: int
    bytes: int
    min_time: str  # its rows' earliest and latest event time, naive UTC in ISO form
    max_time: str
    # An object written for several staging objects (records.group_writer): each one's [id, first row, rows].
    sources: NotRequired[list[list[int]]]


def sorted_by_time(tables: list[pa.Table], column: str) -> pa.Table:
    """The rows by time (a stable sort); rows already in order, as they mostly are, are not moved."""
    joined = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    times = joined.column(column)
    if joined.num_rows < 2 or all_true(pc.less_equal(times.slice(0, joined.num_rows - 1), times.slice(1))):
        return joined
    return joined.sort_by(column)


def split_by_place(table: TableDef, rows: pa.Table) -> list[tuple[Place, pa.Table]]:
    """The rows of each partition they belong to, in order of place (one slice, not a copy, for a single one)."""
    dates = partition_dates(rows.column(table.time_column), table.timezone)
    fields = table.partition_fields
    if not fields:
        distinct = sorted(pc.unique(dates).to_pylist())
        if len(distinct) == 1:
            return [((distinct[0], ""), rows)]
        return [((date, ""), rows.filter(pc.equal(dates, pa.scalar(date, pa.date32())))) for date in distinct]
    values = row_values(fields, rows)
    labels = pc.binary_join_element_wise(pc.cast(dates, pa.string()), values, " ")
    distinct = sorted(pc.unique(labels).to_pylist())
    if len(distinct) == 1:
        return [(_place(distinct[0]), rows)]
    return [(_place(label), rows.filter(pc.equal(labels, pa.scalar(label, pa.string())))) for label in distinct]


def _place(label: str) -> Place:
    date, _, values = label.partition(" ")
    return dt.date.fromisoformat(date), values


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The table's columns in the schema's order and types; columns it lacks (added later) read as null."""
    columns = []
    for target in schema:
        index = table.schema.get_field_index(target.name)
        if index < 0:
            columns.append(pa.nulls(table.num_rows, target.type))
            continue
        column = table.column(index)
        columns.append(column if column.type.equals(target.type) else column.cast(target.type))
    return pa.Table.from_arrays(columns, schema=schema)


def object_schema(table: TableDef, extra: Iterable[pa.Field] = ()) -> pa.Schema:
    """The schema of the table's objects (TableDef.file_schema: its columns and dt, with Iceberg field ids), and
    after them `extra` columns of an object's own (an upsert's delete markers)."""
    schema = table.file_schema()
    for added in extra:
        schema = schema.append(added)
    return schema


def object_rows(rows: pa.Table, schema: pa.Schema, date: dt.date) -> pa.Table:
    """Rows of one partition date as an object's rows: conformed to `schema` (object_schema), dt = date."""
    columns = conform(rows, pa.schema([f for f in schema if f.name != PARTITION_COLUMN]))
    index = schema.get_field_index(PARTITION_COLUMN)
    return columns.add_column(index, schema.field(index), pa.repeat(pa.scalar(date, pa.date32()), rows.num_rows))


# Bounds the rows the k-way merge gathers before writing a row group of the final object.
MAX_ROW_GROUP_ROWS = 262_144
# The merge holds one decoded row group per run: small run row groups and a bounded fan-in keep its
# memory constant however many runs a huge object spills.
RUN_ROW_GROUP_ROWS = 16_384
MAX_MERGE_FAN_IN = 16


# A date's rows nearly always arrive in time order (a shipper writes events as they happen): such a date's object
# is written as they come, a row group at a time, with no run to spill and merge. Its latest rows (this many)
# wait in memory for the next ones, so that rows arriving a little late still land in order.
HOLD_BACK_ROWS = 65_536
# Dates written as they come at one time (each holds an object open); any other takes the runs' path.
MAX_ORDERED_DATES = 8


@dataclass
class _OrderedObject:
    """A date's object being written in time order: where, its writer, and the latest time written."""

    key: str
    sink: BinaryIO
    writer: pq.ParquetWriter
    last_time: dt.datetime | None = None


@dataclass
class _DateBuffer:
    tables: list[pa.Table] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0
    ordered: _OrderedObject | None = None
    in_order: bool = True  # False once rows came before rows already written: the date takes the runs' path

    def hold(self, tables: list[pa.Table]) -> None:
        self.tables = [table for table in tables if table.num_rows]
        self.rows = sum(table.num_rows for table in self.tables)
        self.nbytes = sum(table.nbytes for table in self.tables)


class ObjectWriter:
    """Collects typed rows per partition date and writes one time-sorted Parquet object per date.

    Everything it writes goes to temporary keys of the layout, under run_id and object_id: the caller moves
    the finished objects (or discards them)."""

    def __init__(
        self,
        table: TableDef,
        lake: Storage,
        layout: TableLayout,
        run_id: str,
        object_id: int,
        spill_bytes: int,
        schema: pa.Schema | None = None,
    ) -> None:
        self.table = table
        self.lake = lake
        self.layout = layout
        self.run_id = run_id
        self.object_id = object_id
        self.spill_bytes = spill_bytes
        # The rows' schema: the table's, or (an upsert's delete markers) the table's plus columns of its own;
        # the objects add dt and field ids (object_schema). Spilled runs are temporary: rows only.
        self.schema = schema or table.arrow_schema()
        self.object_schema = object_schema(table, [f for f in self.schema if f.name not in table.arrow_schema().names])
        self.buffers: dict[Place, _DateBuffer] = {}
        self.written: list[str] = []
        self.object_runs: set[str] = set()  # runs that were ordered objects (dt, physical names): _run_rows

    def _key(self, name: str) -> str:
        return self.layout.task_temporary(self.run_id, self.object_id, name)

    def add(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        for place, part in split_by_place(self.table, rows):
            buffer = self.buffers.setdefault(place, _DateBuffer())
            buffer.tables.append(part)
            buffer.rows += part.num_rows
            buffer.nbytes += part.nbytes
            if buffer.in_order and buffer.rows >= MAX_ROW_GROUP_ROWS + HOLD_BACK_ROWS:
                self._write_in_order(place, buffer, HOLD_BACK_ROWS)
        if sum(b.nbytes for b in self.buffers.values()) > self.spill_bytes:
            for place, buffer in self.buffers.items():
                if buffer.in_order:
                    self._write_in_order(place, buffer, 0)
                if not buffer.in_order:
                    self._spill(place, buffer)

    def _sorted(self, tables: list[pa.Table]) -> pa.Table:
        return sorted_by_time(tables, self.table.time_column)

    def _write_in_order(self, place: Place, buffer: _DateBuffer, keep: int) -> None:
        """Append the date's buffered rows to its ordered object, all but its latest `keep` (whole row groups
        while more may come); rows earlier than ones written, or too many dates open, send the date down
        the runs' path instead."""
        if not buffer.rows:
            return
        rows = self._sorted(buffer.tables)
        count = rows.num_rows - keep
        if keep:
            count -= count % MAX_ROW_GROUP_ROWS
        buffer.hold([rows])
        if count <= 0:
            return
        ordered = buffer.ordered
        times = rows.column(self.table.time_column)
        if ordered is None and sum(b.ordered is not None for b in self.buffers.values()) >= MAX_ORDERED_DATES:
            buffer.in_order = False
            return
        if ordered is not None and times[0].as_py() < ordered.last_time:
            self._out_of_order(place, buffer)
            return
        if ordered is None:
            key = self._key(keys.date_part(*place))
            self.written.append(key)
            sink = self.lake.open_output(key)
            writer = pq.ParquetWriter(sink, self.object_schema, compression=self.table.codec, write_statistics=True)
            ordered = buffer.ordered = _OrderedObject(key, sink, writer)
        head = rows.slice(0, count)
        ordered.writer.write_table(
            object_rows(physical_rows(head, self.table), self.object_schema, place[0]),
            row_group_size=MAX_ROW_GROUP_ROWS,
        )
        ordered.last_time = times[count - 1].as_py()
        buffer.hold([rows.slice(count)])

    def _out_of_order(self, place: Place, buffer: _DateBuffer) -> None:
        """The date's ordered object so far becomes its first sorted run; the rest of it takes the runs' path."""
        buffer.in_order = False
        ordered, buffer.ordered = buffer.ordered, None
        if ordered is None:
            return
        ordered.writer.close()
        ordered.sink.close()
        run = self._key(keys.spilled_run(place[0], len(buffer.runs), place[1]))
        self.lake.move(ordered.key, run)
        self.written.append(run)
        self.object_runs.add(run)
        buffer.runs.append(run)

    def _close_ordered(self, ordered: _OrderedObject) -> tuple[pq.FileMetaData, int]:
        ordered.writer.close()
        size = ordered.sink.tell()
        ordered.sink.close()
        return ordered.writer.writer.metadata, size

    def _write(
        self,
        key: str,
        tables: Iterable[pa.Table],
        row_group_rows: int = MAX_ROW_GROUP_ROWS,
        date: dt.date | None = None,
    ) -> tuple[pq.FileMetaData, int]:
        """Write tables in order, gathered into row groups of at most row_group_rows: the object of `date`
        (with dt and field ids), or a spilled run (date None); the file's footer and size, so that describing it
        needs no second read."""
        self.written.append(key)
        schema = self.object_schema if date is not None else self.schema

        def rows(pending: list[pa.Table]) -> pa.Table:
            joined = pa.concat_tables(pending)
            return object_rows(physical_rows(joined, self.table), schema, date) if date is not None else joined

        with self.lake.open_output(key) as sink:
            with pq.ParquetWriter(sink, schema, compression=self.table.codec, write_statistics=True) as writer:
                pending: list[pa.Table] = []
                pending_rows = 0
                for table in tables:
                    pending.append(table)
                    pending_rows += table.num_rows
                    if pending_rows >= row_group_rows:
                        writer.write_table(rows(pending), row_group_size=row_group_rows)
                        pending, pending_rows = [], 0
                if pending:
                    writer.write_table(rows(pending), row_group_size=row_group_rows)
            size = sink.tell()
        return writer.writer.metadata, size

    def _spill(self, place: Place, buffer: _DateBuffer) -> None:
        if not buffer.tables:
            return
        key = self._key(keys.spilled_run(place[0], len(buffer.runs), place[1]))
        self._write(key, [self._sorted(buffer.tables)], row_group_rows=RUN_ROW_GROUP_ROWS)
        buffer.runs.append(key)
        buffer.hold([])

    def finish(self) -> list[WrittenPart]:
        parts = []
        for place in sorted(self.buffers):
            buffer, (date, values) = self.buffers[place], place
            key = self._key(keys.date_part(date, values))
            if buffer.ordered is not None:
                self._write_in_order(place, buffer, 0)
            if buffer.ordered is not None:
                metadata, size = self._close_ordered(buffer.ordered)
                buffer.ordered = None
            elif buffer.runs:
                self._spill(place, buffer)
                runs, passes = list(buffer.runs), 0
                while len(runs) > MAX_MERGE_FAN_IN:
                    passes += 1
                    merged = self._key(keys.merge_pass(date, passes, values))
                    self._write(merged, self._merge_runs(runs[:MAX_MERGE_FAN_IN]), RUN_ROW_GROUP_ROWS)
                    for run in runs[:MAX_MERGE_FAN_IN]:
                        self.lake.delete(run)
                    runs = runs[MAX_MERGE_FAN_IN:] + [merged]
                metadata, size = self._write(key, self._merge_runs(runs), date=date)
                for run in runs:
                    self.lake.delete(run)
            else:
                metadata, size = self._write(key, [self._sorted(buffer.tables)], date=date)
            parts.append(self._describe(place, key, metadata, size))
        return parts

    def _merge_runs(self, runs: list[str]):  # generator of tables
        """K-way merge of time-sorted runs, one batch per run in memory at a time."""
        column = self.table.time_column
        readers = [
            pq.ParquetFile(self.lake.open_input_file(run)).iter_batches(batch_size=RUN_ROW_GROUP_ROWS) for run in runs
        ]
        heads: list[pa.Table | None] = [None] * len(readers)

        def refill(index: int) -> None:
            while (head := heads[index]) is None or head.num_rows == 0:
                batch = next(readers[index], None)
                if batch is None:
                    heads[index] = None
                    return
                heads[index] = self._run_rows(batch, runs[index] in self.object_runs)

        for index in range(len(readers)):
            refill(index)
        while any(head is not None for head in heads):
            # Every row at or before the smallest "last time" among the heads can be emitted now.
            bound = pa.scalar(
                min(head.column(column)[-1].as_py() for head in heads if head is not None),
                self.schema.field(column).type,
            )
            taken = []
            for index, head in enumerate(heads):
                if head is None:
                    continue
                count = pc.sum(pc.less_equal(head.column(column), bound)).as_py() or 0
                if count:
                    taken.append(head.slice(0, count))
                    heads[index] = head.slice(count)
                    refill(index)
            yield self._sorted(taken)

    def _run_rows(self, batch: pa.RecordBatch, object_run: bool) -> pa.Table:
        """A run's batch as rows; a run that was an ordered object holds dt and physical names besides."""
        if not object_run:
            return pa.Table.from_batches([batch], schema=self.schema)
        rows = pa.Table.from_batches([batch])
        return conform(rows.rename_columns(logical_names(self.table, rows.column_names)), self.schema)

    def _describe(self, place: Place, key: str, metadata: pq.FileMetaData, size: int) -> WrittenPart:
        time_index = self.object_schema.get_field_index(self.table.column(self.table.time_column).physical_name)
        lows, highs = [], []
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(time_index).statistics
            lows.append(stats.min)
            highs.append(stats.max)
        part: WrittenPart = {
            "date": place[0].isoformat(),
            "tmp_key": key,
            "rows": metadata.num_rows,
            "bytes": size,
            "min_time": to_naive_utc(min(lows)).isoformat(),
            "max_time": to_naive_utc(max(highs)).isoformat(),
        }
        if place[1]:
            part["values"] = place[1]
        return part

    def discard(self) -> None:
        for buffer in self.buffers.values():
            if buffer.ordered is not None:
                buffer.ordered.writer.close()
                buffer.ordered.sink.close()
                buffer.ordered = None
        for key in self.written:
            self.lake.delete(key)
