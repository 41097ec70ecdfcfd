"""What one merge job does on an executor: write the merged object of each planned range (docs/design.md, "Merge").

Modes:
- deep: decode every input, sort by event time, encode fresh row groups of the table's target size;
- shallow: copy the inputs' row groups byte for byte under a new footer (no decoding);
- auto: extend the open range's object by copying its well-sized row groups as they are, and deep-merge
  only its undersized tail row groups with the new small objects. Falls back to deep when a shallow copy
  is not possible (schema or codec changed); a new range is deep-merged.
A keyed table's merge is always deep, whatever its mode: it keeps one row per key (records/keyed.py), which
copying row groups cannot do.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from siltlake.errors import storage_failure
from siltlake.logs import event
from siltlake.merge.parquet_concat import (
    RowGroupAppender,
    ShallowMergeRefused,
    concatenate,
    shallow_merge_refusal,
)
from siltlake.merge.scan import MAX_SCAN_BYTES, same_schema, scan_alike
from siltlake.records.arrays import int64_range
from siltlake.records.keyed import DELETE_MARKER, latest_rows
from siltlake.records.physical import physical_definition
from siltlake.records.writer import conform, object_rows, object_schema
from siltlake.storage.filesystem import Storage
from siltlake.tabledef import TableDef

log = logging.getLogger(__name__)

# A row group this much smaller than the target is re-encoded by auto rather than kept.
WELL_SIZED_FRACTION = 0.5
# Objects up to this size are fetched in one read and decoded on one thread; larger ones are read with
# Arrow's own (pre-buffered, column-parallel) reader.
WHOLE_READ_BYTES = 16 * 1024 * 1024
# A column is dictionary-encoded when at most this fraction of a sample of its values is distinct. A
# dictionary of mostly unique values (times, ids, measurements) is built and then abandoned by the writer,
# which cost half of encoding's CPU on the merge bench; repeating values (hosts, statuses, dt) keep theirs,
# which readers filter on without decoding every string.
DICTIONARY_MAX_DISTINCT = 0.5
DICTIONARY_SAMPLE_ROWS = 4096
# A deep merge of a range reading more than this sorts its rows in DuckDB's scan (on its threads), a smaller one
# with pyarrow after the scan: the sort operator's fixed cost is more than pyarrow's sort of few rows (100 objects
# of 19 KB: 3 ms slower in the scan; 400, 7.5 MB: even; 2,000: 50 ms faster in the scan).
SORT_IN_SCAN_BYTES = 8 << 20
# Row groups encoded at once: Parquet encoding and compression release the GIL, and one writer uses one core.
ENCODE_THREADS = max(1, min(4, pa.cpu_count()))


@dataclass(frozen=True)
class RangeTask:
    lower: int
    upper: int
    output_key: str
    small_keys: tuple[str, ...]
    small_bytes: int
    existing_key: str | None = None  # the open range's current object, when extending it
    existing_bytes: int = 0


@dataclass(frozen=True)
class MergeTask:
    job_id: int
    lake: Storage
    table_json: str
    ranges: tuple[RangeTask, ...]
    row_group_bytes: int
    partition_date: dt.date  # every range's: the merged objects hold it as their dt column

    @property
    def weight(self) -> int:
        return sum(r.small_bytes for r in self.ranges)

    @property
    def input_bytes(self) -> int:
        """Every byte the job reads, the open object it extends included."""
        return sum(r.small_bytes + r.existing_bytes for r in self.ranges)


@dataclass(frozen=True)
class _SortedRows:
    """Rows in sort order without a sorted copy: the table and the order to take its rows in."""

    table: pa.Table
    order: pa.Array

    @property
    def num_rows(self) -> int:
        return self.table.num_rows


@dataclass
class RangeResult:
    upper: int
    mode: str
    bytes_out: int = 0
    rows: int = 0
    bytes_decoded: int = 0
    notes: list[str] = field(default_factory=list)


class _Merger:
    def __init__(self, task: MergeTask) -> None:
        self.task = task
        self.lake = task.lake
        # Merges read and write objects by the names the objects hold (a renamed column's old name).
        self.table = physical_definition(TableDef.from_json(task.table_json))
        # What objects are decoded as (their dt, if any, is left out) and what merged objects are written as.
        self.schema = self.table.arrow_schema()
        self.object_schema = object_schema(self.table)
        # What a keyed merge decodes: the columns and an upsert's delete marker (null where an object has none).
        self.marked_schema = self.schema.append(pa.field(DELETE_MARKER, pa.bool_()))
        self._input_bytes = task.input_bytes

    # --- decoding ----------------------------------------------------------------------------------

    def _read_one(self, key: str, schema: pa.Schema | None = None) -> pa.Table:
        """One whole object as `schema` (the table's current one by default). A small object is fetched in
        one read and decoded on this thread; a large one (an open range's object) is decoded with Arrow's
        threads."""
        with self.lake.open_input_file(key) as handle:
            if handle.size() <= WHOLE_READ_BYTES:
                table = pq.ParquetFile(pa.BufferReader(handle.read_buffer())).read(use_threads=False)
            else:
                table = pq.ParquetFile(handle, pre_buffer=True).read(use_threads=True)
        return conform(table, schema or self.schema)

    def _decode(self, keys: list[str], schema: pa.Schema | None = None) -> pa.Table:
        """Read whole objects as `schema` (the table's current one by default; columns an object lacks read
        as null, columns it has beyond the schema are dropped), in key order: in one scan when they are alike."""
        schema = schema or self.schema
        if len(keys) > 1:
            scanned = self._scan(keys, schema)
            if scanned is not None:
                return scanned
        return self._decode_each(keys, schema)

    def _scan(self, keys: list[str], schema: pa.Schema, sort_by: str | None = None) -> pa.Table | None:
        """The objects in one DuckDB scan (merge/scan.py) when they are local, alike and fit in memory, else None."""
        if self.lake.is_object_store or self._input_bytes > MAX_SCAN_BYTES or not keys:
            return None
        return scan_alike([self.lake.path(key) for key in keys], schema, sort_by)

    def _decode_each(self, keys: list[str], schema: pa.Schema) -> pa.Table:
        """Objects read and decoded on a thread pool (Parquet decoding releases the GIL), one object per
        thread: a merge reads thousands of small objects, each too small to split. The pieces are then
        joined column by column, each column's pieces released as soon as it is joined, so the join holds
        at most one extra column: sorting and taking from contiguous columns is 2-3x faster than from
        thousands of chunks."""
        if not keys:
            return schema.empty_table()
        if len(keys) == 1:
            return self._read_one(keys[0], schema)
        # An object store's reads wait on the network: Arrow's I/O thread count. A local disk's reads are decoding
        # only: one thread a core, since more only take the GIL from each other.
        threads = pa.io_thread_count() if self.lake.is_object_store else pa.cpu_count()
        with ThreadPoolExecutor(min(len(keys), max(2, threads))) as pool:
            pieces = list(pool.map(lambda key: self._read_one(key, schema), keys))
        pending = [[chunk for piece in pieces for chunk in piece.column(i).chunks] for i in range(len(schema))]
        del pieces
        columns: list[pa.Array | pa.ChunkedArray] = []
        for i, target in enumerate(schema):
            chunks, pending[i] = pending[i], []
            try:
                columns.append(pa.concat_arrays(chunks) if chunks else pa.array([], target.type))
            except (pa.ArrowInvalid, pa.ArrowCapacityError):  # over 2 GiB of strings: leave it in pieces
                columns.append(pa.chunked_array(chunks, target.type))
            del chunks
            # Hand the freed pieces back: they were allocated on the pool's threads, and the allocator
            # would otherwise keep them resident while the next columns are joined (peak RSS 2.7x -> 2.1x
            # of the merged rows on the memory bench).
            pa.default_memory_pool().release_unused()
        return pa.Table.from_arrays(columns, schema=schema)

    def _latest(self, keys: list[str]) -> pa.Table:
        """A keyed table's rows of `keys` (in commit order: the open object, then small objects by id) that
        readers see: one row per key, deleted keys gone, no marker column (records/keyed.py)."""
        table = self._decode(keys, self.marked_schema)
        if not pc.any(table.column(DELETE_MARKER)).as_py():
            table = table.drop_columns([DELETE_MARKER])  # nothing deleted: spare the rule its filter
        return latest_rows(table, self.table.primary_key, self.table.sequence_column)

    def _sorted(self, table: pa.Table) -> _SortedRows:
        # sort_indices is stable: rows with equal times keep the small objects' id order. The rows are
        # taken in that order one row group at a time while encoding, never as a whole sorted copy.
        return _SortedRows(table, pc.sort_indices(table, sort_keys=[(self.table.time_column, "ascending")]))

    def _rows_per_group(self, table: pa.Table) -> int:
        if table.num_rows == 0:
            return 1
        per_row = max(1, table.nbytes // table.num_rows)
        return max(1024, self.task.row_group_bytes // per_row)

    def _encode(self, rows: pa.Table | _SortedRows, sink) -> None:  # any writable stream
        """Write rows as row groups of the table's target size. With more than one row group, each is taken (in
        sort order) and encoded on one of ENCODE_THREADS threads as a Parquet file of its own, and the pieces' row
        groups are copied into sink in order under one footer: at most ENCODE_THREADS + 1 pieces exist at once."""
        table, order = (rows.table, rows.order) if isinstance(rows, _SortedRows) else (rows, None)
        schema, date = self.object_schema, self.task.partition_date
        options = {
            "compression": self.table.codec,
            "write_statistics": True,
            "use_dictionary": dictionary_columns(table, schema),
        }
        per_group = self._rows_per_group(table)
        starts = range(0, table.num_rows, per_group)

        def group(start: int) -> pa.Table:
            taken = table.slice(start, per_group) if order is None else table.take(order.slice(start, per_group))
            return object_rows(taken, schema, date)

        if len(starts) <= 1:
            with pq.ParquetWriter(sink, schema, **options) as writer:
                if table.num_rows:
                    writer.write_table(group(0), row_group_size=per_group)
            return

        def piece(start: int) -> pa.Buffer:
            encoded = pa.BufferOutputStream()
            with pq.ParquetWriter(encoded, schema, **options) as writer:
                writer.write_table(group(start), row_group_size=per_group)
            return encoded.getvalue()

        appender = RowGroupAppender(sink)
        with ThreadPoolExecutor(ENCODE_THREADS) as pool:
            pending: deque = deque()
            for start in starts:
                pending.append(pool.submit(piece, start))
                if len(pending) > ENCODE_THREADS:
                    appender.add(pa.BufferReader(pending.popleft().result()))
            while pending:
                appender.add(pa.BufferReader(pending.popleft().result()))
        appender.close()

    # --- output -------------------------------------------------------------------------------------

    def _write(self, key: str, fill: Callable[[Any], Any]) -> tuple[Any, int]:
        """Write through a temporary key moved into place: readers and retries never see a partial object.
        An object store's upload is atomic already: written in place there."""
        temporary = key if self.lake.writes_are_atomic else f"{key}.{uuid.uuid4().hex}.tmp"
        try:
            with self.lake.open_output(temporary) as sink:
                filled = fill(sink)
        except BaseException as failure:
            try:
                self.lake.delete(temporary)
            except Exception as cleanup:  # the write's error is the one to report; reap removes strays
                event(
                    log,
                    "merge.cleanup_failed",
                    logging.WARNING,
                    key=temporary,
                    reason=f"{type(cleanup).__name__}: {cleanup}",
                )
                failure.add_note(f"its temporary {temporary} was left behind: {type(cleanup).__name__}: {cleanup}")
            raise
        if temporary != key:
            self.lake.move(temporary, key)
        return filled, _stored_size(self.lake, key)

    # --- modes --------------------------------------------------------------------------------------

    def deep(self, planned: RangeTask, result: RangeResult) -> None:
        keys = ([planned.existing_key] if planned.existing_key else []) + list(planned.small_keys)
        if self.table.keyed:
            table: pa.Table | _SortedRows = self._sorted(self._latest(keys))
        elif planned.small_bytes + planned.existing_bytes > SORT_IN_SCAN_BYTES:  # sorted in the scan if alike
            table = self._scan(keys, self.schema, sort_by=self.table.time_column)
            if table is None:
                table = self._sorted(self._decode_each(keys, self.schema))
        else:
            table = self._sorted(self._decode(keys))
        result.bytes_decoded += planned.small_bytes + (
            _stored_size(self.lake, planned.existing_key) if planned.existing_key else 0
        )
        _, result.bytes_out = self._write(planned.output_key, lambda sink: self._encode(table, sink))
        result.rows = table.num_rows

    def shallow(self, planned: RangeTask, result: RangeResult) -> None:
        keys = ([planned.existing_key] if planned.existing_key else []) + list(planned.small_keys)
        footers = [pq.read_metadata(self.lake.path(k), filesystem=self.lake.filesystem) for k in keys]
        reason = shallow_merge_refusal(footers)
        if reason is None and not same_schema(footers[0].schema.to_arrow_schema(), self.object_schema):
            # Inputs alike but older than the table (a column added or widened, or written before objects held
            # dt and field ids): copying them would keep the old schema in the merged object.
            reason = "the table's columns changed since the objects were written"
        if reason is not None:
            raise ShallowMergeRefused(reason)
        files = [self.lake.open_input_file(k) for k in keys]
        try:
            written, result.bytes_out = self._write(planned.output_key, lambda sink: concatenate(files, sink))
        finally:
            for f in files:
                f.close()
        result.rows = written.rows

    def auto(self, planned: RangeTask, result: RangeResult) -> None:
        if planned.existing_key is None:
            self.deep(planned, result)
            return
        with pq.ParquetFile(self.lake.open_input_file(planned.existing_key)) as existing:
            metadata = existing.metadata
            if not same_schema(existing.schema_arrow, self.object_schema):
                raise ShallowMergeRefused("the table's columns changed since the open object was written")
            threshold = self.task.row_group_bytes * WELL_SIZED_FRACTION
            keep = metadata.num_row_groups
            while keep and metadata.row_group(keep - 1).total_byte_size < threshold:
                keep -= 1
            if keep == 0:
                raise ShallowMergeRefused("the open object has no well-sized row group yet")
            tail = list(range(keep, metadata.num_row_groups))
            fresh = self._decode(list(planned.small_keys))
            if tail:
                fresh = pa.concat_tables(
                    [
                        existing.read_row_groups(tail, columns=self.schema.names, use_threads=True).cast(self.schema),
                        fresh,
                    ]
                )
                result.bytes_decoded += sum(
                    metadata.row_group(i).column(c).total_compressed_size
                    for i in tail
                    for c in range(metadata.num_columns)
                )
        result.bytes_decoded += planned.small_bytes
        encoded = pa.BufferOutputStream()
        self._encode(self._sorted(fresh), encoded)
        # concatenate refuses (before writing a byte) when codecs or schemas differ: run() falls back to deep.
        with self.lake.open_input_file(planned.existing_key) as head:
            written, result.bytes_out = self._write(
                planned.output_key,
                lambda sink: concatenate(
                    [head, pa.BufferReader(encoded.getvalue())], sink, row_groups=[list(range(keep)), None]
                ),
            )
        result.rows = written.rows

    def run(self, planned: RangeTask) -> RangeResult:
        mode = self.table.merge_mode
        result = RangeResult(upper=planned.upper, mode=mode)
        if self.table.keyed:
            # Dropping the rows that lost to a later row of their key needs every row decoded.
            if mode != "deep":
                result.notes.append(
                    f"range ({planned.lower}, {planned.upper}]: keyed table: deep merge keeps one row per key"
                )
                result.mode = "deep"
            self.deep(planned, result)
            return result
        if mode == "deep":
            self.deep(planned, result)
            return result
        try:
            self.shallow(planned, result) if mode == "shallow" else self.auto(planned, result)
        except ShallowMergeRefused as refused:
            result.notes.append(f"range ({planned.lower}, {planned.upper}]: deep merge: {refused.reason}")
            result.mode = "deep"
            result.bytes_decoded = 0
            self.deep(planned, result)
            return result
        if mode == "auto" and planned.existing_key is None:
            result.mode = "deep"  # a new range has nothing to append to
        return result


def dictionary_columns(table: pa.Table, schema: pa.Schema) -> list[str]:
    """The columns of `schema` worth a dictionary: those whose values repeat in an evenly spread sample of
    `table`'s rows, and the columns `table` lacks (dt, one value per object; a column added since: nulls)."""
    step = max(1, table.num_rows // DICTIONARY_SAMPLE_ROWS)
    positions: dict[tuple[int, int], pa.Array] = {}  # a chunk's sampled positions, by its offset and length
    chosen = []
    for target in schema:
        if target.name not in table.column_names:
            chosen.append(target.name)
            continue
        column = _every_nth(table.column(target.name), step, positions)
        if pc.count_distinct(column, mode="all").as_py() <= DICTIONARY_MAX_DISTINCT * max(1, len(column)):
            chosen.append(target.name)
    return chosen


def _every_nth(column: pa.ChunkedArray, step: int, positions: dict[tuple[int, int], pa.Array]) -> pa.ChunkedArray:
    """Every step-th value of a column, taken chunk by chunk: a take across a column's chunks joins them first
    (13 ms for a sample of a million sorted rows in nine chunks, against 0.3 ms in one)."""
    if step == 1:
        return column
    pieces, offset = [], 0
    for chunk in column.chunks:
        if (offset, len(chunk)) not in positions:
            positions[offset, len(chunk)] = int64_range((-offset) % step, len(chunk), step)
        pieces.append(chunk.take(positions[offset, len(chunk)]))
        offset += len(chunk)
    return pa.chunked_array(pieces, column.type)


def run_merge_task(task: MergeTask) -> dict:
    """Write every range of one job. Never raises: a failure is reported for the driver to retry."""
    started = time.monotonic()
    ranges: list[dict] = []
    try:
        merger = _Merger(task)
        for planned in task.ranges:
            outcome = merger.run(planned)
            ranges.append(
                {
                    "upper": outcome.upper,
                    "mode": outcome.mode,
                    "bytes_out": outcome.bytes_out,
                    "rows": outcome.rows,
                    "bytes_decoded": outcome.bytes_decoded,
                    "notes": outcome.notes,
                }
            )
    except Exception as exc:  # reported to the driver, which retries with backoff and parks after N attempts
        # A storage outage is retried without counting an attempt; a missing input is this job's own failure
        # (an outage does not make one object vanish), so it counts and eventually parks the job.
        outage = storage_failure(exc) and not isinstance(exc, FileNotFoundError)
        return {
            "job_id": task.job_id,
            "status": "failed",
            "ranges": ranges,
            "outage": outage,
            "error": "; ".join([f"{type(exc).__name__}: {exc}", *getattr(exc, "__notes__", [])]),
            "trace": traceback.format_exc(limit=6),
            "seconds": time.monotonic() - started,
        }
    return {"job_id": task.job_id, "status": "ok", "ranges": ranges, "seconds": time.monotonic() - started}


def _stored_size(lake: Storage, key: str) -> int:
    """The size of an object the merge just wrote or is reading, so there (a missing one still fails here)."""
    info = lake.info(key)
    assert info is not None
    return info.size
