"""The writer of a derived table build's objects: in each Spark task, or in the driver for a small result.

Imports only pyarrow, storage and the table definition: Spark's Python workers load this module for every
build, and the catalog (SQLAlchemy) would add seconds to a fresh worker's first task."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from siltlake.records.writer import object_rows, object_schema
from siltlake.storage.filesystem import Storage
from siltlake.storage.keys import build_object
from siltlake.tabledef import TableDef

# What each writing task reports, one row per date it wrote (key null: it wrote nothing).
WRITTEN = "dt string, key string, rows long, bytes long, outside string, null_dates long"
_WRITTEN_SCHEMA = pa.schema(
    [
        ("dt", pa.string()),
        ("key", pa.string()),
        ("rows", pa.int64()),
        ("bytes", pa.int64()),
        ("outside", pa.string()),
        ("null_dates", pa.int64()),
    ]
)


@dataclass(frozen=True)
class BuildWriter:
    """Writes the rows it is given of each date as one object of the build (part: the Spark task's
    partition, or 0 in the driver)."""

    lake: Storage
    build: str
    table_json: str
    allowed: frozenset[str] | None  # the dates an incremental build may write (None: any)

    def __call__(self, batches: Iterator[pa.RecordBatch], part: int | None = None) -> Iterator[pa.RecordBatch]:
        if part is None:
            from pyspark import TaskContext

            context = TaskContext.get()
            assert context is not None  # called in a Spark task (mapInArrow), which has its context
            part = context.partitionId()
        definition = TableDef.from_json(self.table_json)
        schema = object_schema(definition)
        writers: dict[dt.date, tuple] = {}
        rows: dict[dt.date, int] = {}
        outside: str | None = None
        null_dates = 0
        try:
            for batch in batches:
                table = pa.Table.from_batches([batch])
                dates = table.column("dt")
                null_dates += dates.null_count
                for date in pc.unique(dates.drop_null()).to_pylist():
                    if self.allowed is not None and date.isoformat() not in self.allowed:
                        outside = outside or date.isoformat()
                        continue
                    piece = table.filter(pc.equal(dates, pa.scalar(date, pa.date32())))
                    if date not in writers:
                        sink = self.lake.open_output(build_object(self.build, date, part))
                        writers[date] = (sink, pq.ParquetWriter(sink, schema, compression=definition.codec))
                    writers[date][1].write_table(object_rows(piece.drop_columns(["dt"]), schema, date))
                    rows[date] = rows.get(date, 0) + piece.num_rows
        finally:
            for sink, writer in writers.values():
                writer.close()
                sink.close()
        report: dict[str, list[Any]] = {"dt": [], "key": [], "rows": [], "bytes": [], "outside": [], "null_dates": []}
        written: list[dt.date | None] = [*sorted(writers)] or [None]  # none written: one row, for the counts
        for date in written:
            key = build_object(self.build, date, part) if date is not None else None
            report["dt"].append(date.isoformat() if date is not None else None)
            report["key"].append(key)
            report["rows"].append(rows.get(date, 0) if date is not None else 0)
            report["bytes"].append(_written_size(self.lake, key) if key is not None else 0)
            report["outside"].append(outside)
            report["null_dates"].append(null_dates)
        yield pa.RecordBatch.from_pydict(report, schema=_WRITTEN_SCHEMA)


def _written_size(lake: Storage, key: str) -> int:
    """The size of an object this task just wrote, so there."""
    info = lake.info(key)
    assert info is not None
    return info.size
