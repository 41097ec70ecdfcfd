"""What the lake holds after a chaos run, read back through the catalog, the table API and the readers, and
whether every shipped record is there exactly once."""

from __future__ import annotations

import collections
import datetime as dt

import duckdb
import pyarrow.parquet as pq

from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.read import sql as read_sql
from siltlake.read import table as read_table
from siltlake.storage.manifests import read_manifest


def current_objects(deployment: Deployment, name: str) -> dict[dt.date, tuple[list[str], collections.Counter]]:
    """Per partition date, the objects the table's current state shows (the reader's snapshot) and the
    record_id of every physical row in them, read with pyarrow: re-sent rows not merged yet count twice."""
    record = deployment.catalog.tables.get(name)
    layout = record.layout(deployment.instance_key)
    shown = {}
    for view in deployment.catalog.version_reads.reader_snapshot(record.id):
        keys = []
        if view.manifest_key:
            keys += [
                uri.removeprefix(deployment.lake.root + "/")
                for uri, _ in read_manifest(deployment.lake, view.manifest_key)
            ]
        keys += [layout.small_object(view.partition_date, oid, False) for oid in view.live_object_ids]
        ids: collections.Counter = collections.Counter()
        for key in keys:
            ids.update(
                pq.read_table(deployment.lake.path(key), filesystem=deployment.lake.filesystem, columns=["record_id"])
                .column("record_id")
                .to_pylist()
            )
        shown[view.partition_date] = (keys, ids)
    return shown


def current_record_ids(deployment: Deployment, name: str) -> collections.Counter:
    """record_id of every physical row the table's current state shows (the reader's snapshot, read with
    pyarrow; of an unkeyed table, what its readers show)."""
    ids: collections.Counter = collections.Counter()
    for _, partition_ids in current_objects(deployment, name).values():
        ids.update(partition_ids)
    return ids


def delayed_record_ids(deployment: Deployment, name: str) -> set[int]:
    """record_id of the rows of the table's delayed small objects (shown once merged and published); those a
    killed reap deleted but left in the catalog (merged, so shown) are skipped."""
    record = deployment.catalog.tables.get(name)
    layout = record.layout(deployment.instance_key)
    ids: set[int] = set()
    for small in deployment.catalog.partitions.small_objects(record.id):
        key = layout.small_object(small.partition_date, small.id, True)
        if small.delayed and deployment.lake.exists(key):
            ids.update(
                pq.read_table(deployment.lake.path(key), filesystem=deployment.lake.filesystem, columns=["record_id"])
                .column("record_id")
                .to_pylist()
            )
    return ids


def explain_lost(deployment: Deployment, name: str, lost: set[int]) -> str:
    """Where records the readers do not show lie: each partition's state, ranges, versions and small
    objects, marking those that hold lost ids (for a failure's message)."""
    import sqlalchemy as sa

    from siltlake.catalog import schema as s

    catalog, lake = deployment.catalog, deployment.lake
    record = catalog.tables.get(name)
    layout = record.layout(deployment.instance_key)
    lines = []
    with catalog.engine.connect() as c:
        jobs = c.execute(sa.select(s.merge_jobs)).all()
    for partition in catalog.partitions.list(record.id):
        lines.append(f"{partition}")
        lines += [f"  range {r}" for r in catalog.merge_queue.ranges(partition.id)]
        lines += [f"  version {v}" for v in catalog.versions.of_partitions([partition.id])]
        lines += [f"  job {j}" for j in jobs if j.partition_id == partition.id]
    for small in catalog.partitions.small_objects(record.id):
        key = layout.small_object(small.partition_date, small.id, small.delayed)
        ids = (
            set(
                pq.read_table(lake.path(key), filesystem=lake.filesystem, columns=["record_id"])
                .column("record_id")
                .to_pylist()
            )
            if lake.exists(key)
            else set()
        )
        if ids & lost:
            lines.append(f"small object {small} holds {len(ids & lost)} lost ids")
    return "\n".join(lines)


def reader_record_ids(spark, deployment: Deployment, name: str) -> dict[str, collections.Counter]:
    """record_id of every row each reader shows of the table's current state (each applies the keyed rule)."""
    table = Lake(deployment).table(name)
    with duckdb.connect() as connection:
        ducked = table.to_duckdb(connection).project("record_id").fetchall()
    return {
        "read.table": collections.Counter(
            row.record_id for row in read_table(spark, name, deployment).select("record_id").collect()
        ),
        "read.sql": collections.Counter(
            row.record_id for row in read_sql(spark, f"SELECT record_id FROM {name}", deployment).collect()
        ),
        "Table.to_arrow": collections.Counter(table.to_arrow(columns=["record_id"]).column("record_id").to_pylist()),
        "Table.to_duckdb": collections.Counter(record_id for (record_id,) in ducked),
    }


def exactly_once(shipped: list[int], seen: collections.Counter) -> str | None:
    """What is wrong with seen as the record ids shipped, or None."""
    duplicates = {rid: n for rid, n in seen.items() if n > 1}
    lost = sorted(set(shipped) - set(seen))
    unknown = sorted(set(seen) - set(shipped))
    if duplicates or lost or unknown:
        return (
            f"{len(duplicates)} records seen more than once (e.g. {list(duplicates.items())[:5]}), "
            f"{len(lost)} lost (e.g. {lost[:5]}), {len(unknown)} never shipped (e.g. {unknown[:5]})"
        )
    return None
