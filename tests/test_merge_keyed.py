"""Merges of keyed tables: one range per partition, one row per key, delete markers applied."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.catalog import TableRecord
from siltlake.deployment import Deployment
from siltlake.merge import merge_once
from siltlake.merge.planner import MergedRange, MergeLimits, SmallObject, plan_merge
from siltlake.records.keyed import DELETE_MARKER
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .merge_helpers import add_small_objects

DAY = dt.date(2026, 11, 20)
sqlite_only = pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)


def keyed_table(deployment: Deployment, name: str, **settings: object) -> TableRecord:
    columns = [
        {"name": "utc_event_time", "type": "timestamp", "nullable": False, "source": "time"},
        {"name": "user_id", "type": "bigint", "nullable": False},
        {"name": "action", "type": "string"},
    ]
    if settings.get("sequence_column"):
        columns.append({"name": "seq", "type": "bigint"})
    return deployment.catalog.tables.create(
        TableDef.from_mapping(
            {
                **ACCESS_TABLE,
                "name": name,
                "merge_interval": 0,
                "columns": columns,
                "primary_key": ["user_id"],
                **settings,
            }
        )
    )


def row(user: int, action: str, minute: int, **extra: object) -> dict:
    """A row at `minute` past 01:00 Tokyo time on DAY."""
    tokyo_one = dt.datetime.combine(DAY, dt.time(1, 0), tzinfo=dt.UTC) - dt.timedelta(hours=9)
    return {"utc_event_time": tokyo_one + dt.timedelta(minutes=minute), "user_id": user, "action": action, **extra}


def mark_deletes(deployment: Deployment, table: TableRecord, object_id: int, deletes: list[bool]) -> None:
    """Rewrite a committed small object with an upsert's delete marker column (one flag per row)."""
    (small,) = [
        o for o in deployment.catalog.partitions.small_objects(table.id, up_to_id=object_id) if o.id == object_id
    ]
    key = table.layout(deployment.instance_key).small_object(DAY, object_id, small.delayed)
    rows = pq.read_table(deployment.lake.path(key), filesystem=deployment.lake.filesystem)
    with deployment.lake.open_output(key) as sink:
        pq.write_table(rows.append_column(DELETE_MARKER, pa.array(deletes, pa.bool_())), sink)


def merged_partition(deployment: Deployment, table: TableRecord) -> tuple[pa.Table, list, dict]:
    """The partition's only merged object (asserting the ranges are the sentinel and (0, U]), its ranges
    and the last job's log row."""
    (partition,) = deployment.catalog.partitions.list(table.id)
    ranges = deployment.catalog.merge_queue.ranges(partition.id)
    assert [(r.lower, r.upper) for r in ranges] == [(None, 0), (0, partition.desired_manifest_version)]
    key = ranges[1].key(table.layout(deployment.instance_key), DAY)
    merged = pq.read_table(deployment.lake.path(key), filesystem=deployment.lake.filesystem)
    assert ranges[1].row_count == merged.num_rows
    assert merged.schema.equals(table.definition.file_schema())  # no marker column
    times = merged.column("utc_event_time").to_pylist()
    assert times == sorted(times)
    return merged, ranges, deployment.catalog.merge_queue.log(partition.id)[-1]


def by_user(merged: pa.Table) -> dict[int, str]:
    users = merged.column("user_id").to_pylist()
    assert len(users) == len(set(users)), f"a key appears twice in the merged object: {sorted(users)}"
    return dict(zip(users, merged.column("action").to_pylist(), strict=True))


def test_the_planner_keeps_one_range_for_a_keyed_table() -> None:
    limits = MergeLimits(merged_object_size=10, merge_batch_size=3, max_rows=5, single_range=True)
    objects = [SmallObject(i, 100, 100) for i in range(1, 6)]
    first = plan_merge(objects, None, limits)
    assert [(p.lower, p.upper) for p in first.ranges] == [(0, 3)] and first.continuing and first.needs_sentinel
    second = plan_merge(objects[3:], MergedRange(0, 3, 300, 300), limits)
    assert [(p.lower, p.upper, p.extends is not None) for p in second.ranges] == [(0, 5, True)]
    assert not second.continuing
    unkeyed = plan_merge(objects, None, MergeLimits(merged_object_size=10, merge_batch_size=3))
    assert len(unkeyed.ranges) == 3  # the same objects start a range each when keys do not matter


