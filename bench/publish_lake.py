"""The lake a publish benchmark starts from: its tables, small objects committed through the stream's commit
path, and merges recorded in the catalog directly."""

from __future__ import annotations

import datetime as dt
import itertools

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from siltlake.catalog import schema as s
from siltlake.deployment import Deployment
from siltlake.tabledef import TableDef

TOKYO = dt.timedelta(hours=9)
FIRST_DAY = dt.date(2024, 1, 1)
TABLE = {
    "schema": "bench",
    "name": "t",
    "time_column": "time",
    "timezone": "Asia/Tokyo",
    "merge_interval": "12h",
    "columns": [
        {"name": "time", "type": "timestamp", "nullable": False},
        {"name": "user_id", "type": "bigint"},
        {"name": "action", "type": "string"},
    ],
}
_staging_names = itertools.count()


def tokyo(date: dt.date, hour: int) -> dt.datetime:
    """Naive UTC of a Tokyo wall-clock hour."""
    return dt.datetime.combine(date, dt.time(hour)) - TOKYO


def add_objects(
    deployment: Deployment,
    partitions: list[tuple],
    now: dt.datetime,
    *,
    rows: int = 20,
    write_files: bool = False,
    seed: int = 0,
) -> list[int]:
    """One small object in each (table, date), committed in one stream commit as the stream does
    (staging rows, partition and merge job, small object rows; delayed when the partition is closed).

    tests/merge_helpers.add_small_objects does the same for one date per commit; 10,000 dates need
    one commit, or catalog.staging.pending is read 10,000 times."""
    catalog, lake = deployment.catalog, deployment.lake
    staged = [
        (f"file:///bench-staging/{table.physical_table_name}/{next(_staging_names)}.jsonl", table.id, 1, None)
        for table, _ in partitions
    ]
    catalog.staging.register(staged)
    pending = {p.uri: p.id for p in catalog.staging.pending(len(staged) + 1000)}
    ids = []
    with catalog.partitions.stream_commit() as tx:
        for (uri, *_), (table, date), object_id in zip(staged, partitions, tx.allocate_ids(len(staged)), strict=True):
            partition = tx.partition_for(table.id, date, table.definition.merge_interval, now)
            start = dt.datetime.combine(date, dt.time(1)) - TOKYO
            size = 1000
            if write_files:
                data = object_rows(table.definition, start, rows, object_id + seed)
                key = table.layout(deployment.instance_key).small_object(date, object_id, partition.closed)
                with lake.open_output(key) as sink:
                    pq.write_table(data, sink, compression=table.definition.codec)
                size = lake.info(key).size
            tx.add_small_object(
                object_id=object_id,
                staging_object_id=pending[uri],
                partition_id=partition.id,
                delayed=partition.closed,
                content_length=size,
                row_count=rows,
                min_event_time=start,
                max_event_time=start + dt.timedelta(seconds=rows),
                upload_start_time=now,
            )
            tx.mark_processed(pending[uri], records_in=rows, bad_records=0, error_uri=None, now=now)
            ids.append(object_id)
    return ids


def add_objects_bulk(deployment: Deployment, partitions: list[tuple], now: dt.datetime, rows: int = 20) -> None:
    """The catalog rows add_objects writes (processed staging rows, partitions, small objects, delayed
    in closed partitions, a waiting merge job per partition), inserted a table at a time in one stream
    commit: through StreamCommit it is about 9 statements an object, minutes for 10,000 on a loaded
    PostgreSQL, and the set-up is not what is measured."""
    st, p, so, j = s.staging_objects, s.partitions, s.small_objects, s.merge_jobs
    with deployment.catalog.partitions.stream_commit() as tx:
        c = tx._c  # the commit's connection: ids, rows and the ordering lock in one transaction
        ids = tx.allocate_ids(len(partitions))
        staging = (
            c.execute(
                st.insert().returning(st.c.id, sort_by_parameter_order=True),
                [
                    dict(
                        uri=f"file:///bench-staging/{table.physical_table_name}/{next(_staging_names)}.jsonl",
                        table_id=table.id,
                        size=1,
                        receive_time=now,
                        processed_time=now,
                        records_in=rows,
                        bad_records=0,
                    )
                    for table, _ in partitions
                ],
            )
            .scalars()
            .all()
        )

        def known() -> dict:
            return {
                (row.table_id, row.partition_date): row
                for row in c.execute(
                    sa.select(p.c.id, p.c.table_id, p.c.partition_date, p.c.last_live_object_id).where(
                        p.c.table_id.in_({table.id for table, _ in partitions})
                    )
                )
            }

        found = known()
        missing = {(table.id, date) for table, date in partitions} - set(found)
        if missing:
            c.execute(
                p.insert(),
                [dict(table_id=table_id, partition_date=date, create_time=now) for table_id, date in sorted(missing)],
            )
            found = known()
        objects = []
        for (table, date), object_id, staging_id in zip(partitions, ids, staging, strict=True):
            start = dt.datetime.combine(date, dt.time(1)) - TOKYO
            partition = found[(table.id, date)]
            objects.append(
                dict(
                    id=object_id,
                    staging_object_id=staging_id,
                    partition_id=partition.id,
                    delayed=partition.last_live_object_id is not None,
                    content_length=1000,
                    row_count=rows,
                    min_event_time=start,
                    max_event_time=start + dt.timedelta(seconds=rows),
                    upload_start_time=now,
                )
            )
        c.execute(so.insert(), objects)
        waiting = set(c.execute(sa.select(j.c.partition_id).where(j.c.ongoing_mark == 0)).scalars())
        due = {
            found[(table.id, date)].id: now + dt.timedelta(seconds=table.definition.merge_interval)
            for table, date in partitions
        }
        jobs = [
            dict(partition_id=pid, schedule_time=when, ongoing_mark=0)
            for pid, when in due.items()
            if pid not in waiting
        ]
        if jobs:
            c.execute(j.insert(), jobs)


