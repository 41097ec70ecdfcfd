"""Partitions and their small objects: the stream's commit opened (stream_commit.StreamCommit), a partition
closed, and read back."""

from __future__ import annotations

import builtins
import datetime as dt
from collections.abc import Collection, Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, rows_values
from siltlake.catalog.derived import derived_table_states
from siltlake.catalog.rows import (
    FileStats,
    PartitionRow,
    SmallObjectRow,
    SourceRange,
    partition_state,
)
from siltlake.catalog.stream_batch import partition_row
from siltlake.catalog.stream_commit import StreamCommit
from siltlake.clock import utcnow
from siltlake.errors import NotFoundError

_IDS_PER_STATEMENT = 1000  # ids per IN (...) list


class Partitions:
    """Reached as catalog.partitions."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    @contextmanager
    def stream_commit(self) -> Iterator[StreamCommit]:
        """A transaction that appends small objects, holding the lock that orders their ids.

        Ids are handed out and committed under one lock, so once a reader sees id N every smaller id
        is committed too: merge ranges can cover "ids <= upper bound" without missing a late commit.
        """
        with self._core.tx() as c:
            if self._core.dialect == "postgresql":
                c.execute(sa.select(sa.func.pg_advisory_xact_lock(s.SMALL_OBJECT_LOCK)))
            commit = StreamCommit(self._core, c)
            yield commit
            self._core.add_staging_totals(c, commit.staging_totals())

    def close(self, table_id: int, partition_date: dt.date) -> PartitionRow:
        """Close a partition: later small objects of its date become delayed."""
        with self.stream_commit() as tx:
            partition = tx.partition(table_id, partition_date)
            if partition is None:
                raise NotFoundError(f"table id {table_id} has no partition {partition_date}")
            return tx.close(partition)

    def list(self, table_id: int) -> list[PartitionRow]:
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(s.partitions)
                .where(s.partitions.c.table_id == table_id)
                .order_by(s.partitions.c.partition_date, s.partitions.c.partition_values)
            ).all()
        return [partition_row(r) for r in rows]

    def small_objects(
        self, table_id: int, *, delayed: bool | None = None, up_to_id: int | None = None
    ) -> builtins.list[SmallObjectRow]:
        """A table's small objects in id order, in one query."""
        so, p = s.small_objects, s.partitions
        query = (
            sa.select(
                so.c.id, p.c.partition_date, so.c.delayed, so.c.content_length, so.c.row_count, p.c.partition_values
            )
            .select_from(so.join(p, so.c.partition_id == p.c.id))
            .where(p.c.table_id == table_id)
            .order_by(so.c.id)
        )
        if delayed is not None:
            query = query.where(so.c.delayed == delayed)
        if up_to_id is not None:
            query = query.where(so.c.id <= up_to_id)
        with self._core.tx() as c:
            return [SmallObjectRow(*r) for r in rows_values(c.execute(query))]

    def lineage(self, table_id: int) -> builtins.list[SourceRange]:
        """Where each small object's rows came from, by object id and first row: an object of one staging object
        is one range of all its rows, a group's object (stream.group_bytes) one range per source."""
        so, p, src = s.small_objects, s.partitions, s.small_object_sources
        with self._core.tx() as c:
            objects = c.execute(
                sa.select(so.c.id, so.c.staging_object_id, p.c.partition_date, so.c.row_count)
                .select_from(so.join(p, so.c.partition_id == p.c.id))
                .where(p.c.table_id == table_id)
            ).all()
            grouped = c.execute(
                sa.select(src.c.small_object_id, src.c.staging_object_id, src.c.first_row, src.c.row_count)
                .select_from(src.join(so, src.c.small_object_id == so.c.id).join(p, so.c.partition_id == p.c.id))
                .where(p.c.table_id == table_id)
            ).all()
        dates = {row.id: row.partition_date for row in objects}
        ranges = [
            SourceRange(r.small_object_id, r.staging_object_id, dates[r.small_object_id], r.first_row, r.row_count)
            for r in grouped
        ]
        listed = {r.small_object_id for r in ranges}
        ranges += [
            SourceRange(row.id, row.staging_object_id, row.partition_date, 0, row.row_count)
            for row in objects
            if row.id not in listed
        ]
        return sorted(ranges, key=lambda r: (r.small_object_id, r.first_row))

    def object_stats(self, object_ids: Collection[int]) -> dict[int, FileStats]:
        """Of each small object (by id) the stream recorded at its commit: content length, row count and
        min and max event time (naive UTC); ids without a row are left out."""
        so = s.small_objects
        ordered = sorted(set(object_ids))
        stats: dict[int, FileStats] = {}
        with self._core.snapshot() as c:
            for start in range(0, len(ordered), _IDS_PER_STATEMENT):
                for row in c.execute(
                    sa.select(
                        so.c.id, so.c.content_length, so.c.row_count, so.c.min_event_time, so.c.max_event_time
                    ).where(so.c.id.in_(ordered[start : start + _IDS_PER_STATEMENT]))
                ):
                    stats[row.id] = FileStats(row.content_length, row.row_count, row.min_event_time, row.max_event_time)
        return stats

    def largest_ids(self, table_id: int, dates: Collection[dt.date]) -> dict[tuple[dt.date, str], int]:
        """The largest small object id of each of the table's partitions dated `dates` that has one, by (date,
        values below dt)."""
        so, p = s.small_objects, s.partitions
        if not dates:
            return {}
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(p.c.partition_date, p.c.partition_values, sa.func.max(so.c.id))
                .select_from(so.join(p, so.c.partition_id == p.c.id))
                .where(p.c.table_id == table_id, p.c.partition_date.in_(sorted(dates)))
                .group_by(p.c.partition_date, p.c.partition_values)
            ).all()
        return {(date, values): largest for date, values, largest in rows_values(rows)}

    def max_small_object_id(self) -> int:
        with self._core.tx() as c:
            return c.execute(sa.select(sa.func.coalesce(sa.func.max(s.small_objects.c.id), 0))).scalar_one()

    def summary(self, table_id: int) -> builtins.list[dict]:
        """Per partition: date, values below dt (a table with partition_by), closed, state (one of PARTITION_STATES; a
        derived table's, DERIVED_PARTITION_STATES), object and row counts by live/delayed, merged objects and their
        rows."""
        so, p = s.small_objects, s.partitions
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(
                    p.c.partition_date,
                    p.c.partition_values,
                    p.c.last_live_object_id,
                    p.c.switched,
                    p.c.current_manifest_version,
                    so.c.delayed,
                    sa.func.count(so.c.id).label("objects"),
                    sa.func.coalesce(sa.func.sum(so.c.row_count), 0).label("rows"),
                    sa.func.coalesce(sa.func.sum(so.c.content_length), 0).label("bytes"),
                )
                .select_from(p.outerjoin(so, so.c.partition_id == p.c.id))
                .where(p.c.table_id == table_id)
                .group_by(
                    p.c.partition_date,
                    p.c.partition_values,
                    p.c.last_live_object_id,
                    p.c.switched,
                    p.c.current_manifest_version,
                    so.c.delayed,
                )
                .order_by(p.c.partition_date, p.c.partition_values)
            ).all()
            derived_state = derived_table_states(c, utcnow()).get(table_id)
            r_ = s.merge_ranges
            merged = {
                (row.partition_date, row.partition_values): row
                for row in c.execute(
                    sa.select(
                        p.c.partition_date,
                        p.c.partition_values,
                        sa.func.count(r_.c.id).label("objects"),
                        sa.func.coalesce(sa.func.sum(r_.c.row_count), 0).label("rows"),
                    )
                    .select_from(p.join(r_, r_.c.partition_id == p.c.id))
                    .where(p.c.table_id == table_id, r_.c.lower_bound.is_not(None))
                    .group_by(p.c.partition_date, p.c.partition_values)
                )
            }
        summary: dict[tuple[dt.date, str], dict] = {}
        for r in rows:
            place = (r.partition_date, r.partition_values)
            entry = summary.setdefault(
                place,
                {
                    "date": r.partition_date,
                    **({"values": r.partition_values} if r.partition_values else {}),
                    "closed": r.last_live_object_id is not None,
                    "state": derived_state
                    or partition_state(r.switched, r.last_live_object_id is not None, r.current_manifest_version),
                    "live_objects": 0,
                    "live_rows": 0,
                    "delayed_objects": 0,
                    "delayed_rows": 0,
                    "bytes": 0,
                    "merged_objects": merged[place].objects if place in merged else 0,
                    "merged_rows": int(merged[place].rows) if place in merged else 0,
                },
            )
            if r.delayed is None:
                continue
            kind = "delayed" if r.delayed else "live"
            entry[f"{kind}_objects"] += r.objects
            entry[f"{kind}_rows"] += r.rows
            entry["bytes"] += r.bytes
        return list(summary.values())
