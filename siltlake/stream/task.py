"""The work one Spark task does for one staging object: decode, split by partition date, sort, write.

Output goes to temporary keys; the driver moves it to id-derived keys inside the catalog commit.
Memory stays bounded: rows are buffered up to spill_bytes, then written as sorted runs that a
k-way merge streams into the final object.
"""

from __future__ import annotations

import datetime as dt
import json
import resource
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from siltlake.clock import to_naive_utc
from siltlake.storage.filesystem import Storage
from siltlake.storage.keys import TableLayout
from siltlake.stream.records import UnreadableObject, partition_dates, read_staging_object
from siltlake.tabledef import TableDef

BAD_SAMPLES = 3
# Bounds the rows the k-way merge gathers before writing a row group of the final object.
MAX_ROW_GROUP_ROWS = 262_144
# The merge holds one decoded row group per run: small run row groups and a bounded fan-in keep its
# memory constant however many runs a huge object spills.
RUN_ROW_GROUP_ROWS = 16_384
MAX_MERGE_FAN_IN = 16


@dataclass(frozen=True)
class StreamTask:
    staging_object_id: int
    uri: str
    lake: Storage
    layout: TableLayout
    table_json: str
    run_id: str
    batch_rows: int
    spill_bytes: int


def storage_failure(exc: BaseException) -> bool:
    """Whether a failure is the storage's (unreachable, full, refused: any I/O error), not the object's: it
    never counts toward stream.max_failures, or an outage would move every pending object to unknown."""
    return isinstance(exc, OSError)


def open_uri(uri: str):  # noqa: ANN201 - a pyarrow input stream
    filesystem, path = pafs.FileSystem.from_uri(uri)
    # pyarrow percent-decodes the URI: a stored URI (registered before keys were encoded) must not climb out.
    if ".." in path.split("/"):
        raise UnreadableObject(f"the URI {uri!r} decodes to a path with '..' segments; refused")
    return filesystem.open_input_stream(path, compression=None)


@dataclass
class _DateBuffer:
    tables: list[pa.Table] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tables)


