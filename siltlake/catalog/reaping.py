"""Reap's catalog side (DESIGN §8): one consistent view of what is referenced, then row deletions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore
from siltlake.catalog.records import ReapPartition, ReapRange, ReapSmallObject, ReapTable, ReapVersion, ReapView

_CHUNK = 500  # ids per IN (...) list: well under SQLite's and PostgreSQL's parameter limits


def _chunks(values: Sequence[int]) -> Iterable[list[int]]:
    for start in range(0, len(values), _CHUNK):
        yield list(values[start:start + _CHUNK])


class Reaping:
    """Reached as catalog.reaping."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def view(self) -> ReapView:
        """Tables (dropped too), partitions, versions, ranges, small objects, running merge jobs, error files
        and registered instances, all as of one moment: a reference seen here is never missed because
        another writer moved it between two of these queries."""
        t, p, v, r, so, j = (s.tables, s.partitions, s.partition_versions, s.merge_ranges, s.small_objects,
                             s.merge_jobs)
        view = ReapView()
        with self._core.snapshot() as c:
            view.tables = [ReapTable(*row) for row in c.execute(sa.select(
                t.c.id, t.c.physical_schema_name, t.c.physical_table_name, t.c.timezone, t.c.ttl_days,
                t.c.dropped_time))]
            view.partitions = [ReapPartition(*row) for row in c.execute(
                sa.select(p.c.id, p.c.table_id, p.c.partition_date))]
            view.versions = [ReapVersion(*row) for row in c.execute(sa.select(
                v.c.id, v.c.partition_id, v.c.version, v.c.commit_op, v.c.live_watermark, v.c.manifest_key,
                v.c.covered_upper, v.c.created_at, v.c.file_list_key).order_by(v.c.partition_id, v.c.version))]
            view.ranges = [ReapRange(*row) for row in c.execute(
                sa.select(r.c.partition_id, r.c.lower_bound, r.c.upper_bound, r.c.object_key))]
            view.small_objects = [ReapSmallObject(*row) for row in c.execute(
                sa.select(so.c.id, so.c.partition_id, so.c.delayed, so.c.content_length))]
            view.running_jobs = [(row.partition_id, row.heartbeat_time) for row in c.execute(
                sa.select(j.c.partition_id, j.c.heartbeat_time).where(j.c.ongoing_mark > 0))]
            view.error_keys = set(c.execute(sa.select(s.staging_objects.c.error_uri).where(
                s.staging_objects.c.error_uri.is_not(None))).scalars())
            view.instances = {row.instance_key: row.is_self for row in c.execute(
                sa.select(s.instances.c.instance_key, s.instances.c.is_self))}
        return view

    def running_merge_partitions(self, fresh_after: dt.datetime) -> set[int]:
        """Partitions with a running merge job whose heartbeat is newer than `fresh_after` (read again right
        before deleting: a job claimed after view() may be writing now)."""
        j = s.merge_jobs
        with self._core.tx() as c:
            return set(c.execute(sa.select(j.c.partition_id).where(
                j.c.ongoing_mark > 0, j.c.heartbeat_time >= fresh_after)).scalars())

    def delete_small_object_rows(self, ids: Sequence[int]) -> int:
        """Forget small objects whose files reap deleted (covered by their partition's newest manifest)."""
        so = s.small_objects
        deleted = 0
        with self._core.tx() as c:
            for chunk in _chunks(sorted(ids)):
                deleted += c.execute(so.delete().where(so.c.id.in_(chunk))).rowcount
        return deleted

    def delete_version_rows(self, ids: Sequence[int]) -> int:
        """Delete expired version rows; a partition's newest version is never deleted, whatever the caller
        computed (checked in the statement itself)."""
        v = s.partition_versions
        newer = sa.alias(v, "newer")
        deleted = 0
        with self._core.tx() as c:
            for chunk in _chunks(sorted(ids)):
                deleted += c.execute(v.delete().where(v.c.id.in_(chunk), sa.exists().where(
                    newer.c.partition_id == v.c.partition_id, newer.c.version > v.c.version))).rowcount
        return deleted

    def delete_partitions(self, partition_ids: Sequence[int]) -> int:
        """Delete partitions and every row that references them; returns the rows deleted.

        Under the stream's ordering lock, so no small object commits into a partition being removed.
        """
        if not partition_ids:
            return 0
        deleted = 0
        with self._core.tx() as c:
            self._core.ordering_lock(c)
            deleted += self._delete_partition_rows(c, list(partition_ids))
        return deleted

    @staticmethod
    def _delete_partition_rows(c: Connection, partition_ids: list[int]) -> int:
        deleted = 0
        for chunk in _chunks(sorted(partition_ids)):
            # Ranges go in one statement per chunk: their chain foreign key is checked at its end.
            for table in (s.small_objects, s.merge_ranges, s.partition_versions, s.merge_jobs, s.merge_job_log):
                deleted += c.execute(table.delete().where(table.c.partition_id.in_(chunk))).rowcount
            deleted += c.execute(s.partitions.delete().where(s.partitions.c.id.in_(chunk))).rowcount
        return deleted

    def forget_dropped_table(self, table_id: int) -> int:
        """Delete a dropped table's partitions and their rows, and free its physical name.

        The table row stays, renamed out of the way, because its staging objects' rows stay: they record that
        those staging URIs were seen, so a new table of the same name never loads them again.
        """
        t, p = s.tables, s.partitions
        with self._core.tx() as c:
            self._core.ordering_lock(c)
            dropped = c.execute(sa.select(t.c.dropped_time).where(t.c.id == table_id)).scalar_one()
            if dropped is None:
                return 0  # never: only dropped tables come here
            partition_ids = list(c.execute(sa.select(p.c.id).where(p.c.table_id == table_id)).scalars())
            deleted = self._delete_partition_rows(c, partition_ids)
            # '#' is not allowed in a table name, so the freed name can never collide with a real one.
            c.execute(t.update().where(t.c.id == table_id).values(physical_table_name=f"#reaped-{table_id}"))
        return deleted + 1