def object_rows(definition: TableDef, start: dt.datetime, rows: int, seed: int) -> pa.Table:
    return pa.table(
        {
            "time": pa.array([start + dt.timedelta(seconds=i) for i in range(rows)], pa.timestamp("us")),
            "user_id": pa.array([seed * 1000 + i for i in range(rows)], pa.int64()),
            "action": pa.array([f"a{(seed + i) % 5}" for i in range(rows)]),
        }
    ).cast(definition.arrow_schema())


def merge_partitions(
    deployment: Deployment, partition_ids: list[int], now: dt.datetime, *, write_files: bool = False
) -> None:
    """Every unmerged small object of these partitions merged into their one range, recorded as
    Catalog.merge_queue.commit records a merge (sentinel, range created or extended, desired = its upper
    bound, the waiting job ended) but in one transaction; with write_files the merged object is
    written too (the small objects' rows concatenated, as a deep merge would hold them)."""
    p, so, r, j = s.partitions, s.small_objects, s.merge_ranges, s.merge_jobs
    catalog = deployment.catalog
    table = catalog.tables.list()[0] if write_files else None  # before the transaction: SQLite has one writer
    with catalog.engine.begin() as c:
        totals = c.execute(
            sa.select(
                so.c.partition_id,
                sa.func.max(so.c.id).label("upper"),
                sa.func.sum(so.c.row_count).label("rows"),
                sa.func.sum(so.c.content_length).label("bytes"),
            )
            .where(so.c.partition_id.in_(partition_ids))
            .group_by(so.c.partition_id)
        ).all()
        existing = {
            row.partition_id: row
            for row in c.execute(
                sa.select(r.c.partition_id, r.c.lower_bound, r.c.upper_bound).where(
                    r.c.partition_id.in_(partition_ids), r.c.lower_bound.is_not(None)
                )
            )
        }
        if write_files:
            dates = dict(c.execute(sa.select(p.c.id, p.c.partition_date).where(p.c.id.in_(partition_ids))).all())
            objects = c.execute(
                sa.select(so.c.partition_id, so.c.id, so.c.delayed)
                .where(so.c.partition_id.in_(partition_ids))
                .order_by(so.c.id)
            ).all()
            layout, lake = table.layout(deployment.instance_key), deployment.lake
            by_partition: dict[int, list] = {}
            for row in objects:
                by_partition.setdefault(row.partition_id, []).append(row)
            sizes = {}
            for pid, rows in by_partition.items():
                data = pa.concat_tables(
                    pq.read_table(lake.path(layout.small_object(dates[pid], o.id, o.delayed))) for o in rows
                )
                key = layout.merged_object(dates[pid], 0, rows[-1].id)
                with lake.open_output(key) as sink:
                    pq.write_table(data, sink, compression=table.definition.codec)
                sizes[pid] = lake.info(key).size
        new = [row for row in totals if row.partition_id not in existing]
        if new:
            c.execute(
                r.insert(),
                [
                    dict(
                        partition_id=row.partition_id,
                        lower_bound=None,
                        upper_bound=0,
                        content_length=0,
                        row_count=0,
                        create_time=now,
                        update_time=now,
                    )
                    for row in new
                ],
            )
            c.execute(
                r.insert(),
                [
                    dict(
                        partition_id=row.partition_id,
                        lower_bound=0,
                        upper_bound=row.upper,
                        content_length=sizes[row.partition_id] if write_files else int(row.bytes),
                        row_count=int(row.rows),
                        create_time=now,
                        update_time=now,
                    )
                    for row in new
                ],
            )
        extended = [row for row in totals if row.partition_id in existing]
        if extended:
            c.execute(
                r.update()
                .where(r.c.partition_id == sa.bindparam("pid"), r.c.lower_bound == 0)
                .values(
                    upper_bound=sa.bindparam("upper"),
                    content_length=sa.bindparam("size"),
                    row_count=sa.bindparam("rows"),
                    update_time=now,
                ),
                [
                    dict(
                        pid=row.partition_id,
                        upper=row.upper,
                        rows=int(row.rows),
                        size=sizes[row.partition_id] if write_files else int(row.bytes),
                    )
                    for row in extended
                ],
            )
        c.execute(
            p.update().where(p.c.id == sa.bindparam("pid")).values(desired_manifest_version=sa.bindparam("upper")),
            [dict(pid=row.partition_id, upper=row.upper) for row in totals],
        )
        for chunk in range(0, len(partition_ids), 1000):
            c.execute(j.delete().where(j.c.partition_id.in_(partition_ids[chunk : chunk + 1000])))
