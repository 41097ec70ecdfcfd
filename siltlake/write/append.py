"""Appends of rows from Python (Table.append): the stream's writer and commit, for rows that come from no
staging object.

The rows are written as one small object per partition date they fall on (records.writer, as the stream and
load write), then committed as the stream commits a staging object (stream.commit.commit_parts): ids under the
ordering lock, live or delayed by the partition's state, a merge job scheduled, an update or upsert committed to
a partition while the append ran making it fail. The rows are registered as one processed staging row,
`append:<run>`, and the request id, if any, is recorded in the same transaction.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from siltlake.catalog import AppliedRequest, RequestApplied, UpdateConflict
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.records.writer import ObjectWriter
from siltlake.storage.keys import small_object_id, temporary_run
from siltlake.write.requests import already_applied, applied_before, record_unchanged, write_request
from siltlake.write.update import updatable_table
from siltlake.write.upsert import shaped_rows


@dataclass(frozen=True)
class AppendedObject:
    partition_date: dt.date
    object_id: int
    rows: int
    delayed: bool  # the partition was closed: the rows are a delayed object (published with its next merge)


@dataclass(frozen=True)
class AppendReport:
    table: str
    objects: tuple[AppendedObject, ...]
    request_id: str | None = None
    applied_before: AppliedRequest | None = None  # a retry whose id was committed already: nothing was appended
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(o.rows for o in self.objects)

    @property
    def message(self) -> str | None:
        """What a retry was told, None for an append that ran."""
        return already_applied(self.applied_before) if self.applied_before is not None else None

    def as_dict(self) -> dict:
        return {
            "table": self.table,
            "request_id": self.request_id,
            "rows": self.rows,
            "applied_before": None if self.applied_before is None else self.message,
            "objects": [
                {"dt": o.partition_date.isoformat(), "id": o.object_id, "rows": o.rows, "delayed": o.delayed}
                for o in self.objects
            ],
        }


def _tables(rows: object, table: str) -> Iterable[pa.Table]:
    """The rows as Arrow tables, one per batch given: a pyarrow Table, RecordBatch or RecordBatchReader, anything
    that exports an Arrow stream (`__arrow_c_stream__`: a pandas 2.2+ or Polars DataFrame, a DuckDB relation, ...)
    or a single batch (`__arrow_c_array__`), or an iterable of batches or tables."""
    if isinstance(rows, pa.Table):
        yield rows
    elif isinstance(rows, pa.RecordBatch):
        yield pa.Table.from_batches([rows])
    elif hasattr(rows, "__arrow_c_stream__"):
        # Read batch by batch from the producer (a DuckDB relation runs its query as the batches are asked for).
        for batch in pa.RecordBatchReader.from_stream(rows):
            yield pa.Table.from_batches([batch])
    elif hasattr(rows, "__arrow_c_array__") and not isinstance(rows, Iterable):
        yield pa.Table.from_batches([pa.record_batch(rows)])
    elif isinstance(rows, Iterable) and not isinstance(rows, (str, bytes, dict)):
        for batch in rows:
            if isinstance(batch, pa.Table):
                yield batch
            elif isinstance(batch, pa.RecordBatch):
                yield pa.Table.from_batches([batch])
            else:
                raise SiltError(
                    f"cannot append into {table}: an item of the batches is a {type(batch).__name__}, "
                    "not a pyarrow RecordBatch; nothing was appended"
                )
    else:
        raise SiltError(
            f"cannot append into {table}: give the rows as Arrow data (a pyarrow Table, RecordBatch or "
            "RecordBatchReader, a pandas or Polars DataFrame, a DuckDB relation: anything with "
            f"__arrow_c_stream__), or an iterable of batches, not {type(rows).__name__}; "
            "nothing was appended"
        )


def append(
    deployment: Deployment, name: str, rows: object, request_id: str | None = None, now: dt.datetime | None = None
) -> AppendReport:
    """Append `rows` (the table's columns; nullable ones may be missing) to the table in one commit, once per
    `request_id`. Rows that cannot be written (a column not in the table, a null in a non-nullable column, a
    value of the wrong type) are refused, naming the problem, before anything is committed."""
    from siltlake.stream.commit import _undo, _update_conflict, commit_parts

    started = time.monotonic()
    record = updatable_table(deployment, name)
    name = record.qualified_name
    request = write_request(record, request_id, "append")
    applied = applied_before(deployment, request)
    if applied is not None:
        return AppendReport(name, (), request_id, applied, time.monotonic() - started)
    catalog, lake = deployment.catalog, deployment.lake
    layout = record.layout(deployment.instance_key)
    run_id = f"append-{uuid.uuid4().hex}"
    # Read before writing: an update or upsert committed from here on is one this append conflicts with.
    mark = catalog.versions.mark()
    upload_start = utcnow().isoformat()
    writer = ObjectWriter(record.definition, lake, layout, run_id, 0, deployment.config.stream.spill_bytes)
    try:
        for table in _tables(rows, name):
            writer.add(shaped_rows(record, table, None, "append"))
        parts = writer.finish()
        if not parts:
            record_unchanged(deployment, request, "no rows", now)
            return AppendReport(name, (), request_id, seconds=time.monotonic() - started)
        moves: list[tuple[str, str]] = []
        count = sum(p["rows"] for p in parts)
        with catalog.partitions.stream_commit() as tx:
            try:
                stamp = now or utcnow()
                if request is not None:
                    tx.check_request(request)
                conflict = _update_conflict(tx, record, parts, mark)
                if conflict is not None:
                    raise UpdateConflict(f"{conflict.split(';')[0]}; nothing was appended: run the append again")
                staging_id = tx.register_loaded(
                    f"append:{run_id}",
                    table_id=record.id,
                    size=sum(p["bytes"] for p in parts),
                    records_in=count,
                    bad_records=0,
                    error_uri=None,
                    now=stamp,
                )
                assert staging_id is not None, "a run id is new"
                delayed = commit_parts(tx, lake, record, layout, staging_id, parts, upload_start, stamp, moves)
                if request is not None:
                    tx.record_request(
                        request, None, f"appended {count} rows to {', '.join(p['date'] for p in parts)}", stamp
                    )
            except BaseException:
                # Moved back while the ordering lock is held: on SQLite the ids roll back with the transaction.
                _undo(lake, moves, best_effort=True)
                raise
    except RequestApplied:
        assert request is not None
        return AppendReport(name, (), request_id, applied_before(deployment, request), time.monotonic() - started)
    finally:
        lake.delete_prefix(temporary_run(deployment.instance_key, run_id))
    placed = [key for _, key in moves]
    return AppendReport(
        name,
        tuple(
            AppendedObject(dt.date.fromisoformat(part["date"]), _object_id(key), part["rows"], is_delayed)
            for part, key, is_delayed in zip(parts, placed, delayed, strict=True)
        ),
        request_id,
        seconds=time.monotonic() - started,
    )


def _object_id(key: str) -> int:
    found = small_object_id(key.rsplit("/", 1)[-1])
    assert found is not None
    return found