@sqlite_only
def test_a_keyed_merge_keeps_the_last_row_of_each_key_in_one_range(deployment: Deployment) -> None:
    # A tiny merged_object_size and merge_batch_size: an unkeyed table would start a range per object and
    # continue over several jobs; the keyed one extends its one range every time. Last committed wins, by name.
    table = keyed_table(deployment, "keyed", merged_object_size=1, merge_batch_size=2, sequence_column="_commit_order")
    first_chunk = [row(user, "a", user) for user in range(1, 6)]
    add_small_objects(
        deployment,
        table,
        DAY,
        [
            first_chunk,
            [{**r, "action": "resent"} for r in first_chunk],  # the same chunk shipped again under a new key
            # A key twice in one object: the later row in the file wins (small objects are sorted by time).
            [row(3, "c1", 2), row(6, "c", 51), row(3, "c2", 50)],
        ],
    )
    report = merge_once(deployment)
    assert (report.failed, report.finished, report.continuing) == (0, 1, 1)
    merged, _, job = merged_partition(deployment, table)
    assert by_user(merged) == {1: "resent", 2: "resent", 3: "c2", 4: "resent", 5: "resent", 6: "c"}
    assert job["mode"] == "deep" and "keyed table: deep merge keeps one row per key" in job["note"]
    assert job["rows_out"] == 6

    # Later: an upsert deletes key 5 and rewrites key 2, then a shipper re-sends keys 1 and 6 (already
    # in the merged object) and a new key.
    (upsert,) = add_small_objects(deployment, table, DAY, [[row(5, "gone", 5), row(2, "upserted", 9)]])
    mark_deletes(deployment, table, upsert, [True, False])
    add_small_objects(
        deployment,
        table,
        DAY,
        [[row(1, "again", 30), row(6, "again", 31), row(7, "new", 32)], [row(8, "deleted before it existed", 40)]],
    )
    deleted_first = add_small_objects(deployment, table, DAY, [[row(8, "x", 41)]])
    mark_deletes(deployment, table, deleted_first[0], [True])
    report = merge_once(deployment)
    assert (report.failed, report.finished, report.continuing) == (0, 1, 1)
    merged, _, job = merged_partition(deployment, table)
    assert by_user(merged) == {1: "again", 2: "upserted", 3: "c2", 4: "resent", 6: "again", 7: "new"}
    assert job["rows_out"] == 6
    assert (
        merged.filter(pa.compute.equal(merged.column("user_id"), 2)).column("utc_event_time")[0].as_py()
        == row(2, "", 9)["utc_event_time"]
    )  # the winner's whole row, its time included


@sqlite_only
def test_a_keyed_merge_keeps_the_largest_sequence(deployment: Deployment) -> None:
    table = keyed_table(deployment, "sequenced", sequence_column="seq", merge_mode="shallow")
    add_small_objects(
        deployment,
        table,
        DAY,
        [
            [
                row(1, "newest", 1, seq=9),
                row(2, "old", 2, seq=1),
                row(3, "null loses", 3, seq=None),
                row(4, "tie, earlier", 4, seq=5),
            ],
            [
                row(1, "late but older", 5, seq=3),
                row(2, "new", 6, seq=2),
                row(3, "any", 7, seq=0),
                row(4, "tie, later", 8, seq=5),
            ],
        ],
    )
    assert merge_once(deployment).failed == 0
    merged, _, job = merged_partition(deployment, table)
    assert by_user(merged) == {1: "newest", 2: "new", 3: "any", 4: "tie, later"}
    assert job["mode"] == "deep" and "keyed table" in job["note"]
    add_small_objects(deployment, table, DAY, [[row(1, "still older", 9, seq=8), row(3, "newer", 10, seq=1)]])
    assert merge_once(deployment).failed == 0
    merged, _, _ = merged_partition(deployment, table)
    assert by_user(merged) == {1: "newest", 2: "new", 3: "newer", 4: "tie, later"}
