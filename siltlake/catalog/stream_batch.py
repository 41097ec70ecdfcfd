"""A batch of the stream's commit (StreamCommit.batch): what it reads up front and the writes it holds."""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, rows_values
from siltlake.catalog.rows import PartitionKey, PartitionRow

# The ops that replace or supersede rows an append read nothing of: an append started before one fails.
REWRITES = ("update", "merge")


def partition_row(row) -> PartitionRow:
    return PartitionRow(
        id=row.id,
        table_id=row.table_id,
        partition_date=row.partition_date,
        current_manifest_version=row.current_manifest_version,
        desired_manifest_version=row.desired_manifest_version,
        last_live_object_id=row.last_live_object_id,
        switched=row.switched,
        partition_values=row.partition_values,
    )


@dataclass
class StreamBatch:
    """What a batched commit read up front (StreamCommit.batch) and the writes it holds until flush()."""

    mark: int
    staging_ids: set[int]
    pending: set[int]
    counts: dict[int, sa.Row]  # staging id -> (id, table_id, records_in, bad_records, processed_time) as read
    keys: set[PartitionKey]
    partitions: dict[PartitionKey, PartitionRow]
    waiting: set[int]  # partitions with a waiting merge job
    updated: dict[int, int]  # partition id -> the first update version after mark
    ids: deque[int]
    small_objects: list[dict] = field(default_factory=list)
    sources: list[dict] = field(default_factory=list)  # small_object_sources rows of the objects above
    processed: list[dict] = field(default_factory=list)
    positions: list[dict] = field(default_factory=list)  # record_consumed's, written with the processed marks


def staging_counts(c: Connection, ids: Collection[int]) -> dict[int, sa.Row]:
    """The staging objects' counts and processed time, by id."""
    so = s.staging_objects
    return (
        {
            row.id: row
            for row in c.execute(
                sa.select(so.c.id, so.c.table_id, so.c.records_in, so.c.bad_records, so.c.processed_time).where(
                    so.c.id.in_(sorted(ids))
                )
            )
        }
        if ids
        else {}
    )


def read_batch(
    core: CatalogCore,
    c: Connection,
    staging_object_ids: Collection[int],
    keys: Collection[PartitionKey],
    small_object_ids: list[int],
    mark: int,
) -> StreamBatch:
    """What a batch of the stream's commit reads up front, in a few queries."""
    p, v = s.partitions, s.partition_versions
    ids = sorted(staging_object_ids)
    counts = staging_counts(c, ids)  # the rows' counts too: flush() adds to the totals what it changes of them
    pending = {row.id for row in counts.values() if row.processed_time is None}
    keys = set(keys)
    partitions: dict[PartitionKey, PartitionRow] = {}
    if keys:
        rows = c.execute(
            sa.select(p).where(
                p.c.table_id.in_(sorted({table_id for table_id, _, _ in keys})),
                p.c.partition_date.in_(sorted({date for _, date, _ in keys})),
            )
        )
        partitions = {key: row for row in map(partition_row, rows) if (key := row.key) in keys}
    partition_ids = sorted(row.id for row in partitions.values())
    waiting: set[int] = set()
    updated: dict[int, int] = {}  # partition id -> the first version a rewrite published after the mark
    if partition_ids:
        waiting = {row.partition_id for row in core.lock_waiting_jobs(c, partition_ids)}
        updated = dict(
            rows_values(
                c.execute(
                    sa.select(v.c.partition_id, sa.func.min(v.c.version))
                    .where(v.c.partition_id.in_(partition_ids), v.c.id > mark, v.c.commit_op.in_(REWRITES))
                    .group_by(v.c.partition_id)
                ).all()
            )
        )
    return StreamBatch(
        mark=mark,
        staging_ids=set(ids),
        pending=pending,
        counts=counts,
        keys=keys,
        partitions=partitions,
        waiting=waiting,
        updated=updated,
        ids=deque(small_object_ids),
    )
