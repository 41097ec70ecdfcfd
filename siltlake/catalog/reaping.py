"""Reap's catalog side (docs/design.md, "Reap"): one consistent view of what is referenced, then row deletions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, row_values, rows_values
from siltlake.catalog.external_sync import record_removals
from siltlake.catalog.reap_rows import (
    ReapPartition,
    ReapRange,
    ReapRun,
    ReapScope,
    ReapSmallObject,
    ReapTable,
    ReapVersion,
    ReapView,
)

_CHUNK = 500  # ids per IN (...) list: well under SQLite's and PostgreSQL's parameter limits


def _chunks(values: Sequence[int]) -> Iterable[list[int]]:
    for start in range(0, len(values), _CHUNK):
        yield list(values[start : start + _CHUNK])


class Reaping:
    """Reached as catalog.reaping."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def view(self, scope: ReapScope | None = None) -> ReapView:
        """Tables (dropped too), partitions, versions, ranges, small objects, running merge jobs, error files
        and registered instances, all as of one moment: a reference seen here is never missed because
        another writer moved it between two of these queries.

        With a scope (an incremental run), only the partitions it selects and their rows, and no error
        files (an incremental run does not list the errors areas)."""
        t, p, v, r, so, j = (
            s.tables,
            s.partitions,
            s.partition_versions,
            s.merge_ranges,
            s.small_objects,
            s.merge_jobs,
        )
        view = ReapView()
        with self._core.snapshot() as c:
            view.tables = [
                ReapTable(*row)
                for row in rows_values(
                    c.execute(
                        sa.select(
                            t.c.id,
                            t.c.physical_schema_name,
                            t.c.physical_table_name,
                            t.c.timezone,
                            t.c.ttl_days,
                            t.c.dropped_time,
                        )
                    )
                )
            ]
            view.max_small_object_id = c.execute(sa.select(sa.func.max(so.c.id))).scalar() or 0
            if scope is not None:
                view.scope = self._changed_partitions(c, scope)
            selected = sorted(view.scope) if view.scope is not None else None

            def rows(query: sa.Select, column: sa.ColumnElement) -> list:
                if selected is None:
                    return list(c.execute(query))
                return [row for chunk in _chunks(selected) for row in c.execute(query.where(column.in_(chunk)))]

            view.partitions = [
                ReapPartition(*row)
                for row in rows(sa.select(p.c.id, p.c.table_id, p.c.partition_date, p.c.partition_values), p.c.id)
            ]
            view.versions = sorted(
                (
                    ReapVersion(*row)
                    for row in rows(
                        sa.select(
                            v.c.id,
                            v.c.partition_id,
                            v.c.version,
                            v.c.commit_op,
                            v.c.live_watermark,
                            v.c.manifest_key,
                            v.c.covered_upper,
                            v.c.created_at,
                            v.c.file_list_key,
                            v.c.table_version,
                        ),
                        v.c.partition_id,
                    )
                ),
                key=lambda x: (x.partition_id, x.version),
            )
            view.ranges = [
                ReapRange(*row)
                for row in rows(
                    sa.select(r.c.partition_id, r.c.lower_bound, r.c.upper_bound, r.c.object_key), r.c.partition_id
                )
            ]
            view.small_objects = [
                ReapSmallObject(*row)
                for row in rows(
                    sa.select(so.c.id, so.c.partition_id, so.c.delayed, so.c.content_length), so.c.partition_id
                )
            ]
            view.running_jobs = [
                (row.partition_id, row.heartbeat_time)
                for row in c.execute(sa.select(j.c.partition_id, j.c.heartbeat_time).where(j.c.ongoing_mark > 0))
            ]
            if scope is None:
                view.error_keys = set(
                    c.execute(
                        sa.select(s.staging_objects.c.error_uri).where(s.staging_objects.c.error_uri.is_not(None))
                    ).scalars()
                )
            for tag in c.execute(sa.select(s.version_tags.c.table_id, s.version_tags.c.table_version)):
                view.tagged.setdefault(tag.table_id, set()).add(tag.table_version)
            view.instances = {
                row.instance_key: row.is_self
                for row in c.execute(sa.select(s.instances.c.instance_key, s.instances.c.is_self))
            }
        return view

    @staticmethod
    def _changed_partitions(c: Connection, scope: ReapScope) -> set[int]:
        """The partitions an incremental run reads and lists (ReapScope), each by an indexed range."""
        p, v, r, so, log = s.partitions, s.partition_versions, s.merge_ranges, s.small_objects, s.merge_job_log
        if scope.table_id is not None:
            return set(c.execute(sa.select(p.c.id).where(p.c.table_id == scope.table_id)).scalars())
        low, high = scope.crossing
        queries = [
            sa.select(v.c.partition_id).where(v.c.created_at >= scope.since),
            sa.select(v.c.partition_id).where(v.c.created_at >= low, v.c.created_at < high),
            sa.select(r.c.partition_id).where(r.c.update_time >= scope.since),
            sa.select(log.c.partition_id).where(log.c.end_time >= scope.since),
            sa.select(p.c.id).where(p.c.create_time >= scope.since),
            sa.select(so.c.partition_id).where(so.c.id > scope.small_above),
            sa.select(s.merge_jobs.c.partition_id),  # the queue: its partitions may hold a dead attempt's part
        ]
        tables = [
            ReapTable(*row)
            for row in rows_values(
                c.execute(
                    sa.select(
                        s.tables.c.id,
                        s.tables.c.physical_schema_name,
                        s.tables.c.physical_table_name,
                        s.tables.c.timezone,
                        s.tables.c.ttl_days,
                        s.tables.c.dropped_time,
                    ).where(s.tables.c.ttl_days.is_not(None))
                )
            )
        ]
        for table in tables:
            before = scope.ttl_cutoff(table)
            if before is not None:
                queries.append(sa.select(p.c.id).where(p.c.table_id == table.id, p.c.partition_date < before))
        found: set[int] = set()
        for query in queries:
            found.update(c.execute(query.distinct()).scalars())
        return found

    def last_runs(self, full_since: dt.datetime) -> tuple[ReapRun | None, bool]:
        """The newest completed reap run, and whether a full sweep completed at or after `full_since`."""
        runs = s.reap_runs
        with self._core.tx() as c:
            row = c.execute(
                sa.select(runs.c.run_time, runs.c.full_sweep, runs.c.retention, runs.c.max_small_object_id)
                .order_by(runs.c.run_time.desc(), runs.c.id.desc())
                .limit(1)
            ).first()
            full = c.execute(
                sa.select(runs.c.id).where(runs.c.full_sweep.is_(True), runs.c.run_time >= full_since).limit(1)
            ).first()
        return (ReapRun(*row_values(row)) if row is not None else None), full is not None

    def record_run(self, run: ReapRun, finished: dt.datetime, keep_after: dt.datetime) -> None:
        """Record a completed run; forget runs older than `keep_after` except the newest full sweep (what the
        next runs are measured from)."""
        runs = s.reap_runs
        with self._core.tx() as c:
            c.execute(
                runs.insert().values(
                    run_time=run.run_time,
                    full_sweep=run.full_sweep,
                    retention=run.retention,
                    max_small_object_id=run.max_small_object_id,
                    finished_time=finished,
                )
            )
            newest_full = sa.select(sa.func.max(runs.c.id)).where(runs.c.full_sweep.is_(True)).scalar_subquery()
            c.execute(runs.delete().where(runs.c.run_time < keep_after, runs.c.id != sa.func.coalesce(newest_full, 0)))

    def delete_small_object_rows(self, ids: Sequence[int]) -> int:
        """Forget small objects whose files reap deleted (covered by their partition's newest manifest)."""
        so = s.small_objects
        deleted = 0
        with self._core.tx() as c:
            for chunk in _chunks(sorted(ids)):
                c.execute(s.small_object_sources.delete().where(s.small_object_sources.c.small_object_id.in_(chunk)))
                deleted += c.execute(so.delete().where(so.c.id.in_(chunk))).rowcount
        return deleted

    def delete_version_rows(self, ids: Sequence[int]) -> int:
        """Delete expired version rows; a partition's newest version is never deleted, whatever the caller
        computed (checked in the statement itself). Their tables' readable range moves past them."""
        v = s.partition_versions
        newer = sa.alias(v, "newer")
        deleted = 0
        touched: set[int] = set()
        with self._core.tx() as c:
            for chunk in _chunks(sorted(ids)):
                touched.update(c.execute(sa.select(v.c.partition_id).where(v.c.id.in_(chunk))).scalars())
                deleted += c.execute(
                    v.delete().where(
                        v.c.id.in_(chunk),
                        sa.exists().where(newer.c.partition_id == v.c.partition_id, newer.c.version > v.c.version),
                    )
                ).rowcount
            self._move_readable_from(c, touched)
        return deleted

    @staticmethod
    def _move_readable_from(c: Connection, partition_ids: set[int]) -> None:
        """A table version is readable while every partition still has the versions it showed then: each table's
        `readable_from` becomes the newest first version of these partitions' unbroken runs of versions up to their
        newest, when that run does not start at version 1 (an older version a tag kept, before a gap, counts for
        that tag's version alone), if newer (VersionReads.table_range reads it; it never moves back)."""
        v, t = s.partition_versions, s.tables
        starts: dict[int, int] = {}
        for chunk in _chunks(sorted(partition_ids)):
            histories: dict[int, list] = {}
            for row in c.execute(
                sa.select(v.c.table_id, v.c.partition_id, v.c.version, v.c.table_version)
                .where(v.c.partition_id.in_(chunk))
                .order_by(v.c.partition_id, v.c.version.desc())
            ):
                histories.setdefault(row.partition_id, []).append(row)
            for history in histories.values():  # newest first
                first = history[0]
                for newer, older in zip(history, history[1:], strict=False):
                    if older.version != newer.version - 1:
                        break
                    first = older
                if first.version > 1:
                    starts[first.table_id] = max(starts.get(first.table_id, 0), first.table_version)
        for table_id, readable_from in starts.items():
            c.execute(
                t.update()
                .where(t.c.id == table_id, t.c.readable_from < readable_from)
                .values(readable_from=readable_from)
            )

    def delete_partitions(self, partition_ids: Sequence[int]) -> int:
        """Delete partitions and every row that references them; returns the rows deleted.

        Under the stream's ordering lock, so no small object commits into a partition being removed.
        """
        if not partition_ids:
            return 0
        deleted = 0
        with self._core.tx() as c:
            self._core.ordering_lock(c)
            for chunk in _chunks(sorted(partition_ids)):
                record_removals(c, chunk)
            deleted += self._delete_partition_rows(c, list(partition_ids))
        return deleted

    @staticmethod
    def _delete_partition_rows(c: Connection, partition_ids: list[int]) -> int:
        p, t = s.partitions, s.tables
        deleted = 0
        for chunk in _chunks(sorted(partition_ids)):
            switched = c.execute(
                sa.select(p.c.table_id, sa.func.count())
                .where(p.c.id.in_(chunk), p.c.switched)
                .group_by(p.c.table_id)
                .order_by(p.c.table_id)
            ).all()
            for table_id, count in switched:
                c.execute(
                    t.update().where(t.c.id == table_id).values(switched_partitions=t.c.switched_partitions - count)
                )
            # Ranges go in one statement per chunk: their chain foreign key is checked at its end.
            sources = s.small_object_sources
            owned = sa.select(s.small_objects.c.id).where(s.small_objects.c.partition_id.in_(chunk))
            deleted += c.execute(sources.delete().where(sources.c.small_object_id.in_(owned))).rowcount
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
            dropped: dt.datetime | None = c.execute(sa.select(t.c.dropped_time).where(t.c.id == table_id)).scalar_one()
            if dropped is None:
                return 0  # never: only dropped tables come here
            partition_ids: list[int] = list(c.execute(sa.select(p.c.id).where(p.c.table_id == table_id)).scalars())
            deleted = self._delete_partition_rows(c, partition_ids)
            # '#' is not allowed in a table name, so the freed name can never collide with a real one.
            c.execute(t.update().where(t.c.id == table_id).values(physical_table_name=f"#reaped-{table_id}"))
        return deleted + 1
