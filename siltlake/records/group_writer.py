"""Typed rows of several staging objects into one Parquet object per partition: a stream wave's objects.

Each source's rows stay together, sorted by time among themselves, so that an object's lineage is one row range
per source (WrittenPart's `sources`). Memory holds one source's rows and less than a row group per date besides
(up to spill_bytes across dates).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from siltlake.clock import to_naive_utc
from siltlake.records.physical import physical_rows
from siltlake.records.vectorised import all_true
from siltlake.records.writer import (
    MAX_ROW_GROUP_ROWS,
    Place,
    WrittenPart,
    object_rows,
    object_schema,
    sorted_by_time,
    split_by_place,
)
from siltlake.storage import keys
from siltlake.storage.filesystem import Storage
from siltlake.storage.keys import TableLayout
from siltlake.tabledef import TableDef

_SOURCE = "__siltlake_source"  # a row's source among those added together


@dataclass
class _DateObject:
    key: str
    pending: list[pa.Table] = field(default_factory=list)
    pending_rows: int = 0
    pending_bytes: int = 0
    rows: int = 0  # rows given to it so far, written or pending
    sources: list[list[int]] = field(default_factory=list)
    low: dt.datetime | None = None
    high: dt.datetime | None = None
    sink: BinaryIO | None = None
    writer: pq.ParquetWriter | None = None


class GroupWriter:
    """One object per partition date for the rows of several staging objects, given one source at a time.

    Everything goes to temporary keys of the layout under run_id and object_id (the first source's id): the
    commit moves the finished objects or the caller discards them."""

    def __init__(
        self, table: TableDef, lake: Storage, layout: TableLayout, run_id: str, object_id: int, spill_bytes: int
    ) -> None:
        self.table, self.lake, self.layout = table, lake, layout
        self.run_id, self.object_id, self.spill_bytes = run_id, object_id, spill_bytes
        self.object_schema = object_schema(table)
        self.dates: dict[Place, _DateObject] = {}

    def add_source(self, staging_object_id: int, tables: list[pa.Table]) -> None:
        """All the rows one staging object decoded to; a source adds its rows to each date's object once."""
        tables = [table for table in tables if table.num_rows]
        if not tables:
            return
        rows = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        for place, part in split_by_place(self.table, rows):
            self._append(place, sorted_by_time([part], self.table.time_column), [(staging_object_id, part.num_rows)])
        self._spill_if_full()

    def add_sources(self, sources: list[tuple[int, pa.Table]]) -> None:
        """Several sources' rows at once, each all its staging object decoded to (a joined read's slices): one split
        by partition and one sort for all of them, giving the objects and ranges that adding each in turn gives."""
        sources = [(source, rows) for source, rows in sources if rows.num_rows]
        if len(sources) < 2:
            for source, rows in sources:
                self.add_source(source, [rows])
            return
        counts = [rows.num_rows for _, rows in sources]
        order = np.repeat(np.arange(len(sources), dtype=np.int32), counts)
        rows = pa.concat_tables([rows for _, rows in sources])
        label = _SOURCE
        while label in rows.column_names:  # a table's own column of that name keeps it
            label += "_"
        rows = rows.append_column(label, pa.array(order))
        for place, part in split_by_place(self.table, rows):
            if not _in_order_within_sources(part, label, self.table.time_column):
                # Stable: equal times keep their order within a source, as sorted_by_time does.
                part = part.sort_by([(label, "ascending"), (self.table.time_column, "ascending")])
            per_source = np.bincount(part.column(label).to_numpy(), minlength=len(sources))
            ranges = [(sources[index][0], int(count)) for index, count in enumerate(per_source) if count]
            self._append(place, part.drop_columns([label]), ranges)
        self._spill_if_full()

    def _append(self, place: Place, part: pa.Table, ranges: list[tuple[int, int]]) -> None:
        """Rows of one partition, sorted by time within each source's range (source id, rows), in that order."""
        column = self.table.time_column
        target = self.dates.get(place)
        if target is None:
            target = self.dates[place] = _DateObject(
                self.layout.task_temporary(self.run_id, self.object_id, keys.date_part(*place))
            )
        for source, count in ranges:
            target.sources.append([source, target.rows, count])
            target.rows += count
        target.pending.append(part)
        target.pending_rows += part.num_rows
        target.pending_bytes += part.get_total_buffer_size()  # not nbytes: that walks every slice's offsets
        bounds = pc.min_max(part.column(column))
        low, high = to_naive_utc(bounds["min"].as_py()), to_naive_utc(bounds["max"].as_py())
        target.low = low if target.low is None else min(target.low, low)
        target.high = high if target.high is None else max(target.high, high)
        if target.pending_rows >= MAX_ROW_GROUP_ROWS:
            self._write(place[0], target, whole_groups=True)

    def _spill_if_full(self) -> None:
        if sum(target.pending_bytes for target in self.dates.values()) > self.spill_bytes:
            for (date, _), target in self.dates.items():
                self._write(date, target, whole_groups=False)

    def _write(self, date: dt.date, target: _DateObject, whole_groups: bool) -> None:
        """Write the date's pending rows (only whole row groups of them when more may come)."""
        if not target.pending_rows:
            return
        pending = pa.concat_tables(target.pending)
        count = pending.num_rows - pending.num_rows % MAX_ROW_GROUP_ROWS if whole_groups else pending.num_rows
        if count <= 0:
            return
        if target.writer is None:
            target.sink = self.lake.open_output(target.key)
            target.writer = pq.ParquetWriter(
                target.sink, self.object_schema, compression=self.table.codec, write_statistics=True
            )
        rows = object_rows(physical_rows(pending.slice(0, count), self.table), self.object_schema, date)
        target.writer.write_table(rows, row_group_size=MAX_ROW_GROUP_ROWS)
        rest = pending.slice(count)
        target.pending, target.pending_rows = ([rest] if rest.num_rows else []), rest.num_rows
        target.pending_bytes = rest.get_total_buffer_size() if rest.num_rows else 0

    def finish(self) -> list[WrittenPart]:
        parts: list[WrittenPart] = []
        for place in sorted(self.dates):
            target, (date, values) = self.dates[place], place
            self._write(date, target, whole_groups=False)
            assert target.writer is not None and target.sink is not None and target.low and target.high
            target.writer.close()
            size = target.sink.tell()
            target.sink.close()
            target.writer = None
            part: WrittenPart = {
                "date": date.isoformat(),
                "tmp_key": target.key,
                "rows": target.rows,
                "bytes": size,
                "min_time": target.low.isoformat(),
                "max_time": target.high.isoformat(),
                "sources": target.sources,
            }
            if values:
                part["values"] = values
            parts.append(part)
        return parts

    def discard(self) -> None:
        for target in self.dates.values():
            if target.writer is not None:
                target.writer.close()
            if target.sink is not None:
                target.sink.close()
                self.lake.delete(target.key)
            target.writer = target.sink = None


def _in_order_within_sources(part: pa.Table, label: str, column: str) -> bool:
    """Whether the rows (their sources' in ascending order, as concatenated) are in time order within each source,
    as a shipper's lines mostly are: then sorting them moves nothing."""
    count = part.num_rows
    if count < 2:
        return True
    times, sources = part.column(column), part.column(label)
    return all_true(
        pc.or_(
            pc.less_equal(times.slice(0, count - 1), times.slice(1)),
            pc.not_equal(sources.slice(0, count - 1), sources.slice(1)),
        )
    )