class _ObjectWriter:
    """Collects typed rows per partition date and writes one time-sorted Parquet object per date."""

    def __init__(self, task: StreamTask, table: TableDef) -> None:
        self.task = task
        self.table = table
        self.schema = table.arrow_schema()
        self.buffers: dict[dt.date, _DateBuffer] = {}
        self.written: list[str] = []

    def _key(self, name: str) -> str:
        return self.task.layout.temporary(self.task.run_id, f"{self.task.staging_object_id:019d}/{name}")

    def add(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        dates = partition_dates(rows.column(self.table.time_column), self.table.timezone)
        for date in pc.unique(dates).to_pylist():
            part = rows.filter(pc.equal(dates, pa.scalar(date, pa.date32())))
            self.buffers.setdefault(date, _DateBuffer()).tables.append(part)
        if sum(b.nbytes for b in self.buffers.values()) > self.task.spill_bytes:
            for date, buffer in self.buffers.items():
                self._spill(date, buffer)

    def _sorted(self, tables: list[pa.Table]) -> pa.Table:
        return pa.concat_tables(tables).sort_by(self.table.time_column)

    def _write(self, key: str, tables: Iterable[pa.Table], row_group_rows: int = MAX_ROW_GROUP_ROWS) -> None:
        """Write tables in order, gathered into row groups of at most row_group_rows."""
        self.written.append(key)
        with self.task.lake.open_output(key) as sink, pq.ParquetWriter(
            sink, self.schema, compression=self.table.codec, write_statistics=True
        ) as writer:
            pending: list[pa.Table] = []
            pending_rows = 0
            for table in tables:
                pending.append(table)
                pending_rows += table.num_rows
                if pending_rows >= row_group_rows:
                    writer.write_table(pa.concat_tables(pending), row_group_size=row_group_rows)
                    pending, pending_rows = [], 0
            if pending:
                writer.write_table(pa.concat_tables(pending), row_group_size=row_group_rows)

    def _spill(self, date: dt.date, buffer: _DateBuffer) -> None:
        if not buffer.tables:
            return
        key = self._key(f"{date.isoformat()}.run-{len(buffer.runs):04d}.parquet")
        self._write(key, [self._sorted(buffer.tables)], row_group_rows=RUN_ROW_GROUP_ROWS)
        buffer.runs.append(key)
        buffer.tables = []

    def finish(self) -> list[dict]:
        parts = []
        for date in sorted(self.buffers):
            buffer = self.buffers[date]
            key = self._key(f"{date.isoformat()}.parquet")
            if buffer.runs:
                self._spill(date, buffer)
                runs, passes = list(buffer.runs), 0
                while len(runs) > MAX_MERGE_FAN_IN:
                    passes += 1
                    merged = self._key(f"{date.isoformat()}.merged-{passes:04d}.parquet")
                    self._write(merged, self._merge_runs(runs[:MAX_MERGE_FAN_IN]), RUN_ROW_GROUP_ROWS)
                    for run in runs[:MAX_MERGE_FAN_IN]:
                        self.task.lake.delete(run)
                    runs = runs[MAX_MERGE_FAN_IN:] + [merged]
                self._write(key, self._merge_runs(runs))
                for run in runs:
                    self.task.lake.delete(run)
            else:
                self._write(key, [self._sorted(buffer.tables)])
            parts.append(self._describe(date, key))
        return parts

    def _merge_runs(self, runs: list[str]):  # noqa: ANN202 - generator of tables
        """K-way merge of time-sorted runs, one batch per run in memory at a time."""
        column = self.table.time_column
        readers = [
            pq.ParquetFile(self.task.lake.open_input_file(run)).iter_batches(batch_size=RUN_ROW_GROUP_ROWS)
            for run in runs
        ]
        heads: list[pa.Table | None] = [None] * len(readers)

        def refill(index: int) -> None:
            while heads[index] is None or heads[index].num_rows == 0:
                batch = next(readers[index], None)
                if batch is None:
                    heads[index] = None
                    return
                heads[index] = pa.Table.from_batches([batch], schema=self.schema)

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

    def _describe(self, date: dt.date, key: str) -> dict:
        with self.task.lake.open_input_file(key) as source:
            metadata = pq.read_metadata(source)
        time_index = self.schema.get_field_index(self.table.time_column)
        lows, highs = [], []
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(time_index).statistics
            lows.append(stats.min)
            highs.append(stats.max)
        size = self.task.lake.info(key).size
        return {
            "date": date.isoformat(),
            "tmp_key": key,
            "rows": metadata.num_rows,
            "bytes": size,
            "min_time": to_naive_utc(min(lows)).isoformat(),
            "max_time": to_naive_utc(max(highs)).isoformat(),
        }

    def discard(self) -> None:
        for key in self.written:
            self.task.lake.delete(key)


class _ErrorSink:
    """Bad records as JSON lines with source, line and reason: a file a user can fix and replay."""

    def __init__(self, task: StreamTask, keep: bool) -> None:
        self.task = task
        self.keep = keep
        self.count = 0
        self.samples: list[str] = []
        self._temporary = task.layout.temporary(task.run_id, f"{task.staging_object_id:019d}/errors.jsonl")
        self._stream = None

    def add(self, bad: list) -> None:  # list of records.BadRecord
        for record in bad:
            self.count += 1
            if len(self.samples) < BAD_SAMPLES:
                self.samples.append(f"line {record.line}: {record.reason}")
            if not self.keep:
                continue
            if self._stream is None:
                self._stream = self.task.lake.open_output(self._temporary)
            line = {"source": self.task.uri, "line": record.line, "reason": record.reason, "raw": record.raw}
            self._stream.write((json.dumps(line, ensure_ascii=False) + "\n").encode())

    def finish(self) -> str | None:
        if self._stream is None:
            return None
        self._stream.close()
        final = self.task.layout.errors(self.task.staging_object_id)
        self.task.lake.move(self._temporary, final)
        return final

    def discard(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self.task.lake.delete(self._temporary)


def process_staging_object(task: StreamTask) -> dict:
    """Run in a Spark task. Returns a small, JSON-able report; never raises for bad input."""
    table = TableDef.from_json(task.table_json)
    started = time.time()
    report: dict[str, Any] = {"staging_object_id": task.staging_object_id, "uri": task.uri,
                              "upload_start_time": dt.datetime.now(dt.UTC).replace(tzinfo=None).isoformat()}
    writer = _ObjectWriter(task, table)
    errors = _ErrorSink(task, keep=table.error_policy == "file")
    records_in = 0
    try:
        with open_uri(task.uri) as stream:
            for batch in read_staging_object(stream, task.uri, table, batch_rows=task.batch_rows):
                records_in += batch.records_in
                writer.add(batch.table)
                errors.add(batch.bad)
        parts = writer.finish()
        error_key = errors.finish()
    except UnreadableObject as exc:
        writer.discard()
        errors.discard()
        return {**report, "status": "unknown", "reason": exc.reason}
    except FileNotFoundError:
        writer.discard()
        errors.discard()
        return {**report, "status": "unknown", "reason": "the staging object no longer exists"}
    except Exception as exc:  # an I/O failure or a bug: leave the object pending, report, retry next run
        writer.discard()
        errors.discard()
        return {**report, "status": "failed", "reason": f"{type(exc).__name__}: {exc}",
                "counts": not storage_failure(exc), "traceback": traceback.format_exc(limit=5)}
    return {
        **report,
        "status": "ok",
        "records_in": records_in,
        "bad_records": errors.count,
        "bad_samples": errors.samples,
        "error_key": error_key,
        "parts": parts,
        "seconds": time.time() - started,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
